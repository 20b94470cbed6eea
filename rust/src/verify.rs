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

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::Mmap;

use crate::error::{Result, StoreError};
use crate::index::index_file::{
    DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM, HASH_SLOT_SIZE, INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE,
};
use crate::log::message::{
    body_crc, compressed_body_problem, iter_properties, parse_record, parse_valid_record, sysflag,
    Parsed, RecordView,
};
use crate::paths;
use crate::queue::consume_queue::{CqUnit, CQ_UNIT_SIZE};

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
        for (base, path) in numbered_files(&paths::commit_log_dir(root))? {
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
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
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
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
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

/// Verifies the store at `root`: CommitLog records in `[start, end)`, and
/// every ConsumeQueue unit and index entry against them. `progress` counts
/// CommitLog bytes scanned so far (for a progress bar on another thread).
///
/// One pass: the queue units and index entries are merged into CommitLog
/// order (each queue and each index file is written in that order), and
/// each is checked when the scan reaches the offset it points at, against
/// the record the scan has just parsed and checked. A unit or entry that
/// points at no record start the scan reached, or that comes out of order
/// in its file, is checked on its own by reading the CommitLog at its
/// offset, so its finding is the same either way.
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
    let mut report = VerifyReport::default();
    let (mut names, mut sources) = consume_queue_sources(root)?;
    let (index_names, index) = index_sources(root, hash_slot_num, index_num, &mut report)?;
    names.index_files = index_names.index_files;
    sources.extend(index);
    let mut pointers = Pointers::new(names, sources, &log, &mut report);
    scan_commit_log(&log, &mut report, progress, &mut pointers);
    pointers.finish(&log, &mut report);
    if let Some(e) = pointers.failed.take() {
        return Err(e);
    }
    progress.store(end - start, Ordering::Relaxed);
    Ok(report)
}

#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
fn scan_commit_log(
    log: &CommitLog,
    report: &mut VerifyReport,
    progress: &AtomicU64,
    pointers: &mut Pointers,
) {
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
                let rec = buf.get(..v.total_size).unwrap_or_default();
                let body = rec.get(v.body.clone()).unwrap_or_default();
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
                pointers.check_record(off, &v, rec, log, report);
                off += v.total_size as u64;
            }
            Parsed::Blank => off = next_file,
            Parsed::End { reason } => {
                report.problems.push((Some(off), reason.to_string()));
                let data = map.get(..limit).unwrap_or_default();
                off = match crate::log::message::find_next_valid_record(data, pos + 1, base, true) {
                    Some(i) => base + i as u64,
                    None => next_file,
                };
            }
        }
    }
}

/// What a queue unit or an index entry says about the record it points at.
#[derive(Clone, Copy)]
enum Claim {
    /// Unit `queue_offset` of queue `queue_id` of topic `topics[topic]`.
    Unit {
        topic: usize,
        queue_id: i32,
        queue_offset: u64,
        size: i32,
    },
    /// Entry `entry` of index file `files[file]`.
    Entry {
        file: usize,
        entry: usize,
        hash: i32,
    },
}

/// A queue unit or an index entry to check at CommitLog offset `phy`.
#[derive(Clone, Copy)]
struct Pointer {
    phy: u64,
    claim: Claim,
}

/// One queue's files, or one index file: its pointers, in file order.
enum Source {
    /// A queue's files are mapped one at a time (a store may hold more
    /// files than a process may map at once).
    Queue {
        topic: usize,
        queue_id: i32,
        files: Vec<(u64, PathBuf)>,
        file: usize,
        map: Option<Mmap>,
        unit: usize,
    },
    Index {
        file: usize,
        map: Mmap,
        first: usize,
        count: usize,
        entry: usize,
    },
}

