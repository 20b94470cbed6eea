//! The records' side of the pointer checks: every record dispatch gives a
//! queue unit must have one pointing back at it, and every key of a record
//! must be in the index (see the rules in `mod.rs`).
//!
//! While the scan runs, a record whose unit was not among the pointers
//! checked at its offset becomes a candidate; at the end each candidate's
//! unit is read from its queue file (a unit hidden behind a hole, or out of
//! CommitLog order, is found there), and what is still missing is reported
//! in runs of consecutive queue offsets.

use std::collections::{BTreeMap, HashMap};

use memmap2::Mmap;

use crate::error::Result;
use crate::log::message::{find_property, sysflag, tags_code, RecordView, SCHEDULE_TOPIC};
use crate::queue::consume_queue::{CqUnit, CQ_UNIT_SIZE};

use super::files::map_file;
use super::sources::{unit_name, Names, Source};
use super::VerifyReport;

/// The tags code dispatch gives the record (`None` for the schedule topic,
/// whose code is a delivery time computed from the configured delay levels).
pub(super) fn expected_tags_code(v: &RecordView, rec: &[u8]) -> Option<i64> {
    let topic = rec.get(v.topic.clone())?;
    if topic == SCHEDULE_TOPIC.as_bytes() {
        return None;
    }
    let tags = find_property(rec.get(v.properties.clone())?, "TAGS");
    Some(tags_code(tags.and_then(|t| std::str::from_utf8(t).ok())))
}

/// A tags code below every `i32`: an address in a broker's ConsumeQueue
/// extension (RocketMQ's `ConsumeQueueExt.isExtAddr`), not a tags hash.
pub(super) fn is_ext_addr(tags_code: i64) -> bool {
    tags_code < i64::from(i32::MIN)
}

/// A queue's files (base offset, path) and one past the largest queue
/// offset of a written unit read from them.
type QueueFiles<'a> = (&'a [(u64, std::path::PathBuf)], u64);

/// A record whose unit was not seen when the scan passed it.
struct Candidate {
    topic: usize,
    queue_id: i32,
    queue_offset: u64,
    phy: u64,
    size: i32,
    tags_code: Option<i64>,
}

/// What the scan learns about the records' units and index entries.
#[derive(Default)]
pub(super) struct Coverage {
    /// Topics with a queue directory or in the topic config, by name.
    topics: HashMap<Vec<u8>, usize>,
    /// The record the scan is at.
    current: Option<u64>,
    /// A matching unit was seen for it.
    unit_ok: bool,
    /// The hashes of the matching index entries seen for it.
    entries_ok: Vec<i32>,
    candidates: Vec<Candidate>,
    /// The newest index file's end offset; `None` when the store has no
    /// index files of the geometry (nothing to check against).
    pub(super) index_end: Option<i64>,
    /// Records with keys the index misses, and those keys' hashes (an
    /// entry out of CommitLog order, checked later, may still be found).
    unindexed: BTreeMap<u64, Vec<i32>>,
}

impl Coverage {
    pub(super) fn new(names: &Names, index_end: Option<i64>) -> Self {
        Self {
            topics: names
                .topics
                .iter()
                .enumerate()
                .map(|(i, t)| (t.as_bytes().to_vec(), i))
                .collect(),
            index_end,
            ..Self::default()
        }
    }

    /// The scan is at the record at `off`: the pointers checked from here
    /// to [`Coverage::after_record`] at `off` are its own.
    pub(super) fn begin_record(&mut self, off: u64) {
        self.current = Some(off);
        self.unit_ok = false;
        self.entries_ok.clear();
    }

    /// A unit matching the record at `phy` was checked (records behind the
    /// scan are settled at the end, from their queue files).
    pub(super) fn unit_ok(&mut self, phy: u64) {
        if self.current == Some(phy) {
            self.unit_ok = true;
        }
    }

    /// An index entry with `hash` matching the record at `phy` was checked.
    pub(super) fn entry_ok(&mut self, phy: u64, hash: i32) {
        if self.current == Some(phy) {
            self.entries_ok.push(hash);
        } else if let Some(missing) = self.unindexed.get_mut(&phy) {
            // An entry out of CommitLog order, for a record behind the scan.
            missing.retain(|&h| h != hash);
            if missing.is_empty() {
                self.unindexed.remove(&phy);
            }
        }
    }

    /// After the pointers at `off` were checked: notes the record if its
    /// unit was not among them, or if a key (`key_hashes`) has no entry.
    pub(super) fn after_record(
        &mut self,
        off: u64,
        v: &RecordView,
        rec: &[u8],
        key_hashes: &[i32],
        complete: bool,
    ) {
        let tran = v.sys_flag & sysflag::TRANSACTION_TYPE_MASK;
        let dispatched = tran == sysflag::TRANSACTION_NOT || tran == sysflag::TRANSACTION_COMMIT;
        let own = self.current == Some(off);
        if dispatched && !(own && self.unit_ok) && v.queue_offset >= 0 {
            // A topic with no queue directory that the topic config does
            // not list was deleted: not checked.
            let topic = rec.get(v.topic.clone()).unwrap_or_default();
            if let Some(&t) = self.topics.get(topic) {
                self.candidates.push(Candidate {
                    topic: t,
                    queue_id: v.queue_id,
                    queue_offset: v.queue_offset as u64,
                    phy: off,
                    size: v.total_size as i32,
                    tags_code: expected_tags_code(v, rec),
                });
            }
        }
        let Some(end) = self.index_end else {
            return;
        };
        if tran == sysflag::TRANSACTION_ROLLBACK || (!complete && off as i64 > end) {
            return;
        }
        let found = if own { &self.entries_ok[..] } else { &[] };
        let missing: Vec<i32> = key_hashes
            .iter()
            .copied()
            .filter(|h| !found.contains(h))
            .collect();
        if !missing.is_empty() {
            self.unindexed.insert(off, missing);
        }
    }

