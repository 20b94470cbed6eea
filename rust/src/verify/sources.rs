//! The pointer sources: one per ConsumeQueue (its files mapped) and one
//! per index file.

use std::path::Path;

use crate::error::{Result, StoreError};
use crate::index::index_file::{HASH_SLOT_SIZE, INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE};
use crate::paths;

use super::files::{be_i32, be_i64, map_file, numbered_files, numbered_files_dirs};
use super::pointers::{Names, Source};
use super::VerifyReport;

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
