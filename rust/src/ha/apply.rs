//! A slave's handling of one frame: the checks that refuse it before a byte
//! is written (its start, its fit in this store's segment, the record
//! headers it completes), then the append and the wake-up of dispatch.
//!
//! The record walk follows the headers (size and magic) of the records the
//! frames carry: a blank (end of a segment on the master) must end exactly
//! at this store's segment end, and a record must leave the 8 bytes of the
//! blank before it; otherwise master and slave cut their segments at
//! different offsets (different `mapped_file_size_commit_log`), and
//! replication stops.

use std::sync::Arc;

use crate::log::commitlog::CommitLog;
use crate::log::message::{BLANK_MAGIC, END_FILE_MIN_BLANK_LENGTH, MAGIC_V1, MAGIC_V2};
use crate::services::dispatch::Dispatcher;

use super::wire::FrameRef;

/// Why a frame was not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyError {
    /// The frame breaks the protocol: the connection is closed (nothing written).
    Protocol(String),
    /// Master and slave cannot replicate (segment sizes differ, a write
    /// failed): replication stops (nothing of the frame written).
    Fatal(String),
    /// The master's bytes differ from this store's below its end: the
    /// logs forked; replication stops.
    Diverged(String),
    /// The master's log starts past this store's end (its first frame, an
    /// empty one, starts at its first file): reseed this store. The
    /// connection is closed.
    Behind(String),
    /// The master's log ends before this store's report (its first frame,
    /// an empty one, starts at its end): this store holds bytes the master
    /// does not. The connection is closed.
    Ahead(String),
}

/// Start of the last complete record of the log: of its last file, or of
/// the newest file before it holding one when the last file holds none (a
/// file just rolled to); the log's end when no file holds a record.
pub fn last_record_start(log: &CommitLog) -> u64 {
    let end = log.max_offset();
    for file in log.queue().files().iter().rev() {
        let data = file.readable_from(0).unwrap_or(&[]);
        let mut pos = 0usize;
        let mut last = None;
        while let Some(h) = data.get(pos..pos + 8) {
            let total = i32::from_be_bytes([h[0], h[1], h[2], h[3]]);
            let magic = i32::from_be_bytes([h[4], h[5], h[6], h[7]]);
            if !(magic == MAGIC_V1 || magic == MAGIC_V2) || total <= 0 {
                break;
            }
            let Some(next) = pos.checked_add(total as usize).filter(|n| *n <= data.len()) else {
                break;
            };
            last = Some(pos);
            pos = next;
        }
        if let Some(p) = last {
            return file.file_from_offset() + p as u64;
        }
    }
    end
}

/// End of the last complete record of the log (of its last file, counting
/// an end-of-file blank that reaches the file's end): where a promotion
/// cuts a slave's log (docs/format.md §21.8). The log's end when nothing
/// is cut.
pub fn complete_end(log: &CommitLog) -> u64 {
    let end = log.max_offset();
    let Some(file) = log.queue().last_file() else {
        return end;
    };
    let data = file.readable_from(0).unwrap_or(&[]);
    let mut pos = 0usize;
    while let Some(h) = data.get(pos..pos + 8) {
        let total = i32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let magic = i32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        if total <= 0 {
            break;
        }
        let Some(next) = pos.checked_add(total as usize).filter(|n| *n <= data.len()) else {
            break;
        };
        if magic == BLANK_MAGIC {
            if next == file.file_size() {
                pos = next;
            }
            break;
        }
        if !(magic == MAGIC_V1 || magic == MAGIC_V2) {
            break;
        }
        pos = next;
    }
    file.file_from_offset() + pos as u64
}

/// Start of the record (or end-of-file blank) of the log holding
/// `offset`, walking its file's headers from the file's start; where the
/// walk stops when `offset` lies past the file's whole records.
pub fn record_start_at(log: &CommitLog, offset: u64) -> u64 {
    let Some(file) = log.file_for(offset) else {
        return offset;
    };
    let data = file.raw();
    let target = (offset - file.file_from_offset()) as usize;
    let mut pos = 0usize;
    while let Some(h) = data.get(pos..pos + 8) {
        let total = i32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let magic = i32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        let known = magic == MAGIC_V1 || magic == MAGIC_V2 || magic == BLANK_MAGIC;
        let Some(next) = pos
            .checked_add(total.max(0) as usize)
            .filter(|n| known && total > 0 && *n <= data.len())
        else {
            break;
        };
        if next > target {
            break;
        }
        pos = next;
    }
    file.file_from_offset() + pos as u64
}

