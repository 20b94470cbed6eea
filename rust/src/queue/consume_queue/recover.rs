//! Recovering a ConsumeQueue: the plain scan (docs/format.md §15.3) stops at the
//! first invalid unit; the checked one keeps only units that agree with the
//! CommitLog and returns the runs between good units as [`CqHole`]s to
//! rebuild. Truncation cuts the queue at a CommitLog offset.

use std::sync::atomic::Ordering;

use crate::error::Result;

use super::{scan_valid, ConsumeQueue, CqUnit, WriteState, CQ_UNIT_SIZE};

impl ConsumeQueue {
    /// Recovers the queue (docs/format.md §15.3): scans from the third-last file, stops
    /// at the first invalid unit (continuing into the next file only if the
    /// whole file was valid), sets positions, zeroes and cuts what follows.
    /// Returns the recovered end (`processOffset`, a logical byte offset).
    pub fn recover(&self) -> Result<u64> {
        let mut st = self.state.lock();
        let files = self.mfq.files();
        if files.is_empty() {
            return Ok(0);
        }
        let mut index = files.len().saturating_sub(3);
        let mut process = files[index].file_from_offset();
        let mut max_phy: Option<i64> = None;
        loop {
            let (valid, last_real) = scan_valid(files[index].raw(), 0, None, None);
            if let Some(end) = last_real {
                max_phy = Some(end);
            }
            if valid == self.file_size && index + 1 < files.len() {
                index += 1;
                process = files[index].file_from_offset();
                continue;
            }
            process += valid as u64;
            break;
        }
        self.cut_at(&mut st, process)?;
        self.mfq.set_flushed_where(process);
        self.max_physic_offset
            .store(max_phy.unwrap_or(-1), Ordering::Release);
        drop(st);
        self.correct_min_offset(0);
        Ok(process)
    }

    /// The writer's recovery of this queue (docs/format.md §15.3): scans from the third-last file to the end and
    /// keeps the units that are *good* — not garbage by the cheap checks of
    /// [`UnitLimits::is_garbage`] (pointing below the recovered CommitLog
    /// end, a plausible size, a pre-blank only before every real unit) and
    /// in CommitLog order. When two units are
    /// out of order, `verify(unit, logical_offset)` (the CommitLog record
    /// there is this queue's message at that offset) decides which one is
    /// bad, so one wild unit never hides the units after it. The queue is
    /// cut just past its last good unit (in every file: units past the
    /// CommitLog's end go wherever they are), and the runs of bad or zeroed units between
    /// good ones are returned as holes, each with the CommitLog range
    /// between its good neighbours, for [`ConsumeQueue::put_at`] to rebuild.
    pub fn recover_checked(
        &self,
        limits: UnitLimits,
        verify: &dyn Fn(&CqUnit, i64) -> bool,
    ) -> Result<Vec<CqHole>> {
        let phy_min = limits.phy_min;
        let mut st = self.state.lock();
        let files = self.mfq.files();
        if files.is_empty() {
            return Ok(Vec::new());
        }
        // From the third-last file, or earlier while a file does not start
        // with a good unit (newest files lost: the units before them must be
        // checked against the bound too).
        let mut first = files.len().saturating_sub(3);
        while first > 0 {
            match CqUnit::decode(files[first].raw()) {
                Some(u) if u.is_pre_blank() || !limits.is_garbage(&u) => break,
                _ => first -= 1,
            }
        }
        // A hole before the window (a file whose pages never reached the
        // disk while later files did, one recovery made full size, or
        // garbage units): the files before the window are full of good
        // units, so the first one holding an unwritten or garbage unit
        // starts the window. One decode per unit, no CommitLog read: a clean
        // reopen keeps its cost.
        if let Some(k) = first_file_with_garbage(&files[..first], &limits) {
            first = k;
        }
        let unit = CQ_UNIT_SIZE as u64;
        let window_start = (files[first].file_from_offset() / unit) as i64;
        // The good unit just before the window, if any (for a hole's lower bound).
        let before = (first > 0)
            .then(|| self.last_unit_phy_of_file(&files[first - 1]))
            .flatten()
            .and_then(|_| {
                let f = &files[first - 1];
                f.read(self.file_size - CQ_UNIT_SIZE, CQ_UNIT_SIZE)
                    .and_then(CqUnit::decode)
            })
            .filter(|u| !u.is_pre_blank() && !limits.is_garbage(u) && !limits.is_oversize(u));
        let mut good = GoodUnits::new(window_start - 1, before, phy_min);
        for f in &files[first..] {
            let from = (f.file_from_offset() / unit) as i64;
            // The all-zero units after the last written one are skipped
            // unread (unwritten: garbage, no hole follows them).
            let data = f.raw();
            let written = data.get(..written_len(data)).unwrap_or_default();
            for (k, chunk) in written.chunks_exact(CQ_UNIT_SIZE).enumerate() {
                let idx = from + k as i64;
                let Some(u) = CqUnit::decode(chunk) else {
                    break;
                };
                if u.is_pre_blank() {
                    // The filler only ever precedes a queue's first message.
                    if good.last_real().is_none() {
                        good.push(idx, u);
                    }
                    continue;
                }
                if limits.is_garbage(&u) {
                    continue;
                }
                if limits.is_oversize(&u) && !verify(&u, idx) {
                    continue;
                }
                loop {
                    match good.last_real() {
                        Some((pi, p)) if u.phy_offset < p.end_phy_offset() => {
                            if verify(&u, idx) && !verify(&p, pi) {
                                // The earlier unit was the wild one.
                                good.pop_real();
                                continue;
                            }
                            break;
                        }
                        _ => {
                            good.push(idx, u);
                            break;
                        }
                    }
                }
            }
        }
        let end = ((good.last_index + 1).max(window_start) as u64) * unit;
        self.cut_at(&mut st, end)?;
        self.mfq.set_flushed_where(end);
        self.max_physic_offset
            .store(good.last_real_end().unwrap_or(-1), Ordering::Release);
        drop(st);
        self.correct_min_offset(0);
        Ok(good.holes)
    }

