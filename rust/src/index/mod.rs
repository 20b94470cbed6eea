//! The index subsystem: the hash-slot IndexFiles in `index/` that map
//! `topic#key` (and the offset message id's offset) to CommitLog offsets.
//!
//! ```text
//!  dispatch ──> index_service (newest file, roll when full) ──> index_file (slot, entry)
//!  query_message ──> index_service (files by time) ──> index_file lookups ──> CommitLog offsets
//! ```
//!
//! It owns one file's header, slots and entries ([`index_file`]) and the
//! directory of files with its flush thread ([`index_service`]). Keys enter
//! from dispatch and recovery's rebuild; offsets leave to lookups, which
//! read and check the records in the CommitLog.
//!
//! # Files
//!
//! - `index_file.rs`: one IndexFile (header, slots, entries, lookups).
//! - `index_service.rs`: the `index/` directory, its newest file and its
//!   flush thread.

pub mod index_file;
pub mod index_service;
