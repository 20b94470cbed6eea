//! Recovery as named steps (SPEC §8, RocketMQ 4.9.8's
//! `DefaultMessageStore.recover()`), each returning a typed report.
//!
//! Opening a store ([`Store::open`]) takes the writer lock (creating the
//! `lock` file) and maps the files; it changes nothing else on disk. The
//! steps below then bring the store back to a consistent state. Python's
//! `RecoveryService` calls them in this order; the engine refuses a step
//! called out of order ([`StoreError::RecoveryOrder`]), and refuses puts and
//! reads until the last step ran:
//!
//! ```text
//!  open ─► check_file_sizes ─► judge_damage ─► scan_commit_log_{normally|abnormally}
//!       ─► recover_consume_queues ─► rebuild_queue_holes ─► truncate
//!       ─► rebuild_index ─► redispatch ─► clamp_consumer_offsets
//!       ─► rebuild_queue_offset_table  (recovered: puts and reads allowed)
//! ```
//!
//! RocketMQ recovers the consume queues first and then the CommitLog. Here
//! the CommitLog is judged first: a refused open (damage inside durable
//! data) must change nothing, and the queues' units are checked against the
//! CommitLog's recovered end. A read-only open runs the same steps; each
//! writes nothing there (it finds the ends only).
//!
//! [`Store::recover`] runs every step in order (engine-only callers).

use std::path::PathBuf;
use std::sync::Arc;

use crate::checkpoint::{CheckpointRepair, DurableMark};
use crate::error::{Result, StoreError};
use crate::index::index_file::index_file_size;
use crate::log::commitlog::{Damage, DamagePolicy, DurableBound, RecordRead};
use crate::log::message::{find_property, RecordView};
use crate::queue::consume_queue::{ConsumeQueue, CqHole, CqUnit};
use crate::store::Store;

mod report;
pub use report::*;

/// Where a store is in its recovery, and what the steps hand each other.
#[derive(Debug, Default)]
pub struct RecoveryState {
    done: RecoveryStep,
    report: RecoveryReport,
    policy: Option<DamagePolicy>,
    start_file: usize,
    start_offset: u64,
    damaged: Vec<(u64, u64)>,
    max_phy_cq: i64,
    holes: Vec<(Arc<ConsumeQueue>, Vec<CqHole>)>,
    /// Re-index from here (a short newest index file was removed).
    index_from: Option<i64>,
}

impl RecoveryState {
    /// The last step that ran.
    pub fn done(&self) -> RecoveryStep {
        self.done
    }
}

impl Store {
    /// Normal after a clean stop, abnormal when the abort file says the last
    /// writer died (read-only opens always scan normally: they repair nothing).
    pub fn recovery_mode(&self) -> RecoveryMode {
        if !self.last_exit_ok() && !self.is_read_only() {
            RecoveryMode::Abnormal
        } else {
            RecoveryMode::Normal
        }
    }

    /// The last recovery step that ran.
    pub fn recovery_step(&self) -> RecoveryStep {
        self.recovery_state().lock().done
    }

    /// Runs `f` as `step`, refusing it unless it is the next one.
    fn run_step<T>(
        &self,
        step: RecoveryStep,
        f: impl FnOnce(&Store, &mut RecoveryState) -> Result<T>,
    ) -> Result<T> {
        self.check_not_closed()?;
        let mut st = self.recovery_state().lock();
        if st.done.next() != Some(step) {
            return Err(out_of_order(step, st.done));
        }
        let out = f(self, &mut st)?;
        st.done = step;
        Ok(out)
    }