    /// The units below the queue's first file that the CommitLog may still
    /// hold (docs/format.md §15.3, a front hole): when the first file does
    /// not start at offset 0 and does not begin with pre-blank units (the
    /// queue began there), the records of this queue between the CommitLog's
    /// first retained record `limits.phy_min` and the first good unit have
    /// lost their units with a deleted file. Retention deletes a queue file
    /// only once its last unit points below the CommitLog's min offset, so
    /// after retention that range holds none of this queue's records and a
    /// rebuild finds nothing. Returns the range as a hole `[0, first file)`,
    /// or `None` when the first good unit points at or below `phy_min`
    /// (nothing of this queue can lie before it) or the queue holds no good
    /// unit. A clean queue costs one unit decode.
    pub fn front_gap(&self, limits: UnitLimits) -> Option<CqHole> {
        let files = self.mfq.files();
        let first = files.first()?;
        let to = (first.file_from_offset() / CQ_UNIT_SIZE as u64) as i64;
        if to == 0 {
            return None;
        }
        // No good unit at all (every unit past the recovered end, or
        // garbage): the queue holds nothing to bound the range by, and a
        // scan of the whole log would mostly find other queues' records.
        let mut phy_to = limits.phy_min;
        'files: for f in &files {
            for chunk in f.raw().chunks_exact(CQ_UNIT_SIZE) {
                let Some(u) = CqUnit::decode(chunk) else {
                    break;
                };
                if u.is_pre_blank() {
                    if f.file_from_offset() == first.file_from_offset() {
                        return None;
                    }
                    continue;
                }
                if !limits.is_garbage(&u) && !limits.is_oversize(&u) {
                    phy_to = u.phy_offset;
                    break 'files;
                }
            }
        }
        (phy_to > limits.phy_min).then_some(CqHole {
            from: 0,
            to,
            phy_from: limits.phy_min,
            phy_to,
        })
    }

    /// Cuts the queue at logical byte offset `end`: the containing file keeps
    /// `end % size` bytes, later files are destroyed, and the non-zero bytes
    /// after `end` are zeroed and synced ([`MappedFileQueue::truncate_dirty`]
    /// writes nothing when they are already zero, so a clean queue costs no
    /// writes on every start; a read-only queue only sets positions).
    fn cut_at(&self, st: &mut WriteState, end: u64) -> Result<()> {
        if st.first_created_from.is_some_and(|from| from > end) {
            st.first_created_from = None;
        }
        let discarded = self.mfq.truncate_dirty(end)?;
        if discarded > 0 && self.mfq.is_writable() {
            log::info!(
                "{}-{}: cut the consume queue at {end}, zeroed {discarded} dirty bytes",
                self.topic,
                self.queue_id
            );
        }
        Ok(())
    }

    /// Removes every unit at or after CommitLog offset `phy` (docs/format.md §15.2):
    /// files whose first unit is ≥ `phy` are deleted from the tail; in the
    /// remaining last file the positions stop after the last valid unit below
    /// `phy`, and the bytes after it are zeroed. Pre-blank units are kept and
    /// never become the max physical offset.
    pub fn truncate_dirty_logic_files(&self, phy: i64) -> Result<()> {
        let mut st = self.state.lock();
        let mut max_phy = phy;
        while let Some(last) = self.mfq.last_file() {
            let data = last.raw();
            let mut pos = 0usize;
            let mut delete = false;
            for (i, chunk) in data.chunks_exact(CQ_UNIT_SIZE).enumerate() {
                let Some(u) = CqUnit::decode(chunk) else {
                    break;
                };
                // RocketMQ keeps an invalid first unit (position 20); we stop
                // at it like at any other invalid unit.
                if !u.is_valid() {
                    break;
                }
                if u.phy_offset >= phy {
                    delete = i == 0;
                    break;
                }
                pos = (i + 1) * CQ_UNIT_SIZE;
                if !u.is_pre_blank() {
                    max_phy = u.end_phy_offset();
                }
            }
            if delete {
                let from = last.file_from_offset();
                self.mfq.delete_last_file()?;
                if st.first_created_from == Some(from) {
                    st.first_created_from = None;
                }
                continue;
            }
            let end = last.file_from_offset() + pos as u64;
            self.cut_at(&mut st, end)?;
            if self.mfq.flushed_where() > end {
                self.mfq.set_flushed_where(end);
            }
            break;
        }
        if self.mfq.is_empty() {
            self.mfq.set_flushed_where(0);
        }
        self.max_physic_offset.store(max_phy, Ordering::Release);
        Ok(())
    }
}

