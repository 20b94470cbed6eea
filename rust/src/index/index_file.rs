//! One IndexFile (docs/format.md §10): a hash index from `topic#key` to CommitLog
//! offsets — its header, slots, entries and lookups. The `index/`
//! directory of such files is [`crate::index::index_service`]'s.
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

use std::path::Path;
use std::sync::atomic::{fence, AtomicBool, AtomicI32, AtomicI64, Ordering};

use crate::sync::Mutex;

use crate::error::{Result, StoreError};
use crate::log::mapped_file::{MappedFile, Reserve};
use crate::log::message::java_string_hash;

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
    /// Store time of the first message indexed in the file (ms).
    pub begin_timestamp: i64,
    /// Store time of the last message indexed in the file (ms).
    pub end_timestamp: i64,
    /// CommitLog offset of the first message indexed in the file.
    pub begin_phy_offset: i64,
    /// CommitLog offset of the last message indexed in the file.
    pub end_phy_offset: i64,
    /// Hash slots in use.
    pub hash_slot_count: i32,
    /// Entries written, plus one (entry 0 is never used).
    pub index_count: i32,
}

impl IndexHeader {
    /// The header's 40 bytes, big-endian.
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
    /// Hash of the key (`topic#key`) the entry indexes.
    pub key_hash: i32,
    /// CommitLog offset of the message carrying the key.
    pub phy_offset: i64,
    /// Seconds since the file's begin timestamp.
    pub time_diff: i32,
    /// The previous entry in the same hash slot's chain (0: none).
    pub prev_index: i32,
}

impl IndexEntry {
    /// The entry's 20 bytes, big-endian.
    pub fn encode(&self) -> [u8; INDEX_ENTRY_SIZE] {
        let mut b = [0u8; INDEX_ENTRY_SIZE];
        b[0..4].copy_from_slice(&self.key_hash.to_be_bytes());
        b[4..12].copy_from_slice(&self.phy_offset.to_be_bytes());
        b[12..16].copy_from_slice(&self.time_diff.to_be_bytes());
        b[16..20].copy_from_slice(&self.prev_index.to_be_bytes());
        b
    }

    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    /// Decodes an entry from its 20 bytes; `None` if `b` is shorter.
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
    abs_key_hash(java_string_hash(key))
}

/// [`index_key_hash`] of the stored key `topic#key` ([`build_key`]),
/// computed over the parts without building the string.
pub fn index_key_hash_of(topic: &str, key: &str) -> i32 {
    let step = |h: i32, c: u16| h.wrapping_mul(31).wrapping_add(c as i32);
    // ASCII text is its own UTF-16 (one unit per byte): hashed by byte.
    let h = if topic.is_ascii() && key.is_ascii() {
        let h = topic.bytes().fold(0i32, |h, b| step(h, u16::from(b)));
        key.bytes()
            .fold(step(h, u16::from(b'#')), |h, b| step(h, u16::from(b)))
    } else {
        topic
            .encode_utf16()
            .chain(std::iter::once(u16::from(b'#')))
            .chain(key.encode_utf16())
            .fold(0i32, step)
    };
    abs_key_hash(h)
}

fn abs_key_hash(hash: i32) -> i32 {
    let h = hash.wrapping_abs();
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

pub(crate) fn check_geometry(hash_slot_num: usize, index_num: usize) -> Result<usize> {
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
        .inspect_err(|_| crate::log::mapped_file::remove_failed_creation(path))
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

    /// The index file's path.
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

    /// Hash slots of this file (its geometry).
    pub fn hash_slot_num(&self) -> usize {
        self.hash_slot_num
    }

    /// Entries this file holds at most (its geometry).
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

    /// Store time of the first message indexed here (ms).
    pub fn begin_timestamp(&self) -> i64 {
        self.begin_timestamp.load(Ordering::Acquire)
    }

    /// Store time of the last message indexed here (ms).
    pub fn end_timestamp(&self) -> i64 {
        self.end_timestamp.load(Ordering::Acquire)
    }

    /// CommitLog offset of the first message indexed here.
    pub fn begin_phy_offset(&self) -> i64 {
        self.begin_phy_offset.load(Ordering::Acquire)
    }

    /// CommitLog offset of the last message indexed here.
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

    /// Asks the CPU to start loading the hash slot of `key_hash` (a
    /// lookup's first read, and a cache miss: slots are spread over the
    /// file by hash).
    #[inline]
    pub fn prefetch_slot(&self, key_hash: i32) {
        self.mf.prefetch(self.slot_pos(key_hash), HASH_SLOT_SIZE);
    }

    fn slot_pos(&self, key_hash: i32) -> usize {
        INDEX_HEADER_SIZE + (key_hash as usize % self.hash_slot_num) * HASH_SLOT_SIZE
    }

    fn entry_pos(&self, index: usize) -> usize {
        INDEX_HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE + index * INDEX_ENTRY_SIZE
    }

    /// Adds `key` → `phy_offset` (docs/format.md §10). `Ok(false)` when the file is full.
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
    /// `[begin, end]`, newest first, until `out` holds `max` (docs/format.md §19.3).
    /// Entries of other keys with the same hash are included (the caller
    /// compares the message's keys).
    pub fn select_phy_offsets(
        &self,
        out: &mut Vec<i64>,
        key: &str,
        max: usize,
        begin: i64,
        end: i64,
    ) {
        self.select_hashed(out, index_key_hash(key), max, begin, end);
    }

    /// [`IndexFile::select_phy_offsets`] by the key's hash
    /// ([`index_key_hash`]), which is all the walk compares.
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    pub fn select_hashed(
        &self,
        out: &mut Vec<i64>,
        key_hash: i32,
        max: usize,
        begin: i64,
        end: i64,
    ) {
        let raw = self.mf.raw();
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
            // The next link's entry lies elsewhere in the file (entries are
            // in write order, a chain links entries of one slot): its load
            // starts now, under this entry's checks.
            if e.prev_index > 0 && e.prev_index <= count {
                self.mf
                    .prefetch(self.entry_pos(e.prev_index as usize), INDEX_ENTRY_SIZE);
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

pub(crate) fn is_index_name(name: &str) -> bool {
    name.len() == 17 && name.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_hash_of_parts_is_the_hash_of_the_stored_key() {
        // ASCII, non-ASCII (two UTF-16 units for the emoji), empty parts.
        for (t, k) in [
            ("BenchTopic", "key-0001"),
            ("T", ""),
            ("", "k"),
            ("Thema", "Schlüssel-\u{1F600}"),
            ("Aa", "BB"),
            ("\u{7f}", "\u{80}"),
            ("Thema-\u{e9}", "k"),
        ] {
            assert_eq!(index_key_hash_of(t, k), index_key_hash(&build_key(t, k)));
        }
    }

    proptest::proptest! {
        /// The byte-wise hash of ASCII parts is the UTF-16 hash, for any text.
        #[test]
        fn key_hash_of_any_parts(t in "\\PC{0,12}", k in "[ -~]{0,12}|\\PC{0,6}") {
            proptest::prop_assert_eq!(index_key_hash_of(&t, &k), index_key_hash(&build_key(&t, &k)));
        }
    }

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