impl Source {
    /// The next unit or entry of this source that points into the checked
    /// range; ones that point elsewhere or cannot point anywhere are
    /// counted or reported here. A file that cannot be read ends the
    /// source and sets `failed`.
    fn next(
        &mut self,
        names: &Names,
        log: &CommitLog,
        report: &mut VerifyReport,
        failed: &mut Option<StoreError>,
    ) -> Option<Pointer> {
        match self {
            Source::Queue {
                topic,
                queue_id,
                files,
                file,
                map,
                unit,
            } => loop {
                let (base, path) = files.get(*file)?;
                let base = *base;
                if map.is_none() {
                    match map_file(path) {
                        Ok(Some(m)) => *map = Some(m),
                        Ok(None) => {
                            *file += 1;
                            continue;
                        }
                        Err(e) => {
                            failed.get_or_insert(e);
                            *file = files.len();
                            return None;
                        }
                    }
                }
                let at = *unit * CQ_UNIT_SIZE;
                let decoded = map
                    .as_ref()
                    .and_then(|m| m.get(at..at + CQ_UNIT_SIZE))
                    .and_then(CqUnit::decode);
                let Some(u) =
                    decoded.filter(|u| !(u.phy_offset == 0 && u.size == 0 && u.tags_code == 0))
                else {
                    // End of this file's data.
                    *file += 1;
                    *map = None;
                    *unit = 0;
                    continue;
                };
                *unit += 1;
                if u.is_pre_blank() {
                    continue;
                }
                let queue_offset = (base + at as u64) / CQ_UNIT_SIZE as u64;
                if u.phy_offset < 0 || u.size <= 0 {
                    report.problems.push((
                        None,
                        format!(
                            "{}: invalid unit (offset {}, size {})",
                            unit_name(&names.topics[*topic], *queue_id, queue_offset),
                            u.phy_offset,
                            u.size
                        ),
                    ));
                    continue;
                }
                let phy = u.phy_offset as u64;
                if phy < log.start || phy >= log.end {
                    report.not_checked += 1;
                    continue;
                }
                report.cq_units += 1;
                return Some(Pointer {
                    phy,
                    claim: Claim::Unit {
                        topic: *topic,
                        queue_id: *queue_id,
                        queue_offset,
                        size: u.size,
                    },
                });
            },
            Source::Index {
                file,
                map,
                first,
                count,
                entry,
            } => loop {
                let j = *entry;
                if j >= *count {
                    return None;
                }
                *entry += 1;
                let at = *first + j * INDEX_ENTRY_SIZE;
                let (Some(hash), Some(phy), Some(prev)) =
                    (be_i32(map, at), be_i64(map, at + 4), be_i32(map, at + 16))
                else {
                    *entry = *count;
                    return None;
                };
                if phy < 0 || (phy as u64) < log.start || phy as u64 >= log.end {
                    report.not_checked += 1;
                    continue;
                }
                report.index_entries += 1;
                if prev < 0 || prev as usize >= j {
                    report.problems.push((
                        Some(phy as u64),
                        format!(
                            "{}: previous entry {prev} is not before it",
                            entry_name(&names.index_files[*file], j)
                        ),
                    ));
                    continue;
                }
                return Some(Pointer {
                    phy: phy as u64,
                    claim: Claim::Entry {
                        file: *file,
                        entry: j,
                        hash,
                    },
                });
            },
        }
    }
}

/// Topic and index file names, for the messages.
#[derive(Default)]
struct Names {
    topics: Vec<String>,
    index_files: Vec<String>,
}

fn unit_name(topic: &str, queue_id: i32, queue_offset: u64) -> String {
    format!("ConsumeQueue {topic}/{queue_id}@{queue_offset}")
}

fn entry_name(file: &str, entry: usize) -> String {
    format!("index file {file} entry {entry}")
}

