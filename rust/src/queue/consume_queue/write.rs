//! Writing a ConsumeQueue: appending a unit (pre-blank units first when a
//! queue starts at a logical offset above 0; the `size` field published
//! last), rewriting one unit in a hole during recovery, and deleting
//! expired or all files.

use std::sync::atomic::Ordering;

use crate::error::{Result, StoreError};
use crate::log::mapped_file::MappedFile;

use super::{ConsumeQueue, CqUnit, CQ_UNIT_SIZE};

impl ConsumeQueue {
    /// Writes `unit` at logical offset `index` inside the queue's written
    /// data (recovery only: rebuilding a hole). Returns false when `index`
    /// lies outside it. The caller syncs the files afterwards
    /// ([`ConsumeQueue::sync_all_files`]).
    pub fn put_at(&self, index: i64, unit: CqUnit) -> Result<bool> {
        let _st = self.state.lock();
        let Some(off) = u64::try_from(index)
            .ok()
            .and_then(|i| i.checked_mul(CQ_UNIT_SIZE as u64))
        else {
            return Ok(false);
        };
        let Some(f) = self.mfq.find_by_offset(off, false) else {
            return Ok(false);
        };
        let pos = (off - f.file_from_offset()) as usize;
        if pos + CQ_UNIT_SIZE > f.wrote_position() {
            return Ok(false);
        }
        f.overwrite_in_recovery(pos, &unit.encode())?;
        Ok(true)
    }

    /// Rebuilds units below the queue's first file (recovery only: a front
    /// hole, see [`ConsumeQueue::front_gap`]). `units` are `(logical offset,
    /// unit)` in ascending order, all below the first file. The files from
    /// the one holding the first of them up to the first file are created
    /// (zeros), the units before the first of them in its file become
    /// pre-blank (the messages there are gone with the CommitLog files
    /// retention deleted: the queue now starts at the first rebuilt one),
    /// and the units are written. The caller syncs the files afterwards.
    /// Returns the units written.
    pub fn put_front(&self, units: &[(i64, CqUnit)]) -> Result<u64> {
        let Some(&(lowest, _)) = units.first() else {
            return Ok(0);
        };
        let unit = CQ_UNIT_SIZE as u64;
        let Some(first) = self.mfq.first_file().map(|f| f.file_from_offset()) else {
            return Ok(0);
        };
        let Ok(lowest) = u64::try_from(lowest) else {
            return Ok(0);
        };
        let at = lowest * unit;
        if at >= first {
            return Ok(0);
        }
        let from = at - at % self.file_size as u64;
        let _st = self.state.lock();
        let created = self.mfq.prepend_zero_files(from)?;
        if let Some(f) = self.mfq.first_file().filter(|_| !created.is_empty()) {
            let blanks = (at - from) as usize;
            let mut fill = vec![0u8; blanks];
            for chunk in fill.chunks_exact_mut(CQ_UNIT_SIZE) {
                chunk.copy_from_slice(&CqUnit::PRE_BLANK.encode());
            }
            if blanks > 0 {
                f.overwrite_in_recovery(0, &fill)?;
            }
        }
        let mut written = 0u64;
        for &(index, u) in units {
            let off = index as u64 * unit;
            if off >= first {
                break;
            }
            if let Some(f) = self.mfq.find_by_offset(off, false) {
                f.overwrite_in_recovery((off - f.file_from_offset()) as usize, &u.encode())?;
                written += 1;
            }
        }
        drop(_st);
        self.correct_min_offset(0);
        Ok(written)
    }

    /// Read-only queues: serves `unit` at logical offset `index` in place of
    /// the unit on disk (a hole's unit recovery rebuilt from the CommitLog;
    /// nothing is written). Returns false when `index` lies outside the
    /// queue's recovered units.
    pub fn put_in_memory(&self, index: i64, unit: CqUnit) -> bool {
        let inside = index >= self.min_offset_in_queue() && index < self.max_offset_in_queue();
        if inside {
            self.overlay.write().insert(index, unit);
        }
        inside
    }

