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

use super::wire::Frame;

/// Why a frame was not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyError {
    /// The frame breaks the protocol: the connection is closed (nothing written).
    Protocol(String),
    /// Master and slave cannot replicate (segment sizes differ, a write
    /// failed): replication stops (nothing of the frame written).
    Fatal(String),
}

/// Applies frames to a slave's CommitLog.
pub struct Applier {
    log: Arc<CommitLog>,
    dispatcher: Arc<Dispatcher>,
    /// Start of the next record header the walk reads.
    next_rec: u64,
}

impl Applier {
    /// An applier continuing at the log's end (a record boundary after recovery).
    pub fn new(log: Arc<CommitLog>, dispatcher: Arc<Dispatcher>) -> Self {
        let next_rec = log.max_offset();
        Self {
            log,
            dispatcher,
            next_rec,
        }
    }

    /// Checks `f` and appends its bytes; true if bytes were appended.
    pub fn apply(&mut self, f: &Frame) -> Result<bool, ApplyError> {
        let size = self.log.file_size() as u64;
        let empty = self.log.queue().is_empty();
        let end = self.log.max_offset();
        if empty {
            if f.start % size != 0 {
                return Err(ApplyError::Protocol(format!(
                    "the first frame starts at {}, not at a segment start of this store \
                     (mapped_file_size_commit_log {size})",
                    f.start
                )));
            }
        } else if f.start != end {
            return Err(ApplyError::Protocol(format!(
                "a frame starts at {}, but this store's CommitLog ends at {end}",
                f.start
            )));
        }
        if f.body.is_empty() {
            return Ok(false);
        }
        let len = f.body.len() as u64;
        if f.start % size + len > size {
            return Err(ApplyError::Fatal(format!(
                "a frame of {len} bytes at {} crosses the end of this store's segment at {} \
                 (this store's mapped_file_size_commit_log is {size}; the master's segments \
                 end elsewhere): master and slave must use the same mapped_file_size_commit_log",
                f.start,
                f.start - f.start % size + size
            )));
        }
        let walk_from = if empty { f.start } else { self.next_rec };
        let next = self.walk(walk_from, f).map_err(ApplyError::Fatal)?;
        self.log
            .append_replica(f.start, &f.body)
            .map_err(|e| ApplyError::Fatal(format!("cannot append replicated bytes: {e}")))?;
        self.next_rec = next;
        if empty && self.dispatcher.dispatch_from() < f.start {
            self.dispatcher.set_dispatch_from(f.start);
        }
        self.dispatcher.wakeup();
        Ok(true)
    }

    /// The byte at `off`: from the frame, or from the log below its start.
    fn byte_at(&self, f: &Frame, off: u64) -> Option<u8> {
        if off >= f.start {
            return f.body.get((off - f.start) as usize).copied();
        }
        let file = self.log.file_for(off)?;
        file.raw()
            .get((off - file.file_from_offset()) as usize)
            .copied()
    }

    /// Walks the record headers the frame completes from `from`; returns
    /// where the next header starts, or why the layout differs.
    fn walk(&self, mut r: u64, f: &Frame) -> Result<u64, String> {
        let size = self.log.file_size() as u64;
        let end = f.start + f.body.len() as u64;
        while r + 8 <= end {
            let mut h = [0u8; 8];
            for (i, b) in h.iter_mut().enumerate() {
                *b = self.byte_at(f, r + i as u64).unwrap_or(0);
            }
            let total = i32::from_be_bytes([h[0], h[1], h[2], h[3]]);
            let magic = i32::from_be_bytes([h[4], h[5], h[6], h[7]]);
            let seg_end = r - r % size + size;
            if magic == BLANK_MAGIC {
                if total < END_FILE_MIN_BLANK_LENGTH as i32 || r + total as u64 != seg_end {
                    return Err(format!(
                        "the master's end-of-segment blank at {r} ({total} bytes) ends at {}, \
                         but this store's segment ends at {seg_end} (this store's \
                         mapped_file_size_commit_log is {size}; the master's is another): \
                         master and slave must use the same mapped_file_size_commit_log",
                        r + total.max(0) as u64
                    ));
                }
                r = seg_end;
            } else if (magic == MAGIC_V1 || magic == MAGIC_V2) && total > 0 {
                let rec_end = r + total as u64;
                if rec_end + END_FILE_MIN_BLANK_LENGTH as u64 > seg_end {
                    return Err(format!(
                        "the record at {r} ({total} bytes) crosses the end of this store's \
                         segment at {seg_end} (this store's mapped_file_size_commit_log is \
                         {size}; the master's segments are larger): master and slave must \
                         use the same mapped_file_size_commit_log"
                    ));
                }
                r = rec_end;
            } else {
                // Not a record header (damage the master kept): the walk
                // resumes at the next segment, where records start again.
                r = seg_end;
            }
        }
        Ok(r)
    }
}
