//! The pointer sources: one per ConsumeQueue (its files mapped) and one
//! per index file, each yielding its units or entries as pointers into the
//! CommitLog, in file order; the index files' hash slots and chains are
//! checked as they are opened.

use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::error::{Result, StoreError};
use crate::index::index_file::{HASH_SLOT_SIZE, INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE};
use crate::paths;
use crate::queue::consume_queue::{CqUnit, CQ_UNIT_SIZE};

use super::files::{be_i32, be_i64, map_file, numbered_files, numbered_files_dirs, CommitLog};
use super::VerifyReport;

/// What a queue unit or an index entry says about the record it points at.
#[derive(Clone, Copy)]
pub(super) enum Claim {
    /// Unit `queue_offset` of queue `queue_id` of topic `topics[topic]`.
    Unit {
        topic: usize,
        queue_id: i32,
        queue_offset: u64,
        size: i32,
        tags_code: i64,
    },
    /// Entry `entry` of index file `files[file]`.
    Entry {
        file: usize,
        entry: usize,
        hash: i32,
    },
}

/// A queue unit or an index entry to check at CommitLog offset `phy`.
#[derive(Clone, Copy)]
pub(super) struct Pointer {
    pub(super) phy: u64,
    pub(super) claim: Claim,
}

/// One queue's files, or one index file: its pointers, in file order.
pub(super) enum Source {
    /// A queue's files are mapped one at a time (a store may hold more
    /// files than a process may map at once).
    Queue {
        topic: usize,
        queue_id: i32,
        files: Vec<(u64, PathBuf)>,
        file: usize,
        map: Option<Mmap>,
        unit: usize,
        /// One past the largest queue offset of a written unit read.
        seen_end: u64,
    },
    Index {
        file: usize,
        map: Mmap,
        first: usize,
        count: usize,
        entry: usize,
    },
}

impl Source {
    /// The next unit or entry of this source that points into the checked
    /// range; ones that point elsewhere or cannot point anywhere are
    /// counted or reported here. A file that cannot be read ends the
    /// source and sets `failed`.
    pub(super) fn next(
        &mut self,
        names: &Names,
        log: &CommitLog,
        report: &mut VerifyReport,
        failed: &mut Option<StoreError>,
    ) -> Option<Pointer> {
        match self {
            Source::Queue { .. } => self.next_unit(names, log, report, failed),
            Source::Index { .. } => self.next_entry(names, log, report),
        }
    }

    /// [`Source::next`] of a queue.
    fn next_unit(
        &mut self,
        names: &Names,
        log: &CommitLog,
        report: &mut VerifyReport,
        failed: &mut Option<StoreError>,
    ) -> Option<Pointer> {
        let Source::Queue {
            topic,
            queue_id,
            files,
            file,
            map,
            unit,
            seen_end,
        } = self
        else {
            return None;
        };
        loop {
            let (base, path) = files.get(*file)?;
            let base = *base;
            if map.is_none() {
                match map_file(path) {
                    Ok(Some(m)) => *map = Some(m),
                    Ok(None) => {
                        *file += 1;
                        continue;
                    }
                    Err(e) => {
                        failed.get_or_insert(e);
                        *file = files.len();
                        return None;
                    }
                }
            }
            let at = *unit * CQ_UNIT_SIZE;
            let Some(u) = written_unit(map.as_ref(), at) else {
                // End of this file's data.
                *file += 1;
                *map = None;
                *unit = 0;
                continue;
            };
            *unit += 1;
            if u.is_pre_blank() {
                continue;
            }
            let queue_offset = (base + at as u64) / CQ_UNIT_SIZE as u64;
            *seen_end = (*seen_end).max(queue_offset + 1);
            let topic_name = &names.topics[*topic];
            if u.phy_offset < 0 || u.size <= 0 {
                report.problems.push((
                    None,
                    format!(
                        "{}: invalid unit (offset {}, size {})",
                        unit_name(topic_name, *queue_id, queue_offset),
                        u.phy_offset,
                        u.size
                    ),
                ));
                report.damaged_unit(topic_name, *queue_id, queue_offset);
                continue;
            }
            let phy = u.phy_offset as u64;
            if phy >= log.end && log.complete {
                report.problems.push((
                    None,
                    format!(
                        "{} points past the end of the CommitLog ({phy} >= {})",
                        unit_name(topic_name, *queue_id, queue_offset),
                        log.end
                    ),
                ));
                report.damaged_unit(topic_name, *queue_id, queue_offset);
                continue;
            }
            if phy < log.start || phy >= log.end {
                report.not_checked += 1;
                continue;
            }
            report.cq_units += 1;
            return Some(Pointer {
                phy,
                claim: Claim::Unit {
                    topic: *topic,
                    queue_id: *queue_id,
                    queue_offset,
                    size: u.size,
                    tags_code: u.tags_code,
                },
            });
        }
    }

