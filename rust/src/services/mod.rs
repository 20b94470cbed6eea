//! The store's background work, each loop one [`ServiceThread`](crate::services::service_thread::ServiceThread).
//!
//! ```text
//!  put ──> CommitLog ──> flush (async flush, group commit, transient commit) ──> disk
//!                   └──> dispatch ──> consume queues + index
//!  retention service (Python) ──> retention steps ──> delete old segments
//! ```
//!
//! It owns flushing ([`flush`]), dispatch of CommitLog records into queues
//! and the index ([`dispatch`]), and the file work of retention
//! ([`retention`]), whose *when* and *what* Python decides. Work enters as a
//! wake-up or a step call; it leaves as bytes on disk, units and index
//! entries, or a typed step result. The thread shape (start, wake, bounded
//! join, panic poisons the store) is [`crate::services::service_thread`], below every layer
//! that runs a thread; delayed delivery, a step over the whole store, is
//! [`crate::store::schedule`].

pub mod dispatch;
pub mod flush;
pub mod retention;
pub mod service_thread;