/// Every source's pointers, merged into CommitLog order.
struct Pointers {
    names: Names,
    /// The first queue file that could not be read.
    failed: Option<StoreError>,
    sources: Vec<Source>,
    /// Each source's next pointer, and the offset of its previous one.
    next: Vec<(Option<Pointer>, u64)>,
    /// `(offset, source)` of each source's next in-order pointer.
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    /// Key hashes of the record they were last computed for.
    hashes: (Option<u64>, Vec<i32>),
}

impl Pointers {
    fn new(names: Names, sources: Vec<Source>, log: &CommitLog, report: &mut VerifyReport) -> Self {
        let n = sources.len();
        let mut p = Self {
            names,
            failed: None,
            sources,
            next: vec![(None, 0); n],
            heap: BinaryHeap::with_capacity(n),
            hashes: (None, Vec::new()),
        };
        for i in 0..n {
            if let Some(phy) = p.advance(i, log, report) {
                p.heap.push(Reverse((phy, i)));
            }
        }
        p
    }

    /// Moves source `i` to its next pointer that does not go back in
    /// CommitLog order, and returns that pointer's offset; those that do go
    /// back are checked on their own.
    fn advance(&mut self, i: usize, log: &CommitLog, report: &mut VerifyReport) -> Option<u64> {
        let last = self.next[i].1;
        while let Some(p) = self.sources[i].next(&self.names, log, report, &mut self.failed) {
            if p.phy >= last {
                self.next[i] = (Some(p), p.phy);
                return Some(p.phy);
            }
            self.check_alone(p, log, report);
        }
        self.next[i].0 = None;
        None
    }

    /// Pops the next pointer below `below`.
    fn pop_below(
        &mut self,
        below: u64,
        log: &CommitLog,
        report: &mut VerifyReport,
    ) -> Option<Pointer> {
        let &Reverse((phy, i)) = self.heap.peek()?;
        if phy >= below {
            return None;
        }
        let p = self.next[i].0.take();
        // The top stays source `i` until it is replaced here.
        match self.advance(i, log, report) {
            Some(next) => {
                if let Some(mut top) = self.heap.peek_mut() {
                    *top = Reverse((next, i));
                }
            }
            None => {
                self.heap.pop();
            }
        }
        p
    }

    /// Checks the pointers up to `off`, where the scan found the valid
    /// record `v` (bytes `rec`).
    fn check_record(
        &mut self,
        off: u64,
        v: &RecordView,
        rec: &[u8],
        log: &CommitLog,
        report: &mut VerifyReport,
    ) {
        while let Some(p) = self.pop_below(off, log, report) {
            self.check_alone(p, log, report);
        }
        while let Some(p) = self.pop_below(off + 1, log, report) {
            self.check(p, Ok((v, rec)), report);
        }
    }

    /// Checks the pointers the scan did not reach.
    fn finish(&mut self, log: &CommitLog, report: &mut VerifyReport) {
        while let Some(p) = self.pop_below(u64::MAX, log, report) {
            self.check_alone(p, log, report);
        }
    }

    fn check_alone(&mut self, p: Pointer, log: &CommitLog, report: &mut VerifyReport) {
        let found = log.record(p.phy);
        self.check(
            p,
            found.as_ref().map(|(v, rec)| (v, *rec)).map_err(|e| *e),
            report,
        );
    }