    /// Step 1: extends short newest CommitLog and ConsumeQueue files (a crash
    /// while they were created) with zeros, creates or extends the
    /// checkpoint, and removes a short newest index file. Opening only found
    /// them. Read-only: nothing (short files stay ignored).
    pub fn check_file_sizes(&self) -> Result<FileSizeReport> {
        self.run_step(RecoveryStep::FileSizes, |s, st| {
            let mut r = FileSizeReport::default();
            if s.is_read_only() {
                return Ok(r);
            }
            if let Some(p) = s.commitlog().queue().repair_short_newest()? {
                log::warn!("extended short CommitLog file {} to full size", p.display());
                r.short_files_extended.push(p);
            }
            for q in s.consume_queues().all() {
                for p in q.queue().repair_gaps()? {
                    log::warn!(
                        "made missing or short ConsumeQueue file {} full size (zeros; its \
                         units are rebuilt from the CommitLog)",
                        p.display()
                    );
                    r.short_files_extended.push(p);
                }
                if let Some(p) = q.queue().repair_short_newest()? {
                    log::warn!(
                        "extended short ConsumeQueue file {} to full size",
                        p.display()
                    );
                    r.short_files_extended.push(p);
                }
            }
            r.checkpoint = s.checkpoint().repair_size()?;
            if let Some((p, prev_end)) = s.remove_short_index_file()? {
                st.index_from = Some(prev_end);
                st.report.index_files_destroyed.push(p.clone());
                r.short_index_file_removed = Some(p);
            }
            st.report.short_files_extended = r.short_files_extended.clone();
            st.report.checkpoint_created = r.checkpoint == Some(CheckpointRepair::Create);
            Ok(r)
        })
    }