/// What a unit is checked against without reading the CommitLog
/// (docs/format.md §15.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitLimits {
    /// The recovered CommitLog end: a record ends at or before it.
    pub end: i64,
    /// The CommitLog's min offset (its first retained record).
    pub phy_min: i64,
    /// The largest record the store writes (`max_record_len`, from the put
    /// rules: `max_message_size` + 64 KiB):
    /// a unit over it is checked against its record (an earlier
    /// configuration may have allowed it).
    pub max_size: i64,
}

impl UnitLimits {
    /// True for a unit that cannot be a message's (the pre-blank filler
    /// excepted): unwritten or torn (`size` ≤ 0), a negative CommitLog
    /// offset, or a record ending past the CommitLog's end.
    pub fn is_garbage(&self, u: &CqUnit) -> bool {
        !u.is_pre_blank() && (!u.is_valid() || u.end_phy_offset() > self.end)
    }

    /// True for a unit larger than any record the store writes.
    pub fn is_oversize(&self, u: &CqUnit) -> bool {
        !u.is_pre_blank() && (u.size as i64) > self.max_size
    }
}

/// Bytes of `data` up to the end of its last unit holding a non-zero byte
/// (0 when every unit is zeros). Blocks of units are compared with zeros
/// from the end, so a mostly empty file costs a few `memcmp`s per page.
fn written_len(data: &[u8]) -> usize {
    const BLOCK: usize = CQ_UNIT_SIZE * 205;
    static ZEROS: [u8; BLOCK] = [0; BLOCK];
    let mut end = data.len() / CQ_UNIT_SIZE * CQ_UNIT_SIZE;
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        let block = data.get(start..end).unwrap_or_default();
        if Some(block) != ZEROS.get(..block.len()) {
            let last = block
                .chunks_exact(CQ_UNIT_SIZE)
                .rposition(|u| Some(u) != ZEROS.get(..CQ_UNIT_SIZE))
                .unwrap_or(0);
            return start + (last + 1) * CQ_UNIT_SIZE;
        }
        end = start;
    }
    0
}

/// The first of `files` (full, consecutive files of one queue) holding a
/// unit that is unwritten, garbage ([`UnitLimits::is_garbage`]), over the
/// size limit, a pre-blank after a real unit, or pointing before the end of
/// the real unit before it (units of one queue follow CommitLog order).
fn first_file_with_garbage(
    files: &[std::sync::Arc<crate::log::mapped_file::MappedFile>],
    limits: &UnitLimits,
) -> Option<usize> {
    let mut prev_end: Option<i64> = None;
    files.iter().position(|f| {
        f.raw().chunks_exact(CQ_UNIT_SIZE).any(|chunk| {
            let Some(u) = CqUnit::decode(chunk) else {
                return true;
            };
            if u.is_pre_blank() {
                return prev_end.is_some();
            }
            if limits.is_garbage(&u)
                || limits.is_oversize(&u)
                || prev_end.is_some_and(|e| u.phy_offset < e)
            {
                return true;
            }
            prev_end = Some(u.end_phy_offset());
            false
        })
    })
}

