//! The recovery steps that cut at the recovered end and rebuild from it, as
//! [`Store`] methods (the last five of [`crate::recovery`]'s steps):
//! truncation, the index rebuild, re-dispatch, consumer offsets, the
//! queue-offset table; the report, and [`Store::recover`] running every
//! step in order. The steps that find the end are `recover_scan.rs`.

use std::path::PathBuf;

use crate::checkpoint::DurableMark;
use crate::error::Result;

use super::recover_scan::max_physic_offset_of_queues;
use super::Store;
use crate::consumer_offsets::ConsumerOffsetTable;
use crate::recovery::{
    out_of_order, ConsumerOffsetClamp, IndexRebuild, QueueOffsetTable, RecoveryMode,
    RecoveryReport, RecoveryStep, Redispatch, Truncation,
};

impl Store {
    /// Step 6 (RocketMQ's `truncateDirtyFiles` / `truncateDirtyLogicFiles`):
    /// cuts the CommitLog at the recovered end, zeroing (and syncing) the
    /// non-zero bytes after it so a later crash can never bring a stale
    /// record back, and cuts every queue's units at or past it; with no
    /// CommitLog file left, every queue is destroyed. Read-only: only the
    /// in-memory positions are set.
    pub fn truncate(&self) -> Result<Truncation> {
        self.run_step(RecoveryStep::Truncate, |s, st| {
            let end = st.report.end_offset;
            let mut r = Truncation {
                end_offset: end,
                ..Default::default()
            };
            if s.is_read_only() {
                s.set_read_only_end(end);
                return Ok(r);
            }
            r.bytes_truncated = s.commitlog().truncate_to(end)?;
            st.report.bytes_truncated = r.bytes_truncated;
            let max_phy_cq = st.max_phy_cq.max(max_physic_offset_of_queues(s));
            if s.commitlog().queue().is_empty() {
                s.consume_queues().destroy_all()?;
                r.consume_queues_destroyed = true;
            } else if max_phy_cq >= end as i64 {
                s.consume_queues().truncate_dirty_logic_files(end as i64)?;
            }
            Ok(r)
        })
    }

    /// Step 7 (RocketMQ's `IndexService.load` with `messageIndexSafe`):
    /// after a crash destroys the index files newer than the index
    /// checkpoint, and in both modes the files holding entries at or past
    /// the CommitLog end (they would make new records there look indexed);
    /// then re-indexes, in offset order, from the oldest destroyed file's
    /// begin offset (or where a removed short file's predecessor ended) up
    /// to where [`Store::redispatch`] takes over (the scan's start after a
    /// crash, the end otherwise), so no key is lost.
    pub fn rebuild_index(&self) -> Result<IndexRebuild> {
        self.run_step(RecoveryStep::Index, |s, st| {
            let mut r = IndexRebuild::default();
            let Some(index) = s.index().filter(|_| !s.is_read_only()) else {
                return Ok(r);
            };
            let abnormal = s.recovery_mode() == RecoveryMode::Abnormal;
            let end = st.report.end_offset;
            let mut from = st.index_from;
            if abnormal {
                for (p, begin) in index.destroy_newer_than(s.checkpoint().index_msg_timestamp())? {
                    from = Some(from.map_or(begin, |f| f.min(begin)));
                    r.files_destroyed.push(p);
                }
            }
            let before: Vec<PathBuf> = index
                .files()
                .iter()
                .map(|f| f.path().to_path_buf())
                .collect();
            if let Some(begin) = index.destroy_from(end as i64)? {
                from = Some(from.map_or(begin, |f| f.min(begin)));
                let kept = index.files();
                r.files_destroyed.extend(
                    before
                        .into_iter()
                        .filter(|p| !kept.iter().any(|f| f.path() == p)),
                );
            }
            let until = if abnormal { st.start_offset } else { end };
            if let Some(f) = from {
                r.records = s.reindex(f, until)?;
            }
            r.redispatch_from = from;
            st.report.index_redispatch_from = from;
            st.report.index_redispatched_records = r.records;
            st.report
                .index_files_destroyed
                .extend(r.files_destroyed.iter().cloned());
            Ok(r)
        })
    }