    /// The newest index file, when it is shorter than the geometry (a crash
    /// while it was created: it holds no entry), removed. Returns it and the
    /// end offset of the file before it, from which the index is rebuilt.
    fn remove_short_index_file(&self) -> Result<Option<(PathBuf, i64)>> {
        let Some(index) = self.index() else {
            return Ok(None);
        };
        let opts = self.options();
        let Some(expected) = index_file_size(opts.max_hash_slot_num, opts.max_index_num) else {
            return Ok(None);
        };
        let dir = index.dir();
        let newest = match std::fs::read_dir(dir) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.len() == 17 && n.bytes().all(|b| b.is_ascii_digit()))
                })
                .map(|e| e.path())
                .max(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(StoreError::io(format!("list {}", dir.display()), e)),
        };
        let Some(path) = newest else {
            return Ok(None);
        };
        let len = std::fs::metadata(&path)
            .map_err(|e| StoreError::io(format!("stat {}", path.display()), e))?
            .len();
        if len >= expected as u64 || index.files().iter().any(|f| f.path() == path) {
            return Ok(None);
        }
        log::warn!(
            "removing index file {} ({len} bytes: a crash while it was created)",
            path.display()
        );
        std::fs::remove_file(&path)
            .map_err(|e| StoreError::io(format!("remove {}", path.display()), e))?;
        sync_dir(dir)?;
        Ok(Some((path, index.end_phy_offset())))
    }

    /// Step 2: sets the rule the scan tells a torn tail from damage by: the
    /// checkpoint's durable mark (invalid data past it was never durable),
    /// else its physicMsgTimestamp. Damage inside durable data that intact
    /// records follow is refused with [`StoreError::Corrupted`] by the scan,
    /// unless `skip_damaged` (read-only opens always skip and report it).
    pub fn judge_damage(&self, skip_damaged: bool) -> Result<DamageRule> {
        self.run_step(RecoveryStep::JudgeDamage, |s, st| {
            let mark = s.checkpoint().durable_mark();
            let policy = DamagePolicy {
                bound: match &mark {
                    Some(m) => DurableBound::Mark(m.durable_offset),
                    None => DurableBound::Timestamp(s.checkpoint().physic_msg_timestamp()),
                },
                skip: skip_damaged || s.is_read_only(),
                known: mark.map(|m| m.damaged).unwrap_or_default(),
            };
            let rule = DamageRule {
                durable_mark: policy.bound_mark(),
                physic_msg_timestamp: s.checkpoint().physic_msg_timestamp(),
                known_damaged: policy.known.clone(),
                skip_damaged: policy.skip,
            };
            st.report.durable_mark = policy.bound_mark();
            st.report.known_damaged.clone_from(&policy.known);
            st.policy = Some(policy);
            Ok(rule)
        })
    }

    /// Step 3 after a clean stop (RocketMQ's `recoverNormally`): scans the
    /// CommitLog from its third-last file, checking each record (and its
    /// body CRC when `check_crc`), and finds the end of valid data.
    /// Nothing is written.
    pub fn scan_commit_log_normally(&self, check_crc: bool) -> Result<CommitLogScan> {
        self.scan_commit_log(RecoveryMode::Normal, check_crc, false)
    }

    /// Step 3 after a crash (RocketMQ's `recoverAbnormally`): scans from the
    /// newest file whose first record is older than the checkpoint says was
    /// flushed; [`Store::redispatch`] later re-dispatches what it accepted.
    /// Nothing is written.
    pub fn scan_commit_log_abnormally(&self, check_crc: bool) -> Result<CommitLogScan> {
        self.scan_commit_log(RecoveryMode::Abnormal, check_crc, false)
    }

    /// Step 3 for a repair, in either mode: scans from the first CommitLog
    /// file, so damage in files an ordinary recovery does not scan is found
    /// too (and, with `skip_damaged`, skipped and kept in the durable mark).
    /// After a crash every record is re-dispatched. Nothing is written.
    pub fn scan_whole_commit_log(&self, check_crc: bool) -> Result<CommitLogScan> {
        self.scan_commit_log(self.recovery_mode(), check_crc, true)
    }

    fn scan_commit_log(
        &self,
        mode: RecoveryMode,
        check_crc: bool,
        whole: bool,
    ) -> Result<CommitLogScan> {
        self.run_step(RecoveryStep::ScanCommitLog, |s, st| {
            if mode != s.recovery_mode() {
                return Err(StoreError::RecoveryOrder(format!(
                    "recovery must scan the CommitLog {} (the last writer {}), not {}",
                    if s.recovery_mode() == RecoveryMode::Abnormal {
                        "abnormally"
                    } else {
                        "normally"
                    },
                    if s.last_exit_ok() || s.is_read_only() {
                        "stopped cleanly or the store is read-only"
                    } else {
                        "crashed: the abort file is there"
                    },
                    mode.as_str()
                )));
            }
            let files = s.commitlog().queue().files();
            let start = match mode {
                _ if whole => 0,
                RecoveryMode::Abnormal => s.abnormal_start_file(),
                RecoveryMode::Normal => files.len().saturating_sub(3),
            };
            let start_offset = files.get(start).map(|f| f.file_from_offset()).unwrap_or(0);
            let policy = st
                .policy
                .as_ref()
                .ok_or_else(|| StoreError::internal("recovery scan without a damage rule"))?;
            let scan = s.commitlog().scan_for_recovery(start, check_crc, policy)?;
            let damaged = damaged_ranges(&policy.known, &scan.damaged, scan.end_offset);
            s.commitlog().set_damaged(damaged.clone());
            st.start_file = start;
            st.start_offset = start_offset;
            st.damaged = damaged;
            let r = &mut st.report;
            r.mode = mode;
            r.files_scanned = scan.files_scanned;
            r.bytes_scanned = scan.bytes_scanned;
            r.records = scan.records;
            r.end_offset = scan.end_offset;
            r.stop_reason.clone_from(&scan.stop_reason);
            r.damaged.clone_from(&scan.damaged);
            Ok(CommitLogScan {
                mode,
                start_offset,
                files_scanned: scan.files_scanned,
                bytes_scanned: scan.bytes_scanned,
                records_scanned: scan.records,
                end_offset: scan.end_offset,
                stop_reason: scan.stop_reason,
                damaged: scan.damaged,
            })
        })
    }

    /// The CommitLog file abnormal recovery starts from: the newest file whose
    /// first record was stored before the checkpoint says everything was
    /// flushed (SPEC §8.3), else the first file.
    fn abnormal_start_file(&self) -> usize {
        let min_ts = if self.options().message_index_safe && self.index().is_some() {
            self.checkpoint().min_timestamp_index()
        } else {
            self.checkpoint().min_timestamp()
        };
        let n = self.commitlog().queue().len();
        (0..n)
            .rev()
            .find(|&i| {
                matches!(self.commitlog().first_record_of_file(i),
                    Some((magic, ts)) if magic == crate::log::message::MAGIC_V1 && ts != 0 && ts <= min_ts)
            })
            .unwrap_or(0)
    }

    /// Step 4 (RocketMQ's `recoverConsumeQueue`): every queue keeps its good
    /// units (checked against the recovered CommitLog end and, where two are
    /// out of order, against the CommitLog records) and is cut past its last
    /// good one in every file; the holes between good units are remembered
    /// for [`Store::rebuild_queue_holes`]. Units pointing past the end of the
    /// last CommitLog file (damaged queue files) are cut too. Read-only:
    /// finds each queue's end.
    pub fn recover_consume_queues(&self) -> Result<ConsumeQueueRecovery> {
        self.run_step(RecoveryStep::ConsumeQueues, |s, st| {
            let end = st.report.end_offset;
            let cqs = s.consume_queues();
            let mut max = -1i64;
            if s.is_read_only() {
                max = cqs.recover_all()?;
            } else {
                let min = s.commitlog().min_offset().max(0);
                for q in cqs.all() {
                    let verify = |u: &CqUnit, idx: i64| s.unit_matches_record(&q, u, idx);
                    let holes = q.recover_checked(end as i64, min, &verify)?;
                    max = max.max(q.max_physic_offset());
                    if !holes.is_empty() {
                        st.holes.push((q, holes));
                    }
                }
                // Units pointing past the end of the last CommitLog file cannot
                // be real (damaged queue files): cut them before anything
                // trusts a queue's end, or dispatch would take their records
                // as built.
                let bound = s
                    .commitlog()
                    .queue()
                    .last_file()
                    .map(|f| f.file_from_offset() + f.file_size() as u64)
                    .unwrap_or(0) as i64;
                if max > bound {
                    cqs.truncate_dirty_logic_files(bound)?;
                    max = max_physic_offset_of_queues(s);
                }
            }
            st.max_phy_cq = max;
            Ok(ConsumeQueueRecovery {
                consume_queues: cqs.all().len(),
                max_physic_offset: max,
                queues_with_holes: st.holes.len(),
            })
        })
    }

    /// True when the CommitLog record a unit points at is this queue's
    /// message at logical offset `idx`.
    fn unit_matches_record(&self, q: &ConsumeQueue, u: &CqUnit, idx: i64) -> bool {
        let Ok(at) = u64::try_from(u.phy_offset) else {
            return false;
        };
        match self.commitlog().read_checked(at) {
            RecordRead::Found(v, raw) if v.total_size as i64 == u.size as i64 => {
                (v.queue_id == q.queue_id()
                    && v.queue_offset == idx
                    && &raw[v.topic.clone()] == q.topic().as_bytes())
                    || find_property(&raw[v.properties.clone()], "INNER_MULTI_DISPATCH").is_some()
            }
            _ => false,
        }
    }

    /// Step 5: rebuilds the units of every hole step 4 found from the
    /// CommitLog records between the hole's good neighbours (not a rescan of
    /// the whole log), then syncs the queue's files.
    pub fn rebuild_queue_holes(&self) -> Result<QueueHoleRebuild> {
        self.run_step(RecoveryStep::QueueHoles, |s, st| {
            let mut r = QueueHoleRebuild::default();
            let end = st.report.end_offset;
            for (q, holes) in std::mem::take(&mut st.holes) {
                let (rebuilt, missing) = s.fill_queue_holes(&q, &holes, end, &st.damaged)?;
                r.holes += holes.len();
                r.units_rebuilt += rebuilt;
                r.units_missing += missing;
            }
            Ok(r)
        })
    }

    /// Rebuilds the units of `holes`; returns (units rebuilt, units missing).
    fn fill_queue_holes(
        &self,
        q: &ConsumeQueue,
        holes: &[CqHole],
        end: u64,
        damaged: &[(u64, u64)],
    ) -> Result<(u64, u64)> {
        let min = self.commitlog().min_offset().max(0) as u64;
        let mut rebuilt = 0u64;
        let mut missing = 0i64;
        for h in holes {
            let from = (h.phy_from.max(0) as u64).max(min);
            let until = (h.phy_to.max(0) as u64).min(end);
            let mut put = |phy: u64, v: &RecordView, rec: &[u8]| -> Result<()> {
                if v.queue_id == q.queue_id()
                    && (h.from..h.to).contains(&v.queue_offset)
                    && &rec[v.topic.clone()] == q.topic().as_bytes()
                {
                    if let Some(u) = self.dispatcher().cq_unit_of(phy, v, rec) {
                        if q.put_at(v.queue_offset, u)? {
                            rebuilt += 1;
                        }
                    }
                }
                Ok(())
            };
            if from < until {
                self.commitlog().replay(
                    from,
                    until,
                    damaged,
                    |phy, v, rec| put(phy, v, rec),
                    |_, _| Ok(()),
                )?;
            }
            missing += h.to - h.from;
        }
        log::warn!(
            "{}-{}: rebuilt {rebuilt} of {missing} damaged or lost consume-queue units from the CommitLog",
            q.topic(),
            q.queue_id()
        );
        q.sync_all_files()?;
        Ok((rebuilt, missing.max(0) as u64))
    }

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
    fn reindex(&self, from: i64, until: u64) -> Result<u64> {
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
                let reput_from = max_phy_cq.max(s.commitlog().min_offset()).max(0) as u64;
                s.dispatcher().set_reput_from(reput_from);
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

    /// Step 9: of the stored consumer offsets `(topic@group, queue id,
    /// offset)`, those above their queue's recovered end (after a cut, a
    /// group would skip the messages new puts write there), with the end
    /// to lower them to. Queues the store does not hold are left alone.
    /// The caller writes the lowered table. Read-only: none.
    pub fn clamp_consumer_offsets(
        &self,
        offsets: &[(String, i32, i64)],
    ) -> Result<ConsumerOffsetClamp> {
        self.run_step(RecoveryStep::ConsumerOffsets, |s, st| {
            let mut r = ConsumerOffsetClamp::default();
            if s.is_read_only() {
                return Ok(r);
            }
            for (key, qid, off) in offsets {
                let topic = key.split('@').next().unwrap_or_default();
                if let Some(q) = s.consume_queues().get(topic, *qid) {
                    let end = q.max_offset_in_queue();
                    if *off > end {
                        r.lowered.push((key.clone(), *qid, *off, end));
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

    /// Runs every recovery step in order (SPEC §8; Python's
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
        self.clamp_consumer_offsets(&[])?;
        self.rebuild_queue_offset_table()?;
        self.recovery_report()
    }
}

/// The error for `step` called when `done` was the last step that ran.
fn out_of_order(step: RecoveryStep, done: RecoveryStep) -> StoreError {
    let msg = match done.next() {
        None => format!(
            "recovery step {} called after recovery finished",
            step.method()
        ),
        Some(next) => format!(
            "recovery step {} called out of order: the next step is {} (last done: {})",
            step.method(),
            next.method(),
            done.method()
        ),
    };
    StoreError::RecoveryOrder(msg)
}

/// The error for a put or read before recovery finished.
pub(crate) fn not_recovered(done: RecoveryStep) -> StoreError {
    StoreError::RecoveryOrder(format!(
        "the store is not recovered yet: run the recovery steps first (next: {})",
        done.next()
            .unwrap_or(RecoveryStep::QueueOffsetTable)
            .method()
    ))
}

/// Largest CommitLog end any queue covers (-1: none).
fn max_physic_offset_of_queues(s: &Store) -> i64 {
    s.consume_queues()
        .all()
        .iter()
        .map(|q| q.max_physic_offset())
        .max()
        .unwrap_or(-1)
}

/// The damaged ranges still in the log after a recovery scan: those an
/// earlier recovery recorded and those the scan skipped, below `end`.
fn damaged_ranges(known: &[(u64, u64)], found: &[Damage], end: u64) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = known
        .iter()
        .copied()
        .chain(found.iter().map(|d| (d.offset, d.end)))
        .filter(|&(s, e)| e > s && s < end)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// fsyncs a directory so a removed entry survives a crash.
fn sync_dir(dir: &std::path::Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io(format!("fsync {}", dir.display()), e))
}
