//! The store's background work, each loop one [`ServiceThread`](crate::service::ServiceThread).
//!
//! ```text
//!  put ──> CommitLog ──> flush (async flush, group commit, transient commit) ──> disk
//!                   └──> dispatch (reput) ──> consume queues + index
//!  clean service (Python) ──> expiry steps ──> delete old segments
//! ```
//!
//! It owns flushing ([`flush`]), dispatch of CommitLog records into queues
//! and the index ([`dispatch`]), and the file work of retention
//! ([`expiry`]), whose *when* and *what* Python decides. Work enters as a
//! wake-up or a step call; it leaves as bytes on disk, units and index
//! entries, or a typed step result. The thread shape (start, wake, bounded
//! join, panic poisons the store) is [`crate::service`], below every layer
//! that runs a thread; delayed delivery, a step over the whole store, is
//! [`crate::store::schedule`].
//!
//! # Files
//!
//! - `flush.rs`: flushing (async flush, group commit, transient commit,
//!   consume-queue flush).
//! - `dispatch.rs`: dispatch (reput), CommitLog records into queues and
//!   the index.
//! - `expiry.rs`: retention's file work (expired CommitLog, queue and index
//!   files).

pub mod dispatch;
pub mod expiry;
pub mod flush;