/// Applies frames to a slave's CommitLog.
pub struct Applier {
    log: Arc<CommitLog>,
    dispatcher: Arc<Dispatcher>,
    /// Start of the next record header the walk reads.
    next_rec: u64,
    /// Where the next frame must start (None: the log is empty, any
    /// segment start will do).
    cursor: Option<u64>,
    /// The log's end when the connection began: bytes below it that come
    /// again are compared with this store's, not written.
    own_end: u64,
    /// A frame came on this connection.
    got_frame: bool,
    /// Where the master's file holding `next_rec` starts, once known (the
    /// first frame of an empty log starts one, a blank ends one): names
    /// the master's segment size when it differs from this store's.
    master_file: Option<u64>,
}

impl Applier {
    /// An applier for a new connection: it asks for the log from the start
    /// of its last complete record (see [`Applier::report_offset`]) and
    /// compares what comes back below its end with its own bytes.
    pub fn new(log: Arc<CommitLog>, dispatcher: Arc<Dispatcher>) -> Self {
        let own_end = log.max_offset();
        let cursor = (!log.queue().is_empty()).then(|| last_record_start(&log));
        Self {
            log,
            dispatcher,
            next_rec: own_end,
            cursor,
            own_end,
            got_frame: false,
            master_file: None,
        }
    }

    /// The offset to report: where the next frame must start (0 for an
    /// empty log). Below the log's end until the bytes there are compared.
    pub fn report_offset(&self) -> u64 {
        self.cursor.unwrap_or(0)
    }

    /// True once the bytes this store held when the connection began were
    /// compared with the master's (or there were none to compare).
    pub fn verified(&self) -> bool {
        self.cursor.map_or(true, |c| c >= self.own_end)
    }

    /// Checks `f`, compares the part below this store's end with its own
    /// bytes, appends the rest; true if bytes were appended.
    pub fn apply(&mut self, f: &FrameRef<'_>) -> Result<bool, ApplyError> {
        let size = self.log.file_size() as u64;
        let first = !std::mem::replace(&mut self.got_frame, true);
        match self.cursor {
            Some(c) if first && f.body.is_empty() && f.start > c && f.start % size == 0 => {
                return Err(ApplyError::Behind(format!(
                    "the master's CommitLog starts at {}, past this store's offset {c}: the \
                     bytes between are deleted on the master; reseed this store \
                     (`rocketstore reseed PATH`, docs/format.md §21.8)",
                    f.start
                )))
            }
            Some(c) if first && f.body.is_empty() && f.start < c => {
                return Err(ApplyError::Ahead(format!(
                    "the master's CommitLog ends at {}, before this store's offset {c}: the \
                     range [{}, {}) of this store is not the master's (the logs diverged; this \
                     store takes nothing from this master)",
                    f.start, f.start, self.own_end
                )))
            }
            None if f.start % size != 0 => {
                return Err(ApplyError::Protocol(format!(
                    "the first frame starts at {}, not at a segment start of this store \
                     (mapped_file_size_commit_log {size})",
                    f.start
                )))
            }
            Some(c) if f.start != c => {
                return Err(ApplyError::Protocol(format!(
                    "a frame starts at {}, but this store expects offset {c}",
                    f.start
                )))
            }
            _ => {}
        }
        let compared = self.compare(f)?;
        let start = f.start + compared as u64;
        let body = &f.body[compared..];
        if body.is_empty() {
            self.cursor = Some(start);
            return Ok(false);
        }
        let empty = self.log.queue().is_empty();
        let len = body.len() as u64;
        if start % size + len > size {
            return Err(ApplyError::Fatal(format!(
                "a frame of {len} bytes at {start} crosses the end of this store's segment at {} \
                 (this store's mapped_file_size_commit_log is {size}; the master's segments \
                 end elsewhere): master and slave must use the same mapped_file_size_commit_log",
                start - start % size + size
            )));
        }
        let walk_from = if empty { start } else { self.next_rec };
        let file = if empty { Some(start) } else { self.master_file };
        let (next, file) = self
            .walk(walk_from, start, body, file)
            .map_err(ApplyError::Fatal)?;
        self.master_file = file;
        self.log
            .append_replica(start, body)
            .map_err(|e| ApplyError::Fatal(format!("cannot append replicated bytes: {e}")))?;
        self.next_rec = next;
        self.cursor = Some(start + len);
        if empty && self.dispatcher.dispatch_from() < start {
            self.dispatcher.set_dispatch_from(start);
        }
        self.dispatcher.wakeup();
        Ok(true)
    }

