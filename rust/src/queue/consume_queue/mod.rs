//! ConsumeQueue: the per-queue index of one `consumequeue/<topic>/<queueId>/`
//! directory (docs/format.md §9).
//!
//! ```text
//!  unit (20 bytes, big-endian)            logical offset q lives at byte q*20
//!  0               8        12               20
//!  +---------------+--------+----------------+
//!  | commitLogOff  |  size  |    tagsCode    |
//!  |   i64         |  i32   |      i64       |
//!  +---------------+--------+----------------+
//!
//!  file k = [k*fileSize, (k+1)*fileSize) of the logical byte space,
//!  fileSize = units*20 (default 300000*20 = 6,000,000):
//!
//!  00000000000000000000: [pre-blank]..[pre-blank][unit N][unit N+1]...[zeros]
//!                        (0,0x7FFFFFFF,0) x N      ^ min offset      ^ max offset
//! ```
//! Pre-blank units fill a queue whose first message has logical offset N > 0.
//! They count as valid units for recovery, but never as messages: they are
//! skipped for the min offset and for the max physical offset
//! (docs/format.md §14). An all-zero unit marks the end of the data.
//!
//! Writers publish a unit's `size` field last (after a release fence), so a
//! reader in another process (read-only open, [`ConsumeQueue::refresh`])
//! that sees `size > 0` after an acquire fence also sees the rest of it.
//! In-process readers only see bytes below the file's write position.
//!
//! # Files
//!
//! - `mod.rs`: the unit codec ([`CqUnit`]), the [`ConsumeQueue`] (loading,
//!   offsets, flushing) and the scan for valid units.
//! - `write.rs`: appending units (pre-blank fill), rebuilding one in a hole,
//!   deleting expired files.
//! - `recover.rs`: recovery (plain and checked, with [`CqHole`]s) and
//!   truncation.
//! - `read.rs`: reading units, following a writer, lookup by time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicI64, AtomicU64, Ordering};

use crate::sync::{Mutex, RwLock};

use crate::error::{Result, StoreError};
use crate::log::mapped_file::Reserve;
use crate::log::mapped_file_queue::MappedFileQueue;
use crate::log::message::is_readable_topic;

mod read;
mod recover;
mod write;

pub use recover::{CqHole, UnitLimits};

/// Size of one ConsumeQueue unit.
pub const CQ_UNIT_SIZE: usize = 20;
/// `size` field of a pre-blank unit (`Integer.MAX_VALUE`).
pub const PRE_BLANK_SIZE: i32 = i32::MAX;
/// RocketMQ's default ConsumeQueue file size (300000 units).
pub const DEFAULT_CQ_FILE_SIZE: usize = 300_000 * CQ_UNIT_SIZE;

/// Rounds a configured file size up to a multiple of 20 (RocketMQ's getter:
/// `ceil(n / 20.0) * 20`; 128 → 140, 10 → 20).
pub fn round_cq_file_size(n: usize) -> usize {
    n.div_ceil(CQ_UNIT_SIZE) * CQ_UNIT_SIZE
}

/// One ConsumeQueue unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqUnit {
    /// CommitLog offset of the message.
    pub phy_offset: i64,
    /// Size of its record.
    pub size: i32,
    /// Hash of its tags (or a delayed message's delivery time).
    pub tags_code: i64,
}

impl CqUnit {
    /// The filler unit `(0, Integer.MAX_VALUE, 0)`.
    pub const PRE_BLANK: CqUnit = CqUnit {
        phy_offset: 0,
        size: PRE_BLANK_SIZE,
        tags_code: 0,
    };

    /// The 20 big-endian bytes of this unit.
    pub fn encode(&self) -> [u8; CQ_UNIT_SIZE] {
        let mut b = [0u8; CQ_UNIT_SIZE];
        self.write_to(&mut b);
        b
    }

    /// Decodes the first 20 bytes of `b`; `None` if `b` is shorter.
    #[inline]
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    pub fn decode(b: &[u8]) -> Option<CqUnit> {
        let (phy, rest) = b.split_first_chunk::<8>()?;
        let (size, rest) = rest.split_first_chunk::<4>()?;
        let tags = rest.first_chunk::<8>()?;
        Some(CqUnit {
            phy_offset: i64::from_be_bytes(*phy),
            size: i32::from_be_bytes(*size),
            tags_code: i64::from_be_bytes(*tags),
        })
    }

    /// Decodes a unit another process may be writing: reads `size` first,
    /// then (after an acquire fence) the other fields. Pairs with
    /// [`CqUnit::write_to`].
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    fn decode_published(b: &[u8]) -> Option<CqUnit> {
        let size = i32::from_be_bytes(b.get(8..12)?.try_into().ok()?);
        fence(Ordering::Acquire);
        let mut u = CqUnit::decode(b)?;
        u.size = size;
        Some(u)
    }

    /// Writes the unit into `dst[..20]`, publishing `size` last.
    fn write_to(&self, dst: &mut [u8]) {
        dst[0..8].copy_from_slice(&self.phy_offset.to_be_bytes());
        dst[12..20].copy_from_slice(&self.tags_code.to_be_bytes());
        fence(Ordering::Release);
        dst[8..12].copy_from_slice(&self.size.to_be_bytes());
    }

