//! Queue units and index entries as pointers into the CommitLog, merged
//! into CommitLog order across their files and checked against the record
//! each points at (size, topic, queue id and offset; for index entries one
//! of the record's key hashes).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::PathBuf;

use memmap2::Mmap;

use crate::error::StoreError;
use crate::index::index_file::INDEX_ENTRY_SIZE;
use crate::log::message::{iter_properties, RecordView};
use crate::queue::consume_queue::{CqUnit, CQ_UNIT_SIZE};

use super::coverage::{expected_tags_code, is_ext_addr, Coverage};
use super::files::{be_i32, be_i64, map_file, CommitLog};
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
    phy: u64,
    claim: Claim,
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
            Source::Queue {
                topic,
                queue_id,
                files,
                file,
                map,
                unit,
                seen_end,
            } => loop {
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
            },
            Source::Index {
                file,
                map,
                first,
                count,
                entry,
            } => loop {
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
            },
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

/// Every source's pointers, merged into CommitLog order.
pub(super) struct Pointers {
    pub(super) names: Names,
    /// The first queue file that could not be read.
    pub(super) failed: Option<StoreError>,
    pub(super) sources: Vec<Source>,
    /// Each source's next pointer, and the offset of its previous one.
    pub(super) next: Vec<(Option<Pointer>, u64)>,
    /// `(offset, source)` of each source's next in-order pointer.
    pub(super) heap: BinaryHeap<Reverse<(u64, usize)>>,
    /// Key hashes of the record they were last computed for.
    pub(super) hashes: (Option<u64>, Vec<i32>),
    /// Which records have their unit and index entries.
    pub(super) coverage: Coverage,
    /// Damaged ranges a recovery skipped (see [`CommitLog::known_damaged`]).
    pub(super) known_damaged: Vec<(u64, u64)>,
}

impl Pointers {
    pub(super) fn new(
        names: Names,
        sources: Vec<Source>,
        coverage: Coverage,
        log: &CommitLog,
        report: &mut VerifyReport,
    ) -> Self {
        let n = sources.len();
        let mut p = Self {
            names,
            failed: None,
            sources,
            next: vec![(None, 0); n],
            heap: BinaryHeap::with_capacity(n),
            hashes: (None, Vec::new()),
            coverage,
            known_damaged: log.known_damaged.clone(),
        };
        for i in 0..n {
            if let Some(phy) = p.advance(i, log, report) {
                p.heap.push(Reverse((phy, i)));
            }
        }
        p
    }

    /// Moves source `i` to its next pointer that does not go back in
    /// CommitLog order, and returns that pointer's offset; those that do go
    /// back are checked on their own.
    pub(super) fn advance(
        &mut self,
        i: usize,
        log: &CommitLog,
        report: &mut VerifyReport,
    ) -> Option<u64> {
        let last = self.next[i].1;
        while let Some(p) = self.sources[i].next(&self.names, log, report, &mut self.failed) {
            if p.phy >= last {
                self.next[i] = (Some(p), p.phy);
                return Some(p.phy);
            }
            self.check_alone(p, log, report);
        }
        self.next[i].0 = None;
        None
    }

    /// Pops the next pointer below `below`.
    pub(super) fn pop_below(
        &mut self,
        below: u64,
        log: &CommitLog,
        report: &mut VerifyReport,
    ) -> Option<Pointer> {
        let &Reverse((phy, i)) = self.heap.peek()?;
        if phy >= below {
            return None;
        }
        let p = self.next[i].0.take();
        // The top stays source `i` until it is replaced here.
        match self.advance(i, log, report) {
            Some(next) => {
                if let Some(mut top) = self.heap.peek_mut() {
                    *top = Reverse((next, i));
                }
            }
            None => {
                self.heap.pop();
            }
        }
        p
    }

    /// Checks the pointers up to `off`, where the scan found the valid
    /// record `v` (bytes `rec`).
    pub(super) fn check_record(
        &mut self,
        off: u64,
        v: &RecordView,
        rec: &[u8],
        log: &CommitLog,
        report: &mut VerifyReport,
    ) {
        while let Some(p) = self.pop_below(off, log, report) {
            self.check_alone(p, log, report);
        }
        self.coverage.begin_record(off);
        while let Some(p) = self.pop_below(off + 1, log, report) {
            self.check(p, Ok((v, rec)), report);
        }
        if self.coverage.index_end.is_some() && self.hashes.0 != Some(off) {
            self.hashes.1.clear();
            record_key_hashes(v, rec, &mut self.hashes.1);
            self.hashes.0 = Some(off);
        }
        if !log.in_known_damage(off) {
            self.coverage
                .after_record(off, v, rec, &self.hashes.1, log.complete);
        }
    }

    /// Checks the pointers the scan did not reach, then the records found
    /// without their unit or index entries.
    pub(super) fn finish(&mut self, log: &CommitLog, report: &mut VerifyReport) {
        while let Some(p) = self.pop_below(u64::MAX, log, report) {
            self.check_alone(p, log, report);
        }
        let coverage = std::mem::take(&mut self.coverage);
        if let Err(e) = coverage.finish(&self.names, &self.sources, log.complete, report) {
            self.failed.get_or_insert(e);
        }
    }

    fn in_known_damage(&self, off: u64) -> bool {
        self.known_damaged.iter().any(|&(s, e)| s <= off && off < e)
    }

