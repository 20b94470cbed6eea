//! IndexFile and the `index/` directory (SPEC §3): a hash index from
//! `topic#key` to CommitLog offsets.
//!
//! ```text
//!  file size = 40 + hashSlotNum*4 + indexNum*20   (defaults: 420,000,040)
//!
//!  header (40 B)
//!  0            8            16             24             32          36         40
//!  +------------+------------+--------------+--------------+-----------+----------+
//!  | beginTs i64| endTs i64  | beginPhy i64 | endPhy i64   | slots i32 | count i32|
//!  +------------+------------+--------------+--------------+-----------+----------+
//!  slot table at 40: hashSlotNum x i32 = newest entry number of the slot (0 = empty)
//!  entries at 40 + hashSlotNum*4 + i*20, i = 1..indexNum-1 (entry 0 unused):
//!  +-------------+---------------+----------------+----------------+
//!  | keyHash i32 | phyOffset i64 | timeDiff i32 s | prevIndex i32  |
//!  +-------------+---------------+----------------+----------------+
//! ```
//! `indexCount` is the number of the next entry (starts at 1), so a file
//! holds `indexNum − 1` keys. Entries of one slot form a chain, newest first,
//! through `prevIndex`. Files are named `yyyyMMddHHmmssSSS` in local time at
//! creation (unique: an existing name gets +1 ms).
//!
//! An index file is not append-only, so it uses [`MappedFile`] with its
//! write position kept at 0: `write_at` then accepts any position, `raw`
//! reads, and `sync_all` flushes (RocketMQ forces the whole index mapping).
//! Within a process, a writer stores the entry, then (release fence) the slot,
//! then the header, then publishes the in-memory `indexCount`; a reader loads
//! the slot, then (acquire fence) `indexCount`, so every entry it follows is
//! complete. Every read from the mapping is bounds-checked: a corrupt file
//! yields fewer results, never a panic or an endless chain walk.

use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicBool, AtomicI32, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Mutex, RwLock};

use crate::checkpoint::Checkpoint;
use crate::error::{Result, StoreError};
use crate::mapped_file::{MappedFile, Reserve};
use crate::message::{java_string_hash, sysflag};

/// Header length.
pub const INDEX_HEADER_SIZE: usize = 40;
/// One hash slot.
pub const HASH_SLOT_SIZE: usize = 4;
/// One index entry.
pub const INDEX_ENTRY_SIZE: usize = 20;
/// RocketMQ's default `maxHashSlotNum`.
pub const DEFAULT_HASH_SLOT_NUM: usize = 5_000_000;
/// RocketMQ's default `maxIndexNum`.
pub const DEFAULT_INDEX_NUM: usize = 20_000_000;
/// RocketMQ's default `maxMsgsNumBatch` (cap of a query).
pub const DEFAULT_MAX_MSGS_NUM_BATCH: usize = 64;

/// The 40-byte header of an index file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct IndexHeader {
    pub begin_timestamp: i64,
    pub end_timestamp: i64,
    pub begin_phy_offset: i64,
    pub end_phy_offset: i64,
    pub hash_slot_count: i32,
    pub index_count: i32,
}

impl IndexHeader {
    pub fn encode(&self) -> [u8; INDEX_HEADER_SIZE] {
        let mut b = [0u8; INDEX_HEADER_SIZE];
        b[0..8].copy_from_slice(&self.begin_timestamp.to_be_bytes());
        b[8..16].copy_from_slice(&self.end_timestamp.to_be_bytes());
        b[16..24].copy_from_slice(&self.begin_phy_offset.to_be_bytes());
        b[24..32].copy_from_slice(&self.end_phy_offset.to_be_bytes());
        b[32..36].copy_from_slice(&self.hash_slot_count.to_be_bytes());
        b[36..40].copy_from_slice(&self.index_count.to_be_bytes());
        b
    }

    /// Decodes the first 40 bytes as stored (no normalisation); `None` if
    /// shorter.
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    pub fn decode(b: &[u8]) -> Option<IndexHeader> {
        Some(IndexHeader {
            begin_timestamp: be_i64(b, 0)?,
            end_timestamp: be_i64(b, 8)?,
            begin_phy_offset: be_i64(b, 16)?,
            end_phy_offset: be_i64(b, 24)?,
            hash_slot_count: be_i32(b, 32)?,
            index_count: be_i32(b, 36)?,
        })
    }
}

/// One index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IndexEntry {
    pub key_hash: i32,
    pub phy_offset: i64,
    /// Seconds since the file's begin timestamp.
    pub time_diff: i32,
    pub prev_index: i32,
}

impl IndexEntry {
    pub fn encode(&self) -> [u8; INDEX_ENTRY_SIZE] {
        let mut b = [0u8; INDEX_ENTRY_SIZE];
        b[0..4].copy_from_slice(&self.key_hash.to_be_bytes());
        b[4..12].copy_from_slice(&self.phy_offset.to_be_bytes());
        b[12..16].copy_from_slice(&self.time_diff.to_be_bytes());
        b[16..20].copy_from_slice(&self.prev_index.to_be_bytes());
        b
    }

    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    pub fn decode(b: &[u8]) -> Option<IndexEntry> {
        Some(IndexEntry {
            key_hash: be_i32(b, 0)?,
            phy_offset: be_i64(b, 4)?,
            time_diff: be_i32(b, 12)?,
            prev_index: be_i32(b, 16)?,
        })
    }
}

