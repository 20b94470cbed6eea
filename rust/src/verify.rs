//! Whole-store checks that need no open store: verification of every
//! CommitLog record, ConsumeQueue unit and index entry, detection of the
//! index geometry a store was written with, and probing the writer lock.
//!
//! Everything here reads files only (read-only maps of files whose size is
//! taken first, so nothing is mapped past a file's end); it never writes.
//!
//! Verification rules:
//! - CommitLog: from `start` to `end`, every record must pass
//!   [`parse_valid_record`] (magic, sizes, physical offset, topic, queue
//!   id/offset, properties) and its body CRC; a body flagged compressed
//!   (zlib types) must inflate. A record whose body fails its CRC still has
//!   a sound size, so the scan goes on behind it; behind a record that does
//!   not parse, the scan resumes at the next valid record of the same file
//!   (as recovery's skip does), or at the next file.
//! - ConsumeQueue: every unit below `end` must point at a valid record of
//!   the same size, topic, queue id and queue offset. Units pointing below
//!   `start` (expired CommitLog files) or at or past `end` (not yet readable
//!   data, e.g. a writer running) are counted as not checked.
//! - Index: every entry below `end` must point at a valid record one of
//!   whose keys (`topic#UNIQ_KEY`, `topic#KEY` for each of `KEYS`) has the
//!   entry's hash, and its previous-entry link must point backwards.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::Mmap;

use crate::consume_queue::{CqUnit, CQ_UNIT_SIZE};
use crate::error::{Result, StoreError};
use crate::index_file::{
    DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM, HASH_SLOT_SIZE, INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE,
};
use crate::message::{
    body_crc, compressed_body_problem, iter_properties, parse_record, parse_valid_record, sysflag,
    Parsed, RecordView,
};

/// Compression types (sys_flag bits 8..10) this build inflates: zlib.
const ZLIB_TYPES: [i32; 2] = [0, 3];
const COMPRESSION_TYPE_MASK: i32 = 0x700;
/// Progress is published every this many bytes of CommitLog scanned.
const PROGRESS_STEP: u64 = 1 << 20;

/// What a whole-store verification found.
#[derive(Debug, Default, Clone)]
pub struct VerifyReport {
    /// CommitLog records scanned (including those whose body fails its CRC).
    pub records: u64,
    /// Their bytes.
    pub bytes: u64,
    /// ConsumeQueue units checked against the CommitLog.
    pub cq_units: u64,
    /// Index entries checked against the CommitLog.
    pub index_entries: u64,
    /// Units and entries pointing outside `[start, end)`: not checked.
    pub not_checked: u64,
    /// Problems, by CommitLog offset (`None` for a problem of a whole file).
    pub problems: Vec<(Option<u64>, String)>,
}

/// Read-only maps of the CommitLog files, by base offset.
struct CommitLog {
    segment: u64,
    files: BTreeMap<u64, Mmap>,
    start: u64,
    end: u64,
}

fn map_file(path: &Path) -> Result<Option<Mmap>> {
    let file =
        File::open(path).map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
    let len = file
        .metadata()
        .map_err(|e| StoreError::io(format!("stat {}", path.display()), e))?
        .len();
    if len == 0 {
        return Ok(None);
    }
    // SAFETY: a read-only map of a file whose length was just read; reads
    // stay below the map's length. A writer only appends or fills
    // preallocated space, so mapped bytes stay backed.
    let map = unsafe { Mmap::map(&file) }
        .map_err(|e| StoreError::io(format!("map {}", path.display()), e))?;
    Ok(Some(map))
}