    /// Checks pointer `p` against what lies at its offset.
    fn check(
        &mut self,
        p: Pointer,
        found: std::result::Result<(&RecordView, &[u8]), &'static str>,
        report: &mut VerifyReport,
    ) {
        let problem = match p.claim {
            Claim::Unit {
                topic,
                queue_id,
                queue_offset,
                size,
            } => {
                let topic = &self.names.topics[topic];
                let what = || unit_name(topic, queue_id, queue_offset);
                match found {
                    Err(reason) => Some(format!("{} points at no valid record ({reason})", what())),
                    Ok((v, rec)) => {
                        if v.total_size as i64 != size as i64 {
                            Some(format!(
                                "{} says size {size}, the record has {}",
                                what(),
                                v.total_size
                            ))
                        } else if &rec[v.topic.clone()] != topic.as_bytes()
                            || v.queue_id != queue_id
                        {
                            Some(format!(
                                "{} points at a record of {}/{}",
                                what(),
                                String::from_utf8_lossy(&rec[v.topic.clone()]),
                                v.queue_id
                            ))
                        } else if v.queue_offset as u64 != queue_offset {
                            Some(format!(
                                "{} points at a record with queue offset {}",
                                what(),
                                v.queue_offset
                            ))
                        } else {
                            None
                        }
                    }
                }
            }
            Claim::Entry { file, entry, hash } => {
                let what = || entry_name(&self.names.index_files[file], entry);
                match found {
                    Err(reason) => Some(format!("{} points at no valid record ({reason})", what())),
                    Ok((v, rec)) => {
                        if self.hashes.0 != Some(p.phy) {
                            self.hashes.1.clear();
                            record_key_hashes(v, rec, &mut self.hashes.1);
                            self.hashes.0 = Some(p.phy);
                        }
                        if self.hashes.1.contains(&hash) {
                            None
                        } else {
                            Some(format!("{}: no key of the record has hash {hash}", what()))
                        }
                    }
                }
            }
        };
        if let Some(problem) = problem {
            report.problems.push((Some(p.phy), problem));
        }
    }
}

/// One source per queue, with its files mapped.
fn consume_queue_sources(root: &Path) -> Result<(Names, Vec<Source>)> {
    let mut names = Names::default();
    let mut sources = Vec::new();
    let cq_root = paths::consume_queue_dir(root);
    let topics = match std::fs::read_dir(&cq_root) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((names, sources)),
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
        let t = names.topics.len();
        names.topics.push(topic);
        for (queue_id, queue_dir) in numbered_files_dirs(&topic_dir)? {
            sources.push(Source::Queue {
                topic: t,
                queue_id,
                files: numbered_files(&queue_dir)?,
                file: 0,
                map: None,
                unit: 0,
            });
        }
    }
    Ok((names, sources))
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

/// One source per index file of the expected size; files of another size
/// are reported.
fn index_sources(
    root: &Path,
    slots: usize,
    num: usize,
    report: &mut VerifyReport,
) -> Result<(Names, Vec<Source>)> {
    let Some(size) = crate::index::index_file::index_file_size(slots, num) else {
        return Err(StoreError::InvalidArgument(
            "index geometry too large".into(),
        ));
    };
    let mut names = Names::default();
    let mut sources = Vec::new();
    for (_, path) in numbered_files(&paths::index_dir(root))? {
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
        sources.push(Source::Index {
            file: names.index_files.len(),
            first: INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE,
            count: count.min(num),
            // Entry 0 is unused.
            entry: 1,
            map,
        });
        names.index_files.push(name);
    }
    Ok((names, sources))
}

/// Appends to `out` the index hash of each key of the record (bytes `rec`):
/// `topic#UNIQ_KEY`, and `topic#KEY` for each of its first `KEYS`.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
fn record_key_hashes(v: &RecordView, rec: &[u8], out: &mut Vec<i32>) {
    let topic = rec.get(v.topic.clone()).unwrap_or_default();
    if !topic.is_ascii() && std::str::from_utf8(topic).is_err() {
        return;
    }
    let mut keys_seen = false;
    for (name, value) in iter_properties(rec.get(v.properties.clone()).unwrap_or_default()) {
        let keys = match name {
            b"UNIQ_KEY" => false,
            b"KEYS" if !keys_seen => true,
            _ => continue,
        };
        if !value.is_ascii() && std::str::from_utf8(value).is_err() {
            continue;
        }
        if keys {
            keys_seen = true;
            for k in value.split(|&b| b == b' ').filter(|k| !k.is_empty()) {
                out.push(key_hash(topic, k));
            }
        } else {
            out.push(key_hash(topic, value));
        }
    }
}

