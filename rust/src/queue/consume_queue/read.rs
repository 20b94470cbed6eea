//! Reading a ConsumeQueue: units from a logical offset, the last unit,
//! following a writer in another process (units published by their `size`
//! field), and the lookup of a logical offset by store time.

use std::sync::atomic::Ordering;

use crate::error::Result;
use crate::log::mapped_file::MappedFile;

use super::{scan_valid, ConsumeQueue, CqUnit, CQ_UNIT_SIZE};

impl ConsumeQueue {
    /// Units from logical offset `start_index` to the end of readable data of
    /// the file holding it (never crossing into the next file), at most
    /// `max_units` (RocketMQ's `getIndexBuffer`). `None` when the offset is
    /// below the min offset, not held by any file, or at/after the end of
    /// that file's data.
    pub fn units(&self, start_index: i64, max_units: usize) -> Option<Vec<CqUnit>> {
        let off = u64::try_from(start_index)
            .ok()?
            .checked_mul(CQ_UNIT_SIZE as u64)?;
        if off < self.min_logic_offset() {
            return None;
        }
        let f = self.mfq.find_by_offset(off, false)?;
        let pos = (off - f.file_from_offset()) as usize;
        let data = f.readable_from(pos)?;
        if data.len() < CQ_UNIT_SIZE {
            return None;
        }
        let chunks = data.chunks_exact(CQ_UNIT_SIZE).take(max_units);
        let mut units: Vec<CqUnit> = Vec::with_capacity(chunks.len());
        units.extend(chunks.filter_map(CqUnit::decode));
        if !self.mfq.is_writable() {
            let overlay = self.overlay.read();
            if !overlay.is_empty() {
                let end = start_index.saturating_add(units.len() as i64);
                for (&i, u) in overlay.range(start_index..end) {
                    if let Some(slot) = units.get_mut((i - start_index) as usize) {
                        *slot = *u;
                    }
                }
            }
        }
        Some(units)
    }

    /// The unit at logical offset `index`, if readable.
    pub fn unit_at(&self, index: i64) -> Option<CqUnit> {
        self.units(index, 1)?.into_iter().next()
    }

    /// First logical offset of the file after the one holding `index`.
    pub fn roll_next_file(&self, index: i64) -> i64 {
        let per = self.units_per_file() as i64;
        index + per - index.rem_euclid(per)
    }

    /// CommitLog offset just past the last unit of the queue (RocketMQ's
    /// `getLastOffset`), -1 when there is none or it is a pre-blank unit.
    pub fn last_offset(&self) -> i64 {
        let Some(last) = self.mfq.last_file() else {
            return -1;
        };
        let wrote = last.read_position();
        if wrote < CQ_UNIT_SIZE {
            return -1;
        }
        match last
            .read(wrote - CQ_UNIT_SIZE, CQ_UNIT_SIZE)
            .and_then(CqUnit::decode)
        {
            Some(u) if u.is_valid() && !u.is_pre_blank() => u.end_phy_offset(),
            _ => -1,
        }
    }

    /// The CommitLog offset of the last unit of a full file (`fileSize − 20`),
    /// used by retention; `None` if the file is not full or unreadable.
    pub fn last_unit_phy_of_file(&self, file: &MappedFile) -> Option<i64> {
        file.read(self.file_size - CQ_UNIT_SIZE, CQ_UNIT_SIZE)
            .and_then(CqUnit::decode)
            .map(|u| u.phy_offset)
    }

    /// Follows a writer in another process (read-only queues): drops head
    /// files the writer deleted, adopts files it created, and advances the
    /// end over units that became visible (non-zero `size`), pointing at or
    /// after the end of the queue's last unit and, when `phy_end` (where the
    /// CommitLog's records end as this process knows them) is given, ending
    /// at or before it: a writer appends a unit after its record, in
    /// CommitLog order, so any other unit is stale (one a writer's recovery
    /// cuts, see docs/format.md, "A store a RocketMQ broker cut and appended
    /// to") and is not adopted. When the head
    /// changed or `phy_min` (the CommitLog's min offset as this process
    /// knows it) moved, the min offset is corrected to `phy_min`, as the
    /// writer's retention round corrects its own: the first unit of the first
    /// file pointing at or above it (docs/format.md §16). Returns the new
    /// max offset in the queue. A writable queue only reports its max offset.
    pub fn refresh(&self, phy_min: i64, phy_end: Option<i64>) -> Result<i64> {
        if self.mfq.is_writable() {
            return Ok(self.max_offset_in_queue());
        }
        let st = self.state.lock();
        let was_empty = self.mfq.is_empty();
        let gone = self
            .mfq
            .files()
            .iter()
            .take_while(|f| !f.path().exists())
            .count();
        if gone > 0 {
            self.mfq.remove_head(gone);
        }
        loop {
            let files = self.mfq.files();
            let mut all_full = true;
            for f in files.iter().skip_while(|f| f.is_full()) {
                let pos = f.wrote_position();
                let after = Some(self.max_physic_offset());
                let (valid, last_real) = scan_valid(f.raw(), pos, after, phy_end);
                if valid > pos {
                    f.set_positions(valid);
                }
                if let Some(end) = last_real {
                    self.max_physic_offset.fetch_max(end, Ordering::AcqRel);
                }
                if valid < self.file_size {
                    all_full = false;
                    break;
                }
            }
            // One file at a time: a file adopted after one whose scan stopped
            // early (a unit past `phy_end`) would move the max offset past
            // units not adopted yet, and a pull there would skip them.
            if !all_full || self.mfq.adopt_new_files_upto(1)? == 0 {
                break;
            }
        }
        if let Some(first) = self.mfq.first_file() {
            if was_empty
                || self.min_logic_offset() < first.file_from_offset()
                || phy_min > self.corrected_for.load(Ordering::Acquire)
            {
                drop(st);
                self.correct_min_offset(phy_min.max(0));
                self.corrected_for.fetch_max(phy_min, Ordering::AcqRel);
            }
        }
        Ok(self.max_offset_in_queue())
    }