    /// Compares the part of `f` below this store's end at connect with the
    /// bytes there; returns how many bytes of `f` were compared.
    fn compare(&self, f: &FrameRef<'_>) -> Result<usize, ApplyError> {
        if f.start >= self.own_end || f.body.is_empty() {
            return Ok(0);
        }
        let n = f.body.len().min((self.own_end - f.start) as usize);
        let mut off = f.start;
        while off < f.start + n as u64 {
            let file = self.log.file_for(off).ok_or_else(|| {
                ApplyError::Fatal(format!(
                    "this store's CommitLog holds no file for offset {off}"
                ))
            })?;
            let pos = (off - file.file_from_offset()) as usize;
            let take = (file.file_size() - pos).min((f.start + n as u64 - off) as usize);
            let at = (off - f.start) as usize;
            let theirs = &f.body[at..at + take];
            let mine = file.read(pos, take).unwrap_or(&[]);
            if mine != theirs {
                let first = mine
                    .iter()
                    .zip(theirs)
                    .position(|(a, b)| a != b)
                    .unwrap_or(mine.len().min(take));
                return Err(ApplyError::Diverged(format!(
                    "this store's CommitLog differs from the master's at offset {}: the range \
                     [{}, {}) of this store is not the master's (the logs diverged; this store \
                     takes nothing more from this master)",
                    off + first as u64,
                    off + first as u64,
                    self.own_end
                )));
            }
            off += take as u64;
        }
        Ok(n)
    }

    /// The byte at `off`: from the bytes `body` at `start`, or from the log below them.
    fn byte_at(&self, start: u64, body: &[u8], off: u64) -> Option<u8> {
        if off >= start {
            return body.get((off - start) as usize).copied();
        }
        let file = self.log.file_for(off)?;
        file.raw()
            .get((off - file.file_from_offset()) as usize)
            .copied()
    }

    /// Walks the record headers the frame completes from `from`; returns
    /// where the next header starts and where the master's file holding it
    /// starts (`file`: where the one holding `from` does, if known), or why
    /// the layout differs.
    fn walk(
        &self,
        mut r: u64,
        start: u64,
        body: &[u8],
        mut file: Option<u64>,
    ) -> Result<(u64, Option<u64>), String> {
        let size = self.log.file_size() as u64;
        let end = start + body.len() as u64;
        while r + 8 <= end {
            let mut h = [0u8; 8];
            if r >= start {
                let at = (r - start) as usize;
                h.copy_from_slice(&body[at..at + 8]);
            } else {
                // A header begun in an earlier frame.
                for (i, b) in h.iter_mut().enumerate() {
                    *b = self.byte_at(start, body, r + i as u64).unwrap_or(0);
                }
            }
            let total = i32::from_be_bytes([h[0], h[1], h[2], h[3]]);
            let magic = i32::from_be_bytes([h[4], h[5], h[6], h[7]]);
            let seg_end = r - r % size + size;
            if magic == BLANK_MAGIC {
                if total < END_FILE_MIN_BLANK_LENGTH as i32 || r + total as u64 != seg_end {
                    let blank_end = r + total.max(0) as u64;
                    let theirs = match file {
                        Some(f) if blank_end > f => format!("is {}", blank_end - f),
                        _ => "is another".to_owned(),
                    };
                    return Err(format!(
                        "the master's end-of-segment blank at {r} ({total} bytes) ends at \
                         {blank_end}, but this store's segment ends at {seg_end} (this store's \
                         mapped_file_size_commit_log is {size}; the master's {theirs}): \
                         master and slave must use the same mapped_file_size_commit_log"
                    ));
                }
                r = seg_end;
                file = Some(seg_end);
            } else if (magic == MAGIC_V1 || magic == MAGIC_V2) && total > 0 {
                let rec_end = r + total as u64;
                if rec_end + END_FILE_MIN_BLANK_LENGTH as u64 > seg_end {
                    return Err(format!(
                        "the record at {r} ({total} bytes) crosses the end of this store's \
                         segment at {seg_end} (this store's mapped_file_size_commit_log is \
                         {size}; the master's is larger than {size}): master and slave must \
                         use the same mapped_file_size_commit_log"
                    ));
                }
                r = rec_end;
            } else {
                // Not a record header (damage the master kept): the walk
                // resumes at the next segment, where records start again
                // (if the master's segments end there: unknown).
                r = seg_end;
                file = None;
            }
        }
        Ok((r, file))
    }
}