    /// Index-only dispatch of the valid records in `[from, until)`; returns
    /// how many records were passed to the index (it skips offsets it holds).
    pub(super) fn reindex(&self, from: i64, until: u64) -> Result<u64> {
        if self.index().is_none() {
            return Ok(0);
        }
        let from = from.max(0) as u64;
        if from >= until {
            return Ok(0);
        }
        let Some(first) = self
            .commitlog()
            .queue()
            .files()
            .iter()
            .find(|f| f.file_from_offset() + f.file_size() as u64 > from)
            .map(|f| f.file_from_offset())
        else {
            return Ok(0);
        };
        // Records were validated by the recovery scan; damaged ranges it
        // skipped are jumped over (a scan would stop at them).
        let damaged = self.commitlog().damaged();
        let mut n = 0u64;
        self.commitlog().replay(
            first,
            until,
            &damaged,
            |phy, v, rec| {
                if phy >= from {
                    self.dispatcher()
                        .dispatch_record(phy, v, rec, false, true)?;
                    n += 1;
                }
                Ok(())
            },
            |_, _| Ok(()),
        )?;
        Ok(n)
    }

    /// Step 8: after a crash, dispatches every record the scan accepted to
    /// the queues and the index (a damaged record whose header still reads
    /// gets its queue unit, so queue offsets stay dense, never an index
    /// entry); then, in both modes, dispatches what the queues miss up to
    /// the end (from the largest CommitLog end any queue covers).
    pub fn redispatch(&self) -> Result<Redispatch> {
        self.run_step(RecoveryStep::Redispatch, |s, st| {
            let mut r = Redispatch::default();
            if s.recovery_mode() == RecoveryMode::Abnormal {
                r.records =
                    s.redispatch_scanned(st.start_offset, st.report.end_offset, &st.damaged)?;
                // One summary instead of a line per record: after a crash,
                // the queues usually hold records past the checkpoint already.
                r.already_in_queues = s
                    .consume_queues()
                    .all()
                    .iter()
                    .map(|q| q.take_repeated())
                    .sum();
                if r.already_in_queues > 0 {
                    log::info!(
                        "recovery: {} of {} re-dispatched records were already in their consume \
                         queues (written before the crash); kept as they were",
                        r.already_in_queues,
                        r.records
                    );
                }
            }
            st.report.consume_queues = s.consume_queues().all().len();
            if !s.is_read_only() {
                let max_phy_cq = max_physic_offset_of_queues(s);
                let dispatch_from = max_phy_cq.max(s.commitlog().min_offset()).max(0) as u64;
                s.dispatcher().set_dispatch_from(dispatch_from);
                loop {
                    let step = s
                        .dispatcher()
                        .dispatch_once(crate::services::dispatch::DEFAULT_STEP_BYTES)?;
                    r.caught_up_records += step.records;
                    if step.records == 0 {
                        break;
                    }
                }
            }
            st.report.redispatched_records = r.records + r.caught_up_records;
            Ok(r)
        })
    }

    /// Dispatches every record of `[from, until)` the scan accepted.
    fn redispatch_scanned(&self, from: u64, until: u64, damaged: &[(u64, u64)]) -> Result<u64> {
        let mut n = 0u64;
        self.commitlog().replay(
            from,
            until,
            damaged,
            |phy, v, rec| {
                n += 1;
                self.dispatcher().dispatch_record(phy, v, rec, true, true)
            },
            |phy, rec| match rec {
                Some((v, raw)) => self.dispatcher().dispatch_record(phy, v, raw, true, false),
                None => Ok(()),
            },
        )?;
        Ok(n)
    }

    /// Step 9: of the stored consumer offsets, those above their queue's
    /// recovered end (after a cut, a group would skip the messages new
    /// puts write there), with the end to lower them to. Queues the store
    /// does not hold are left alone. The caller writes the lowered table.
    /// Read-only: none.
    pub fn clamp_consumer_offsets(
        &self,
        offsets: &ConsumerOffsetTable,
    ) -> Result<ConsumerOffsetClamp> {
        self.run_step(RecoveryStep::ConsumerOffsets, |s, st| {
            let mut r = ConsumerOffsetClamp::default();
            if s.is_read_only() {
                return Ok(r);
            }
            for (key, qid, off) in offsets.iter() {
                if let Some(q) = s.consume_queues().get(key.topic(), qid) {
                    let end = q.max_offset_in_queue();
                    if off > end {
                        r.lowered.push((key.clone(), qid, off, end));
                    }
                }
            }
            st.report.consumer_offsets_clamped = r.lowered.len();
            Ok(r)
        })
    }

