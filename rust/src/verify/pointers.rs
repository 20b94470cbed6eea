//! Queue units and index entries as pointers into the CommitLog, merged
//! into CommitLog order across their files and checked against the record
//! each points at (size, topic, queue id and offset; for index entries one
//! of the record's key hashes).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::error::StoreError;
use crate::log::message::{iter_properties, RecordView};

use super::coverage::{expected_tags_code, is_ext_addr, Coverage};
use super::files::CommitLog;
use super::sources::{entry_name, unit_name, Claim, Names, Pointer, Source};
use super::VerifyReport;

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
