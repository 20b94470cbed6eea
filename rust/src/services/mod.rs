//! The store's background work, each loop one
//! [`ServiceThread`](service_thread::ServiceThread).
//!
//! ```text
//!  put ──> CommitLog ──> flush (async flush, group commit, transient commit) ──> disk
//!                   └──> dispatch ──> consume queues + index
//!  retention service (Python) ──> retention steps ──> delete old segments
//! ```
//!
//! It owns flushing ([`flush`]), dispatch of CommitLog records into queues
//! and the index ([`dispatch`]), and the file work of retention
//! ([`retention`]), whose *when* and *what* Python decides and passes whole
//! as a [`RetentionPolicy`](retention::RetentionPolicy). Work enters as a
//! wake-up or a step call; it leaves as bytes on disk, units and index
//! entries, or a typed step result. The thread shape (start, wake, bounded
//! join, panic poisons the store) is [`service_thread`]: it sits here with
//! the services it shapes but belongs to the lowest layer, since every
//! layer that runs a thread (the allocator, the index flush, the clock)
//! uses it, and it uses nothing above the primitives. Delayed delivery, a
//! step over the whole store, is [`crate::store::schedule`].
//!
//! # Files
//!
//! - `flush.rs`: group commit, the periodic and consume-queue flushes, the
//!   transient-pool commit.
//! - `dispatch.rs`: dispatch, CommitLog records into queues and the index
//!   (the dispatcher and its thread).
//! - `retention.rs`: retention's file work (expired CommitLog, queue and
//!   index files) and its policy.
//! - `service_thread.rs`: `ServiceThread` and `Signal`.

pub mod dispatch;
pub mod flush;
pub mod retention;
pub mod service_thread;
