//! The CommitLog subsystem: every message of every topic, as records in one
//! run of memory-mapped segment files.
//!
//! ```text
//!  put / put_batch ──> message (encode) ──> commitlog ──> mapped_file_queue ──> mapped_file
//!                                              │              ▲
//!                                              │              └── allocate (next file, prefault)
//!  reads, dispatch, recovery <── message (decode) <── commitlog (record at offset / scan)
//! ```
//!
//! It owns the record codec ([`message`]), the mapped segment (all `mmap`
//! `unsafe` lives in [`mapped_file`]), the ordered file queue
//! ([`mapped_file_queue`]; the names and sizes of its files on disk in
//! [`segment_files`]), ahead-of-time file creation ([`allocate`]), the
//! transient store pool's buffers ([`transient_pool`]) and
//! the CommitLog itself ([`commitlog`]): append positions, the record scan
//! recovery uses, damage accounting and reads by physical offset. Data enters
//! as encoded records appended at the write position; it leaves as records
//! read by offset (consume queues, the index and readers hold offsets into
//! it, never views that outlive a segment).

pub mod allocate;
pub mod commitlog;
pub mod mapped_file;
pub mod mapped_file_queue;
pub mod message;
pub mod segment_files;
pub mod transient_pool;
