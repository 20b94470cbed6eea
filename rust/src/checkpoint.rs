//! The store checkpoint file `checkpoint` (docs/format.md §11, RocketMQ's
//! `StoreCheckpoint`).
//!
//! ```text
//!  0                 8                 16                24          40        4096
//!  +-----------------+-----------------+-----------------+-----------+---------+
//!  | physicMsgTs i64 | logicsMsgTs i64 | indexMsgTs i64  | 5.x: 0, 0 |  zeros  |
//!  +-----------------+-----------------+-----------------+-----------+---------+
//!                                            5.x: masterFlushedOffset @24,
//!                                                 confirmPhyOffset    @32
//! ```
//! All values big-endian, milliseconds since the epoch. RocketMQ 4.9.8 reads
//! only the first 24 bytes, 5.x the first 40; we write the three timestamps
//! and zeros for the two 5.x fields. The file is 4096 bytes; an existing file
//! of 24..4096 bytes is accepted and extended with zeros, a shorter one is
//! refused as corrupted.
//!
//! The checkpoint is written with `pwrite` + `fdatasync` rather than through a
//! mapping: the bytes on disk are the same as RocketMQ's mmap writes.
//!
//! Our own block, the **durable mark**, lives at byte 2048, where neither
//! RocketMQ 4.9.8 (bytes 0..24) nor 5.x (0..48: 5.x adds
//! masterFlushedOffset @24, confirmPhyOffset @32, logicsPhysicalOffset @40)
//! reads or writes:
//! ```text
//!  2048 +0  magic "RSDMARK1"          +24 u32 damaged-range count n (≤ 126)
//!       +8  durable CommitLog offset  +28 u32 crc32 of [+0,+28) and the ranges
//!       +16 physicMsgTs it was written with
//!       +32 n × (u64 start, u64 end)  damaged CommitLog ranges known to recovery
//! ```
//! The mark counts only if its magic and CRC match and its copy of
//! physicMsgTimestamp equals the one at byte 0 (a RocketMQ broker that ran
//! on the store since rewrote byte 0 but not the mark: the mark is stale and
//! ignored). It holds at most 62 damaged ranges (a mark written before the
//! property-CRC block existed may hold up to 126; it is read, and rewritten
//! with the first 62).
//!
//! The **property-CRC ranges** follow at byte 3072: the CommitLog ranges
//! whose records were all written with the property CRC `__CRC32#`
//! (docs/format.md "Property CRC"):
//! ```text
//!  3072 +0  magic "RSPCRC01"      +8  u32 range count n (≤ 63)
//!       +12 u32 crc32 of [+0,+12) and the ranges
//!       +16 n × (u64 start, u64 end)   ascending, not overlapping
//! ```
//! They are read when magic and CRC match, whatever byte 0 holds: a broker
//! that ran since usually wrote after them (it appends at the end of the
//! log). One that cut the log inside a range wrote over it, so an open
//! takes them at their word only while the durable mark is valid and the
//! bytes at each range's boundaries still show the property; otherwise they
//! end at the first record without it (`log/commitlog/prop_ranges.rs`,
//! docs/format.md §11).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};

use crate::sync::{Mutex, RwLock};

use crate::error::{Result, StoreError};

/// Length of the checkpoint file (RocketMQ's OS_PAGE_SIZE).
pub const CHECKPOINT_FILE_SIZE: usize = 4096;
/// Bytes RocketMQ 4.9.8 reads: the three timestamps.
pub const CHECKPOINT_MIN_LEN: usize = 24;
/// Bytes we write: the three timestamps and the two 5.x fields (as zeros).
pub const CHECKPOINT_WRITE_LEN: usize = 40;
/// Where the durable mark block starts (past every field RocketMQ uses).
pub const MARK_AT: usize = 2048;
/// Magic of the durable mark block.
pub const MARK_MAGIC: &[u8; 8] = b"RSDMARK1";
/// Fixed part of the mark block.
const MARK_HEADER_LEN: usize = 32;
/// Where the property-CRC ranges block starts (after the durable mark).
pub const PROP_CRC_AT: usize = 3072;
/// Magic of the property-CRC ranges block.
pub const PROP_CRC_MAGIC: &[u8; 8] = b"RSPCRC01";
/// Fixed part of the property-CRC ranges block.
const PROP_CRC_HEADER_LEN: usize = 16;
/// Most property-CRC ranges the block holds.
pub const MAX_PROP_CRC_RANGES: usize =
    (CHECKPOINT_FILE_SIZE - PROP_CRC_AT - PROP_CRC_HEADER_LEN) / 16;
