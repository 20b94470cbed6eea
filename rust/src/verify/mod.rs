//! Whole-store checks that need no open store: verification of every
//! CommitLog record, ConsumeQueue unit and index entry, detection of the
//! index geometry a store was written with, and probing the writer lock.
//!
//! Everything here reads files only (read-only maps of files whose size is
//! taken first, so nothing is mapped past a file's end); it never writes.
//!
//! Verification rules:
//! - CommitLog: from `start` to `end`, every record must pass
//!   [`parse_valid_record`] (magic, sizes, physical offset, topic, queue
//!   id/offset, properties) and its body CRC; a body flagged compressed
//!   (zlib types) must inflate; in a range the checkpoint lists as written
//!   with the property CRC, that CRC must match. A record whose body fails its CRC still has
//!   a sound size, so the scan goes on behind it; behind a record that does
//!   not parse, the scan resumes at the next valid record of the same file
//!   (as recovery's skip does), or at the next file.
//! - ConsumeQueue: every unit below `end` must point at a valid record of
//!   the same size, topic, queue id and queue offset, with the tags code
//!   dispatch gives it (the hash of `TAGS`; not checked for the schedule
//!   topic, whose code is a delivery time, nor when the code is a broker's
//!   ConsumeQueue extension address, below the `i32` range). Units pointing below `start`
//!   (expired CommitLog files) are counted as not checked, and so are units
//!   at or past `end` unless the check is complete (below): then they are
//!   damaged. Every record dispatch gives a unit (not a PREPARED or ROLLBACK
//!   one) must have one at its queue offset in its queue pointing back at
//!   it: a unit that is zero, missing (a hole, a queue file or directory
//!   gone) or pointing elsewhere is damaged. Units past the last one a
//!   queue holds are not yet dispatched unless the check is complete. A
//!   topic with no queue directory at all that the store's topic config
//!   (`config/topics.json`, read by the caller) does not list is a deleted
//!   topic: its records are not checked.
//! - Index: every entry below `end` must point at a valid record one of
//!   whose keys (`topic#UNIQ_KEY`, `topic#KEY` for each of `KEYS`) has the
//!   entry's hash, and its previous-entry link must point backwards, at an
//!   entry of the same hash slot. Every hash slot must be empty or point at
//!   an entry of that slot, and every entry must be reachable from its slot
//!   once. When the store has index files, every record in range that is not
//!   a ROLLBACK must have an entry for each of its keys (records past the
//!   newest index file's end offset are not yet indexed unless the check is
//!   complete). An index file of another size than the geometry is damaged.
//!
//! The check is *complete* when `[start, end)` is all of the store's data
//! and no writer adds to it (no writer running, or the writer is the one
//! checking, as a repair does).
//!
//! Besides the problems' text, the report says what is damaged in a form a
//! repair acts on: the queue units (by queue and queue offset), the index
//! files, and the first record the index misses.
//!
//! # Files
//!
//! - `check.rs`: [`verify_store`] and the CommitLog scan it drives.
//! - `pointers.rs`: queue units and index entries merged into CommitLog
//!   order and checked against the records they point at.
//! - `sources.rs`: the queue and index files read as pointer sources
//!   (and the index files' hash slots and chains checked).
//! - `coverage.rs`: the records' side: each record's unit and index
//!   entries, missing ones found and reported.
//! - `files.rs`: read-only maps of the store's files.
//! - `probe.rs`: the index geometry a store was written with, and whether a
//!   writer holds the lock.

use std::collections::{BTreeMap, BTreeSet};

mod check;
mod coverage;
mod files;
mod pointers;
mod probe;
mod sources;

pub use check::verify_store;
pub use probe::{detect_index_geometry, writer_running};

/// Compression types (sys_flag bits 8..10) this build inflates: zlib.
const ZLIB_TYPES: [i32; 2] = [0, 3];
const COMPRESSION_TYPE_MASK: i32 = 0x700;
/// Progress is published every this many bytes of CommitLog scanned.
const PROGRESS_STEP: u64 = 1 << 20;

/// The CommitLog range a verification checks.
#[derive(Debug, Clone, Copy)]
pub struct Scope {
    /// The first CommitLog offset checked (the first file's start, or the
    /// CommitLog's min offset).
    pub start: u64,
    /// The end of the data checked.
    pub end: u64,
    /// `[start, end)` is all of the store's data and no writer adds to it
    /// (see the rules above).
    pub complete: bool,
}

