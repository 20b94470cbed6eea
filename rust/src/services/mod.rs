//! The store's background work, each loop one [`service::ServiceThread`].
//!
//! ```text
//!  put ──> CommitLog ──> flush (async flush, group commit, transient commit) ──> disk
//!                   └──> dispatch (reput) ──> consume queues + index
//!  clean service (Python) ──> expiry steps ──> delete old segments
//!  schedule service (Python) ──> schedule steps ──> delivered copies via put
//! ```
//!
//! It owns the thread shape (start, wake, bounded join, panic poisons the
//! store: [`service`]), flushing ([`flush`]), dispatch of CommitLog records
//! into queues and the index ([`dispatch`]), and the file work of retention
//! ([`expiry`]) and delayed delivery ([`schedule`]), whose *when* and *what*
//! Python decides. Work enters as a wake-up or a step call; it leaves as
//! bytes on disk, units and index entries, or a typed step result.

pub mod dispatch;
pub mod expiry;
pub mod flush;
pub mod schedule;
pub mod service;