#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
fn be_i64(b: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_be_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
fn be_i32(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// `40 + slots*4 + num*20`, if it fits in memory.
pub fn index_file_size(hash_slot_num: usize, index_num: usize) -> Option<usize> {
    let s = hash_slot_num.checked_mul(HASH_SLOT_SIZE)?;
    let n = index_num.checked_mul(INDEX_ENTRY_SIZE)?;
    let total = INDEX_HEADER_SIZE.checked_add(s)?.checked_add(n)?;
    (total <= isize::MAX as usize).then_some(total)
}

/// RocketMQ's `indexKeyHashMethod`: `abs(key.hashCode())`, and 0 for
/// `Integer.MIN_VALUE` (whose abs is still negative).
pub fn index_key_hash(key: &str) -> i32 {
    let h = java_string_hash(key).wrapping_abs();
    if h < 0 {
        0
    } else {
        h
    }
}

/// `topic#key`, the stored key.
pub fn build_key(topic: &str, key: &str) -> String {
    let mut s = String::with_capacity(topic.len() + 1 + key.len());
    s.push_str(topic);
    s.push('#');
    s.push_str(key);
    s
}

/// The non-empty keys of a `KEYS` property (Java `keys.split(" ")`).
pub fn split_keys(keys: &str) -> impl Iterator<Item = &str> {
    keys.split(' ').filter(|k| !k.is_empty())
}

/// Index files reserve the header and slot table (written anywhere) at
/// creation and the entries (written in order) ahead of the writer.
fn index_reserve(hash_slot_num: usize) -> Reserve {
    Reserve::index(INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE)
}

fn check_geometry(hash_slot_num: usize, index_num: usize) -> Result<usize> {
    if hash_slot_num == 0
        || hash_slot_num > i32::MAX as usize
        || index_num < 2
        || index_num > i32::MAX as usize
    {
        return Err(StoreError::InvalidArgument(format!(
            "bad index geometry: hash_slot_num={hash_slot_num} (1..=2^31-1), index_num={index_num} (2..=2^31-1)"
        )));
    }
    index_file_size(hash_slot_num, index_num).ok_or_else(|| {
        StoreError::InvalidArgument(format!(
            "index geometry hash_slot_num={hash_slot_num} index_num={index_num} is too large"
        ))
    })
}

/// One index file.
#[derive(Debug)]
pub struct IndexFile {
    mf: MappedFile,
    hash_slot_num: usize,
    index_num: usize,
    begin_timestamp: AtomicI64,
    end_timestamp: AtomicI64,
    begin_phy_offset: AtomicI64,
    end_phy_offset: AtomicI64,
    hash_slot_count: AtomicI32,
    index_count: AtomicI32,
    dirty: AtomicBool,
    write_lock: Mutex<()>,
}

impl IndexFile {
    /// Creates `path` (space reserved, zero-filled). When the previous file's
    /// end offset/timestamp are > 0 they become this file's begin and end
    /// (RocketMQ's `IndexFile` constructor) and are written to the header.
    pub fn create(
        path: &Path,
        hash_slot_num: usize,
        index_num: usize,
        prev_end_phy_offset: i64,
        prev_end_timestamp: i64,
    ) -> Result<Self> {
        let size = check_geometry(hash_slot_num, index_num)?;
        let mf = MappedFile::create_with(path, 0, size, index_reserve(hash_slot_num))?;
        Self::init_created(
            mf,
            hash_slot_num,
            index_num,
            prev_end_phy_offset,
            prev_end_timestamp,
        )
        .inspect_err(|_| crate::mapped_file::remove_failed_creation(path))
    }

    /// Sets up a freshly created file; on error the caller removes it.
    fn init_created(
        mf: MappedFile,
        hash_slot_num: usize,
        index_num: usize,
        prev_end_phy_offset: i64,
        prev_end_timestamp: i64,
    ) -> Result<Self> {
        let f = Self::with(mf, hash_slot_num, index_num, IndexHeader::default());
        if prev_end_phy_offset > 0 {
            f.begin_phy_offset
                .store(prev_end_phy_offset, Ordering::Release);
            f.end_phy_offset
                .store(prev_end_phy_offset, Ordering::Release);
        }
        if prev_end_timestamp > 0 {
            f.begin_timestamp
                .store(prev_end_timestamp, Ordering::Release);
            f.end_timestamp.store(prev_end_timestamp, Ordering::Release);
        }
        // RocketMQ writes only these setters through; the two counters reach
        // the file with the first key (an empty file has indexCount 0 on disk).
        f.mf.write_at(0, &f.header().encode()[..32])?;
        f.dirty.store(true, Ordering::Release);
        Ok(f)
    }

    /// Opens an existing file, which must be exactly
    /// `40 + hash_slot_num*4 + index_num*20` bytes.
    pub fn open(
        path: &Path,
        hash_slot_num: usize,
        index_num: usize,
        writable: bool,
    ) -> Result<Self> {
        let size = check_geometry(hash_slot_num, index_num)?;
        let len = std::fs::metadata(path)
            .map_err(|e| StoreError::io(format!("stat {}", path.display()), e))?
            .len();
        if len != size as u64 {
            return Err(StoreError::Mismatch(format!(
                "index file {} is {len} bytes, but hash_slot_num={hash_slot_num} and \
                 index_num={index_num} need 40 + {hash_slot_num}*4 + {index_num}*20 = {size} bytes; \
                 open the store with the geometry it was written with",
                path.display()
            )));
        }
        let mf =
            MappedFile::open(path, 0, size, writable)?.with_reserve(index_reserve(hash_slot_num));
        let header = IndexHeader::decode(mf.raw())
            .ok_or_else(|| StoreError::corrupted(path, 0, "index header truncated"))?;
        if header.index_count as i64 > index_num as i64 {
            log::warn!(
                "{}: indexCount {} exceeds index_num {index_num}; treating the file as full",
                path.display(),
                header.index_count
            );
        }
        Ok(Self::with(mf, hash_slot_num, index_num, header))
    }

    fn with(mf: MappedFile, hash_slot_num: usize, index_num: usize, h: IndexHeader) -> Self {
        Self {
            mf,
            hash_slot_num,
            index_num,
            begin_timestamp: AtomicI64::new(h.begin_timestamp),
            end_timestamp: AtomicI64::new(h.end_timestamp),
            begin_phy_offset: AtomicI64::new(h.begin_phy_offset),
            end_phy_offset: AtomicI64::new(h.end_phy_offset),
            hash_slot_count: AtomicI32::new(h.hash_slot_count),
            index_count: AtomicI32::new(h.index_count.max(1)),
            dirty: AtomicBool::new(false),
            write_lock: Mutex::new(()),
        }
    }

    pub fn path(&self) -> &Path {
        self.mf.path()
    }

    /// The file name (`yyyyMMddHHmmssSSS`).
    pub fn file_name(&self) -> String {
        self.path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    pub fn hash_slot_num(&self) -> usize {
        self.hash_slot_num
    }

    pub fn index_num(&self) -> usize {
        self.index_num
    }

    /// The in-memory header (what the file holds once written through).
    pub fn header(&self) -> IndexHeader {
        IndexHeader {
            begin_timestamp: self.begin_timestamp(),
            end_timestamp: self.end_timestamp(),
            begin_phy_offset: self.begin_phy_offset(),
            end_phy_offset: self.end_phy_offset(),
            hash_slot_count: self.hash_slot_count.load(Ordering::Acquire),
            index_count: self.index_count(),
        }
    }

    pub fn begin_timestamp(&self) -> i64 {
        self.begin_timestamp.load(Ordering::Acquire)
    }

    pub fn end_timestamp(&self) -> i64 {
        self.end_timestamp.load(Ordering::Acquire)
    }

    pub fn begin_phy_offset(&self) -> i64 {
        self.begin_phy_offset.load(Ordering::Acquire)
    }

    pub fn end_phy_offset(&self) -> i64 {
        self.end_phy_offset.load(Ordering::Acquire)
    }

    /// Number of the next entry (1 + keys held).
    pub fn index_count(&self) -> i32 {
        self.index_count.load(Ordering::Acquire)
    }

    /// `indexCount >= indexNum`: `indexNum − 1` keys fit.
    pub fn is_write_full(&self) -> bool {
        self.index_count() as i64 >= self.index_num as i64
    }

    /// RocketMQ's `isTimeMatched`: the file's time range overlaps
    /// `[begin, end]`.
    pub fn is_time_matched(&self, begin: i64, end: i64) -> bool {
        let (fb, fe) = (self.begin_timestamp(), self.end_timestamp());
        (begin < fb && end > fe) || (begin >= fb && begin <= fe) || (end >= fb && end <= fe)
    }

    fn slot_pos(&self, key_hash: i32) -> usize {
        INDEX_HEADER_SIZE + (key_hash as usize % self.hash_slot_num) * HASH_SLOT_SIZE
    }

    fn entry_pos(&self, index: usize) -> usize {
        INDEX_HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE + index * INDEX_ENTRY_SIZE
    }

    /// Adds `key` → `phy_offset` (SPEC §3.2). `Ok(false)` when the file is full.
    pub fn put_key(&self, key: &str, phy_offset: i64, store_timestamp: i64) -> Result<bool> {
        let _g = self.write_lock.lock();
        let count = self.index_count();
        if self.is_write_full() {
            log::warn!(
                "index file {} is full ({count} entries)",
                self.path().display()
            );
            return Ok(false);
        }
        let key_hash = index_key_hash(key);
        let slot_pos = self.slot_pos(key_hash);
        let mut slot_value = be_i32(self.mf.raw(), slot_pos).unwrap_or(0);
        if slot_value <= 0 || slot_value > count {
            slot_value = 0;
        }
        let begin = self.begin_timestamp();
        let time_diff = if begin <= 0 {
            0
        } else {
            (store_timestamp.wrapping_sub(begin) / 1000).clamp(0, i32::MAX as i64)
        };
        let entry = IndexEntry {
            key_hash,
            phy_offset,
            time_diff: time_diff as i32,
            prev_index: slot_value,
        };
        self.mf
            .write_at(self.entry_pos(count as usize), &entry.encode())?;
        fence(Ordering::Release);
        self.mf.write_at(slot_pos, &count.to_be_bytes())?;
        if count <= 1 {
            self.begin_phy_offset.store(phy_offset, Ordering::Release);
            self.begin_timestamp
                .store(store_timestamp, Ordering::Release);
        }
        if slot_value == 0 {
            self.hash_slot_count.fetch_add(1, Ordering::AcqRel);
        }
        self.end_phy_offset.store(phy_offset, Ordering::Release);
        self.end_timestamp.store(store_timestamp, Ordering::Release);
        let mut h = self.header();
        h.index_count = count + 1;
        self.mf.write_at(0, &h.encode())?;
        self.index_count.store(count + 1, Ordering::Release);
        self.dirty.store(true, Ordering::Release);
        Ok(true)
    }

    /// Appends to `out` the offsets stored under `key` whose time lies in
    /// `[begin, end]`, newest first, until `out` holds `max` (SPEC §3.3).
    /// Entries of other keys with the same hash are included (the caller
    /// compares the message's keys).
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    pub fn select_phy_offsets(
        &self,
        out: &mut Vec<i64>,
        key: &str,
        max: usize,
        begin: i64,
        end: i64,
    ) {
        let raw = self.mf.raw();
        let key_hash = index_key_hash(key);
        let Some(slot_value) = be_i32(raw, self.slot_pos(key_hash)) else {
            return;
        };
        fence(Ordering::Acquire);
        let count = self.index_count();
        if slot_value <= 0 || slot_value > count || count <= 1 {
            return;
        }
        let file_begin = self.begin_timestamp();
        let mut next = slot_value;
        // A corrupt file may hold a cycle; a chain never has more than
        // `count` links.
        for _ in 0..count {
            if out.len() >= max {
                break;
            }
            let Some(e) =
                IndexEntry::decode(raw.get(self.entry_pos(next as usize)..).unwrap_or(&[]))
            else {
                break;
            };
            if e.time_diff < 0 {
                break;
            }
            let time_read = file_begin.wrapping_add(e.time_diff as i64 * 1000);
            if e.key_hash == key_hash && time_read >= begin && time_read <= end {
                out.push(e.phy_offset);
            }
            if e.prev_index <= 0
                || e.prev_index > count
                || e.prev_index == next
                || time_read < begin
            {
                break;
            }
            next = e.prev_index;
        }
    }

    /// Re-reads the header from the file (a reader following another
    /// process's writer).
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    pub fn reload_header(&self) {
        if let Some(h) = IndexHeader::decode(self.mf.raw()) {
            self.begin_timestamp
                .store(h.begin_timestamp, Ordering::Release);
            self.end_timestamp.store(h.end_timestamp, Ordering::Release);
            self.begin_phy_offset
                .store(h.begin_phy_offset, Ordering::Release);
            self.end_phy_offset
                .store(h.end_phy_offset, Ordering::Release);
            self.hash_slot_count
                .store(h.hash_slot_count, Ordering::Release);
            self.index_count
                .store(h.index_count.max(1), Ordering::Release);
        }
    }

    /// Forces the whole mapping to disk.
    pub fn flush(&self) -> Result<()> {
        if self.dirty.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.mf.sync_all() {
                self.dirty.store(true, Ordering::Release);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Unlinks the file (the mapping lives until the last reference drops).
    pub fn destroy(&self) -> Result<()> {
        self.mf.destroy()
    }
}

/// `yyyyMMddHHmmssSSS` of `ms` since the epoch in the local time zone
/// (RocketMQ's `UtilAll.timeMillisToHumanString`).
pub fn human_time_name(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let milli = ms.rem_euclid(1000);
    let (y, mo, d, h, mi, s) = local_civil(secs).unwrap_or_else(|| utc_civil(secs));
    format!("{y:04}{mo:02}{d:02}{h:02}{mi:02}{s:02}{milli:03}")
}

/// Local broken-down time via `localtime_r`.
fn local_civil(secs: i64) -> Option<(i64, i64, i64, i64, i64, i64)> {
    let t = libc::time_t::try_from(secs).ok()?;
    let mut tm = std::mem::MaybeUninit::<libc::tm>::uninit();
    // SAFETY: `localtime_r` reads `t` and fills the `tm` we own; it returns
    // null (leaving `tm` unspecified) on failure, which we check before use.
    let tm = unsafe {
        if libc::localtime_r(&t, tm.as_mut_ptr()).is_null() {
            return None;
        }
        tm.assume_init()
    };
    Some((
        tm.tm_year as i64 + 1900,
        tm.tm_mon as i64 + 1,
        tm.tm_mday as i64,
        tm.tm_hour as i64,
        tm.tm_min as i64,
        tm.tm_sec as i64,
    ))
}

/// UTC broken-down time (fallback when `localtime_r` fails).
fn utc_civil(secs: i64) -> (i64, i64, i64, i64, i64, i64) {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem % 3600 / 60, rem % 60)
}

fn is_index_name(name: &str) -> bool {
    name.len() == 17 && name.bytes().all(|b| b.is_ascii_digit())
}

/// What [`IndexStore::query`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryOffsetResult {
    /// CommitLog offsets, newest file first (hash collisions included).
    pub phy_offsets: Vec<i64>,
    /// End timestamp of the newest index file.
    pub index_last_update_timestamp: i64,
    /// End CommitLog offset of the newest index file.
    pub index_last_update_phy_offset: i64,
}

type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The `index/` directory (RocketMQ's `IndexService`).
pub struct IndexStore {
    dir: PathBuf,
    hash_slot_num: usize,
    index_num: usize,
    writable: bool,
    max_msgs_num_batch: AtomicUsize,
    files: RwLock<Vec<Arc<IndexFile>>>,
    write_lock: Mutex<()>,
    clock: RwLock<Clock>,
    checkpoint: RwLock<Option<Arc<Checkpoint>>>,
    flushers: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for IndexStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexStore")
            .field("dir", &self.dir)
            .field("hash_slot_num", &self.hash_slot_num)
            .field("index_num", &self.index_num)
            .field("files", &self.files.read().len())
            .finish()
    }
}

fn system_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl IndexStore {
    fn empty(dir: PathBuf, hash_slot_num: usize, index_num: usize, writable: bool) -> Result<Self> {
        check_geometry(hash_slot_num, index_num)?;
        Ok(Self {
            dir,
            hash_slot_num,
            index_num,
            writable,
            max_msgs_num_batch: AtomicUsize::new(DEFAULT_MAX_MSGS_NUM_BATCH),
            files: RwLock::new(Vec::new()),
            write_lock: Mutex::new(()),
            clock: RwLock::new(Arc::new(system_now_ms)),
            checkpoint: RwLock::new(None),
            flushers: Mutex::new(Vec::new()),
        })
    }

    /// Loads `dir` (RocketMQ's `IndexService.load`). After an abnormal exit
    /// (`!last_exit_ok`), files whose end timestamp is newer than
    /// `index_checkpoint_ts` are destroyed; the second value is then the
    /// begin CommitLog offset of the oldest destroyed file, from which the
    /// caller re-dispatches to the index. A file whose size does not match
    /// the geometry is refused with [`StoreError::Mismatch`].
    pub fn load(
        dir: &Path,
        hash_slot_num: usize,
        index_num: usize,
        last_exit_ok: bool,
        index_checkpoint_ts: i64,
    ) -> Result<(Self, Option<i64>)> {
        Self::load_inner(
            dir,
            hash_slot_num,
            index_num,
            true,
            last_exit_ok,
            index_checkpoint_ts,
            true,
        )
    }

    /// Loads `dir` read-only: nothing is destroyed or written.
    pub fn load_read_only(dir: &Path, hash_slot_num: usize, index_num: usize) -> Result<Self> {
        Ok(Self::load_inner(dir, hash_slot_num, index_num, false, true, 0, false)?.0)
    }

    /// Loads `dir` for a writer without changing anything on disk: a short
    /// newest file is skipped (not removed) and no file is destroyed. The
    /// store's recovery steps remove and destroy what must go
    /// (`crate::recovery`, [`IndexStore::destroy_newer_than`]).
    pub fn load_for_recovery(dir: &Path, hash_slot_num: usize, index_num: usize) -> Result<Self> {
        Ok(Self::load_inner(dir, hash_slot_num, index_num, true, true, 0, false)?.0)
    }

    fn load_inner(
        dir: &Path,
        hash_slot_num: usize,
        index_num: usize,
        writable: bool,
        last_exit_ok: bool,
        index_checkpoint_ts: i64,
        remove_short: bool,
    ) -> Result<(Self, Option<i64>)> {
        let store = Self::empty(dir.to_path_buf(), hash_slot_num, index_num, writable)?;
        let mut files = Vec::new();
        let mut redispatch_from = None;
        let paths = list_index_files(dir)?;
        let expected = index_file_size(hash_slot_num, index_num).unwrap_or(usize::MAX) as u64;
        let last = paths.len().saturating_sub(1);
        for (i, path) in paths.into_iter().enumerate() {
            // The newest file shorter than the geometry: a crash while it was
            // being created, so it holds no entry. A writer removes it and
            // re-indexes from where the previous file ended; a reader skips it.
            let len = std::fs::metadata(&path)
                .map_err(|e| StoreError::io(format!("stat {}", path.display()), e))?
                .len();
            if i == last && len < expected {
                if writable && remove_short {
                    log::warn!(
                        "removing index file {} ({len} bytes: a crash while it was created)",
                        path.display()
                    );
                    std::fs::remove_file(&path)
                        .map_err(|e| StoreError::io(format!("remove {}", path.display()), e))?;
                    let prev_end = files
                        .last()
                        .map(|f: &Arc<IndexFile>| f.end_phy_offset())
                        .unwrap_or(0);
                    redispatch_from.get_or_insert(prev_end);
                }
                continue;
            }
            let f = IndexFile::open(&path, hash_slot_num, index_num, writable)?;
            if writable && !last_exit_ok && f.end_timestamp() > index_checkpoint_ts {
                log::info!(
                    "destroying index file {} (end {} > index checkpoint {index_checkpoint_ts}) after an abnormal exit",
                    path.display(),
                    f.end_timestamp()
                );
                redispatch_from.get_or_insert(f.begin_phy_offset());
                f.destroy()?;
                continue;
            }
            files.push(Arc::new(f));
        }
        *store.files.write() = files;
        Ok((store, redispatch_from))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Caps the number of offsets a query returns (default 64).
    pub fn set_max_msgs_num_batch(&self, n: usize) {
        self.max_msgs_num_batch.store(n, Ordering::Release);
    }

    /// Replaces the clock used to name new files (ms since the epoch).
    pub fn set_clock(&self, clock: Arc<dyn Fn() -> i64 + Send + Sync>) {
        *self.clock.write() = clock;
    }

    /// The checkpoint whose index timestamp advances when a full file has
    /// been flushed.
    pub fn set_checkpoint(&self, checkpoint: Arc<Checkpoint>) {
        *self.checkpoint.write() = Some(checkpoint);
    }

    /// A snapshot of the files, oldest first.
    pub fn files(&self) -> Vec<Arc<IndexFile>> {
        self.files.read().clone()
    }

    /// End CommitLog offset of the newest file (0 if none).
    pub fn end_phy_offset(&self) -> i64 {
        self.files
            .read()
            .last()
            .map(|f| f.end_phy_offset())
            .unwrap_or(0)
    }

    /// End timestamp of the newest file (0 if none).
    pub fn end_timestamp(&self) -> i64 {
        self.files
            .read()
            .last()
            .map(|f| f.end_timestamp())
            .unwrap_or(0)
    }

    /// A file name for now, unique in the directory and sorting after every
    /// existing file.
    fn new_file_path(&self, newest: Option<&Arc<IndexFile>>) -> PathBuf {
        let now = (self.clock.read())();
        let newest_name = newest.map(|f| f.file_name());
        for ms in now..now.saturating_add(1000) {
            let name = human_time_name(ms);
            let after_newest = match newest_name.as_deref() {
                Some(n) => name.as_str() > n,
                None => true,
            };
            if after_newest && !self.dir.join(&name).exists() {
                return self.dir.join(name);
            }
        }
        // The clock went far backwards: take the decimal successor of the
        // newest name (still 17 digits, still sorting last).
        let mut n: u64 = newest_name.and_then(|n| n.parse().ok()).unwrap_or(0);
        loop {
            n += 1;
            let name = format!("{n:017}");
            if !self.dir.join(&name).exists() {
                return self.dir.join(name);
            }
        }
    }

    /// The newest file if it has room, else a new one whose header starts at
    /// the previous file's end (RocketMQ's `getAndCreateLastIndexFile`); the
    /// full previous file is flushed on a background thread.
    fn writable_last_file(&self) -> Result<Arc<IndexFile>> {
        let newest = self.files.read().last().cloned();
        if let Some(f) = &newest {
            if !f.is_write_full() {
                return Ok(f.clone());
            }
        }
        let (prev_phy, prev_ts) = newest
            .as_ref()
            .map(|f| (f.end_phy_offset(), f.end_timestamp()))
            .unwrap_or((0, 0));
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| StoreError::io(format!("create {}", self.dir.display()), e))?;
        let path = self.new_file_path(newest.as_ref());
        let f = Arc::new(IndexFile::create(
            &path,
            self.hash_slot_num,
            self.index_num,
            prev_phy,
            prev_ts,
        )?);
        self.files.write().push(f.clone());
        if let Some(prev) = newest {
            self.flush_full_in_background(prev);
        }
        Ok(f)
    }

    fn flush_full_in_background(&self, file: Arc<IndexFile>) {
        let checkpoint = self.checkpoint.read().clone();
        let (f2, c2) = (file.clone(), checkpoint.clone());
        let mut flushers = self.flushers.lock();
        flushers.retain(|h| !h.is_finished());
        match std::thread::Builder::new()
            .name("rocketstore-index-flush".into())
            .spawn(move || flush_full(&f2, c2.as_deref()))
        {
            Ok(h) => flushers.push(h),
            Err(e) => {
                log::warn!("cannot start the index flush thread ({e}); flushing inline");
                flush_full(&file, checkpoint.as_deref());
            }
        }
    }

    fn put_key(
        &self,
        file: Arc<IndexFile>,
        key: &str,
        phy: i64,
        ts: i64,
    ) -> Result<Arc<IndexFile>> {
        if file.put_key(key, phy, ts)? {
            return Ok(file);
        }
        log::warn!(
            "index file {} is full, creating another one",
            file.path().display()
        );
        let next = self.writable_last_file()?;
        if next.put_key(key, phy, ts)? {
            Ok(next)
        } else {
            Err(StoreError::internal(format!(
                "fresh index file {} refused a key",
                next.path().display()
            )))
        }
    }

    /// Indexes one dispatched message (RocketMQ's `buildIndex`): skipped if
    /// `phy` is below the newest file's end offset or the message is a
    /// ROLLBACK; else `topic#uniq_key` and `topic#key` for every non-empty
    /// key. Returns how many keys were written.
    pub fn build_index(
        &self,
        topic: &str,
        keys: &[&str],
        uniq_key: Option<&str>,
        phy: i64,
        store_ts: i64,
        tran_type: i32,
    ) -> Result<usize> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let _g = self.write_lock.lock();
        let mut file = self.writable_last_file()?;
        if phy < file.end_phy_offset() {
            return Ok(0);
        }
        if tran_type & sysflag::TRANSACTION_TYPE_MASK == sysflag::TRANSACTION_ROLLBACK {
            return Ok(0);
        }
        let mut n = 0;
        if let Some(u) = uniq_key {
            file = self.put_key(file, &build_key(topic, u), phy, store_ts)?;
            n += 1;
        }
        for k in keys.iter().filter(|k| !k.is_empty()) {
            file = self.put_key(file, &build_key(topic, k), phy, store_ts)?;
            n += 1;
        }
        Ok(n)
    }

    /// Offsets stored under `topic#key` in `[begin, end]`, newest file first,
    /// at most `min(max_num, max_msgs_num_batch)` (RocketMQ's `queryOffset`).
    pub fn query(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin: i64,
        end: i64,
    ) -> QueryOffsetResult {
        let max = max_num.min(self.max_msgs_num_batch.load(Ordering::Acquire));
        let key = build_key(topic, key);
        let files = self.files();
        let mut r = QueryOffsetResult::default();
        if let Some(newest) = files.last() {
            r.index_last_update_timestamp = newest.end_timestamp();
            r.index_last_update_phy_offset = newest.end_phy_offset();
        }
        for f in files.iter().rev() {
            if f.is_time_matched(begin, end) {
                f.select_phy_offsets(&mut r.phy_offsets, &key, max, begin, end);
            }
            if f.begin_timestamp() < begin || r.phy_offsets.len() >= max {
                break;
            }
        }
        r
    }

    /// Deletes leading files (never the newest) whose end offset is below
    /// `min_phy` (SPEC §10). Returns how many were deleted.
    pub fn delete_expired(&self, min_phy: i64) -> usize {
        if !self.writable {
            return 0;
        }
        let files = self.files();
        match files.first() {
            Some(f) if f.end_phy_offset() < min_phy => {}
            _ => return 0,
        }
        let mut count = 0;
        for f in files.iter().take(files.len() - 1) {
            if f.end_phy_offset() >= min_phy {
                break;
            }
            if let Err(e) = f.destroy() {
                log::warn!("cannot delete expired index file: {e}");
                break;
            }
            count += 1;
        }
        let mut list = self.files.write();
        let n = count.min(list.len());
        list.drain(..n);
        count
    }

    /// Destroys the newest files holding entries at or past CommitLog offset
    /// `phy` (the log was cut there, so those entries point at records that
    /// no longer exist, and new records there would be skipped as already
    /// indexed). Returns the begin offset of the oldest destroyed file, from
    /// which the caller re-indexes.
    pub fn destroy_from(&self, phy: i64) -> Result<Option<i64>> {
        if !self.writable {
            return Ok(None);
        }
        let _g = self.write_lock.lock();
        let mut list = self.files.write();
        let mut from = None;
        while let Some(f) = list.last() {
            if f.end_phy_offset() < phy || f.index_count() <= 1 && f.end_phy_offset() <= 0 {
                break;
            }
            log::info!(
                "destroying index file {} (entries up to {} past the CommitLog end {phy})",
                f.path().display(),
                f.end_phy_offset()
            );
            from = Some(f.begin_phy_offset());
            f.destroy()?;
            list.pop();
        }
        Ok(from)
    }

    /// Destroys every file whose end timestamp is newer than `ts` (the
    /// index checkpoint: after an abnormal exit their pages may be lost).
    /// Returns the destroyed files' paths and begin offsets, oldest first.
    pub fn destroy_newer_than(&self, ts: i64) -> Result<Vec<(PathBuf, i64)>> {
        if !self.writable {
            return Ok(Vec::new());
        }
        let _g = self.write_lock.lock();
        let mut list = self.files.write();
        let mut gone = Vec::new();
        let mut i = 0;
        while let Some(f) = list.get(i).cloned() {
            if f.end_timestamp() <= ts {
                i += 1;
                continue;
            }
            log::info!(
                "destroying index file {} (end {} > index checkpoint {ts}) after an abnormal exit",
                f.path().display(),
                f.end_timestamp()
            );
            f.destroy()?;
            list.remove(i);
            gone.push((f.path().to_path_buf(), f.begin_phy_offset()));
        }
        Ok(gone)
    }

    /// Waits for background flushes of full files and forces every file
    /// written since its last flush.
    pub fn flush(&self) -> Result<()> {
        let handles: Vec<_> = std::mem::take(&mut *self.flushers.lock());
        for h in handles {
            let _ = h.join();
        }
        for f in self.files() {
            f.flush()?;
        }
        Ok(())
    }

    /// Waits for background flushes and drops every file (the store shut
    /// down): mappings and descriptors are released as soon as no reader
    /// holds them.
    pub fn release(&self) {
        for h in std::mem::take(&mut *self.flushers.lock()) {
            let _ = h.join();
        }
        self.files.write().clear();
    }

    /// Follows a writer in another process (read-only stores): drops files
    /// it deleted, re-reads the newest header, and opens files it created.
    pub fn refresh(&self) -> Result<()> {
        if self.writable {
            return Ok(());
        }
        let mut files = self.files.write();
        let gone = files.iter().take_while(|f| !f.path().exists()).count();
        files.drain(..gone);
        if let Some(last) = files.last() {
            last.reload_header();
        }
        let newest = files.last().map(|f| f.file_name());
        for path in list_index_files(&self.dir)? {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            if newest.is_some() && name <= newest {
                continue;
            }
            match IndexFile::open(&path, self.hash_slot_num, self.index_num, false) {
                Ok(f) => files.push(Arc::new(f)),
                // Still being created by the writer: next time.
                Err(StoreError::Mismatch(_)) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Drop for IndexStore {
    fn drop(&mut self) {
        for h in std::mem::take(&mut *self.flushers.lock()) {
            let _ = h.join();
        }
    }
}

/// Flushes a full file, then records its end timestamp in the checkpoint
/// (RocketMQ's `IndexService.flush(IndexFile)`).
fn flush_full(file: &IndexFile, checkpoint: Option<&Checkpoint>) {
    let ts = if file.is_write_full() {
        file.end_timestamp()
    } else {
        0
    };
    if let Err(e) = file.flush() {
        log::error!("flushing index file {} failed: {e}", file.path().display());
        return;
    }
    if ts > 0 {
        if let Some(c) = checkpoint {
            c.set_index_msg_timestamp(ts);
            if let Err(e) = c.flush() {
                log::error!("flushing the checkpoint failed: {e}");
            }
        }
    }
}

/// Index files of `dir` (17-digit names), oldest first.
fn list_index_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::io(format!("list {}", dir.display()), e)),
    };
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| StoreError::io(format!("list {}", dir.display()), e))?;
        let name = ent.file_name();
        match name.to_str() {
            Some(n) if is_index_name(n) => out.push(ent.path()),
            _ => log::warn!("ignoring {} in the index directory", ent.path().display()),
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn header_codec() {
        let h = IndexHeader {
            begin_timestamp: 1,
            end_timestamp: 2,
            begin_phy_offset: 3,
            end_phy_offset: 4,
            hash_slot_count: 5,
            index_count: 6,
        };
        let b = h.encode();
        assert_eq!(&b[36..40], &6i32.to_be_bytes());
        assert_eq!(IndexHeader::decode(&b), Some(h));
        assert_eq!(IndexHeader::decode(&b[..39]), None);
        assert_eq!(index_file_size(5_000_000, 20_000_000), Some(420_000_040));
    }

    #[test]
    fn key_hash_rules() {
        assert_eq!(java_string_hash("Aa"), java_string_hash("BB"));
        assert_eq!(index_key_hash("polygenelubricants"), 0, "Integer.MIN_VALUE");
        assert!(index_key_hash("T#k1") >= 0);
        assert_eq!(split_keys(" a  b ").collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn file_put_select_capacity() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("20240222172627123");
        let f = IndexFile::create(&p, 4, 5, 0, 0).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 40 + 16 + 100);
        assert_eq!(f.index_count(), 1);
        for i in 0..4 {
            assert!(f
                .put_key(&format!("k{i}"), 100 + i, 1_000_000 + i * 1000)
                .unwrap());
        }
        assert!(
            !f.put_key("k9", 999, 2_000_000).unwrap(),
            "capacity is indexNum - 1"
        );
        assert!(f.is_write_full());
        let h = IndexHeader::decode(&std::fs::read(&p).unwrap()).unwrap();
        assert_eq!(h, f.header());
        assert_eq!(h.index_count, 5);
        assert_eq!(h.begin_phy_offset, 100);
        assert_eq!(h.end_phy_offset, 103);
        assert_eq!(h.begin_timestamp, 1_000_000);
        let mut out = Vec::new();
        f.select_phy_offsets(&mut out, "k2", 10, 0, i64::MAX);
        assert_eq!(out, [102]);
        out.clear();
        f.select_phy_offsets(&mut out, "k2", 10, 1_000_000, 1_001_000);
        assert!(out.is_empty(), "time 1_002_000 is outside");
        drop(f);
        let f = IndexFile::open(&p, 4, 5, false).unwrap();
        assert_eq!(f.header(), h);
        let e = IndexFile::open(&p, 8, 5, false).unwrap_err();
        assert!(matches!(e, StoreError::Mismatch(_)));
        assert!(e.to_string().contains("hash_slot_num=8"), "{e}");
    }

    #[test]
    fn first_entry_time_quirk_and_preset_header() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("20240222172627123");
        let f = IndexFile::create(&p, 4, 5, 500, 10_000).unwrap();
        let h = IndexHeader::decode(&std::fs::read(&p).unwrap()).unwrap();
        assert_eq!(
            (h.begin_phy_offset, h.end_timestamp, h.index_count),
            (500, 10_000, 0)
        );
        assert_eq!(f.index_count(), 1);
        f.put_key("a", 600, 15_500).unwrap();
        // timeDiff computed against the pre-set begin (10 s): 5 s.
        let raw = std::fs::read(&p).unwrap();
        let e = IndexEntry::decode(&raw[40 + 16 + 20..]).unwrap();
        assert_eq!(e.time_diff, 5);
        assert_eq!(f.begin_timestamp(), 15_500);
        assert_eq!(f.begin_phy_offset(), 600);
    }

    #[test]
    fn corrupt_chain_terminates() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("20240222172627123");
        {
            let f = IndexFile::create(&p, 1, 5, 0, 0).unwrap();
            f.put_key("a", 1, 1000).unwrap();
            f.put_key("a", 2, 1000).unwrap();
        }
        // Make entry 1 point back at entry 2: a cycle.
        let mut raw = std::fs::read(&p).unwrap();
        let at = 40 + 4 + 20 + 16;
        raw[at..at + 4].copy_from_slice(&2i32.to_be_bytes());
        std::fs::write(&p, &raw).unwrap();
        let f = IndexFile::open(&p, 1, 5, false).unwrap();
        let mut out = Vec::new();
        f.select_phy_offsets(&mut out, "a", 100, 0, i64::MAX);
        assert!(out.len() <= 3, "{out:?}");
    }

    fn store(dir: &Path, clock: i64) -> IndexStore {
        let (s, r) = IndexStore::load(dir, 100, 101, true, 0).unwrap();
        assert_eq!(r, None);
        s.set_clock(Arc::new(move || clock));
        s.set_max_msgs_num_batch(1000);
        s
    }

    #[test]
    fn store_many_files_collisions_and_repeats() {
        let dir = tempfile::tempdir().unwrap();
        let idx = dir.path().join("index");
        // 100 slots, 400 keys: capacity 100 per file => 4 files; all created
        // in the same millisecond, so names get +1 ms.
        let s = store(&idx, 1_700_000_000_000);
        let ts = 1_700_000_000_000i64;
        for i in 0..200i64 {
            let key = if i % 2 == 0 { "Aa" } else { "BB" };
            let uniq = format!("U{i}");
            let n = s
                .build_index("T", &[key], Some(&uniq), i * 100, ts + i, 0)
                .unwrap();
            assert_eq!(n, 2);
        }
        let files = s.files();
        assert_eq!(files.len(), 4);
        assert!(files.iter().take(3).all(|f| f.is_write_full()));
        assert!(files.iter().take(3).all(|f| f.index_count() == 101));
        let names: HashSet<_> = files.iter().map(|f| f.file_name()).collect();
        assert_eq!(names.len(), 4, "names are unique");
        let mut sorted: Vec<_> = files.iter().map(|f| f.file_name()).collect();
        sorted.sort();
        assert_eq!(
            sorted,
            files.iter().map(|f| f.file_name()).collect::<Vec<_>>()
        );
        assert_eq!(
            files[1].begin_phy_offset(),
            5000,
            "message 50 starts file 1"
        );
        // "Aa" and "BB" collide: a query returns offsets of both keys.
        let r = s.query("T", "Aa", 1000, 0, i64::MAX);
        assert_eq!(r.phy_offsets.len(), 200);
        let set: HashSet<_> = r.phy_offsets.iter().copied().collect();
        assert_eq!(set.len(), 200);
        assert_eq!(r.phy_offsets[0], 19_900, "newest first");
        assert_eq!(r.index_last_update_phy_offset, 19_900);
        assert_eq!(r.index_last_update_timestamp, ts + 199);
        let r = s.query("T", "U7", 1000, 0, i64::MAX);
        assert_eq!(r.phy_offsets, [700]);
        // The batch cap.
        s.set_max_msgs_num_batch(64);
        assert_eq!(s.query("T", "BB", 1000, 0, i64::MAX).phy_offsets.len(), 64);
        // Already indexed offsets are skipped (the full newest file still
        // rolls first, as in RocketMQ: the new file starts at its end).
        assert_eq!(s.build_index("T", &["x"], None, 100, ts, 0).unwrap(), 0);
        assert_eq!(s.files().len(), 5);
        assert_eq!(s.files()[4].begin_phy_offset(), 19_900);
        // ROLLBACK is skipped, PREPARED is indexed.
        assert_eq!(
            s.build_index("T", &["x"], None, 30_000, ts + 300, 0xC)
                .unwrap(),
            0
        );
        assert_eq!(
            s.build_index("T", &["x", ""], None, 30_000, ts + 300, 0x4)
                .unwrap(),
            1
        );
        s.flush().unwrap();
        drop(s);

        let (s, _) = IndexStore::load(&idx, 100, 101, true, 0).unwrap();
        assert_eq!(s.files().len(), 5);
        assert_eq!(s.query("T", "x", 10, 0, i64::MAX).phy_offsets, [30_000]);
        assert_eq!(s.end_phy_offset(), 30_000);
        // Expiry deletes leading files whose end offset is below the min
        // (file ends: 4900, 9900, 14900, 19900, 30000).
        assert_eq!(s.delete_expired(10_000), 2);
        assert_eq!(s.files().len(), 3);
        assert_eq!(s.delete_expired(i64::MAX), 2, "never the newest");
        assert_eq!(std::fs::read_dir(&idx).unwrap().count(), 1);
        assert!(matches!(
            IndexStore::load(&idx, 99, 101, true, 0),
            Err(StoreError::Mismatch(_))
        ));
    }

    #[test]
    fn full_file_flush_advances_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let ck = Arc::new(Checkpoint::load_or_create(&dir.path().join("checkpoint")).unwrap());
        let (s, _) = IndexStore::load(&dir.path().join("index"), 10, 3, true, 0).unwrap();
        s.set_checkpoint(ck.clone());
        s.build_index("T", &["a", "b"], None, 10, 5000, 0).unwrap();
        assert_eq!(ck.index_msg_timestamp(), 0);
        s.build_index("T", &["c"], None, 20, 6000, 0).unwrap();
        s.flush().unwrap();
        assert_eq!(ck.index_msg_timestamp(), 5000);
        assert_eq!(
            Checkpoint::load_read_only(ck.path())
                .unwrap()
                .index_msg_timestamp(),
            5000
        );
    }

    #[test]
    fn abnormal_exit_destroys_newer_files() {
        let dir = tempfile::tempdir().unwrap();
        let idx = dir.path().join("index");
        let s = store(&idx, 1_700_000_000_000);
        for i in 0..250i64 {
            s.build_index("T", &["k"], None, 1000 + i, 10_000 + i * 1000, 0)
                .unwrap();
        }
        let files = s.files();
        assert_eq!(files.len(), 3);
        let ckpt = files[0].end_timestamp();
        let second_begin = files[1].begin_phy_offset();
        s.flush().unwrap();
        drop(s);
        // A clean exit keeps everything.
        let (s, r) = IndexStore::load(&idx, 100, 101, true, ckpt).unwrap();
        assert_eq!((s.files().len(), r), (3, None));
        drop(s);
        let (s, r) = IndexStore::load(&idx, 100, 101, false, ckpt).unwrap();
        assert_eq!(s.files().len(), 1);
        assert_eq!(r, Some(second_begin));
        assert_eq!(second_begin, 1100);
        assert_eq!(std::fs::read_dir(&idx).unwrap().count(), 1);
        // Re-dispatching from there rebuilds the keys.
        s.set_clock(Arc::new(|| 1_700_000_000_000));
        for i in 100..250i64 {
            s.build_index("T", &["k"], None, 1000 + i, 10_000 + i * 1000, 0)
                .unwrap();
        }
        let r = s.query("T", "k", 64, 0, i64::MAX);
        assert_eq!(r.phy_offsets.len(), 64);
        assert_eq!(r.phy_offsets[0], 1249);
    }

    #[test]
    fn read_only_refresh() {
        let dir = tempfile::tempdir().unwrap();
        let idx = dir.path().join("index");
        let w = store(&idx, 1_700_000_000_000);
        let r = IndexStore::load_read_only(&idx, 100, 101).unwrap();
        assert!(r.build_index("T", &["k"], None, 1, 1, 0).is_err());
        w.build_index("T", &["k"], None, 5, 1000, 0).unwrap();
        r.refresh().unwrap();
        assert_eq!(r.query("T", "k", 10, 0, i64::MAX).phy_offsets, [5]);
        w.build_index("T", &["k"], None, 6, 2000, 0).unwrap();
        r.refresh().unwrap();
        assert_eq!(r.query("T", "k", 10, 0, i64::MAX).phy_offsets, [6, 5]);
    }

    #[test]
    fn names_are_local_time() {
        let n = human_time_name(1_700_000_000_123);
        assert_eq!(n.len(), 17);
        assert!(n.ends_with("123"));
        assert_eq!(utc_civil(1_700_000_000), (2023, 11, 14, 22, 13, 20));
        assert_eq!(utc_civil(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(utc_civil(951_782_400), (2000, 2, 29, 0, 0, 0));
    }
}