    /// Forces every file of the queue to disk (after [`ConsumeQueue::put_at`]).
    pub fn sync_all_files(&self) -> Result<()> {
        for f in self.mfq.files() {
            f.sync_all()?;
        }
        Ok(())
    }
    /// Appends the unit for logical offset `cq_offset` (RocketMQ's
    /// `putMessagePositionInfo`, docs/format.md §9). Returns `Ok(true)` when the unit
    /// is in the queue (written now, or already built), `Ok(false)` when the
    /// file had no room for it.
    pub fn put(&self, phy_offset: i64, size: i32, tags_code: i64, cq_offset: i64) -> Result<bool> {
        if !self.mfq.is_writable() {
            return Err(StoreError::ReadOnly);
        }
        #[cfg(feature = "failpoints")]
        crate::failpoint::check("cq_put")
            .map_err(|e| StoreError::io(format!("append to {}", self.mfq.dir().display()), e))?;
        if phy_offset < 0 || size <= 0 || cq_offset < 0 {
            return Err(StoreError::internal(format!(
                "bad ConsumeQueue unit (phy {phy_offset}, size {size}, queue offset {cq_offset})"
            )));
        }
        let unit = CqUnit {
            phy_offset,
            size,
            tags_code,
        };
        let mut st = self.state.lock();
        if unit.end_phy_offset() <= self.max_physic_offset.load(Ordering::Acquire) {
            self.repeated.fetch_add(1, Ordering::Relaxed);
            log::debug!(
                "{}-{}: maybe building the consume queue repeatedly (max physic offset {}, phy {phy_offset})",
                self.topic,
                self.queue_id,
                self.max_physic_offset()
            );
            return Ok(true);
        }
        let expect = (cq_offset as u64)
            .checked_mul(CQ_UNIT_SIZE as u64)
            .ok_or_else(|| StoreError::internal(format!("queue offset {cq_offset} too large")))?;
        if cq_offset != 0 && st.first_created_from.is_none() {
            self.restart_if_no_message(expect)?;
        }
        let was_empty = self.mfq.is_empty();
        let file = self.mfq.last_file_or_create(expect)?;
        if was_empty {
            st.first_created_from = Some(file.file_from_offset());
        }
        let from = file.file_from_offset();
        if st.first_created_from == Some(from) && cq_offset != 0 && file.wrote_position() == 0 {
            self.min_logic_offset.store(expect, Ordering::Release);
            self.mfq.set_flushed_where(expect);
            if expect >= from && expect < from + self.file_size as u64 {
                let until = (expect - from) as usize;
                fill_pre_blank(&file, until)?;
                log::info!(
                    "{}-{}: filled {} pre-blank units in {}",
                    self.topic,
                    self.queue_id,
                    until / CQ_UNIT_SIZE,
                    file.path().display()
                );
            }
        }
        if cq_offset != 0 {
            let current = from + file.wrote_position() as u64;
            if expect < current {
                self.repeated.fetch_add(1, Ordering::Relaxed);
                log::debug!(
                    "{}-{}: consume queue built repeatedly (expect {expect}, current {current})",
                    self.topic,
                    self.queue_id
                );
                return Ok(true);
            }
            if expect != current {
                log::warn!(
                    "{}-{}: consume queue gap: expected logical offset {expect}, current end {current}; appending at the end",
                    self.topic,
                    self.queue_id
                );
            }
        }
        let ok = file.append_reserved(CQ_UNIT_SIZE, |tail, _| {
            if tail.len() < CQ_UNIT_SIZE {
                return (0, false);
            }
            unit.write_to(&mut tail[..CQ_UNIT_SIZE]);
            (CQ_UNIT_SIZE, true)
        })?;
        if ok {
            self.max_physic_offset
                .store(unit.end_phy_offset(), Ordering::Release);
        }
        Ok(ok)
    }