/// A run of bad or zeroed units between good ones, found by
/// [`ConsumeQueue::recover_checked`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqHole {
    /// Logical offsets `[from, to)` of the units to rebuild.
    pub from: i64,
    /// End of the hole (exclusive).
    pub to: i64,
    /// The CommitLog range between the hole's good neighbours: the records
    /// of the missing units lie in `[phy_from, phy_to)`.
    pub phy_from: i64,
    /// End of that CommitLog range (exclusive).
    pub phy_to: i64,
}

/// The good units recovery keeps, newest last (a bounded tail of them: a
/// wild unit is caught by its successor), and the holes between them.
struct GoodUnits {
    stack: Vec<(i64, CqUnit)>,
    /// Logical offset of the last good unit (window start − 1 when none).
    last_index: i64,
    /// End of the good real unit before the window, or the CommitLog min.
    floor: i64,
    holes: Vec<CqHole>,
}

impl GoodUnits {
    const KEEP: usize = 4096;

    fn new(last_index: i64, before: Option<CqUnit>, phy_min: i64) -> Self {
        let mut stack = Vec::new();
        let floor = match before {
            Some(u) => {
                stack.push((last_index, u));
                u.end_phy_offset()
            }
            None => phy_min.max(0),
        };
        Self {
            stack,
            last_index,
            floor,
            holes: Vec::new(),
        }
    }

    fn last_real(&self) -> Option<(i64, CqUnit)> {
        self.stack
            .iter()
            .rev()
            .find(|(_, u)| !u.is_pre_blank())
            .copied()
    }

    fn last_real_end(&self) -> Option<i64> {
        self.last_real().map(|(_, u)| u.end_phy_offset())
    }

    fn push(&mut self, idx: i64, u: CqUnit) {
        if idx > self.last_index + 1 {
            let phy_from = self.last_real_end().unwrap_or(self.floor);
            let phy_to = if u.is_pre_blank() {
                phy_from
            } else {
                u.phy_offset
            };
            self.holes.push(CqHole {
                from: self.last_index + 1,
                to: idx,
                phy_from,
                phy_to,
            });
        }
        self.last_index = idx;
        self.stack.push((idx, u));
        if self.stack.len() > 2 * Self::KEEP {
            self.stack.drain(..Self::KEEP);
        }
    }

    /// Drops the last good real unit (it turned out wild): the hole that
    /// ended at it is re-made, larger, by the next push.
    fn pop_real(&mut self) {
        let Some(pos) = self.stack.iter().rposition(|(_, u)| !u.is_pre_blank()) else {
            return;
        };
        let (idx, _) = self.stack[pos];
        self.stack.truncate(pos);
        if self.holes.last().is_some_and(|h| h.to == idx) {
            let h = self.holes.pop().expect("checked above");
            self.last_index = h.from - 1;
        } else {
            self.last_index = idx - 1;
        }
        if let Some(&(i, _)) = self.stack.last() {
            self.last_index = self.last_index.max(i).min(idx - 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_len_ends_after_the_last_non_zero_unit() {
        let mut data = vec![0u8; CQ_UNIT_SIZE * 1000 + 7];
        assert_eq!(written_len(&data), 0);
        data[0] = 1;
        assert_eq!(written_len(&data), CQ_UNIT_SIZE);
        // A zero run in the middle stays inside; the last unit's last byte counts.
        data[CQ_UNIT_SIZE * 600 + 19] = 1;
        assert_eq!(written_len(&data), CQ_UNIT_SIZE * 601);
        data[CQ_UNIT_SIZE * 999] = 9;
        assert_eq!(written_len(&data), CQ_UNIT_SIZE * 1000);
        // Bytes past the last whole unit are not a unit.
        data[CQ_UNIT_SIZE * 1000 + 3] = 1;
        assert_eq!(written_len(&data), CQ_UNIT_SIZE * 1000);
        assert_eq!(written_len(&data[..CQ_UNIT_SIZE * 205]), CQ_UNIT_SIZE);
    }
}