/// Most damaged ranges the mark holds (up to the property-CRC block).
pub const MAX_DAMAGED_RANGES: usize = (PROP_CRC_AT - MARK_AT - MARK_HEADER_LEN) / 16;
/// Most damaged ranges a mark written before the property-CRC block held.
const LEGACY_MAX_DAMAGED_RANGES: usize = (CHECKPOINT_FILE_SIZE - MARK_AT - MARK_HEADER_LEN) / 16;

/// The CommitLog ranges `[start, end)` written with the property CRC, and
/// the start of the range the running writer is adding to (its end is the
/// durable offset when the block is written).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PropCrcRanges {
    /// Closed ranges, ascending.
    pub ranges: Vec<(u64, u64)>,
    /// Where this writer started writing with the property CRC.
    pub open: Option<u64>,
}

impl PropCrcRanges {
    /// The ranges to write, the open one ending at `durable` (the oldest
    /// dropped beyond [`MAX_PROP_CRC_RANGES`]: a range not listed is only
    /// checked less).
    pub fn closed_at(&self, durable: u64) -> Vec<(u64, u64)> {
        let mut v = self.ranges.clone();
        if let Some(s) = self.open {
            push_range(&mut v, s, durable);
        }
        let extra = v.len().saturating_sub(MAX_PROP_CRC_RANGES);
        v.drain(..extra);
        v
    }

    /// The ranges readers check: the open one without an end.
    pub fn for_reads(&self) -> Vec<(u64, u64)> {
        self.closed_at(u64::MAX)
    }

    /// Starts the writer's range at `start` (continuing the last range when
    /// it ends exactly there: nothing else wrote in between).
    pub fn open_at(&mut self, start: u64) {
        if let Some(&(s, e)) = self.ranges.last() {
            if e == start {
                self.ranges.pop();
                self.open = Some(s);
                return;
            }
        }
        self.open = Some(start);
    }

    /// Keeps only what lies in `[min, end)`: below `min` the files are
    /// gone; past `end` recovery cut the log (others may write there).
    pub fn clip(&mut self, min: u64, end: u64) {
        let mut v = Vec::with_capacity(self.ranges.len());
        for &(s, e) in &self.ranges {
            push_range(&mut v, s.max(min), e.min(end));
        }
        self.ranges = v;
        if let Some(s) = self.open {
            if s >= end {
                self.open = None;
            }
        }
    }

    /// The block at [`PROP_CRC_AT`] for these ranges, the open one ending
    /// at `durable`.
    pub fn encode(&self, durable: u64) -> Vec<u8> {
        let ranges = self.closed_at(durable);
        let mut b = Vec::with_capacity(PROP_CRC_HEADER_LEN + ranges.len() * 16);
        b.extend_from_slice(PROP_CRC_MAGIC);
        b.extend_from_slice(&(ranges.len() as u32).to_be_bytes());
        b.extend_from_slice(&[0u8; 4]);
        for (s, e) in &ranges {
            b.extend_from_slice(&s.to_be_bytes());
            b.extend_from_slice(&e.to_be_bytes());
        }
        let mut h = crc32fast::Hasher::new();
        h.update(&b[..12]);
        h.update(&b[PROP_CRC_HEADER_LEN..]);
        b[12..16].copy_from_slice(&h.finalize().to_be_bytes());
        b
    }

    /// Decodes the block of a whole checkpoint file; empty when there is
    /// none or it is damaged (then no range is checked).
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    pub fn decode(file: &[u8]) -> Self {
        Self::decode_block(file).unwrap_or_default()
    }

    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    fn decode_block(file: &[u8]) -> Option<Self> {
        let b = file.get(PROP_CRC_AT..)?;
        if b.get(..8)? != PROP_CRC_MAGIC {
            return None;
        }
        let n = u32::from_be_bytes(b.get(8..12)?.try_into().ok()?) as usize;
        let crc = u32::from_be_bytes(b.get(12..16)?.try_into().ok()?);
        if n > MAX_PROP_CRC_RANGES {
            return None;
        }
        let body = b.get(PROP_CRC_HEADER_LEN..PROP_CRC_HEADER_LEN + n * 16)?;
        let mut h = crc32fast::Hasher::new();
        h.update(b.get(..12)?);
        h.update(body);
        if h.finalize() != crc {
            return None;
        }
        let mut ranges: Vec<(u64, u64)> = Vec::with_capacity(n);
        for c in body.chunks_exact(16) {
            let (start, end) = c.split_first_chunk::<8>()?;
            let (s, e) = (
                u64::from_be_bytes(*start),
                u64::from_be_bytes(*end.first_chunk::<8>()?),
            );
            // Ascending and disjoint, or the block is not ours.
            if e < s || ranges.last().is_some_and(|&(_, pe)| s < pe) {
                return None;
            }
            ranges.push((s, e));
        }
        Some(Self { ranges, open: None })
    }
}

