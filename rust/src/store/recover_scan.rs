//! The recovery steps that find the recovered end, as [`Store`] methods
//! (the first five of [`crate::recovery`]'s steps): file sizes, the damage
//! rule, the CommitLog scans, and the consume queues checked against the
//! CommitLog (holes found and rebuilt); and the step guard (each step runs
//! only after the one before it). The steps that cut and rebuild at that
//! end are `recover_rebuild.rs`.

use std::path::PathBuf;

use crate::checkpoint::CheckpointRepair;
use crate::error::{Result, StoreError};
use crate::index::index_file::index_file_size;
use crate::log::commitlog::{DamagePolicy, DurableBound, RecordRead};
use crate::log::message::{find_property, max_record_len, RecordView};
use crate::queue::consume_queue::{ConsumeQueue, CqHole, CqUnit, UnitLimits, CQ_UNIT_SIZE};

use super::Store;
use crate::recovery::{
    damaged_ranges, out_of_order, CommitLogScan, ConsumeQueueRecovery, DamageRule, FileSizeReport,
    QueueHoleRebuild, RecoveryMode, RecoveryState, RecoveryStep,
};

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
    pub(super) fn run_step<T>(
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
            let removed = s.remove_unloaded_index_files()?;
            if !removed.is_empty() {
                st.index_from = Some(s.index().map_or(0, |i| i.end_phy_offset()));
                st.report.index_files_destroyed.extend(removed);
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
        crate::paths::sync_dir(dir)?;
        Ok(Some((path, index.end_phy_offset())))
    }

    /// In a repair, the index files loading left out (the first of another
    /// size than the geometry, and every newer one), removed: recovery
    /// rebuilds their entries from where the loaded files end.
    fn remove_unloaded_index_files(&self) -> Result<Vec<PathBuf>> {
        let Some(index) = self.index().filter(|_| self.options().repair) else {
            return Ok(Vec::new());
        };
        let loaded: Vec<PathBuf> = index
            .files()
            .iter()
            .map(|f| f.path().to_path_buf())
            .collect();
        let dir = index.dir();
        let mut removed = Vec::new();
        for path in crate::index::index_service::list_index_files(dir)? {
            if loaded.contains(&path) {
                continue;
            }
            log::warn!(
                "removing index file {} (not of the index geometry: damaged); its entries are \
                 rebuilt from the CommitLog",
                path.display()
            );
            std::fs::remove_file(&path)
                .map_err(|e| StoreError::io(format!("remove {}", path.display()), e))?;
            removed.push(path);
        }
        if !removed.is_empty() {
            crate::paths::sync_dir(dir)?;
        }
        Ok(removed)
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
            // Records in ranges written with the property CRC are checked
            // for it by the scan and every read from here on, as far as
            // the bytes still show them (docs/format.md §11).
            s.vouch_prop_crc_ranges(rule.durable_mark.is_some());
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
            let mut scan = s.commitlog().scan_for_recovery(start, check_crc, policy)?;
            if let Some(cut) = s.options().cut_at.filter(|c| *c < scan.end_offset) {
                // A rejoin: the log ends where it forked from its new master.
                scan.end_offset = cut;
                scan.stop_reason = Some(format!("cut at {cut} (a rejoin)"));
            }
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
    /// flushed (docs/format.md §15.2), else the first file.
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
    /// the same judgement, positions only (nothing is written), so the
    /// queue ends and holes are those a writer's recovery finds (a front
    /// hole stays: its files cannot be created).
    pub fn recover_consume_queues(&self) -> Result<ConsumeQueueRecovery> {
        self.run_step(RecoveryStep::ConsumeQueues, |s, st| {
            let end = st.report.end_offset;
            let cqs = s.consume_queues();
            let mut max = -1i64;
            let mut with_holes = 0usize;
            let limits = UnitLimits {
                end: end as i64,
                phy_min: s.commitlog().min_offset().max(0),
                max_size: i64::try_from(max_record_len(s.options().max_message_size))
                    .unwrap_or(i64::MAX),
            };
            for q in cqs.all() {
                let verify = |u: &CqUnit, idx: i64| s.unit_matches_record(&q, u, idx);
                let mut holes = q.recover_checked(limits, &verify)?;
                max = max.max(q.max_physic_offset());
                if !holes.is_empty() {
                    with_holes += 1;
                }
                if let Some(front) = q.front_gap(limits).filter(|_| !s.is_read_only()) {
                    // One CommitLog pass for the front and a first hole
                    // that shares its range.
                    match holes.first_mut() {
                        Some(h) if h.from == front.to && h.phy_from == front.phy_from => {
                            h.from = 0;
                        }
                        _ => holes.insert(0, front),
                    }
                }
                if !holes.is_empty() {
                    st.holes.push((q, holes));
                }
            }
            if !s.is_read_only() {
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
                queues_with_holes: with_holes,
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
    /// the whole log), then syncs the queue's files. Read-only: the rebuilt
    /// units are held in memory and served in place of those on disk.
    pub fn rebuild_queue_holes(&self) -> Result<QueueHoleRebuild> {
        self.run_step(RecoveryStep::QueueHoles, |s, st| {
            let mut r = QueueHoleRebuild::default();
            let end = st.report.end_offset;
            for (q, holes) in std::mem::take(&mut st.holes) {
                let f = s.fill_queue_holes(&q, &holes, end, &st.damaged)?;
                r.holes += f.holes;
                r.units_rebuilt += f.rebuilt;
                r.units_missing += f.missing;
            }
            st.report.queue_units_rebuilt = r.units_rebuilt;
            Ok(r)
        })
    }

    /// Rebuilds the units of `holes`. Units below the queue's first file (a
    /// front hole) are collected and written by [`ConsumeQueue::put_front`];
    /// a front hole counts only the units the CommitLog still held.
    fn fill_queue_holes(
        &self,
        q: &ConsumeQueue,
        holes: &[CqHole],
        end: u64,
        damaged: &[(u64, u64)],
    ) -> Result<HoleFill> {
        let min = self.commitlog().min_offset().max(0) as u64;
        let first = q
            .queue()
            .first_file()
            .map_or(0, |f| (f.file_from_offset() / CQ_UNIT_SIZE as u64) as i64);
        let mut rebuilt = 0u64;
        let mut missing = 0i64;
        let mut front = Vec::new();
        for h in holes {
            let from = (h.phy_from.max(0) as u64).max(min);
            let until = (h.phy_to.max(0) as u64).min(end);
            let mut put = |phy: u64, v: &RecordView, rec: &[u8]| -> Result<()> {
                if v.queue_id == q.queue_id()
                    && (h.from..h.to).contains(&v.queue_offset)
                    && &rec[v.topic.clone()] == q.topic().as_bytes()
                {
                    if let Some(u) = self.dispatcher().cq_unit_of(phy, v, rec) {
                        if self.is_read_only() {
                            rebuilt += u64::from(q.put_in_memory(v.queue_offset, u));
                        } else if v.queue_offset < first {
                            front.push((v.queue_offset, u));
                        } else if q.put_at(v.queue_offset, u)? {
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
            missing += (h.to - h.from.max(first)).max(0);
        }
        front.sort_unstable_by_key(|&(i, _)| i);
        front.dedup_by_key(|&mut (i, _)| i);
        if !front.is_empty() {
            log::warn!(
                "{}-{}: the CommitLog holds {} messages below the queue's first file \
                 (offsets {}..={}): a deleted queue file, rebuilt",
                q.topic(),
                q.queue_id(),
                front.len(),
                front[0].0,
                front[front.len() - 1].0
            );
            missing += front.len() as i64;
            rebuilt += q.put_front(&front)?;
        }
        let holes = holes
            .iter()
            .filter(|h| h.to > first || !front.is_empty())
            .count();
        if missing > 0 {
            log::warn!(
                "{}-{}: rebuilt {rebuilt} of {missing} damaged or lost consume-queue units from the CommitLog{}",
                q.topic(),
                q.queue_id(),
                if self.is_read_only() {
                    " (in memory: the open is read-only)"
                } else {
                    ""
                }
            );
        }
        if rebuilt > 0 && !self.is_read_only() {
            q.sync_all_files()?;
        }
        Ok(HoleFill {
            holes,
            rebuilt,
            missing: missing.max(0) as u64,
        })
    }
}

impl Store {
    /// Sets the property-CRC ranges the scan and reads check: the
    /// checkpoint's, cut where the bytes stop showing them (another writer
    /// wrote there, docs/format.md §11). The checkpoint keeps the cut list,
    /// which a writer's recovery writes back.
    fn vouch_prop_crc_ranges(&self, mark_valid: bool) {
        let read = self.checkpoint().prop_crc_ranges().ranges;
        let v = crate::log::commitlog::vouch_prop_crc_ranges(self.commitlog(), &read, mark_valid);
        if let Some(p) = v.stale_from {
            log::warn!(
                "the checkpoint's property-CRC ranges {read:?} no longer describe the CommitLog \
                 from offset {p} (another writer wrote there without the property): it is \
                 checked below {p} only, in {:?}",
                v.ranges
            );
        }
        self.checkpoint()
            .update_prop_crc_ranges(|r| r.ranges.clone_from(&v.ranges));
        self.commitlog()
            .set_prop_crc_ranges(self.checkpoint().prop_crc_ranges().for_reads());
    }
}

/// What [`Store::rebuild_queue_holes`] did for one queue.
struct HoleFill {
    /// Holes that lacked units.
    holes: usize,
    /// Units rebuilt from the CommitLog.
    rebuilt: u64,
    /// Units the holes lacked (a front hole: those the CommitLog held).
    missing: u64,
}

/// Largest CommitLog end any queue covers (-1: none).
pub(super) fn max_physic_offset_of_queues(s: &Store) -> i64 {
    s.consume_queues()
        .all()
        .iter()
        .map(|q| q.max_physic_offset())
        .max()
        .unwrap_or(-1)
}