fn numbered_files(dir: &Path) -> Result<Vec<(u64, std::path::PathBuf)>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(StoreError::io(format!("list {}", dir.display()), e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io(format!("list {}", dir.display()), e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(n) = name.parse::<u64>() {
            if entry.path().is_file() {
                out.push((n, entry.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

impl CommitLog {
    fn open(root: &Path, segment: u64, start: u64, end: u64) -> Result<Self> {
        let mut files = BTreeMap::new();
        for (base, path) in numbered_files(&root.join("commitlog"))? {
            if base + segment <= start || base >= end {
                continue;
            }
            if let Some(m) = map_file(&path)? {
                files.insert(base, m);
            }
        }
        Ok(Self {
            segment,
            files,
            start,
            end,
        })
    }

    /// The readable bytes from `off` to the end of its file (or of the data).
    fn at(&self, off: u64) -> Option<&[u8]> {
        let base = off - off % self.segment;
        let m = self.files.get(&base)?;
        let limit = (m.len() as u64).min(self.end - base) as usize;
        m.get((off - base) as usize..limit)
    }

    /// The record starting at `off`, for a queue unit or an index entry
    /// pointing there. The scan applied the record rules and the CRC to
    /// every record in range, so here it is enough that a record of sound
    /// structure starts at `off` and carries `off` as its physical offset
    /// (bytes inside another record do not); the full rules are applied
    /// only to say why a pointer is wrong.
    fn record(&self, off: u64) -> std::result::Result<(RecordView, &[u8]), &'static str> {
        let buf = self.at(off).ok_or("no CommitLog data there")?;
        if let Parsed::Record(v) = parse_record(buf, false) {
            if v.physical_offset == off as i64 {
                let rec = buf.get(..v.total_size).ok_or("record outside the data")?;
                return Ok((v, rec));
            }
        }
        match parse_valid_record(buf, off, false) {
            Parsed::Record(v) => {
                let rec = buf.get(..v.total_size).ok_or("record outside the data")?;
                Ok((v, rec))
            }
            Parsed::Blank => Err("an end-of-file blank, not a record"),
            Parsed::End { reason } => Err(reason),
        }
    }
}

fn segment_name(base: u64) -> String {
    format!("{base:020}")
}

/// Verifies the store at `root`: CommitLog records in `[start, end)`, then
/// every ConsumeQueue unit and index entry against them. `progress` counts
/// CommitLog bytes scanned so far (for a progress bar on another thread).
pub fn verify_store(
    root: &Path,
    segment: u64,
    start: u64,
    end: u64,
    hash_slot_num: usize,
    index_num: usize,
    progress: &AtomicU64,
) -> Result<VerifyReport> {
    if segment == 0 {
        return Err(StoreError::InvalidArgument(
            "segment size must be positive".into(),
        ));
    }
    let end = end.max(start);
    let log = CommitLog::open(root, segment, start, end)?;
    // The three checks read the same maps and are independent: they run
    // side by side, and their findings are joined in order.
    let (mut report, cq, index) = std::thread::scope(|s| {
        let cq = s.spawn(|| {
            let mut r = VerifyReport::default();
            check_consume_queues(root, &log, &mut r).map(|()| r)
        });
        let index = s.spawn(|| {
            let mut r = VerifyReport::default();
            check_index(root, &log, hash_slot_num, index_num, &mut r).map(|()| r)
        });
        let mut r = VerifyReport::default();
        scan_commit_log(&log, &mut r, progress);
        (r, join_check(cq), join_check(index))
    });
    for part in [cq?, index?] {
        report.cq_units += part.cq_units;
        report.index_entries += part.index_entries;
        report.not_checked += part.not_checked;
        report.problems.extend(part.problems);
    }
    progress.store(end - start, Ordering::Relaxed);
    Ok(report)
}

fn join_check(
    handle: std::thread::ScopedJoinHandle<'_, Result<VerifyReport>>,
) -> Result<VerifyReport> {
    handle
        .join()
        .unwrap_or_else(|_| Err(StoreError::internal("a verification thread panicked")))
}

#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
fn scan_commit_log(log: &CommitLog, report: &mut VerifyReport, progress: &AtomicU64) {
    let (start, end, segment) = (log.start, log.end, log.segment);
    let mut off = start;
    let mut published = start;
    while off < end {
        if off - published >= PROGRESS_STEP {
            progress.store(off - start, Ordering::Relaxed);
            published = off;
        }
        let base = off - off % segment;
        let next_file = (base + segment).min(end);
        let Some(map) = log.files.get(&base) else {
            report.problems.push((
                Some(off),
                format!("segment file {} is missing", segment_name(base)),
            ));
            off = next_file;
            continue;
        };
        let pos = (off - base) as usize;
        let limit = (map.len() as u64).min(end - base) as usize;
        let buf = match map.get(pos..limit) {
            Some(b) if b.len() >= 8 || limit as u64 == end - base => b,
            _ => {
                report.problems.push((
                    Some(off),
                    format!("segment file {} ends early", segment_name(base)),
                ));
                off = next_file;
                continue;
            }
        };
        match parse_valid_record(buf, off, false) {
            Parsed::Record(v) => {
                // The view's ranges lie inside `buf` (the parser checked them).
                let body = buf.get(v.body.clone()).unwrap_or_default();
                let crc = body_crc(body);
                if crc != v.body_crc {
                    report.problems.push((
                        Some(off),
                        format!("body CRC mismatch (stored {}, computed {crc})", v.body_crc),
                    ));
                } else if v.sys_flag & sysflag::COMPRESSED != 0
                    && ZLIB_TYPES.contains(&((v.sys_flag & COMPRESSION_TYPE_MASK) >> 8))
                {
                    if let Some(why) = compressed_body_problem(body) {
                        report.problems.push((Some(off), why));
                    }
                }
                report.records += 1;
                report.bytes += v.total_size as u64;
                off += v.total_size as u64;
            }
            Parsed::Blank => off = next_file,
            Parsed::End { reason } => {
                report.problems.push((Some(off), reason.to_string()));
                let data = map.get(..limit).unwrap_or_default();
                off = match crate::message::find_next_valid_record(data, pos + 1, base, true) {
                    Some(i) => base + i as u64,
                    None => next_file,
                };
            }
        }
    }
}

fn check_consume_queues(root: &Path, log: &CommitLog, report: &mut VerifyReport) -> Result<()> {
    let cq_root = root.join("consumequeue");
    let topics = match std::fs::read_dir(&cq_root) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StoreError::io(format!("list {}", cq_root.display()), e)),
    };
    let mut topic_dirs: Vec<_> = topics.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    topic_dirs.sort();
    for topic_dir in topic_dirs {
        let Some(topic) = topic_dir
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_owned)
        else {
            continue;
        };
        if !topic_dir.is_dir() {
            continue;
        }
        for (queue_id, queue_dir) in numbered_files_dirs(&topic_dir)? {
            for (base, path) in numbered_files(&queue_dir)? {
                let Some(map) = map_file(&path)? else {
                    continue;
                };
                let units = map.len() / CQ_UNIT_SIZE;
                for i in 0..units {
                    let at = i * CQ_UNIT_SIZE;
                    let Some(unit) = map.get(at..at + CQ_UNIT_SIZE).and_then(CqUnit::decode) else {
                        break;
                    };
                    if unit.phy_offset == 0 && unit.size == 0 && unit.tags_code == 0 {
                        break; // end of this file's data
                    }
                    if unit.is_pre_blank() {
                        continue;
                    }
                    let queue_offset = (base + at as u64) / CQ_UNIT_SIZE as u64;
                    check_unit(log, report, &topic, queue_id, queue_offset, &unit);
                }
            }
        }
    }
    Ok(())
}

fn numbered_files_dirs(dir: &Path) -> Result<Vec<(i32, std::path::PathBuf)>> {
    let mut out = Vec::new();
    let entries =
        std::fs::read_dir(dir).map_err(|e| StoreError::io(format!("list {}", dir.display()), e))?;
    for entry in entries.filter_map(|e| e.ok()) {
        let path = entry.path();
        if let Some(q) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<i32>().ok())
        {
            if path.is_dir() {
                out.push((q, path));
            }
        }
    }
    out.sort();
    Ok(out)
}

#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
fn check_unit(
    log: &CommitLog,
    report: &mut VerifyReport,
    topic: &str,
    queue_id: i32,
    queue_offset: u64,
    unit: &CqUnit,
) {
    let where_ = || format!("ConsumeQueue {topic}/{queue_id}@{queue_offset}");
    if unit.phy_offset < 0 || unit.size <= 0 {
        report.problems.push((
            None,
            format!(
                "{}: invalid unit (offset {}, size {})",
                where_(),
                unit.phy_offset,
                unit.size
            ),
        ));
        return;
    }
    let phy = unit.phy_offset as u64;
    if phy < log.start || phy >= log.end {
        report.not_checked += 1;
        return;
    }
    report.cq_units += 1;
    let problem = match log.record(phy) {
        Err(reason) => Some(format!("{} points at no valid record ({reason})", where_())),
        Ok((v, rec)) => {
            if v.total_size as i64 != unit.size as i64 {
                Some(format!(
                    "{} says size {}, the record has {}",
                    where_(),
                    unit.size,
                    v.total_size
                ))
            } else if rec.get(v.topic.clone()) != Some(topic.as_bytes()) || v.queue_id != queue_id {
                Some(format!(
                    "{} points at a record of {}/{}",
                    where_(),
                    String::from_utf8_lossy(rec.get(v.topic.clone()).unwrap_or_default()),
                    v.queue_id
                ))
            } else if v.queue_offset as u64 != queue_offset {
                Some(format!(
                    "{} points at a record with queue offset {}",
                    where_(),
                    v.queue_offset
                ))
            } else {
                None
            }
        }
    };
    if let Some(p) = problem {
        report.problems.push((Some(phy), p));
    }
}

#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
fn check_index(
    root: &Path,
    log: &CommitLog,
    slots: usize,
    num: usize,
    report: &mut VerifyReport,
) -> Result<()> {
    let Some(size) = crate::index_file::index_file_size(slots, num) else {
        return Err(StoreError::InvalidArgument(
            "index geometry too large".into(),
        ));
    };
    for (_, path) in numbered_files(&root.join("index"))? {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(map) = map_file(&path)? else {
            continue;
        };
        if map.len() != size {
            report.problems.push((
                None,
                format!(
                    "index file {name} has {} bytes, the geometry ({slots} slots, {num} \
                     entries) needs {size}",
                    map.len()
                ),
            ));
            continue;
        }
        let count = be_i32(&map, 36).unwrap_or(0).max(0) as usize;
        let first = INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE;
        for j in 1..count.min(num) {
            let at = first + j * INDEX_ENTRY_SIZE;
            let (Some(hash), Some(phy), Some(prev)) = (
                be_i32(&map, at),
                be_i64(&map, at + 4),
                be_i32(&map, at + 16),
            ) else {
                break;
            };
            if phy < 0 || (phy as u64) < log.start || phy as u64 >= log.end {
                report.not_checked += 1;
                continue;
            }
            report.index_entries += 1;
            let phy = phy as u64;
            let what = format!("index file {name} entry {j}");
            if prev < 0 || prev as usize >= j {
                report.problems.push((
                    Some(phy),
                    format!("{what}: previous entry {prev} is not before it"),
                ));
                continue;
            }
            match log.record(phy) {
                Err(reason) => report.problems.push((
                    Some(phy),
                    format!("{what} points at no valid record ({reason})"),
                )),
                Ok((v, rec)) => {
                    if !record_has_key_hash(&v, rec, hash) {
                        report.problems.push((
                            Some(phy),
                            format!("{what}: no key of the record has hash {hash}"),
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
fn record_has_key_hash(v: &RecordView, rec: &[u8], hash: i32) -> bool {
    let Some(Ok(topic)) = rec.get(v.topic.clone()).map(std::str::from_utf8) else {
        return false;
    };
    let mut keys_seen = false;
    for (name, value) in iter_properties(rec.get(v.properties.clone()).unwrap_or_default()) {
        let Ok(value) = std::str::from_utf8(value) else {
            continue;
        };
        match name {
            b"UNIQ_KEY" if key_hash(topic, value) == hash => return true,
            b"KEYS" if !keys_seen => {
                keys_seen = true;
                for k in value.split(' ').filter(|k| !k.is_empty()) {
                    if key_hash(topic, k) == hash {
                        return true;
                    }
                }
            }
            _ => {}
        }
    }
    false
}

/// [`index_key_hash`] of [`build_key`]`(topic, key)`, without building
/// the key.
fn key_hash(topic: &str, key: &str) -> i32 {
    let h = if topic.is_ascii() && key.is_ascii() {
        // One UTF-16 unit per byte.
        let step = |h: i32, &b: &u8| h.wrapping_mul(31).wrapping_add(i32::from(b));
        let h = topic.as_bytes().iter().fold(0i32, step);
        key.as_bytes().iter().fold(step(h, &b'#'), step)
    } else {
        topic
            .encode_utf16()
            .chain(std::iter::once(u16::from(b'#')))
            .chain(key.encode_utf16())
            .fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(i32::from(u)))
    };
    let h = h.wrapping_abs();
    if h < 0 {
        0
    } else {
        h
    }
}

#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
fn be_i32(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
fn be_i64(b: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// `(max_hash_slot_num, max_index_num)` from one index file's content.
///
/// The header holds the entry count `c` and the CommitLog offset of the
/// last key; that key's entry (number `c - 1`) holds the same offset, its
/// hash slot points back at it, and entry 0 is unused (zeros). Every
/// occurrence of the offset's bytes is tried as that entry; `None` if the
/// file holds fewer than one key or nothing fits.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
pub fn index_file_geometry(data: &[u8]) -> Option<(usize, usize)> {
    let size = data.len();
    if size <= INDEX_HEADER_SIZE {
        return None;
    }
    let end_phy = data.get(24..32)?;
    let count = be_i32(data, 36)?;
    if count < 2 || end_phy == [0u8; 8] {
        return None;
    }
    let last = (count - 1) as usize;
    let mut from = INDEX_HEADER_SIZE;
    while let Some(found) = find(data, end_phy, from) {
        from = found + 1;
        let Some(entry) = found.checked_sub(4) else {
            continue;
        };
        let Some(slots_bytes) = entry
            .checked_sub(INDEX_HEADER_SIZE)
            .and_then(|x| x.checked_sub(last.checked_mul(INDEX_ENTRY_SIZE)?))
        else {
            continue;
        };
        if slots_bytes == 0 || slots_bytes % HASH_SLOT_SIZE != 0 {
            continue;
        }
        let slots = slots_bytes / HASH_SLOT_SIZE;
        let rest = size - INDEX_HEADER_SIZE - slots_bytes;
        if rest % INDEX_ENTRY_SIZE != 0 || rest / INDEX_ENTRY_SIZE < count as usize {
            continue;
        }
        let Some(key_hash) = be_i32(data, entry) else {
            continue;
        };
        let first = INDEX_HEADER_SIZE + slots_bytes;
        if key_hash < 0 {
            continue;
        }
        let slot = INDEX_HEADER_SIZE + (key_hash as usize % slots) * HASH_SLOT_SIZE;
        let first_zero = data
            .get(first..first + INDEX_ENTRY_SIZE)
            .is_some_and(|e| e.iter().all(|&b| b == 0));
        if first_zero && be_i32(data, slot).map(|s| s as i64) == Some(last as i64) {
            return Some((slots, rest / INDEX_ENTRY_SIZE));
        }
    }
    None
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

/// The index geometry `(max_hash_slot_num, max_index_num)` to open the
/// store at `root` with so that its index files are used. Given values
/// win; a missing one follows from the files' size and content. `None` for
/// a value that cannot be told (the caller's default applies).
pub fn detect_index_geometry(
    root: &Path,
    slots: Option<usize>,
    num: Option<usize>,
) -> Result<(Option<usize>, Option<usize>)> {
    if slots.is_some() && num.is_some() {
        return Ok((slots, num));
    }
    let mut files = Vec::new();
    for (_, path) in numbered_files(&root.join("index"))? {
        let len = std::fs::metadata(&path)
            .map_err(|e| StoreError::io(format!("stat {}", path.display()), e))?
            .len() as usize;
        files.push((path, len));
    }
    let Some(size) = files.iter().map(|f| f.1).max() else {
        return Ok((slots, num));
    };
    let rest = size.saturating_sub(INDEX_HEADER_SIZE);
    if let Some(s) = slots {
        let left = rest.checked_sub(s.saturating_mul(HASH_SLOT_SIZE));
        return Ok(match left {
            Some(l) if l % INDEX_ENTRY_SIZE == 0 && l / INDEX_ENTRY_SIZE >= 2 => {
                (slots, Some(l / INDEX_ENTRY_SIZE))
            }
            _ => (slots, num),
        });
    }
    if let Some(n) = num {
        let left = rest.checked_sub(n.saturating_mul(INDEX_ENTRY_SIZE));
        return Ok(match left {
            Some(l) if l % HASH_SLOT_SIZE == 0 && l / HASH_SLOT_SIZE >= 1 => {
                (Some(l / HASH_SLOT_SIZE), num)
            }
            _ => (slots, num),
        });
    }
    if crate::index_file::index_file_size(DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM) == Some(size) {
        return Ok((None, None));
    }
    for (path, len) in &files {
        if *len != size {
            continue;
        }
        if let Some(m) = map_file(path)? {
            if let Some((s, n)) = index_file_geometry(&m) {
                return Ok((Some(s), Some(n)));
            }
        }
    }
    // No key in any file: any geometry of the right size reads them (as
    // empty); RocketMQ's 1:4 ratio of slots to entries.
    let unit = HASH_SLOT_SIZE + 4 * INDEX_ENTRY_SIZE;
    if rest % unit == 0 && rest / unit >= 1 {
        let s = rest / unit;
        return Ok((Some(s), Some(4 * s)));
    }
    Ok((None, None))
}

/// Whether a writer holds the lock of the store at `root` (`None` if that
/// cannot be told). Asks with `F_OFD_GETLK`, which reports a conflicting
/// lock without taking one, so a writer starting at the same moment is
/// never disturbed.
pub fn writer_running(root: &Path) -> Option<bool> {
    use std::os::fd::AsRawFd;
    let path = root.join("lock");
    if !path.exists() {
        return Some(false);
    }
    let file = File::open(&path).ok()?;
    // SAFETY: zero is a valid `flock` value; the fields are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 1;
    // SAFETY: valid descriptor and a properly initialised `flock`.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    if rc != 0 {
        return None;
    }
    Some(fl.l_type != libc::F_UNLCK as libc::c_short)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index_file::{build_key, index_key_hash};

    /// A panicking check is an engine bug (`Internal`, asking for a
    /// report), not a bad argument of the caller.
    #[test]
    fn a_panicking_check_is_an_internal_error() {
        let err = std::thread::scope(|s| {
            join_check(s.spawn(|| -> Result<VerifyReport> { panic!("check failed") }))
        })
        .unwrap_err();
        assert!(matches!(err, StoreError::Internal(_)), "{err:?}");
        assert!(err.to_string().contains("please report this bug"), "{err}");
    }

    #[test]
    fn geometry_of_a_file_without_keys_is_unknown() {
        assert_eq!(index_file_geometry(&[0u8; 100]), None);
    }

    #[test]
    fn key_hash_is_the_index_hash_of_the_built_key() {
        for (t, k) in [("orders", "key-1"), ("t", ""), ("é", "ключ"), ("a", "b c")] {
            assert_eq!(key_hash(t, k), index_key_hash(&build_key(t, k)));
        }
    }

    #[test]
    fn geometry_is_read_from_an_index_file_with_keys() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("index");
        std::fs::create_dir_all(&index).unwrap();
        let f = crate::index_file::IndexFile::create(&index.join("20240222172627123"), 7, 30, 0, 0)
            .unwrap();
        for i in 0..5 {
            assert!(f.put_key(&format!("t#k{i}"), 1000 + i, 1_000_000).unwrap());
        }
        drop(f);
        let data = std::fs::read(index.join("20240222172627123")).unwrap();
        assert_eq!(index_file_geometry(&data), Some((7, 30)));
        assert_eq!(
            detect_index_geometry(dir.path(), None, None).unwrap(),
            (Some(7), Some(30))
        );
        // A given value wins; the other follows from the size.
        assert_eq!(
            detect_index_geometry(dir.path(), Some(7), None).unwrap(),
            (Some(7), Some(30))
        );
    }

    #[test]
    fn no_lock_file_means_no_writer() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(writer_running(dir.path()), Some(false));
    }

    #[test]
    fn a_held_lock_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let lock = crate::lock::StoreLock::acquire(&dir.path().join("lock"), dir.path()).unwrap();
        assert_eq!(writer_running(dir.path()), Some(true));
        drop(lock);
        assert_eq!(writer_running(dir.path()), Some(false));
    }
}