/// Appends `[s, e)` to ascending ranges, merging with the last when they
/// touch; empty ranges are dropped.
fn push_range(v: &mut Vec<(u64, u64)>, s: u64, e: u64) {
    if e <= s {
        return;
    }
    if let Some(last) = v.last_mut() {
        if last.1 >= s {
            last.1 = last.1.max(e);
            return;
        }
    }
    v.push((s, e));
}

/// True when `phy` lies in one of the ascending `ranges`.
#[inline]
pub fn in_ranges(ranges: &[(u64, u64)], phy: u64) -> bool {
    ranges.iter().any(|&(s, e)| s <= phy && phy < e)
}

/// The durable mark: the CommitLog offset known to be on disk, and the
/// damaged CommitLog ranges recovery skipped (`[start, end)`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DurableMark {
    /// Every CommitLog byte below this offset is on disk.
    pub durable_offset: u64,
    /// Damaged ranges `[start, end)` recovery skipped, ascending.
    pub damaged: Vec<(u64, u64)>,
}

impl DurableMark {
    /// The mark block, tagged with `physic_ts` (the value at byte 0).
    pub fn encode(&self, physic_ts: i64) -> Vec<u8> {
        let ranges = &self.damaged[..self.damaged.len().min(MAX_DAMAGED_RANGES)];
        let mut b = Vec::with_capacity(MARK_HEADER_LEN + ranges.len() * 16);
        b.extend_from_slice(MARK_MAGIC);
        b.extend_from_slice(&self.durable_offset.to_be_bytes());
        b.extend_from_slice(&physic_ts.to_be_bytes());
        b.extend_from_slice(&(ranges.len() as u32).to_be_bytes());
        b.extend_from_slice(&[0u8; 4]);
        for (s, e) in ranges {
            b.extend_from_slice(&s.to_be_bytes());
            b.extend_from_slice(&e.to_be_bytes());
        }
        let mut h = crc32fast::Hasher::new();
        h.update(&b[..28]);
        h.update(&b[MARK_HEADER_LEN..]);
        b[28..32].copy_from_slice(&h.finalize().to_be_bytes());
        b
    }

    /// Decodes the block at [`MARK_AT`] of a whole checkpoint file; `None`
    /// when there is none, it is damaged, or it is stale (its timestamp
    /// copy differs from `physic_ts`).
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    pub fn decode(file: &[u8], physic_ts: i64) -> Option<Self> {
        let b = file.get(MARK_AT..)?;
        if b.get(..8)? != MARK_MAGIC {
            return None;
        }
        let durable_offset = u64::from_be_bytes(b.get(8..16)?.try_into().ok()?);
        let tag = i64::from_be_bytes(b.get(16..24)?.try_into().ok()?);
        let n = u32::from_be_bytes(b.get(24..28)?.try_into().ok()?) as usize;
        let crc = u32::from_be_bytes(b.get(28..32)?.try_into().ok()?);
        if n > LEGACY_MAX_DAMAGED_RANGES {
            return None;
        }
        let ranges = b.get(MARK_HEADER_LEN..MARK_HEADER_LEN + n * 16)?;
        let mut h = crc32fast::Hasher::new();
        h.update(b.get(..28)?);
        h.update(ranges);
        if h.finalize() != crc || tag != physic_ts {
            return None;
        }
        let damaged = ranges
            .chunks_exact(16)
            .map(|c| {
                let (start, end) = c.split_first_chunk::<8>()?;
                Some((
                    u64::from_be_bytes(*start),
                    u64::from_be_bytes(*end.first_chunk::<8>()?),
                ))
            })
            .collect::<Option<_>>()?;
        Some(Self {
            durable_offset,
            damaged,
        })
    }
}