    /// Step 10 (RocketMQ's `recoverTopicQueueTable`): the next queue offset
    /// of every queue, with each queue's min offset corrected to the
    /// CommitLog's min offset. A writer then syncs the kept records (which a
    /// killed writer may have left in the page cache only) and writes the
    /// durable mark at the recovered end with the checkpoint. The store is
    /// recovered: puts and reads are allowed from here.
    pub fn rebuild_queue_offset_table(&self) -> Result<QueueOffsetTable> {
        self.run_step(RecoveryStep::QueueOffsetTable, |s, st| {
            let table = s
                .consume_queues()
                .queue_offset_table(s.commitlog().min_offset());
            s.commitlog().set_queue_offsets(table);
            let mut r = QueueOffsetTable {
                queues: s.consume_queues().all().len(),
                durable_mark: None,
            };
            if !s.is_read_only() {
                let end = st.report.end_offset;
                // Ranges end where the log does now (others may write past
                // it); this writer's own range starts there. A slave's
                // bytes are its master's, written with or without the
                // property CRC (a RocketMQ 4.9 master writes none): it
                // claims no range (docs/format.md §21.4).
                let min = s.commitlog().min_offset().max(0) as u64;
                let prop_crc =
                    s.commitlog().config().prop_crc && s.ha_role() != crate::ha::HaRole::Slave;
                s.checkpoint().update_prop_crc_ranges(|r| {
                    r.clip(min, end);
                    if prop_crc {
                        r.open_at(end);
                    }
                });
                s.commitlog()
                    .set_prop_crc_ranges(s.checkpoint().prop_crc_ranges().for_reads());
                s.renew_durable_mark(st.start_file, end, std::mem::take(&mut st.damaged))?;
                r.durable_mark = Some(end);
            }
            s.set_recovered();
            if !s.is_read_only() {
                // Have the file after the current one ready before the first roll.
                if let (Some(a), Some(last)) = (s.allocator(), s.commitlog().queue().last_file()) {
                    a.request(last.file_from_offset() + last.file_size() as u64);
                }
            }
            Ok(r)
        })
    }

    /// Syncs the kept records, then sets the durable mark to the recovered
    /// end with the damaged ranges still in the log and writes it with the
    /// checkpoint.
    fn renew_durable_mark(&self, start: usize, end: u64, damaged: Vec<(u64, u64)>) -> Result<()> {
        for f in self.commitlog().queue().files().iter().skip(start) {
            if f.file_from_offset() < end {
                f.sync_all()?;
            }
        }
        let min = self.commitlog().min_offset().max(0) as u64;
        let damaged = damaged.into_iter().filter(|&(_, e)| e > min).collect();
        self.checkpoint().set_durable_mark(DurableMark {
            durable_offset: end,
            damaged,
        });
        self.checkpoint().flush()
    }

    /// What the recovery found and did, once its last step ran.
    pub fn recovery_report(&self) -> Result<RecoveryReport> {
        let st = self.recovery_state().lock();
        if st.done != RecoveryStep::QueueOffsetTable {
            return Err(out_of_order(RecoveryStep::QueueOffsetTable, st.done));
        }
        Ok(st.report.clone())
    }

    /// Runs every recovery step in order (docs/format.md §15.2; Python's
    /// `RecoveryService` runs the same steps one by one). No consumer
    /// offsets are clamped.
    pub fn recover(&self, check_crc: bool, skip_damaged: bool) -> Result<RecoveryReport> {
        self.check_file_sizes()?;
        self.judge_damage(skip_damaged)?;
        match self.recovery_mode() {
            RecoveryMode::Normal => self.scan_commit_log_normally(check_crc)?,
            RecoveryMode::Abnormal => self.scan_commit_log_abnormally(check_crc)?,
        };
        self.recover_consume_queues()?;
        self.rebuild_queue_holes()?;
        self.truncate()?;
        self.rebuild_index()?;
        self.redispatch()?;
        self.clamp_consumer_offsets(&ConsumerOffsetTable::new())?;
        self.rebuild_queue_offset_table()?;
        self.recovery_report()
    }
}