    /// True for the filler unit `(0, 0x7FFFFFFF, 0)`.
    pub fn is_pre_blank(&self) -> bool {
        *self == Self::PRE_BLANK
    }

    /// RocketMQ's recovery test: `offset >= 0 && size > 0` (pre-blank units
    /// are valid; an all-zero unit is not).
    pub fn is_valid(&self) -> bool {
        self.phy_offset >= 0 && self.size > 0
    }

    /// `phy_offset + size`, the CommitLog offset just past the message.
    pub fn end_phy_offset(&self) -> i64 {
        self.phy_offset.saturating_add(self.size as i64)
    }
}

/// Writer-side state, serialising puts, truncation and refreshes.
#[derive(Debug, Default)]
struct WriteState {
    /// Start of the file this object created into an empty queue (RocketMQ's
    /// `MappedFile.firstCreateInQueue`).
    first_created_from: Option<u64>,
}

/// The ConsumeQueue of one topic and queue id.
#[derive(Debug)]
pub struct ConsumeQueue {
    topic: String,
    queue_id: i32,
    file_size: usize,
    mfq: MappedFileQueue,
    /// CommitLog offset just past the last real unit; -1 when unknown.
    max_physic_offset: AtomicI64,
    /// Logical byte offset of the first message (`minLogicOffset`).
    min_logic_offset: AtomicU64,
    /// Units offered again that the queue already held (counted, logged at
    /// debug: after a crash, recovery re-dispatches thousands of them).
    repeated: AtomicU64,
    /// Read-only queues: the CommitLog min offset the min offset was last
    /// corrected to (see [`ConsumeQueue::refresh`]).
    corrected_for: AtomicI64,
    state: Mutex<WriteState>,
    /// Read-only queues: the units recovery rebuilt for holes, served in
    /// place of the damaged or zeroed units on disk (a read-only open
    /// writes nothing).
    overlay: RwLock<BTreeMap<i64, CqUnit>>,
}

impl ConsumeQueue {
    /// Units offered again that this queue already held, since the last call
    /// (the counter restarts at 0).
    pub fn take_repeated(&self) -> u64 {
        self.repeated.swap(0, Ordering::Relaxed)
    }

    /// Loads `root/<topic>/<queue_id>/` (`root` is the store's
    /// `consumequeue` directory). `file_size` is rounded up to a multiple of
    /// 20. Files are marked full; call [`ConsumeQueue::recover`] next.
    pub fn load(
        root: &Path,
        topic: &str,
        queue_id: i32,
        file_size: usize,
        writable: bool,
    ) -> Result<Self> {
        if !is_valid_dir_topic(topic) {
            return Err(StoreError::InvalidArgument(format!(
                "illegal topic name {topic:?} for a ConsumeQueue directory"
            )));
        }
        if queue_id < 0 {
            return Err(StoreError::InvalidArgument(format!(
                "negative queue id {queue_id}"
            )));
        }
        let file_size = round_cq_file_size(file_size);
        if file_size == 0 {
            return Err(StoreError::InvalidArgument(
                "ConsumeQueue file size is 0".into(),
            ));
        }
        let dir = queue_dir(root, topic, queue_id);
        let (mfq, info) = MappedFileQueue::load_tolerating_gaps(
            dir,
            file_size,
            writable,
            Reserve::CONSUME_QUEUE,
        )?;
        mfq.set_flush_pause_point("pause_cq_flush");
        mfq.set_create_fail_point("create_cq_file");
        if let (Some(p), false) = (info.short_file, writable) {
            log::info!(
                "ignoring short ConsumeQueue file {} until it is full size",
                p.display()
            );
        }
        Ok(Self {
            topic: topic.to_owned(),
            queue_id,
            file_size,
            mfq,
            max_physic_offset: AtomicI64::new(-1),
            min_logic_offset: AtomicU64::new(0),
            repeated: AtomicU64::new(0),
            corrected_for: AtomicI64::new(i64::MIN),
            state: Mutex::new(WriteState::default()),
            overlay: RwLock::new(BTreeMap::new()),
        })
    }

    /// Opens a queue read-only and recovers its positions without writing,
    /// its min offset corrected to the CommitLog's min offset `phy_min` as a
    /// writer's is; [`ConsumeQueue::refresh`] then follows a writer in
    /// another process.
    pub fn load_read_only(
        root: &Path,
        topic: &str,
        queue_id: i32,
        file_size: usize,
        phy_min: i64,
    ) -> Result<Self> {
        let cq = Self::load(root, topic, queue_id, file_size, false)?;
        cq.recover()?;
        cq.correct_min_offset(phy_min.max(0));
        cq.corrected_for.store(phy_min, Ordering::Release);
        Ok(cq)
    }

    /// The queue's topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The queue's id.
    pub fn queue_id(&self) -> i32 {
        self.queue_id
    }

    /// File size in bytes (a multiple of 20).
    pub fn file_size(&self) -> usize {
        self.file_size
    }

    /// Units per file.
    pub fn units_per_file(&self) -> usize {
        self.file_size / CQ_UNIT_SIZE
    }