/// The values held by a checkpoint file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct CheckpointData {
    /// Store time of the last CommitLog message known flushed.
    pub physic_msg_timestamp: i64,
    /// Store time of the last message dispatched to a ConsumeQueue.
    pub logics_msg_timestamp: i64,
    /// End time of the last full, flushed index file.
    pub index_msg_timestamp: i64,
}

impl CheckpointData {
    /// The first 40 bytes of the file: three timestamps, then zeros.
    pub fn encode(&self) -> [u8; CHECKPOINT_WRITE_LEN] {
        let mut b = [0u8; CHECKPOINT_WRITE_LEN];
        b[0..8].copy_from_slice(&self.physic_msg_timestamp.to_be_bytes());
        b[8..16].copy_from_slice(&self.logics_msg_timestamp.to_be_bytes());
        b[16..24].copy_from_slice(&self.index_msg_timestamp.to_be_bytes());
        b
    }

    /// The whole 4096-byte file.
    pub fn encode_file(&self) -> Vec<u8> {
        let mut v = vec![0u8; CHECKPOINT_FILE_SIZE];
        v[..CHECKPOINT_WRITE_LEN].copy_from_slice(&self.encode());
        v
    }

    /// RocketMQ's `getMinTimestamp`: `max(0, min(physic, logics) − 3000)`.
    pub fn min_timestamp(&self) -> i64 {
        self.physic_msg_timestamp
            .min(self.logics_msg_timestamp)
            .saturating_sub(3000)
            .max(0)
    }

    /// RocketMQ's `getMinTimestampIndex`: `min(min_timestamp, index)`.
    pub fn min_timestamp_index(&self) -> i64 {
        self.min_timestamp().min(self.index_msg_timestamp)
    }
}

fn be_i64(b: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The checkpoint of an open store.
#[derive(Debug)]
pub struct Checkpoint {
    path: PathBuf,
    /// `None` for a read-only open of a store that has no checkpoint yet,
    /// and once closed.
    file: RwLock<Option<File>>,
    writable: bool,
    physic: AtomicI64,
    logics: AtomicI64,
    index: AtomicI64,
    /// The durable mark read at open (`None`: the store has none) and kept
    /// up to date by the flush service and recovery.
    mark: Mutex<Option<DurableMark>>,
    /// The property-CRC ranges read at open, and the writer's own.
    prop_crc: Mutex<PropCrcRanges>,
    flush_lock: Mutex<()>,
    /// A size repair [`Checkpoint::open_writable`] found needed.
    pending: Mutex<Option<CheckpointRepair>>,
}

/// How a checkpoint file had to be repaired before it could be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointRepair {
    /// The file was missing (a new store): created.
    Create,
    /// The file was this many bytes (a crash while it was created): extended.
    Extend(u64),
}

impl Checkpoint {
    /// Decodes the first 24 bytes of a checkpoint file; `None` if shorter.
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    pub fn decode(buf: &[u8]) -> Option<CheckpointData> {
        Some(CheckpointData {
            physic_msg_timestamp: be_i64(buf, 0)?,
            logics_msg_timestamp: be_i64(buf, 8)?,
            index_msg_timestamp: be_i64(buf, 16)?,
        })
    }

    /// Opens `path`, or creates it (4096 zero bytes, synced) if missing.
    pub fn load_or_create(path: &Path) -> Result<Self> {
        let c = Self::open_writable(path)?;
        c.repair_size()?;
        Ok(c)
    }