/// What a whole-store verification found.
#[derive(Debug, Default, Clone)]
pub struct VerifyReport {
    /// CommitLog records scanned (including those whose body fails its CRC).
    pub records: u64,
    /// Their bytes.
    pub bytes: u64,
    /// ConsumeQueue units checked against the CommitLog.
    pub cq_units: u64,
    /// Index entries checked against the CommitLog.
    pub index_entries: u64,
    /// Units and entries pointing outside `[start, end)`: not checked.
    pub not_checked: u64,
    /// Problems, by CommitLog offset (`None` for a problem of a whole file).
    pub problems: Vec<(Option<u64>, String)>,
    /// ConsumeQueue units found damaged or missing, by `(topic, queue id)`:
    /// their queue offsets.
    pub damaged_units: BTreeMap<(String, i32), BTreeSet<u64>>,
    /// Index files found damaged, by name.
    pub damaged_index_files: BTreeSet<String>,
    /// The first record in range with a key the index misses.
    pub unindexed_from: Option<u64>,
}

impl VerifyReport {
    /// Records unit `queue_offset` of `topic`/`queue_id` as damaged; true if
    /// it was not yet.
    pub(crate) fn damaged_unit(&mut self, topic: &str, queue_id: i32, queue_offset: u64) -> bool {
        self.damaged_units
            .entry((topic.to_owned(), queue_id))
            .or_default()
            .insert(queue_offset)
    }
}

#[cfg(test)]
mod tests {
    use super::pointers::key_hash;
    use super::probe::index_file_geometry;
    use super::*;
    use crate::index::index_file::{build_key, index_key_hash};

    #[test]
    fn geometry_of_a_file_without_keys_is_unknown() {
        assert_eq!(index_file_geometry(&[0u8; 100]), None);
    }

    #[test]
    fn key_hash_is_the_index_hash_of_the_built_key() {
        for (t, k) in [("orders", "key-1"), ("t", ""), ("é", "ключ"), ("a", "b c")] {
            assert_eq!(
                key_hash(t.as_bytes(), k.as_bytes()),
                index_key_hash(&build_key(t, k))
            );
        }
    }

    #[test]
    fn geometry_is_read_from_an_index_file_with_keys() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("index");
        std::fs::create_dir_all(&index).unwrap();
        let f = crate::index::index_file::IndexFile::create(
            &index.join("20240222172627123"),
            7,
            30,
            0,
            0,
        )
        .unwrap();
        for i in 0..5 {
            assert!(f.put_key(&format!("t#k{i}"), 1000 + i, 1_000_000).unwrap());
        }
        drop(f);
        let data = std::fs::read(index.join("20240222172627123")).unwrap();
        assert_eq!(index_file_geometry(&data), Some((7, 30)));
        assert_eq!(
            detect_index_geometry(dir.path(), None, None).unwrap(),
            (Some(7), Some(30))
        );
        // A given value wins; the other follows from the size.
        assert_eq!(
            detect_index_geometry(dir.path(), Some(7), None).unwrap(),
            (Some(7), Some(30))
        );
    }

    #[test]
    fn geometry_is_read_for_small_and_large_slot_counts() {
        let dir = tempfile::tempdir().unwrap();
        for (slots, num, keys) in [(1, 4, 3), (2, 9, 8), (13, 40, 2), (500, 64, 40)] {
            let path = dir.path().join(format!("{slots}-{num}"));
            let f = crate::index::index_file::IndexFile::create(&path, slots, num, 0, 0).unwrap();
            for i in 0..keys {
                assert!(f
                    .put_key(&format!("t#k{i}"), 4096 + 97 * i, 1_000_000)
                    .unwrap());
            }
            drop(f);
            let data = std::fs::read(&path).unwrap();
            assert_eq!(index_file_geometry(&data), Some((slots, num)));
        }
    }

    #[test]
    fn no_lock_file_means_no_writer() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(writer_running(dir.path()), Some(false));
    }

    #[test]
    fn a_held_lock_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let lock = crate::lock::StoreLock::acquire(&dir.path().join("lock"), dir.path()).unwrap();
        assert_eq!(writer_running(dir.path()), Some(true));
        drop(lock);
        assert_eq!(writer_running(dir.path()), Some(false));
    }
}