    /// The queue's directory.
    pub fn dir(&self) -> &Path {
        self.mfq.dir()
    }

    /// False for a read-only queue (another process writes).
    pub fn is_writable(&self) -> bool {
        self.mfq.is_writable()
    }

    /// The underlying file queue.
    pub fn queue(&self) -> &MappedFileQueue {
        &self.mfq
    }

    /// `(last.from + last.wrote) / 20`: one past the last logical offset.
    pub fn max_offset_in_queue(&self) -> i64 {
        (self.mfq.max_offset() / CQ_UNIT_SIZE as u64) as i64
    }

    /// `minLogicOffset / 20`: the first message's logical offset.
    pub fn min_offset_in_queue(&self) -> i64 {
        (self.min_logic_offset() / CQ_UNIT_SIZE as u64) as i64
    }

    /// `minLogicOffset` in bytes.
    pub fn min_logic_offset(&self) -> u64 {
        self.min_logic_offset.load(Ordering::Acquire)
    }

    /// CommitLog offset just past the last real unit (never from a pre-blank
    /// unit); -1 when the queue holds none.
    pub fn max_physic_offset(&self) -> i64 {
        self.max_physic_offset.load(Ordering::Acquire)
    }

    /// Sets the min offset to the first real unit of the first file whose
    /// CommitLog offset is ≥ `phy_min` (docs/format.md §18.2, skipping pre-blank
    /// units). If the first file holds only pre-blank units, the min offset
    /// is the end of them; if no unit qualifies it stays (but never below
    /// the first file's start).
    pub fn correct_min_offset(&self, phy_min: i64) {
        let Some(first) = self.mfq.first_file() else {
            return;
        };
        let from = first.file_from_offset();
        let data = first.readable_from(0).unwrap_or(&[]);
        let mut only_blank = true;
        let mut units = 0usize;
        for (i, chunk) in data.chunks_exact(CQ_UNIT_SIZE).enumerate() {
            units = i + 1;
            let Some(u) = CqUnit::decode(chunk) else {
                break;
            };
            if u.is_pre_blank() {
                continue;
            }
            only_blank = false;
            if u.phy_offset >= phy_min {
                let m = from + (i * CQ_UNIT_SIZE) as u64;
                self.min_logic_offset.store(m, Ordering::Release);
                return;
            }
        }
        if only_blank && units > 0 {
            let m = from + (units * CQ_UNIT_SIZE) as u64;
            self.min_logic_offset.store(m, Ordering::Release);
        } else {
            self.min_logic_offset.fetch_max(from, Ordering::AcqRel);
        }
    }

    /// Flushes the file holding the flushed offset if at least `least_pages`
    /// pages are dirty (0: any). Returns true when nothing new was flushed.
    pub fn flush(&self, least_pages: usize) -> Result<bool> {
        self.mfq.flush(least_pages)
    }

    /// Flushes everything written; returns the flushed offset.
    pub fn flush_all(&self) -> Result<u64> {
        self.mfq.flush_all()
    }
}

/// A topic usable as a directory name: the topic read rule
/// ([`is_readable_topic`]: non-empty UTF-8, no `/` or NUL, not `.`/`..`),
/// so every topic a valid record carries — a 5.x store's long (V2) topics
/// included — has a queue directory.
fn is_valid_dir_topic(topic: &str) -> bool {
    is_readable_topic(topic)
}

/// `root/<topic>/<queue_id>`.
pub fn queue_dir(root: &Path, topic: &str, queue_id: i32) -> PathBuf {
    root.join(topic).join(queue_id.to_string())
}