    /// [`Source::next`] of an index file.
    fn next_entry(
        &mut self,
        names: &Names,
        log: &CommitLog,
        report: &mut VerifyReport,
    ) -> Option<Pointer> {
        let Source::Index {
            file,
            map,
            first,
            count,
            entry,
        } = self
        else {
            return None;
        };
        loop {
            let j = *entry;
            if j >= *count {
                return None;
            }
            *entry += 1;
            let at = *first + j * INDEX_ENTRY_SIZE;
            let (Some(hash), Some(phy), Some(prev)) =
                (be_i32(map, at), be_i64(map, at + 4), be_i32(map, at + 16))
            else {
                *entry = *count;
                return None;
            };
            let name = &names.index_files[*file];
            if log.complete && (phy < 0 || phy as u64 >= log.end) {
                report.problems.push((
                    None,
                    format!(
                        "{} points outside the CommitLog (offset {phy}, end {})",
                        entry_name(name, j),
                        log.end
                    ),
                ));
                report.damaged_index_files.insert(name.clone());
                continue;
            }
            if phy < 0 || (phy as u64) < log.start || phy as u64 >= log.end {
                report.not_checked += 1;
                continue;
            }
            report.index_entries += 1;
            if prev < 0 || prev as usize >= j {
                report.problems.push((
                    Some(phy as u64),
                    format!(
                        "{}: previous entry {prev} is not before it",
                        entry_name(name, j)
                    ),
                ));
                report.damaged_index_files.insert(name.clone());
                continue;
            }
            return Some(Pointer {
                phy: phy as u64,
                claim: Claim::Entry {
                    file: *file,
                    entry: j,
                    hash,
                },
            });
        }
    }
}

/// The unit at byte `at` of a mapped queue file; `None` at the end of its
/// data (an all-zero unit, or past the file).
fn written_unit(map: Option<&Mmap>, at: usize) -> Option<CqUnit> {
    map.and_then(|m| m.get(at..at + CQ_UNIT_SIZE))
        .and_then(CqUnit::decode)
        .filter(|u| !(u.phy_offset == 0 && u.size == 0 && u.tags_code == 0))
}

/// Topic and index file names, for the messages.
#[derive(Default)]
pub(super) struct Names {
    pub(super) topics: Vec<String>,
    pub(super) index_files: Vec<String>,
}

pub(super) fn unit_name(topic: &str, queue_id: i32, queue_offset: u64) -> String {
    format!("ConsumeQueue {topic}/{queue_id}@{queue_offset}")
}

pub(super) fn entry_name(file: &str, entry: usize) -> String {
    format!("index file {file} entry {entry}")
}

/// One source per queue, with its files mapped.
pub(super) fn consume_queue_sources(root: &Path) -> Result<(Names, Vec<Source>)> {
    let mut names = Names::default();
    let mut sources = Vec::new();
    let cq_root = paths::consume_queue_dir(root);
    let topics = match std::fs::read_dir(&cq_root) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((names, sources)),
        Err(e) => return Err(StoreError::io(format!("list {}", cq_root.display()), e)),
    };
    let mut topic_dirs: Vec<_> = topics.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    topic_dirs.sort();
    for topic_dir in topic_dirs {
        let Some(topic) = topic_dir
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_owned)
        else {
            continue;
        };
        if !topic_dir.is_dir() {
            continue;
        }
        let t = names.topics.len();
        names.topics.push(topic);
        for (queue_id, queue_dir) in numbered_files_dirs(&topic_dir)? {
            sources.push(Source::Queue {
                topic: t,
                queue_id,
                files: numbered_files(&queue_dir)?,
                file: 0,
                map: None,
                unit: 0,
                seen_end: 0,
            });
        }
    }
    Ok((names, sources))
}

/// The index files as pointer sources.
pub(super) struct IndexSources {
    pub(super) names: Names,
    pub(super) sources: Vec<Source>,
    /// The store has index files (of any size).
    pub(super) present: bool,
    /// The end CommitLog offset of the newest file of the expected size.
    pub(super) end: Option<i64>,
}

/// One source per index file of the expected size, after its hash slots
/// and chains are checked (when the check is `complete`: a running writer
/// links new entries into the slots meanwhile); files of another size are
/// reported.
pub(super) fn index_sources(
    root: &Path,
    slots: usize,
    num: usize,
    complete: bool,
    report: &mut VerifyReport,
) -> Result<IndexSources> {
    let Some(size) = crate::index::index_file::index_file_size(slots, num) else {
        return Err(StoreError::InvalidArgument(
            "index geometry too large".into(),
        ));
    };
    let mut names = Names::default();
    let mut sources = Vec::new();
    let mut present = false;
    let mut end = None;
    for (_, path) in numbered_files(&paths::index_dir(root))? {
        present = true;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(map) = map_file(&path)? else {
            continue;
        };
        if map.len() != size {
            report.problems.push((
                None,
                format!(
                    "index file {name} has {} bytes, the geometry ({slots} slots, {num} \
                     entries) needs {size}",
                    map.len()
                ),
            ));
            report.damaged_index_files.insert(name);
            continue;
        }
        let count = (be_i32(&map, 36).unwrap_or(0).max(0) as usize).min(num);
        let chains = if complete {
            hash_chain_problem(&map, slots, count)
        } else {
            None
        };
        if let Some(why) = chains {
            report
                .problems
                .push((None, format!("index file {name} {why}")));
            report.damaged_index_files.insert(name.clone());
        }
        end = be_i64(&map, 24);
        sources.push(Source::Index {
            file: names.index_files.len(),
            first: INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE,
            count,
            // Entry 0 is unused.
            entry: 1,
            map,
        });
        names.index_files.push(name);
    }
    Ok(IndexSources {
        names,
        sources,
        present,
        end,
    })
}

