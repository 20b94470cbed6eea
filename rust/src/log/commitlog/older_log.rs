//! Intact records after damage that belong to an older log (docs/format.md,
//! "A store a RocketMQ broker cut and appended to"): a log cut at a damaged
//! record without zeroing what followed, then appended to, leaves the old
//! records after its new ones. The recovery scan asks, where it would skip
//! damage, whether the record it would resume at continues the log; if not,
//! the log ends at the damage, as RocketMQ's recovery ends it.

use std::collections::HashMap;

use crate::log::message::{parse_record, sysflag, Parsed, RecordView, FIXED_OVERHEAD_V4};

use super::{CommitLog, Damage, DamagePolicy};

/// The smallest record: the fixed fields with IPv4 hosts, a one-byte
/// topic, no body, no properties.
const MIN_RECORD_SIZE: u64 = FIXED_OVERHEAD_V4 as u64 + 1;

/// What a recovery scan knows of the records before damage it finds.
#[derive(Debug)]
pub(super) struct BeforeDamage {
    /// The last valid record before the current position, if any.
    pub(super) last_record: Option<u64>,
    /// Each queue's last record (CommitLog offset, queue offset) from the
    /// scan's start up to `queues_upto`: built at the first damage judged, then
    /// extended from where the last judgement stopped (each record is
    /// replayed once, however many damaged ranges there are).
    queues: HashMap<Vec<u8>, HashMap<i32, (u64, i64)>>,
    queues_upto: u64,
}

impl BeforeDamage {
    /// Nothing known yet of a scan starting at `scan_from`.
    pub(super) fn new(scan_from: u64) -> Self {
        Self {
            last_record: None,
            queues: HashMap::new(),
            queues_upto: scan_from,
        }
    }

    fn note(&mut self, phy: u64, v: &RecordView, rec: &[u8]) {
        if !counts_in_queue(v) {
            return;
        }
        let Some(topic) = rec.get(v.topic.clone()) else {
            return;
        };
        let last = (phy, v.queue_offset);
        match self.queues.get_mut(topic) {
            Some(q) => {
                q.insert(v.queue_id, last);
            }
            None => {
                self.queues
                    .insert(topic.to_vec(), HashMap::from([(v.queue_id, last)]));
            }
        }
    }
}

/// True when the record takes a queue offset of its queue (not a prepared
/// or rolled-back transaction message: RocketMQ gives those offset 0).
fn counts_in_queue(v: &RecordView) -> bool {
    let tran = v.sys_flag & sysflag::TRANSACTION_TYPE_MASK;
    tran == sysflag::TRANSACTION_NOT || tran == sysflag::TRANSACTION_COMMIT
}

impl CommitLog {
    /// Damage at `at` that intact records follow from `resume`: says why
    /// the record at `resume` belongs to an older log (one a cut left behind
    /// and new records were appended over), or `None` when it may continue
    /// the log. It is older when it was stored before the last valid record
    /// preceding the damage, or when its queue offset does not follow the
    /// last one its queue reached before the damage: not greater, or greater
    /// by more than the records the skipped bytes could have held.
    pub(super) fn older_log_resumes(
        &self,
        at: u64,
        resume: u64,
        before: &mut BeforeDamage,
        policy: &DamagePolicy,
        found: &[Damage],
    ) -> Option<String> {
        let record_at = |phy: u64| {
            let f = self.mfq.find_by_offset(phy, false)?;
            let data = f
                .raw()
                .get(usize::try_from(phy - f.file_from_offset()).ok()?..)?;
            match parse_record(data, false) {
                Parsed::Record(v) => Some((data.get(v.topic.clone())?.to_vec(), v)),
                _ => None,
            }
        };
        let (next_topic, next) = record_at(resume)?;
        let last_at = before.last_record?;
        let (_, last) = record_at(last_at)?;
        if next.store_timestamp < last.store_timestamp {
            return Some(format!(
                "stored at {}, before the record at {last_at} (stored at {})",
                next.store_timestamp, last.store_timestamp
            ));
        }
        if !counts_in_queue(&next) {
            return None;
        }
        // The ranges skipped before the damage (the durable mark's, and
        // those this scan skipped: `found`), which replays jump over.
        let mut skipped: Vec<(u64, u64)> = policy
            .known
            .iter()
            .copied()
            .chain(found.iter().map(|d| (d.offset, d.end)))
            .filter(|&(s, e)| e > s && s < at)
            .collect();
        skipped.sort_unstable();
        if before.queues_upto < at {
            let from = before.queues_upto;
            let note = |phy: u64, v: &RecordView, rec: &[u8]| {
                before.note(phy, v, rec);
                Ok(())
            };
            self.replay(from, at, &skipped, note, |_, _| Ok(())).ok()?;
            before.queues_upto = at;
        }
        let &(phy, prev) = before
            .queues
            .get(next_topic.as_slice())?
            .get(&next.queue_id)?;
        if next.queue_offset <= prev {
            return Some(format!(
                "its queue offset {} does not follow {prev} of the same queue at {phy}",
                next.queue_offset
            ));
        }
        // Bytes after that record that were skipped: records of the queue
        // may hide there, at most one per smallest record.
        let hidden = (resume - at)
            + skipped
                .iter()
                .filter(|&&(s, _)| s > phy)
                .map(|&(s, e)| e - s)
                .sum::<u64>();
        let room = (hidden / MIN_RECORD_SIZE) as i64;
        if next.queue_offset > prev.saturating_add(1).saturating_add(room) {
            return Some(format!(
                "its queue offset {} skips past {prev}: at most {room} records of the queue \
                 fit in the skipped bytes",
                next.queue_offset
            ));
        }
        None
    }
}