/// Scans units of `data` from byte `pos` (a multiple of 20) while they are
/// valid. Returns the end of the valid run and the end CommitLog offset of
/// its last real (non-pre-blank) unit. `after` is the end of the last real
/// unit before `pos`, when known: a unit pointing before it ends the run.
/// `phy_end` is where the CommitLog's records end, when known: a unit
/// pointing past it ends the run.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
fn scan_valid(
    data: &[u8],
    pos: usize,
    after: Option<i64>,
    phy_end: Option<i64>,
) -> (usize, Option<i64>) {
    let mut end = pos - pos % CQ_UNIT_SIZE;
    let mut last_real = after.filter(|&a| a >= 0);
    for chunk in data
        .get(end..)
        .unwrap_or_default()
        .chunks_exact(CQ_UNIT_SIZE)
    {
        match CqUnit::decode_published(chunk) {
            // Units of one queue point at records in CommitLog order: a unit
            // pointing before the end of its predecessor is damage, not data.
            Some(u)
                if u.is_valid()
                    && !u.is_pre_blank()
                    && last_real.is_some_and(|p| u.phy_offset < p) =>
            {
                break
            }
            Some(u)
                if u.is_valid()
                    && !u.is_pre_blank()
                    && phy_end.is_some_and(|e| u.end_phy_offset() > e) =>
            {
                break
            }
            Some(u) if u.is_valid() => {
                end += CQ_UNIT_SIZE;
                if !u.is_pre_blank() {
                    last_real = Some(u.end_phy_offset());
                }
            }
            _ => break,
        }
    }
    (end, last_real)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::mapped_file::file_name;

    const FS: usize = 10 * CQ_UNIT_SIZE; // 10 units per file

    fn open(root: &Path, writable: bool) -> ConsumeQueue {
        let cq = ConsumeQueue::load(root, "T", 0, FS, writable).unwrap();
        cq.recover().unwrap();
        cq
    }

    #[test]
    fn unit_codec_and_rounding() {
        let u = CqUnit {
            phy_offset: 1234,
            size: 186,
            tags_code: -5,
        };
        let b = u.encode();
        assert_eq!(&b[0..8], &1234i64.to_be_bytes());
        assert_eq!(&b[8..12], &186i32.to_be_bytes());
        assert_eq!(CqUnit::decode(&b), Some(u));
        assert_eq!(CqUnit::decode(&b[..19]), None);
        assert!(CqUnit::PRE_BLANK.is_pre_blank());
        assert!(CqUnit::PRE_BLANK.is_valid());
        assert!(!CqUnit::decode(&[0u8; 20]).unwrap().is_valid());
        assert_eq!(round_cq_file_size(128), 140);
        assert_eq!(round_cq_file_size(10), 20);
        assert_eq!(round_cq_file_size(6_000_000), 6_000_000);
        assert!(ConsumeQueue::load(Path::new("/tmp"), "../x", 0, FS, false).is_err());
    }

    #[test]
    fn put_read_and_roll() {
        let dir = tempfile::tempdir().unwrap();
        let cq = open(dir.path(), true);
        assert_eq!(cq.max_offset_in_queue(), 0);
        assert_eq!(cq.max_physic_offset(), -1);
        for i in 0..25i64 {
            assert!(cq.put(i * 100, 100, i, i).unwrap());
        }
        assert_eq!(cq.max_offset_in_queue(), 25);
        assert_eq!(cq.min_offset_in_queue(), 0);
        assert_eq!(cq.max_physic_offset(), 2500);
        assert_eq!(cq.queue().len(), 3);
        // Already built: skipped without writing.
        assert!(cq.put(0, 100, 0, 0).unwrap());
        assert_eq!(cq.max_offset_in_queue(), 25);
        // Reads never cross a file.
        let us = cq.units(7, 100).unwrap();
        assert_eq!(us.len(), 3);
        assert_eq!(us[0].phy_offset, 700);
        assert_eq!(cq.units(8, 1).unwrap().len(), 1);
        assert_eq!(cq.units(20, 100).unwrap().len(), 5);
        assert!(cq.units(25, 1).is_none());
        assert!(cq.units(-1, 1).is_none());
        assert_eq!(cq.unit_at(13).unwrap().tags_code, 13);
        assert_eq!(cq.roll_next_file(13), 20);
        assert_eq!(cq.roll_next_file(20), 30);
        assert_eq!(cq.last_offset(), 2500);
        assert!(dir.path().join("T/0").join(file_name(400)).exists());
    }

    #[test]
    fn built_repeatedly_and_gap() {
        let dir = tempfile::tempdir().unwrap();
        let cq = open(dir.path(), true);
        cq.put(0, 10, 0, 0).unwrap();
        cq.put(10, 10, 0, 1).unwrap();
        // expect < current: built repeatedly (a different phy, so the
        // max-physic check does not catch it).
        assert!(cq.put(100, 10, 0, 1).unwrap());
        assert_eq!(cq.max_offset_in_queue(), 2);
        // Gap: appended at the current end, as RocketMQ does.
        assert!(cq.put(200, 10, 0, 5).unwrap());
        assert_eq!(cq.max_offset_in_queue(), 3);
        assert_eq!(cq.unit_at(2).unwrap().phy_offset, 200);
    }

    #[test]
    fn pre_blank_fill_at_non_zero_start() {
        let dir = tempfile::tempdir().unwrap();
        let cq = open(dir.path(), true);
        // First message of the queue has logical offset 13: file 10..20 is
        // created and units 10..12 are pre-blank.
        assert!(cq.put(5000, 100, 7, 13).unwrap());
        assert_eq!(cq.queue().first_file().unwrap().file_from_offset(), 200);
        assert_eq!(cq.min_offset_in_queue(), 13);
        assert_eq!(cq.max_offset_in_queue(), 14);
        assert_eq!(cq.max_physic_offset(), 5100, "pre-blank units never count");
        assert!(cq.units(12, 1).is_none(), "below the min offset");
        assert_eq!(cq.unit_at(13).unwrap().phy_offset, 5000);
        let raw = cq.queue().first_file().unwrap().raw()[..60].to_vec();
        for c in raw.chunks(20) {
            assert!(CqUnit::decode(c).unwrap().is_pre_blank());
        }
        cq.put(5100, 100, 7, 14).unwrap();
        drop(cq);

        // After a restart the min offset is still the first real message.
        let cq = open(dir.path(), true);
        assert_eq!(cq.min_offset_in_queue(), 13);
        assert_eq!(cq.max_offset_in_queue(), 15);
        assert_eq!(cq.max_physic_offset(), 5200);
        cq.correct_min_offset(0);
        assert_eq!(cq.min_offset_in_queue(), 13);
        cq.correct_min_offset(5100);
        assert_eq!(cq.min_offset_in_queue(), 14);
        // A pre-blank is not "already built" (0 + 0x7FFFFFFF).
        assert!(cq.put(5200, 10, 0, 15).unwrap());
        assert_eq!(cq.max_offset_in_queue(), 16);
    }

    /// A queue reloaded with no message — its first file all zeros (a kill
    /// after the file was made, before its first write) or holding part of
    /// the pre-blank filler (a kill mid-fill) — puts the first message at
    /// the queue offset its record carries, not at the files' end.
    #[test]
    fn reloaded_queue_without_a_message_starts_at_the_first_offset() {
        for filler in [0usize, 2] {
            let dir = tempfile::tempdir().unwrap();
            let cq = open(dir.path(), true);
            assert!(cq.put(5000, 100, 7, 13).unwrap());
            drop(cq);
            let path = dir.path().join("T/0").join(file_name(200));
            let mut data = vec![0u8; FS];
            for c in data.chunks_exact_mut(CQ_UNIT_SIZE).take(filler) {
                c.copy_from_slice(&CqUnit::PRE_BLANK.encode());
            }
            std::fs::write(&path, &data).unwrap();
            let cq = open(dir.path(), true);
            assert_eq!(cq.max_offset_in_queue(), 10 + filler as i64);
            // A message far past the file (offset 27, file 20..30) and one
            // after it.
            assert!(cq.put(5000, 100, 7, 27).unwrap());
            assert!(cq.put(5100, 100, 7, 28).unwrap());
            assert_eq!(cq.min_offset_in_queue(), 27);
            assert_eq!(cq.max_offset_in_queue(), 29);
            assert_eq!(cq.unit_at(27).unwrap().phy_offset, 5000);
            assert_eq!(cq.unit_at(28).unwrap().phy_offset, 5100);
            assert!(!path.exists(), "the file that held no message is gone");
            drop(cq);
            let cq = open(dir.path(), true);
            assert_eq!(cq.min_offset_in_queue(), 27);
            assert_eq!(cq.unit_at(28).unwrap().phy_offset, 5100);
        }
        // A queue holding a message keeps appending at its end on a gap.
        let dir = tempfile::tempdir().unwrap();
        let cq = open(dir.path(), true);
        assert!(cq.put(5000, 100, 7, 13).unwrap());
        drop(cq);
        let cq = open(dir.path(), true);
        assert!(cq.put(6000, 100, 7, 17).unwrap());
        assert_eq!(cq.unit_at(14).unwrap().phy_offset, 6000);
    }

    #[test]
    fn recover_truncates_torn_unit() {
        let dir = tempfile::tempdir().unwrap();
        {
            let cq = open(dir.path(), true);
            for i in 0..14i64 {
                cq.put(i * 10, 10, 0, i).unwrap();
            }
            cq.flush_all().unwrap();
        }
        // Tear unit 14 (phy written, size not yet) and leave garbage after it.
        let p = dir.path().join("T/0").join(file_name(200));
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[80..88].copy_from_slice(&140i64.to_be_bytes());
        bytes[120..140].copy_from_slice(
            &CqUnit {
                phy_offset: 999,
                size: 9,
                tags_code: 0,
            }
            .encode(),
        );
        std::fs::write(&p, &bytes).unwrap();
        let cq = ConsumeQueue::load(dir.path(), "T", 0, FS, true).unwrap();
        assert_eq!(cq.recover().unwrap(), 280);
        assert_eq!(cq.max_offset_in_queue(), 14);
        assert_eq!(cq.max_physic_offset(), 140);
        let bytes = std::fs::read(&p).unwrap();
        assert!(bytes[80..].iter().all(|&b| b == 0), "cut bytes are zeroed");
        // Writing continues at the recovered end.
        cq.put(140, 10, 0, 14).unwrap();
        assert_eq!(cq.unit_at(14).unwrap().phy_offset, 140);
    }

    #[test]
    fn recover_drops_empty_trailing_file() {
        let dir = tempfile::tempdir().unwrap();
        {
            let cq = open(dir.path(), true);
            for i in 0..10i64 {
                cq.put(i * 10, 10, 0, i).unwrap();
            }
            cq.queue().create_file(200).unwrap();
            cq.queue().create_file(400).unwrap();
        }
        let cq = open(dir.path(), true);
        assert_eq!(cq.max_offset_in_queue(), 10);
        assert_eq!(
            cq.queue().len(),
            2,
            "the file starting at the end stays, empty"
        );
        assert!(!dir.path().join("T/0").join(file_name(400)).exists());
    }

    /// A queue of 25 units (phy i*10, size 10) in 3 files, reloaded.
    fn written(root: &Path) -> ConsumeQueue {
        let cq = open(root, true);
        for i in 0..25i64 {
            cq.put(i * 10, 10, 0, i).unwrap();
        }
        drop(cq);
        ConsumeQueue::load(root, "T", 0, FS, true).unwrap()
    }

    fn write_unit(root: &Path, index: usize, bytes: &[u8; CQ_UNIT_SIZE]) {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(root.join("T/0").join(file_name((index / 10 * FS) as u64)))
            .unwrap();
        f.write_all_at(bytes, (index % 10 * CQ_UNIT_SIZE) as u64)
            .unwrap();
    }

    /// Units checked against a CommitLog ending at `end` (min 0, records of
    /// at most 50 bytes).
    fn limits(end: i64) -> UnitLimits {
        UnitLimits {
            end,
            phy_min: 0,
            max_size: 50,
        }
    }

    /// The record of unit i is at phy i*10 (what the CommitLog would say).
    fn verify(u: &CqUnit, idx: i64) -> bool {
        u.phy_offset == idx * 10 && u.size == 10
    }

    #[test]
    fn recover_checked_finds_holes_between_good_units() {
        let dir = tempfile::tempdir().unwrap();
        let cq = written(dir.path());
        // The middle file lost its pages; one unit of the last file is zero.
        for i in 10..20 {
            write_unit(dir.path(), i, &[0u8; 20]);
        }
        write_unit(dir.path(), 22, &[0u8; 20]);
        let holes = cq.recover_checked(limits(250), &verify).unwrap();
        assert_eq!(
            holes,
            vec![
                CqHole {
                    from: 10,
                    to: 20,
                    phy_from: 100,
                    phy_to: 200
                },
                CqHole {
                    from: 22,
                    to: 23,
                    phy_from: 220,
                    phy_to: 230
                },
            ]
        );
        assert_eq!(cq.max_offset_in_queue(), 25);
        assert_eq!(cq.max_physic_offset(), 250);
        for i in (10..20).chain([22]) {
            let u = CqUnit {
                phy_offset: i * 10,
                size: 10,
                tags_code: 0,
            };
            assert!(cq.put_at(i, u).unwrap());
        }
        assert!(!cq
            .put_at(
                25,
                CqUnit {
                    phy_offset: 250,
                    size: 10,
                    tags_code: 0
                }
            )
            .unwrap());
        assert_eq!(cq.recover_checked(limits(250), &verify).unwrap(), vec![]);
        assert_eq!(cq.unit_at(15).unwrap().phy_offset, 150);
    }

    #[test]
    fn recover_checked_drops_wild_units_and_units_past_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let cq = written(dir.path());
        // Unit 3 points far past the log; unit 6 points inside it, at unit
        // 12's record (its successors look out of order).
        let wild = CqUnit {
            phy_offset: 1 << 50,
            size: 10,
            tags_code: 0,
        };
        write_unit(dir.path(), 3, &wild.encode());
        let inside = CqUnit {
            phy_offset: 120,
            size: 10,
            tags_code: 0,
        };
        write_unit(dir.path(), 6, &inside.encode());
        // The newest file lost its pages: units 10..19 (phy ≥ 100) in the
        // middle file point past the recovered end 95 and must go as well.
        for i in 20..25 {
            write_unit(dir.path(), i, &[0u8; 20]);
        }
        let holes = cq.recover_checked(limits(95), &verify).unwrap();
        assert_eq!(
            holes,
            vec![
                CqHole {
                    from: 3,
                    to: 4,
                    phy_from: 30,
                    phy_to: 40
                },
                CqHole {
                    from: 6,
                    to: 7,
                    phy_from: 60,
                    phy_to: 70
                },
            ]
        );
        assert_eq!(cq.max_offset_in_queue(), 9);
        assert_eq!(cq.max_physic_offset(), 90);
        assert_eq!(cq.queue().len(), 1);
    }

    #[test]
    fn recover_checked_finds_garbage_before_the_window() {
        let dir = tempfile::tempdir().unwrap();
        {
            let cq = open(dir.path(), true);
            for i in 0..45i64 {
                cq.put(i * 10, 10, 0, i).unwrap();
            }
        }
        // 5 files: the unit-by-unit window starts at file 2. Garbage in the
        // files before it: a CommitLog offset past the end (unit 2), a
        // size over any record's whose record does not match (unit 4), a
        // pre-blank after real units (unit 7), and CommitLog offsets going
        // backwards (units 12, 13).
        let bad = |phy: i64, size: i32| CqUnit {
            phy_offset: phy,
            size,
            tags_code: 0,
        };
        write_unit(dir.path(), 2, &bad(1 << 40, 10).encode());
        write_unit(dir.path(), 4, &bad(40, 4000).encode());
        write_unit(dir.path(), 7, &CqUnit::PRE_BLANK.encode());
        write_unit(dir.path(), 12, &bad(10, 10).encode());
        write_unit(dir.path(), 13, &bad(20, 10).encode());
        let cq = ConsumeQueue::load(dir.path(), "T", 0, FS, true).unwrap();
        let holes = cq.recover_checked(limits(450), &verify).unwrap();
        let hole = |i: i64| CqHole {
            from: i,
            to: i + 1,
            phy_from: i * 10,
            phy_to: i * 10 + 10,
        };
        assert_eq!(
            holes,
            vec![
                hole(2),
                hole(4),
                hole(7),
                CqHole {
                    from: 12,
                    to: 14,
                    phy_from: 120,
                    phy_to: 140
                }
            ]
        );
        assert_eq!(cq.max_offset_in_queue(), 45);

        // Clean files cost no hole; a unit over the size limit whose record
        // matches (an earlier configuration allowed it) is kept.
        let dir = tempfile::tempdir().unwrap();
        let cq = written(dir.path());
        let big = |u: &CqUnit, idx: i64| u.phy_offset == idx * 10;
        write_unit(dir.path(), 24, &bad(240, 60).encode());
        assert_eq!(cq.recover_checked(limits(300), &big).unwrap(), vec![]);
        assert_eq!(cq.unit_at(24).unwrap().size, 60);
        // The same unit whose record does not match goes (the last unit:
        // the queue is cut before it, dispatch rebuilds it).
        assert_eq!(cq.recover_checked(limits(300), &verify).unwrap(), vec![]);
        assert_eq!(cq.max_offset_in_queue(), 24);
    }

    #[test]
    fn front_gap_and_put_front() {
        let dir = tempfile::tempdir().unwrap();
        drop(written(dir.path()));
        let first = dir.path().join("T/0").join(file_name(0));
        let saved = std::fs::read(&first).unwrap();
        std::fs::remove_file(&first).unwrap();
        let cq = ConsumeQueue::load(dir.path(), "T", 0, FS, true).unwrap();
        assert!(cq.recover_checked(limits(250), &verify).unwrap().is_empty());
        assert_eq!(cq.min_offset_in_queue(), 10);
        // Unit 10 points at 100: records of this queue may lie in [min, 100).
        let at = |phy_min: i64| UnitLimits {
            phy_min,
            ..limits(250)
        };
        assert_eq!(
            cq.front_gap(at(30)),
            Some(CqHole {
                from: 0,
                to: 10,
                phy_from: 30,
                phy_to: 100
            })
        );
        assert_eq!(cq.front_gap(at(100)), None, "nothing before the first unit");
        assert_eq!(cq.front_gap(at(120)), None);
        // The CommitLog held units 3..9: unit 0..2 become pre-blank.
        let units: Vec<(i64, CqUnit)> = (3..10)
            .map(|i| {
                (
                    i,
                    CqUnit {
                        phy_offset: i * 10,
                        size: 10,
                        tags_code: 0,
                    },
                )
            })
            .collect();
        assert_eq!(cq.put_front(&units).unwrap(), 7);
        assert_eq!(cq.queue().len(), 3);
        assert_eq!(cq.min_offset_in_queue(), 3);
        let now = std::fs::read(&first).unwrap();
        for k in 0..3 {
            assert!(CqUnit::decode(&now[k * 20..]).unwrap().is_pre_blank());
        }
        assert_eq!(now[60..], saved[60..]);
        assert_eq!(
            cq.front_gap(at(0)),
            None,
            "the queue starts with pre-blanks"
        );
        assert_eq!(cq.put_front(&units).unwrap(), 0, "not below the first file");
        // A queue without a good unit bounds nothing: no scan.
        let dir = tempfile::tempdir().unwrap();
        drop(written(dir.path()));
        std::fs::remove_file(dir.path().join("T/0").join(file_name(0))).unwrap();
        let cq = ConsumeQueue::load(dir.path(), "T", 0, FS, true).unwrap();
        assert_eq!(cq.front_gap(limits(95)), None, "every unit past the end");
        assert!(cq.front_gap(limits(250)).is_some());
    }

    #[test]
    fn truncate_dirty_logic_files_cuts_and_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let cq = open(dir.path(), true);
        for i in 0..25i64 {
            cq.put(i * 10, 10, 0, i).unwrap();
        }
        // Cut at phy 125: units 0..12 (phy 0..120) stay.
        cq.truncate_dirty_logic_files(125).unwrap();
        assert_eq!(cq.max_offset_in_queue(), 13);
        assert_eq!(cq.max_physic_offset(), 130);
        assert_eq!(cq.queue().len(), 2);
        assert!(!dir.path().join("T/0").join(file_name(400)).exists());
        let p = dir.path().join("T/0").join(file_name(200));
        assert!(std::fs::read(&p).unwrap()[60..].iter().all(|&b| b == 0));
        // Cut at a file's first unit: the file goes.
        cq.truncate_dirty_logic_files(100).unwrap();
        assert_eq!(cq.max_offset_in_queue(), 10);
        assert_eq!(cq.queue().len(), 1);
        // Everything goes; the next put starts a fresh queue with pre-blanks.
        cq.truncate_dirty_logic_files(0).unwrap();
        assert!(cq.queue().is_empty());
        assert_eq!(cq.max_physic_offset(), 0);
        assert!(cq.put(50, 10, 0, 3).unwrap());
        assert_eq!(cq.min_offset_in_queue(), 3);
        assert_eq!(cq.max_offset_in_queue(), 4);
    }

    #[test]
    fn truncate_keeps_pre_blanks_out_of_max_physic() {
        let dir = tempfile::tempdir().unwrap();
        let cq = open(dir.path(), true);
        cq.put(1000, 10, 0, 4).unwrap();
        cq.put(1010, 10, 0, 5).unwrap();
        cq.truncate_dirty_logic_files(1000).unwrap();
        assert_eq!(cq.max_offset_in_queue(), 4, "pre-blank units stay");
        assert_eq!(cq.max_physic_offset(), 1000, "not 0 + 0x7FFFFFFF");
        assert!(cq.put(1000, 10, 0, 4).unwrap());
        assert_eq!(cq.unit_at(4).unwrap().phy_offset, 1000);
    }

    #[test]
    fn retention_by_offset() {
        let dir = tempfile::tempdir().unwrap();
        let cq = open(dir.path(), true);
        for i in 0..35i64 {
            cq.put(i * 10, 10, 0, i).unwrap();
        }
        assert_eq!(cq.delete_expired_by_offset(100), 1);
        assert_eq!(cq.min_offset_in_queue(), 10);
        assert_eq!(
            cq.delete_expired_by_offset(150),
            0,
            "file 1's last unit is 190"
        );
        assert_eq!(cq.min_offset_in_queue(), 15);
        assert_eq!(
            cq.delete_expired_by_offset(10_000),
            2,
            "never the last file"
        );
        assert_eq!(cq.queue().len(), 1);
        assert_eq!(cq.min_offset_in_queue(), 30);
        assert!(cq.units(29, 1).is_none());
    }

    #[test]
    fn read_only_refresh_follows_writer() {
        let dir = tempfile::tempdir().unwrap();
        let w = open(dir.path(), true);
        let r = ConsumeQueue::load_read_only(dir.path(), "T", 0, FS, 0).unwrap();
        assert_eq!(r.refresh(0, None).unwrap(), 0);
        w.put(900, 10, 0, 3).unwrap();
        assert_eq!(r.refresh(0, None).unwrap(), 4);
        assert_eq!(r.min_offset_in_queue(), 3);
        assert_eq!(r.unit_at(3).unwrap().phy_offset, 900);
        for i in 4..23i64 {
            w.put(900 + i * 10, 10, 0, i).unwrap();
        }
        assert_eq!(r.refresh(0, None).unwrap(), 23);
        assert_eq!(r.queue().len(), 3);
        assert_eq!(r.max_physic_offset(), 900 + 22 * 10 + 10);
        assert_eq!(r.unit_at(22).unwrap().phy_offset, 1120);
        assert!(r.put(0, 1, 0, 0).is_err());
        // The writer expires the first file; the reader drops it.
        assert_eq!(w.delete_expired_by_offset(1000), 1);
        r.refresh(1000, None).unwrap();
        assert_eq!(r.queue().len(), 2);
        assert_eq!(r.min_offset_in_queue(), 10);
        // The CommitLog's min moved inside the reader's first file: the
        // reader's min offset moves with it, as the writer's does.
        assert_eq!(w.delete_expired_by_offset(1055), 0);
        assert_eq!(w.min_offset_in_queue(), 16);
        r.refresh(1055, None).unwrap();
        assert_eq!(r.min_offset_in_queue(), 16);
        // A reader opened now agrees.
        let fresh = ConsumeQueue::load_read_only(dir.path(), "T", 0, FS, 1055).unwrap();
        assert_eq!(fresh.min_offset_in_queue(), 16);
    }

    #[test]
    fn read_only_refresh_never_adopts_stale_units() {
        let dir = tempfile::tempdir().unwrap();
        let w = open(dir.path(), true);
        for i in 0..4i64 {
            w.put(i * 10, 10, 0, i).unwrap();
        }
        let r = ConsumeQueue::load_read_only(dir.path(), "T", 0, FS, 0).unwrap();
        assert_eq!(r.max_offset_in_queue(), 4);
        // Units left from an older log after the writer's: one pointing
        // before the queue's last unit, then one past the CommitLog's end.
        write_unit(
            dir.path(),
            4,
            &CqUnit {
                phy_offset: 20,
                size: 10,
                tags_code: 0,
            }
            .encode(),
        );
        assert_eq!(r.refresh(0, Some(1000)).unwrap(), 4);
        write_unit(
            dir.path(),
            4,
            &CqUnit {
                phy_offset: 990,
                size: 20,
                tags_code: 0,
            }
            .encode(),
        );
        assert_eq!(r.refresh(0, Some(1000)).unwrap(), 4);
        assert_eq!(r.max_physic_offset(), 40);
        // Once the CommitLog holds its record, the unit is adopted.
        assert_eq!(r.refresh(0, Some(1010)).unwrap(), 5);
        assert_eq!(r.max_physic_offset(), 1010);
    }

    #[test]
    fn offset_by_time() {
        let dir = tempfile::tempdir().unwrap();
        let cq = open(dir.path(), true);
        for i in 0..8i64 {
            cq.put(i * 10, 10, 0, i).unwrap();
        }
        // store time of phy p is 1000 + p (ms)
        let ts = |phy: i64, _| Some(1000 + phy);
        assert_eq!(cq.offset_in_queue_by_time(1030, 0, ts), 3);
        assert_eq!(cq.offset_in_queue_by_time(1034, 0, ts), 3);
        assert_eq!(cq.offset_in_queue_by_time(1036, 0, ts), 4);
        assert_eq!(cq.offset_in_queue_by_time(1035, 0, ts), 3, "ties go left");
        assert_eq!(cq.offset_in_queue_by_time(0, 0, ts), 0);
        assert_eq!(cq.offset_in_queue_by_time(9999, 0, ts), 7);
        assert_eq!(cq.offset_in_queue_by_time(1030, 0, |_, _| None), 0);
    }
}