/// [`index_key_hash`] of [`build_key`]`(topic, key)`, without building
/// the key; both are valid UTF-8.
fn key_hash(topic: &[u8], key: &[u8]) -> i32 {
    let h = if topic.is_ascii() && key.is_ascii() {
        // One UTF-16 unit per byte.
        let step = |h: i32, &b: &u8| h.wrapping_mul(31).wrapping_add(i32::from(b));
        let h = topic.iter().fold(0i32, step);
        key.iter().fold(step(h, &b'#'), step)
    } else {
        let utf16 = |b: &[u8]| {
            std::str::from_utf8(b)
                .unwrap_or_default()
                .encode_utf16()
                .collect::<Vec<u16>>()
        };
        utf16(topic)
            .into_iter()
            .chain(std::iter::once(u16::from(b'#')))
            .chain(utf16(key))
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
    let end_phy: [u8; 8] = data.get(24..32)?.try_into().ok()?;
    let count = be_i32(data, 36)?;
    if count < 2 || end_phy == [0u8; 8] {
        return None;
    }
    let last = (count - 1) as usize;
    // Entry `last` holds the offset at `INDEX_HEADER_SIZE + slots * 4 +
    // last * 20 + 4` with at least one slot: only those positions (4 apart
    // from the first one) can be it.
    let mut from = last
        .checked_mul(INDEX_ENTRY_SIZE)?
        .checked_add(INDEX_HEADER_SIZE + HASH_SLOT_SIZE + 4)?;
    while let Some(found) = find_aligned(data, end_phy, from, HASH_SLOT_SIZE) {
        from = found + HASH_SLOT_SIZE;
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

/// The first position `from + k * step` at which `needle` lies in `hay`.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
fn find_aligned(hay: &[u8], needle: [u8; 8], from: usize, step: usize) -> Option<usize> {
    let last = hay.len().checked_sub(needle.len())?;
    (from..=last)
        .step_by(step)
        .find(|&at| hay.get(at..at + 8).is_some_and(|w| w == needle))
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
    for (_, path) in numbered_files(&paths::index_dir(root))? {
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
    if crate::index::index_file::index_file_size(DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM)
        == Some(size)
    {
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
    let path = paths::lock_file(root);
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
    use crate::index::index_file::{build_key, index_key_hash};

    #[test]
    fn geometry_of_a_file_without_keys_is_unknown() {
        assert_eq!(index_file_geometry(&[0u8; 100]), None);
    }

    #[test]
    fn key_hash_is_the_index_hash_of_the_built_key() {
        for (t, k) in [("orders", "key-1"), ("t", ""), ("é", "ключ"), ("a", "b c")] {
            assert_eq!(
                key_hash(t.as_bytes(), k.as_bytes()),
                index_key_hash(&build_key(t, k))
            );
        }
    }

    #[test]
    fn geometry_is_read_from_an_index_file_with_keys() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("index");
        std::fs::create_dir_all(&index).unwrap();
        let f = crate::index::index_file::IndexFile::create(
            &index.join("20240222172627123"),
            7,
            30,
            0,
            0,
        )
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
    fn geometry_is_read_for_small_and_large_slot_counts() {
        let dir = tempfile::tempdir().unwrap();
        for (slots, num, keys) in [(1, 4, 3), (2, 9, 8), (13, 40, 2), (500, 64, 40)] {
            let path = dir.path().join(format!("{slots}-{num}"));
            let f = crate::index::index_file::IndexFile::create(&path, slots, num, 0, 0).unwrap();
            for i in 0..keys {
                assert!(f
                    .put_key(&format!("t#k{i}"), 4096 + 97 * i, 1_000_000)
                    .unwrap());
            }
            drop(f);
            let data = std::fs::read(&path).unwrap();
            assert_eq!(index_file_geometry(&data), Some((slots, num)));
        }
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