    pub(super) fn check_alone(&mut self, p: Pointer, log: &CommitLog, report: &mut VerifyReport) {
        let found = log.record(p.phy);
        self.check(
            p,
            found.as_ref().map(|(v, rec)| (v, *rec)).map_err(|e| *e),
            report,
        );
    }

    /// Checks pointer `p` against what lies at its offset.
    pub(super) fn check(
        &mut self,
        p: Pointer,
        found: std::result::Result<(&RecordView, &[u8]), &'static str>,
        report: &mut VerifyReport,
    ) {
        let problem = match p.claim {
            Claim::Unit {
                topic,
                queue_id,
                queue_offset,
                size,
                tags_code,
            } => {
                let topic = &self.names.topics[topic];
                let what = || unit_name(topic, queue_id, queue_offset);
                let problem = match found {
                    Err(reason) => Some(format!("{} points at no valid record ({reason})", what())),
                    Ok((v, rec)) => {
                        if v.total_size as i64 != size as i64 {
                            Some(format!(
                                "{} says size {size}, the record has {}",
                                what(),
                                v.total_size
                            ))
                        } else if &rec[v.topic.clone()] != topic.as_bytes()
                            || v.queue_id != queue_id
                        {
                            Some(format!(
                                "{} points at a record of {}/{}",
                                what(),
                                String::from_utf8_lossy(&rec[v.topic.clone()]),
                                v.queue_id
                            ))
                        } else if v.queue_offset as u64 != queue_offset {
                            Some(format!(
                                "{} points at a record with queue offset {}",
                                what(),
                                v.queue_offset
                            ))
                        } else {
                            match expected_tags_code(v, rec) {
                                Some(want) if want != tags_code && !is_ext_addr(tags_code) => {
                                    Some(format!(
                                        "{} has tags code {tags_code}, the record's tags give \
                                         {want}",
                                        what()
                                    ))
                                }
                                _ => {
                                    self.coverage.unit_ok(p.phy);
                                    None
                                }
                            }
                        }
                    }
                };
                // A unit into a skipped damaged range is its record's own:
                // pulls count it as damaged, and nothing is rebuilt.
                if problem.is_some() && !self.in_known_damage(p.phy) {
                    report.damaged_unit(topic, queue_id, queue_offset);
                }
                problem
            }
            Claim::Entry { file, entry, hash } => {
                let what = || entry_name(&self.names.index_files[file], entry);
                let problem = match found {
                    Err(reason) => Some(format!("{} points at no valid record ({reason})", what())),
                    Ok((v, rec)) => {
                        if self.hashes.0 != Some(p.phy) {
                            self.hashes.1.clear();
                            record_key_hashes(v, rec, &mut self.hashes.1);
                            self.hashes.0 = Some(p.phy);
                        }
                        if self.hashes.1.contains(&hash) {
                            self.coverage.entry_ok(p.phy, hash);
                            None
                        } else {
                            Some(format!("{}: no key of the record has hash {hash}", what()))
                        }
                    }
                };
                if problem.is_some() && !self.in_known_damage(p.phy) {
                    report
                        .damaged_index_files
                        .insert(self.names.index_files[file].clone());
                }
                problem
            }
        };
        if let Some(problem) = problem {
            report.problems.push((Some(p.phy), problem));
        }
    }
}

/// Appends to `out` the index hash of each key of the record (bytes `rec`):
/// `topic#UNIQ_KEY`, and `topic#KEY` for each of its first `KEYS`.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
pub(super) fn record_key_hashes(v: &RecordView, rec: &[u8], out: &mut Vec<i32>) {
    let topic = rec.get(v.topic.clone()).unwrap_or_default();
    if !topic.is_ascii() && std::str::from_utf8(topic).is_err() {
        return;
    }
    let mut keys_seen = false;
    for (name, value) in iter_properties(rec.get(v.properties.clone()).unwrap_or_default()) {
        let keys = match name {
            b"UNIQ_KEY" => false,
            b"KEYS" if !keys_seen => true,
            _ => continue,
        };
        if !value.is_ascii() && std::str::from_utf8(value).is_err() {
            continue;
        }
        if keys {
            keys_seen = true;
            for k in value.split(|&b| b == b' ').filter(|k| !k.is_empty()) {
                out.push(key_hash(topic, k));
            }
        } else {
            out.push(key_hash(topic, value));
        }
    }
}

/// [`index_key_hash`] of [`build_key`]`(topic, key)`, without building
/// the key; both are valid UTF-8.
pub(super) fn key_hash(topic: &[u8], key: &[u8]) -> i32 {
    let h = if topic.is_ascii() && key.is_ascii() {
        // One UTF-16 unit per byte.
        let step = |h: i32, &b: &u8| h.wrapping_mul(31).wrapping_add(i32::from(b));
        let h = topic.iter().fold(0i32, step);
        key.iter().fold(step(h, &b'#'), step)
    } else {
        let utf16 = |b: &[u8]| {
            std::str::from_utf8(b)
                .unwrap_or_default()
                .encode_utf16()
                .collect::<Vec<u16>>()
        };
        utf16(topic)
            .into_iter()
            .chain(std::iter::once(u16::from(b'#')))
            .chain(utf16(key))
            .fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(i32::from(u)))
    };
    let h = h.wrapping_abs();
    if h < 0 {
        0
    } else {
        h
    }
}
