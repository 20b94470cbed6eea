//! A repair's last step ([`Store::rebuild_damaged_pointers`]): what a
//! complete verification of the recovered store finds damaged in the
//! consume queues and the index is rebuilt from the CommitLog, with the
//! recovery's own rebuild steps (the dispatcher's unit of a record, the
//! index-only dispatch); damaged CommitLog ranges are jumped over.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;

use crate::error::{Result, StoreError};
use crate::log::message::RecordView;
use crate::verify::{verify_store, Scope, VerifyReport};

use super::Store;

/// Per topic: (queue id, the queue offsets to rebuild; `None`: all).
type Wanted<'a> = HashMap<&'a [u8], Vec<(i32, Option<&'a BTreeSet<u64>>)>>;

/// What [`Store::rebuild_damaged_pointers`] found and rebuilt.
#[derive(Debug, Clone, Default)]
pub struct PointerRebuild {
    /// Queue units the verification found damaged or missing.
    pub units_damaged: u64,
    /// Of them, units written again from their CommitLog record.
    pub units_rebuilt: u64,
    /// Queues holding a damaged unit, as `(topic, queue id)`.
    pub queues: Vec<(String, i32)>,
    /// The index was rebuilt from this CommitLog offset.
    pub index_from: Option<u64>,
    /// Index files destroyed (rebuilt as new files).
    pub index_files_destroyed: Vec<PathBuf>,
    /// Records indexed again.
    pub index_records: u64,
}

impl Store {
    /// Verifies the recovered store's consume queues and index against the
    /// CommitLog (every record from the first file to the end; no writer
    /// but this one), then rebuilds what is damaged: each damaged or
    /// missing queue unit is written again from the record carrying its
    /// topic, queue id and queue offset, and the index is rebuilt from the
    /// oldest damaged index file (or the first record it misses) on, that
    /// file and every newer one destroyed first. What has no record to be
    /// rebuilt from (its record is in a damaged range) stays; a second
    /// verification says what is left. `topics`: the topics the store's
    /// topic config lists (their queues are rebuilt even when every queue
    /// directory of the topic is gone). Refused on a read-only store.
    pub fn rebuild_damaged_pointers(&self, topics: &[String]) -> Result<PointerRebuild> {
        self.check_open()?;
        if self.is_read_only() {
            return Err(StoreError::ReadOnly);
        }
        self.drain_dispatch()?;
        let found = self.verify_pointers(topics)?;
        let mut r = PointerRebuild {
            units_damaged: found.damaged_units.values().map(|s| s.len() as u64).sum(),
            queues: found.damaged_units.keys().cloned().collect(),
            ..PointerRebuild::default()
        };
        if !found.damaged_units.is_empty() {
            r.units_rebuilt = self.rebuild_units(&found.damaged_units)?;
        }
        self.rebuild_damaged_index(&found, &mut r)?;
        Ok(r)
    }

    /// A complete verification of the queues and index (the CommitLog's
    /// own problems are recovery's).
    fn verify_pointers(&self, topics: &[String]) -> Result<VerifyReport> {
        let opts = self.options();
        let log = self.commitlog();
        let scope = Scope {
            start: log.min_offset().max(0) as u64,
            end: log.max_offset(),
            complete: true,
        };
        verify_store(
            &opts.root,
            log.file_size() as u64,
            scope,
            (opts.max_hash_slot_num, opts.max_index_num),
            topics,
            &AtomicU64::new(0),
        )
    }

    /// Writes the damaged units again from their records; returns how many
    /// were written. A queue with damaged units below its first file (a
    /// queue lost, then created again by dispatch from a later record) is
    /// destroyed and rebuilt whole.
    fn rebuild_units(&self, damaged: &BTreeMap<(String, i32), BTreeSet<u64>>) -> Result<u64> {
        let mut wanted: Wanted<'_> = HashMap::new();
        for ((topic, queue_id), offsets) in damaged {
            let below_first = match (self.consume_queues().get(topic, *queue_id), offsets.first()) {
                (Some(q), Some(&first)) => (first as i64) < q.min_offset_in_queue(),
                _ => false,
            };
            if below_first {
                if let Some(q) = self.consume_queues().get(topic, *queue_id) {
                    log::warn!("repair: rebuilding consume queue {topic}/{queue_id} whole");
                    q.destroy()?;
                }
            }
            wanted
                .entry(topic.as_bytes())
                .or_default()
                .push((*queue_id, (!below_first).then_some(offsets)));
        }
        let log = self.commitlog();
        let Some(first) = log.queue().files().first().map(|f| f.file_from_offset()) else {
            return Ok(0);
        };
        let mut rebuilt = 0u64;
        let mut touched = Vec::new();
        let mut put = |phy: u64, v: &RecordView, rec: &[u8]| -> Result<()> {
            let Some(queues) = rec.get(v.topic.clone()).and_then(|t| wanted.get(t)) else {
                return Ok(());
            };
            let Some(&(_, offsets)) = queues.iter().find(|(q, _)| *q == v.queue_id) else {
                return Ok(());
            };
            if v.queue_offset < 0 || offsets.is_some_and(|o| !o.contains(&(v.queue_offset as u64)))
            {
                return Ok(());
            }
            let Some(unit) = self.dispatcher().cq_unit_of(phy, v, rec) else {
                return Ok(());
            };
            let topic = std::str::from_utf8(&rec[v.topic.clone()]).unwrap_or_default();
            let q = self.consume_queues().get_or_create(topic, v.queue_id)?;
            // Inside the queue's data the unit is overwritten; right at its
            // end (a lost tail or queue) it is appended, in CommitLog order.
            // After a gap (a unit whose record is gone) nothing is appended:
            // the units would land at the wrong queue offsets.
            let end = q.max_offset_in_queue();
            let wrote = q.put_at(v.queue_offset, unit)?
                || ((end == v.queue_offset || (q.queue().is_empty() && end <= v.queue_offset))
                    && q.put(unit.phy_offset, unit.size, unit.tags_code, v.queue_offset)?
                    && q.max_offset_in_queue() > end);
            if wrote {
                rebuilt += 1;
                if !touched.iter().any(|t| std::sync::Arc::ptr_eq(t, &q)) {
                    touched.push(q);
                }
            }
            Ok(())
        };
        log.replay(
            first,
            log.max_offset(),
            &log.damaged(),
            |phy, v, rec| put(phy, v, rec),
            |_, _| Ok(()),
        )?;
        for q in &touched {
            q.sync_all_files()?;
        }
        // The next queue offset of a queue rebuilt past its old end.
        log.set_queue_offsets(self.consume_queues().queue_offset_table(log.min_offset()));
        log::warn!("repair: rebuilt {rebuilt} consume-queue unit(s) from the CommitLog");
        Ok(rebuilt)
    }

    /// Destroys the oldest damaged index file (or the oldest one holding
    /// entries at or past the first record the index misses) and every
    /// newer one, and re-indexes from where the file before it ends.
    fn rebuild_damaged_index(&self, found: &VerifyReport, r: &mut PointerRebuild) -> Result<()> {
        let Some(index) = self.index() else {
            return Ok(());
        };
        if found.damaged_index_files.is_empty() && found.unindexed_from.is_none() {
            return Ok(());
        }
        let files = index.files();
        let missed = found.unindexed_from.map(|u| u as i64);
        let pos = files
            .iter()
            .position(|f| {
                found.damaged_index_files.contains(&f.file_name())
                    || missed.is_some_and(|u| f.end_phy_offset() >= u)
            })
            .unwrap_or(files.len());
        let log = self.commitlog();
        let from = match pos.checked_sub(1).and_then(|p| files.get(p)) {
            Some(prev) => prev.end_phy_offset().max(0) as u64,
            None => log.min_offset().max(0) as u64,
        };
        let from = match missed {
            Some(u) if pos == files.len() => from.min(u as u64),
            _ => from,
        };
        drop(files);
        r.index_files_destroyed = index.destroy_files_from(pos)?;
        r.index_records = self.reindex(from as i64, log.max_offset())?;
        r.index_from = Some(from);
        index.flush()?;
        log::warn!(
            "repair: rebuilt the index from CommitLog offset {from} ({} record(s), {} file(s) \
             replaced)",
            r.index_records,
            r.index_files_destroyed.len()
        );
        Ok(())
    }
}