    /// Read-only queues: true when the writer may have appended since the
    /// last [`ConsumeQueue::refresh`] (a unit is published past the known
    /// end, the next file exists, or no file is known), so a refresh is due.
    /// Costs one unit read, or one `stat` when the last file is full.
    pub fn may_have_grown(&self) -> bool {
        if self.mfq.is_writable() {
            return false;
        }
        let Some(last) = self.mfq.last_file() else {
            return true;
        };
        let pos = last.wrote_position();
        match last.raw().get(pos..pos + CQ_UNIT_SIZE) {
            Some(unit) => CqUnit::decode_published(unit).is_some_and(|u| u.is_valid()),
            None => {
                let next = last.file_from_offset() + self.file_size as u64;
                self.dir()
                    .join(crate::log::mapped_file::file_name(next))
                    .exists()
            }
        }
    }

    /// Logical offset of the message stored nearest to `timestamp` (RocketMQ
    /// 4.9.8 `getOffsetInQueueByTime`, docs/format.md §18.5): picks the first file
    /// modified at or after `timestamp` (else the last), binary-searches its
    /// units, skipping those below `min_phy` (and pre-blank units), reading
    /// each message's store time with `store_ts_of(phy, size)` (`None` ⇒ 0).
    pub fn offset_in_queue_by_time(
        &self,
        timestamp: i64,
        min_phy: i64,
        mut store_ts_of: impl FnMut(i64, i32) -> Option<i64>,
    ) -> i64 {
        // RocketMQ picks the first file *modified* at or after `timestamp`, but
        // writes through a mapping do not reliably advance a file's mtime
        // (only the first dirtying of a page does), so a full file can look
        // older than the messages it holds. We pick the first file whose last
        // unit's message was stored at or after `timestamp` (else the last
        // file): the same file RocketMQ means, judged by the data itself.
        let files = self.mfq.files();
        let chosen = files.iter().find(|f| {
            let wrote = f.read_position();
            if wrote < CQ_UNIT_SIZE {
                return false;
            }
            f.read(wrote - CQ_UNIT_SIZE, CQ_UNIT_SIZE)
                .and_then(CqUnit::decode)
                .filter(|u| u.is_valid() && !u.is_pre_blank())
                .and_then(|u| store_ts_of(u.phy_offset, u.size))
                .is_some_and(|ts| ts >= timestamp)
        });
        let Some(f) = chosen.or(files.last()).cloned() else {
            return 0;
        };
        let from = f.file_from_offset() as i64;
        let Some(data) = f.readable_from(0) else {
            return 0;
        };
        if data.is_empty() {
            return 0;
        }
        let unit = CQ_UNIT_SIZE as i64;
        let min_logic = self.min_logic_offset() as i64;
        let mut low = if min_logic > from {
            min_logic - from
        } else {
            0
        };
        let mut high = data.len() as i64 - unit;
        let (mut target, mut left, mut right) = (-1i64, -1i64, -1i64);
        let (mut left_value, mut right_value) = (-1i64, -1i64);
        while high >= low {
            let mid = (low + high) / (2 * unit) * unit;
            let Some(u) = data.get(mid as usize..).and_then(CqUnit::decode) else {
                return 0;
            };
            if u.phy_offset < min_phy || u.is_pre_blank() {
                low = mid + unit;
                left = mid;
                continue;
            }
            let Some(ts) = store_ts_of(u.phy_offset, u.size).filter(|t| *t >= 0) else {
                return 0;
            };
            match ts.cmp(&timestamp) {
                std::cmp::Ordering::Equal => {
                    target = mid;
                    break;
                }
                std::cmp::Ordering::Greater => {
                    high = mid - unit;
                    right = mid;
                    right_value = ts;
                }
                std::cmp::Ordering::Less => {
                    low = mid + unit;
                    left = mid;
                    left_value = ts;
                }
            }
        }
        let offset = if target != -1 {
            target
        } else if left_value == -1 {
            right
        } else if right_value == -1 {
            left
        } else if timestamp.abs_diff(left_value) > timestamp.abs_diff(right_value) {
            right
        } else {
            left
        };
        (from + offset) / unit
    }
}