/// What is wrong with the hash slots and chains of an index file (`map`,
/// `slots` slots, entries `1..count`), if anything: each slot must be empty
/// or point at an entry of its slot, each entry's previous-entry link at an
/// entry of the same slot, and each entry must be reached once.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
fn hash_chain_problem(map: &[u8], slots: usize, count: usize) -> Option<String> {
    let first = INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE;
    let entry = |j: usize| first + j * INDEX_ENTRY_SIZE;
    let slot_of = |j: usize| be_i32(map, entry(j)).map(|h| h.rem_euclid(slots as i32) as usize);
    let mut reached = vec![0u8; count];
    let mut problems = Vec::new();
    for s in 0..slots {
        let v = be_i32(map, INDEX_HEADER_SIZE + s * HASH_SLOT_SIZE).unwrap_or(0);
        if v == 0 {
            continue;
        }
        match usize::try_from(v).ok().filter(|&j| j < count) {
            None => problems.push(format!("slot {s} points at entry {v}, not a written entry")),
            Some(j) if slot_of(j) != Some(s) => {
                problems.push(format!("slot {s} points at entry {j} of another slot"))
            }
            Some(j) => {
                if let Some(r) = reached.get_mut(j) {
                    *r = r.saturating_add(1);
                }
            }
        }
    }
    for j in 1..count {
        let prev = be_i32(map, entry(j) + 16).unwrap_or(0);
        let Some(p) = usize::try_from(prev).ok().filter(|&p| p > 0 && p < j) else {
            continue; // the entry check reports a link that is not before it
        };
        if slot_of(p) != slot_of(j) {
            problems.push(format!("entry {j} links to entry {p} of another slot"));
        }
        if let Some(r) = reached.get_mut(p) {
            *r = r.saturating_add(1);
        }
    }
    let unreached = (1..count).filter(|&j| reached.get(j) != Some(&1)).count();
    if unreached > 0 {
        problems.push(format!(
            "{unreached} entr{} reached from no hash slot, or more than once",
            if unreached == 1 { "y is" } else { "ies are" }
        ));
    }
    let first_problem = problems.first()?.clone();
    Some(match problems.len() {
        1 => first_problem,
        n => format!(
            "{first_problem} (and {} more problem(s) in its hash slots)",
            n - 1
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::index_file::IndexFile;

    /// An index file of 7 slots with `keys` keys, as bytes.
    fn index_bytes(keys: usize) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("20240222172627123");
        let f = IndexFile::create(&path, 7, 30, 0, 0).unwrap();
        for i in 0..keys {
            assert!(f
                .put_key(&format!("t#k{i}"), 100 * i as i64, 1_000_000)
                .unwrap());
        }
        drop(f);
        std::fs::read(&path).unwrap()
    }

    fn slot(data: &[u8], s: usize) -> i32 {
        be_i32(data, INDEX_HEADER_SIZE + s * HASH_SLOT_SIZE).unwrap()
    }

    #[test]
    fn written_slots_and_chains_are_sound() {
        let data = index_bytes(20);
        assert_eq!(hash_chain_problem(&data, 7, 21), None);
    }

    #[test]
    fn a_changed_or_zeroed_slot_is_found() {
        let data = index_bytes(20);
        let s = (0..7).find(|&s| slot(&data, s) > 1).unwrap();
        let at = INDEX_HEADER_SIZE + s * HASH_SLOT_SIZE;
        for v in [0, slot(&data, s) - 1, 99] {
            let mut bad = data.clone();
            bad[at..at + 4].copy_from_slice(&i32::to_be_bytes(v));
            let why = hash_chain_problem(&bad, 7, 21).expect("damage not found");
            assert!(why.contains("slot") || why.contains("reached"), "{why}");
        }
    }

    #[test]
    fn a_broken_chain_link_is_found() {
        let data = index_bytes(20);
        let first = INDEX_HEADER_SIZE + 7 * HASH_SLOT_SIZE;
        let j = (2..21)
            .find(|&j| be_i32(&data, first + j * INDEX_ENTRY_SIZE + 16).unwrap() > 0)
            .unwrap();
        let mut bad = data.clone();
        let at = first + j * INDEX_ENTRY_SIZE + 16;
        bad[at..at + 4].copy_from_slice(&0i32.to_be_bytes());
        let why = hash_chain_problem(&bad, 7, 21).expect("damage not found");
        assert!(why.contains("reached from no hash slot"), "{why}");
    }
}