    /// Opens `path` for writing without changing it: a missing file reads
    /// as all zeros and a file shorter than 4096 bytes as it is, until
    /// [`Checkpoint::repair_size`] creates or extends it (a store's recovery
    /// does, as its first step). Flushing before that fails.
    pub fn open_writable(path: &Path) -> Result<Self> {
        let file = match OpenOptions::new().read(true).write(true).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let c = Self::with(path, None, true, CheckpointData::default());
                *c.pending.lock() = Some(CheckpointRepair::Create);
                return Ok(c);
            }
            Err(e) => return Err(StoreError::io(format!("open {}", path.display()), e)),
        };
        let data = read_prefix(&file, path)?;
        let len = file_len(&file, path)?;
        let whole = read_whole(&file);
        let c = Self::with(path, Some(file), true, data).with_mark(whole);
        if len < CHECKPOINT_FILE_SIZE as u64 {
            *c.pending.lock() = Some(CheckpointRepair::Extend(len));
        }
        Ok(c)
    }

    /// Creates a missing checkpoint (4096 zero bytes, synced, its directory
    /// entry synced) or extends a short one with zeros, as
    /// [`Checkpoint::open_writable`] found it. Returns what was done.
    pub fn repair_size(&self) -> Result<Option<CheckpointRepair>> {
        let mut pending = self.pending.lock();
        let Some(fix) = *pending else {
            return Ok(None);
        };
        let path = &self.path;
        match fix {
            CheckpointRepair::Create => {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)
                    .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
                file.write_all_at(&CheckpointData::default().encode_file(), 0)
                    .map_err(|e| StoreError::io(format!("write {}", path.display()), e))?;
                file.sync_all()
                    .map_err(|e| StoreError::io(format!("fsync {}", path.display()), e))?;
                crate::paths::sync_parent(path)?;
                *self.file.write() = Some(file);
            }
            CheckpointRepair::Extend(len) => {
                log::info!(
                    "extending checkpoint {} from {len} to {CHECKPOINT_FILE_SIZE} bytes",
                    path.display()
                );
                let file = self.file.read();
                let Some(file) = file.as_ref() else {
                    return Err(StoreError::Closed);
                };
                file.set_len(CHECKPOINT_FILE_SIZE as u64)
                    .map_err(|e| StoreError::io(format!("extend {}", path.display()), e))?;
                file.sync_all()
                    .map_err(|e| StoreError::io(format!("fsync {}", path.display()), e))?;
            }
        }
        *pending = None;
        Ok(Some(fix))
    }

    /// Opens `path` read-only; a missing file reads as all zeros.
    pub fn load_read_only(path: &Path) -> Result<Self> {
        match File::open(path) {
            Ok(file) => {
                let data = read_prefix(&file, path)?;
                let whole = read_whole(&file);
                Ok(Self::with(path, Some(file), false, data).with_mark(whole))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Ok(Self::with(path, None, false, CheckpointData::default()))
            }
            Err(e) => Err(StoreError::io(format!("open {}", path.display()), e)),
        }
    }

    fn with(path: &Path, file: Option<File>, writable: bool, d: CheckpointData) -> Self {
        Self {
            path: path.to_path_buf(),
            file: RwLock::new(file),
            writable,
            physic: AtomicI64::new(d.physic_msg_timestamp),
            logics: AtomicI64::new(d.logics_msg_timestamp),
            index: AtomicI64::new(d.index_msg_timestamp),
            mark: Mutex::new(None),
            prop_crc: Mutex::new(PropCrcRanges::default()),
            flush_lock: Mutex::new(()),
            pending: Mutex::new(None),
        }
    }

    /// Reads the durable mark of `file` (if valid for `physic_ts`).
    fn with_mark(self, file_bytes: Option<Vec<u8>>) -> Self {
        if let Some(b) = file_bytes {
            *self.mark.lock() = DurableMark::decode(&b, self.physic_msg_timestamp());
            *self.prop_crc.lock() = PropCrcRanges::decode(&b);
        }
        self
    }

    /// The durable mark as read at open or set since (`None`: no mark).
    pub fn durable_mark(&self) -> Option<DurableMark> {
        self.mark.lock().clone()
    }

    /// Sets the durable CommitLog offset (written by the next [`Checkpoint::flush`]).
    /// Call only after the flush that made `offset` durable has returned.
    pub fn set_durable_offset(&self, offset: u64) {
        let mut m = self.mark.lock();
        m.get_or_insert_with(DurableMark::default).durable_offset = offset;
    }

    /// The property-CRC ranges (as read at open, clipped and opened since).
    pub fn prop_crc_ranges(&self) -> PropCrcRanges {
        self.prop_crc.lock().clone()
    }

    /// Changes the property-CRC ranges (recovery: clips them to the log,
    /// opens the writer's range); written by the next flush.
    pub fn update_prop_crc_ranges(&self, f: impl FnOnce(&mut PropCrcRanges)) {
        f(&mut self.prop_crc.lock());
    }

    /// Replaces the mark (recovery: after cutting, or with the damaged
    /// ranges it skipped).
    pub fn set_durable_mark(&self, mark: DurableMark) {
        *self.mark.lock() = Some(mark);
    }

    /// The checkpoint file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Store time of the last CommitLog record flushed (`physicMsgTimestamp`, ms).
    pub fn physic_msg_timestamp(&self) -> i64 {
        self.physic.load(Ordering::Acquire)
    }

    /// Sets `physicMsgTimestamp` (kept in memory until the next flush of the checkpoint).
    pub fn set_physic_msg_timestamp(&self, ts: i64) {
        self.physic.store(ts, Ordering::Release);
    }

    /// Store time of the last message flushed to a consume queue (`logicsMsgTimestamp`, ms).
    pub fn logics_msg_timestamp(&self) -> i64 {
        self.logics.load(Ordering::Acquire)
    }

    /// Sets `logicsMsgTimestamp` (kept in memory until the next flush of the checkpoint).
    pub fn set_logics_msg_timestamp(&self, ts: i64) {
        self.logics.store(ts, Ordering::Release);
    }

    /// Store time of the last message flushed to the index (`indexMsgTimestamp`, ms).
    pub fn index_msg_timestamp(&self) -> i64 {
        self.index.load(Ordering::Acquire)
    }

    /// Sets `indexMsgTimestamp` (kept in memory until the next flush of the checkpoint).
    pub fn set_index_msg_timestamp(&self, ts: i64) {
        self.index.store(ts, Ordering::Release);
    }

    /// The current values.
    pub fn snapshot(&self) -> CheckpointData {
        CheckpointData {
            physic_msg_timestamp: self.physic_msg_timestamp(),
            logics_msg_timestamp: self.logics_msg_timestamp(),
            index_msg_timestamp: self.index_msg_timestamp(),
        }
    }

    /// `max(0, min(physic, logics) − 3000)`.
    pub fn min_timestamp(&self) -> i64 {
        self.snapshot().min_timestamp()
    }

    /// `min(min_timestamp, index)`.
    pub fn min_timestamp_index(&self) -> i64 {
        self.snapshot().min_timestamp_index()
    }

    /// Writes every field and syncs the file.
    pub fn flush(&self) -> Result<()> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let _g = self.flush_lock.lock();
        let file = self.file.read();
        let Some(file) = file.as_ref() else {
            return Err(StoreError::Closed);
        };
        let snap = self.snapshot();
        let bytes = snap.encode();
        file.write_all_at(&bytes, 0)
            .map_err(|e| StoreError::io(format!("write {}", self.path.display()), e))?;
        let mark = self.durable_mark();
        if let Some(m) = &mark {
            file.write_all_at(&m.encode(snap.physic_msg_timestamp), MARK_AT as u64)
                .map_err(|e| StoreError::io(format!("write {}", self.path.display()), e))?;
        }
        let crc_block = {
            let r = self.prop_crc.lock();
            // The open range ends where data is known durable; without a
            // mark nothing of it is.
            let durable = mark.as_ref().map_or(0, |m| m.durable_offset);
            (!r.ranges.is_empty() || r.open.is_some()).then(|| r.encode(durable))
        };
        if let Some(b) = crc_block {
            file.write_all_at(&b, PROP_CRC_AT as u64)
                .map_err(|e| StoreError::io(format!("write {}", self.path.display()), e))?;
        }
        file.sync_data()
            .map_err(|e| StoreError::io(format!("fsync {}", self.path.display()), e))
    }

    /// Closes the file (the store shut down); later flushes fail with
    /// [`StoreError::Closed`] and reloads keep the values held.
    pub fn close(&self) {
        let _g = self.flush_lock.lock();
        self.file.write().take();
    }

    /// Re-reads the file (read-only opens following a writer).
    pub fn reload(&self) -> Result<CheckpointData> {
        let file = self.file.read();
        let Some(file) = file.as_ref() else {
            return Ok(self.snapshot());
        };
        let d = read_prefix(file, &self.path)?;
        self.set_physic_msg_timestamp(d.physic_msg_timestamp);
        self.set_logics_msg_timestamp(d.logics_msg_timestamp);
        self.set_index_msg_timestamp(d.index_msg_timestamp);
        Ok(d)
    }
}