    /// A queue whose files hold no message — only zeros, or part of the
    /// pre-blank filler: a kill between the creation of its first file and
    /// its first unit — ending before `expect` starts afresh, as a new queue
    /// would (docs/format.md §15.3): its files are deleted, so the put
    /// creates the file holding `expect` and fills the units before it with
    /// pre-blanks. Appending at the files' end would serve the message at a
    /// lower queue offset than its record carries. Called with the write
    /// lock held, only when no file was created in this process.
    fn restart_if_no_message(&self, expect: u64) -> Result<()> {
        let files = self.mfq.files();
        let Some(last) = files.last() else {
            return Ok(());
        };
        let end = last.file_from_offset() + last.wrote_position() as u64;
        if expect <= end {
            return Ok(());
        }
        let only_filler = files.iter().all(|f| {
            f.raw()
                .get(..f.wrote_position())
                .unwrap_or_default()
                .chunks_exact(CQ_UNIT_SIZE)
                .all(|c| CqUnit::decode(c).is_some_and(|u| u.is_pre_blank()))
        });
        if !only_filler {
            return Ok(());
        }
        log::warn!(
            "{}-{}: the consume queue holds no message (its files end at logical offset {end}); \
             it starts again at {expect}, the first message's",
            self.topic,
            self.queue_id
        );
        for f in self.mfq.remove_head(usize::MAX) {
            f.destroy()?;
        }
        self.max_physic_offset.store(-1, Ordering::Release);
        self.min_logic_offset.store(0, Ordering::Release);
        self.mfq.set_flushed_where(0);
        Ok(())
    }

    /// Deletes every file and the queue directory (if empty afterwards).
    pub fn destroy(&self) -> Result<()> {
        if !self.mfq.is_writable() {
            return Err(StoreError::ReadOnly);
        }
        let mut st = self.state.lock();
        let files = self.mfq.remove_head(usize::MAX);
        let mut first_err = None;
        for f in files {
            if let Err(e) = f.destroy() {
                first_err.get_or_insert(e);
            }
        }
        st.first_created_from = None;
        self.max_physic_offset.store(-1, Ordering::Release);
        self.min_logic_offset.store(0, Ordering::Release);
        self.mfq.set_flushed_where(0);
        let _ = std::fs::remove_dir(self.mfq.dir());
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Deletes leading files (never the last) whose last unit points below
    /// `min_phy` (RocketMQ's `deleteExpiredFileByOffset(minPhy, 20)`, docs/format.md
    /// §16), then corrects the min offset. Returns how many were deleted.
    pub fn delete_expired_by_offset(&self, min_phy: i64) -> usize {
        if !self.mfq.is_writable() {
            return 0;
        }
        let count = {
            let _st = self.state.lock();
            let files = self.mfq.files();
            let mut count = 0;
            for f in files.iter().take(files.len().saturating_sub(1)) {
                let destroy = match self.last_unit_phy_of_file(f) {
                    Some(phy) => phy < min_phy,
                    None if !f.is_available() => {
                        log::warn!(
                            "found a hanged consume queue file {}; deleting it",
                            f.path().display()
                        );
                        true
                    }
                    None => false,
                };
                if !destroy {
                    break;
                }
                // The min offset moves past the file before it goes, so a
                // pull that finds the file gone reads a min offset past it.
                self.min_logic_offset.fetch_max(
                    f.file_from_offset() + self.file_size as u64,
                    Ordering::AcqRel,
                );
                if let Err(e) = f.destroy() {
                    log::warn!("cannot delete expired consume queue file: {e}");
                    break;
                }
                count += 1;
            }
            self.mfq.remove_head(count);
            count
        };
        self.correct_min_offset(min_phy);
        count
    }
}

/// Appends pre-blank units from the file's start up to byte `until`.
fn fill_pre_blank(file: &MappedFile, until: usize) -> Result<()> {
    let n = until / CQ_UNIT_SIZE * CQ_UNIT_SIZE;
    let filled = file.append_reserved(n, |tail, _| {
        if tail.len() < n {
            return (0, false);
        }
        for chunk in tail[..n].chunks_exact_mut(CQ_UNIT_SIZE) {
            CqUnit::PRE_BLANK.write_to(chunk);
        }
        (n, true)
    })?;
    if filled {
        Ok(())
    } else {
        Err(StoreError::internal(format!(
            "no room for {n} bytes of pre-blank units in {}",
            file.path().display()
        )))
    }
}