    /// Reports the records left without their unit (after reading each
    /// one's unit from its queue file) and those the index misses.
    pub(super) fn finish(
        mut self,
        names: &Names,
        sources: &[Source],
        complete: bool,
        report: &mut VerifyReport,
    ) -> Result<()> {
        let mut unindexed = self.unindexed.keys();
        if let (Some(&first), Some(&last)) = (unindexed.next(), self.unindexed.keys().last()) {
            let n = self.unindexed.len();
            report.problems.push((
                Some(first),
                format!(
                    "{n} record(s) from offset {first} to {last} have keys that are not indexed"
                ),
            ));
            report.unindexed_from = Some(first);
        }
        let mut queues: HashMap<(usize, i32), QueueFiles<'_>> = HashMap::new();
        for s in sources {
            if let Source::Queue {
                topic,
                queue_id,
                files,
                seen_end,
                ..
            } = s
            {
                queues.insert((*topic, *queue_id), (&files[..], *seen_end));
            }
        }
        self.candidates
            .sort_unstable_by_key(|c| (c.topic, c.queue_id, c.queue_offset));
        let mut reader = UnitReader::default();
        // Runs of consecutive missing units: (first candidate, last offset, count, why).
        let mut run: Option<(usize, u64, u64, &'static str)> = None;
        let mut runs = Vec::new();
        for (i, c) in self.candidates.iter().enumerate() {
            let why = match queues.get(&(c.topic, c.queue_id)) {
                None => "the queue's directory is missing",
                Some((files, seen_end)) => match reader.unit(files, c.queue_offset)? {
                    Some(u)
                        if u.phy_offset == c.phy as i64
                            && u.size == c.size
                            && c.tags_code
                                .map_or(true, |t| t == u.tags_code || is_ext_addr(u.tags_code)) =>
                    {
                        continue;
                    }
                    // Reported when the unit itself was checked.
                    Some(_)
                        if !report.damaged_unit(
                            &names.topics[c.topic],
                            c.queue_id,
                            c.queue_offset,
                        ) =>
                    {
                        continue;
                    }
                    Some(_) => "the unit there does not point at this record",
                    // Not dispatched yet: a writer is running.
                    None if !complete && c.queue_offset >= *seen_end => continue,
                    None => "the queue has no unit there (a hole, or a lost queue file)",
                },
            };
            report.damaged_unit(&names.topics[c.topic], c.queue_id, c.queue_offset);
            run = match run {
                Some((f, last, n, w))
                    if w == why
                        && last + 1 == c.queue_offset
                        && self.candidates[f].topic == c.topic
                        && self.candidates[f].queue_id == c.queue_id =>
                {
                    Some((f, c.queue_offset, n + 1, w))
                }
                other => {
                    runs.extend(other);
                    Some((i, c.queue_offset, 1, why))
                }
            };
        }
        runs.extend(run);
        for (f, last, n, why) in runs {
            let c = &self.candidates[f];
            let name = unit_name(&names.topics[c.topic], c.queue_id, c.queue_offset);
            let text = if n == 1 {
                format!(
                    "{name} is missing for the record at offset {}: {why}",
                    c.phy
                )
            } else {
                format!(
                    "{name}..{last} ({n} units) are missing for the records from offset {}: {why}",
                    c.phy
                )
            };
            report.problems.push((Some(c.phy), text));
        }
        Ok(())
    }
}

/// Reads single units from a queue's files, keeping the last file mapped.
#[derive(Default)]
struct UnitReader {
    mapped: Option<(std::path::PathBuf, Mmap)>,
}

impl UnitReader {
    /// The written unit at `queue_offset` (`None`: zero, or no file holds it).
    fn unit(
        &mut self,
        files: &[(u64, std::path::PathBuf)],
        queue_offset: u64,
    ) -> Result<Option<CqUnit>> {
        let pos = queue_offset.saturating_mul(CQ_UNIT_SIZE as u64);
        let Some((base, path)) = files.iter().rev().find(|(b, _)| *b <= pos) else {
            return Ok(None);
        };
        if self.mapped.as_ref().map(|(p, _)| p) != Some(path) {
            self.mapped = match map_file(path)? {
                Some(m) => Some((path.clone(), m)),
                None => return Ok(None),
            };
        }
        let at = (pos - base) as usize;
        Ok(self
            .mapped
            .as_ref()
            .and_then(|(_, m)| m.get(at..at + CQ_UNIT_SIZE))
            .and_then(CqUnit::decode)
            .filter(|u| !(u.phy_offset == 0 && u.size == 0 && u.tags_code == 0)))
    }
}