fn file_len(file: &File, path: &Path) -> Result<u64> {
    Ok(file
        .metadata()
        .map_err(|e| StoreError::io(format!("stat {}", path.display()), e))?
        .len())
}

/// Reads and decodes the first 24 bytes; a shorter file is corrupted.
fn read_prefix(file: &File, path: &Path) -> Result<CheckpointData> {
    let len = file_len(file, path)?;
    if len < CHECKPOINT_MIN_LEN as u64 {
        // A crash while the file was being created. Zero timestamps only make
        // an abnormal recovery start earlier (from the first file), which is
        // always safe, so read them as zeros instead of refusing the store.
        log::warn!(
            "checkpoint {} is {len} bytes (a crash while it was created); reading it as zeros",
            path.display()
        );
        return Ok(CheckpointData::default());
    }
    let mut buf = [0u8; CHECKPOINT_MIN_LEN];
    file.read_exact_at(&mut buf, 0)
        .map_err(|e| StoreError::io(format!("read {}", path.display()), e))?;
    Checkpoint::decode(&buf)
        .ok_or_else(|| StoreError::corrupted(path, 0, "checkpoint file too short"))
}

/// The whole file (at most 4096 bytes), for the mark; `None` on a read error.
fn read_whole(file: &File) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; CHECKPOINT_FILE_SIZE];
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(_) => return None,
        }
    }
    buf.truncate(got);
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("checkpoint");
        let c = Checkpoint::load_or_create(&p).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 4096);
        assert_eq!(c.snapshot(), CheckpointData::default());
        c.set_physic_msg_timestamp(1_700_000_000_123);
        c.set_logics_msg_timestamp(1_700_000_000_100);
        c.set_index_msg_timestamp(1_600_000_000_000);
        c.flush().unwrap();
        drop(c);
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(bytes.len(), 4096);
        assert_eq!(&bytes[0..8], &1_700_000_000_123i64.to_be_bytes());
        assert_eq!(&bytes[8..16], &1_700_000_000_100i64.to_be_bytes());
        assert_eq!(&bytes[16..24], &1_600_000_000_000i64.to_be_bytes());
        assert!(bytes[24..].iter().all(|&b| b == 0));
        let c = Checkpoint::load_or_create(&p).unwrap();
        assert_eq!(c.physic_msg_timestamp(), 1_700_000_000_123);
        assert_eq!(c.min_timestamp(), 1_700_000_000_100 - 3000);
        assert_eq!(c.min_timestamp_index(), 1_600_000_000_000);
        let r = Checkpoint::load_read_only(&p).unwrap();
        assert_eq!(r.snapshot(), c.snapshot());
        assert!(r.flush().is_err());
    }

    #[test]
    fn durable_mark_layout_and_staleness() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("checkpoint");
        let c = Checkpoint::load_or_create(&p).unwrap();
        assert_eq!(c.durable_mark(), None);
        c.set_physic_msg_timestamp(1_700_000_000_123);
        c.set_durable_offset(4242);
        c.set_durable_mark(DurableMark {
            durable_offset: 9000,
            damaged: vec![(100, 300), (5000, 5200)],
        });
        c.flush().unwrap();
        drop(c);
        let bytes = std::fs::read(&p).unwrap();
        // RocketMQ's fields (4.9.8: 0..24, 5.x: 0..48) are untouched.
        assert_eq!(&bytes[0..8], &1_700_000_000_123i64.to_be_bytes());
        assert!(bytes[24..MARK_AT].iter().all(|&b| b == 0));
        assert_eq!(&bytes[MARK_AT..MARK_AT + 8], MARK_MAGIC);
        let c = Checkpoint::load_or_create(&p).unwrap();
        let m = c.durable_mark().unwrap();
        assert_eq!(m.durable_offset, 9000);
        assert_eq!(m.damaged, vec![(100, 300), (5000, 5200)]);
        drop(c);
        // A RocketMQ broker rewrote physicMsgTimestamp: the mark is stale.
        let mut b = bytes.clone();
        b[0..8].copy_from_slice(&1_800_000_000_000i64.to_be_bytes());
        std::fs::write(&p, &b).unwrap();
        assert_eq!(Checkpoint::load_read_only(&p).unwrap().durable_mark(), None);
        // A damaged mark is no mark.
        let mut b = bytes.clone();
        b[MARK_AT + 12] ^= 1;
        std::fs::write(&p, &b).unwrap();
        assert_eq!(Checkpoint::load_read_only(&p).unwrap().durable_mark(), None);
    }

    #[test]
    fn prop_crc_ranges_layout() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("checkpoint");
        let c = Checkpoint::load_or_create(&p).unwrap();
        c.set_physic_msg_timestamp(1_700_000_000_123);
        c.set_durable_mark(DurableMark {
            durable_offset: 9000,
            damaged: vec![(100, 300)],
        });
        c.update_prop_crc_ranges(|r| {
            r.ranges = vec![(0, 500)];
            r.open_at(4000);
        });
        assert_eq!(
            c.prop_crc_ranges().for_reads(),
            vec![(0, 500), (4000, u64::MAX)]
        );
        c.flush().unwrap();
        drop(c);
        let bytes = std::fs::read(&p).unwrap();
        let b = &bytes[PROP_CRC_AT..];
        assert_eq!(&b[..8], PROP_CRC_MAGIC);
        assert_eq!(&b[8..12], &2u32.to_be_bytes());
        let mut h = crc32fast::Hasher::new();
        h.update(&b[..12]);
        h.update(&b[16..48]);
        assert_eq!(&b[12..16], &h.finalize().to_be_bytes());
        assert_eq!(&b[16..24], &0u64.to_be_bytes());
        assert_eq!(&b[24..32], &500u64.to_be_bytes());
        assert_eq!(&b[32..40], &4000u64.to_be_bytes());
        assert_eq!(
            &b[40..48],
            &9000u64.to_be_bytes(),
            "the open range ends at the mark"
        );
        assert!(b[48..].iter().all(|&x| x == 0));
        // A broker rewrote byte 0: the mark is stale, the ranges still count.
        let mut s = bytes.clone();
        s[0..8].copy_from_slice(&1_800_000_000_000i64.to_be_bytes());
        std::fs::write(&p, &s).unwrap();
        let c = Checkpoint::load_read_only(&p).unwrap();
        assert_eq!(c.durable_mark(), None);
        assert_eq!(c.prop_crc_ranges().ranges, vec![(0, 500), (4000, 9000)]);
        // A damaged block is no block.
        let mut d = bytes.clone();
        d[PROP_CRC_AT + 20] ^= 1;
        std::fs::write(&p, &d).unwrap();
        assert_eq!(
            Checkpoint::load_read_only(&p).unwrap().prop_crc_ranges(),
            PropCrcRanges::default()
        );
        // Reopened where it ended: the range continues; elsewhere a new one.
        let mut r = PropCrcRanges {
            ranges: vec![(0, 500), (4000, 9000)],
            open: None,
        };
        r.open_at(9000);
        assert_eq!(r.closed_at(12_000), vec![(0, 500), (4000, 12_000)]);
        r.clip(100, 10_000);
        assert_eq!(r.closed_at(12_000), vec![(100, 500), (4000, 12_000)]);
        let mut r = PropCrcRanges {
            ranges: vec![(0, 500)],
            open: None,
        };
        r.open_at(700);
        assert_eq!(r.closed_at(900), vec![(0, 500), (700, 900)]);
        assert_eq!(r.closed_at(700), vec![(0, 500)], "nothing durable yet");
        r.clip(0, 300);
        assert_eq!(
            r.closed_at(900),
            vec![(0, 300)],
            "cut below the writer's start"
        );
    }

    #[test]
    fn min_timestamp_rules() {
        let d = CheckpointData {
            physic_msg_timestamp: 2000,
            logics_msg_timestamp: 5000,
            index_msg_timestamp: 1,
        };
        assert_eq!(d.min_timestamp(), 0);
        assert_eq!(d.min_timestamp_index(), 0);
        let d = CheckpointData {
            physic_msg_timestamp: i64::MIN,
            logics_msg_timestamp: 0,
            index_msg_timestamp: 0,
        };
        assert_eq!(d.min_timestamp(), 0);
    }

    #[test]
    fn short_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("checkpoint");
        // A file cut short by a crash while it was created reads as zeros
        // (recovery then starts from the first file, which is always safe).
        let mut torn = vec![0u8; 23];
        torn[0..8].copy_from_slice(&77i64.to_be_bytes());
        std::fs::write(&p, &torn).unwrap();
        let c = Checkpoint::load_or_create(&p).unwrap();
        assert_eq!(c.snapshot(), CheckpointData::default());
        drop(c);
        let mut v = vec![0u8; 24];
        v[0..8].copy_from_slice(&42i64.to_be_bytes());
        std::fs::write(&p, &v).unwrap();
        let c = Checkpoint::load_or_create(&p).unwrap();
        assert_eq!(c.physic_msg_timestamp(), 42);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 4096);
        let r = Checkpoint::load_read_only(&dir.path().join("missing")).unwrap();
        assert_eq!(r.snapshot(), CheckpointData::default());
    }
}
