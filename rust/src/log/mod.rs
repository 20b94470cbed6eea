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
//! It owns the record codec ([`message`]), the mapped segment (every
//! writable `mmap` and the `unsafe` code around it live in [`mapped_file`];
//! `verify/files.rs` keeps read-only maps of its own), the ordered file queue
//! ([`mapped_file_queue`]; the names and sizes of its files on disk in
//! [`segment_files`]), ahead-of-time file creation ([`allocate`]), the
//! transient store pool's buffers ([`transient_pool`]) and
//! the CommitLog itself ([`commitlog`]): append positions, the record scan
//! recovery uses, damage accounting and reads by physical offset. Data enters
//! as encoded records appended at the write position; it leaves as records
//! read by offset (consume queues, the index and readers hold offsets into
//! it, never views that outlive a segment).
//!
//! # Files
//!
//! - `message/`: the record codec (encode, decode, properties, put rules).
//! - `commitlog/`: the CommitLog (append, batch, scan, damage, reads).
//! - `mapped_file_queue.rs`: the ordered file queue.
//! - `mapped_file_queue/`: its part for read-only queues (adopting files).
//! - `mapped_file/`: one mapped segment file.
//! - `segment_files.rs`: segment names and sizes on disk, before mapping.
//! - `allocate.rs`: the next file made ahead of the writer, and prefault.
//! - `transient_pool.rs`: the transient store pool's buffers.

pub mod allocate;
pub mod commitlog;
pub mod mapped_file;
pub mod mapped_file_queue;
pub mod message;
pub mod segment_files;
pub mod transient_pool;
