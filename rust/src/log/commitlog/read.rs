//! Reading one record at a CommitLog offset (checked the way every read
//! serving a message checks it: [`check_read_record`]) and, for read-only
//! stores, following the files and records another process writes.

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::Result;
use crate::log::mapped_file::MappedFile;
use crate::log::message::{
    self, parse_record, parse_record_frame, NotARecord, Parsed, RecordFrame, RecordView,
};

use super::CommitLog;

impl CommitLog {
    /// Bytes of `f` from `pos` that a reader may parse: below the write
    /// position for the writer; for a read-only store (another process
    /// writes) the whole mapped file, whose records are validated as parsed.
    pub fn readable<'f>(&self, f: &'f MappedFile, pos: usize) -> Option<&'f [u8]> {
        if self.mfq.is_writable() {
            f.readable_from(pos)
        } else {
            f.raw().get(pos..)
        }
    }

    /// The store timestamp of the record at `phy`, if one is there.
    pub fn store_timestamp_at(&self, phy: i64) -> Option<i64> {
        let phy = u64::try_from(phy).ok()?;
        let f = self.mfq.find_by_offset(phy, false)?;
        let pos = (phy - f.file_from_offset()) as usize;
        match parse_record(self.readable(&f, pos)?, false) {
            Parsed::Record(v) => Some(v.store_timestamp),
            _ => None,
        }
    }

    /// Read-only stores: adopts CommitLog files another process created and
    /// forgets files it deleted. True when the readable end moved.
    pub fn refresh(&self) -> Result<bool> {
        if self.mfq.is_writable() {
            return Ok(false);
        }
        let before = self.mfq.max_offset();
        let gone = self
            .mfq
            .files()
            .iter()
            .take_while(|f| !f.path().exists())
            .count();
        if gone > 0 {
            self.mfq.remove_head(gone);
        }
        // Advance the end over records that became valid since; the writer
        // fills a file (its end blank) before it writes to the next, so new
        // files are looked for only when every known file is full.
        if self.advance_known_files() {
            self.mfq.adopt_new_files()?;
            self.advance_known_files();
        }
        Ok(self.mfq.max_offset() != before)
    }

    /// Read-only stores: advances each known file's positions over the
    /// records that became valid, from the first file not full. True when
    /// every known file is full (or none is known).
    fn advance_known_files(&self) -> bool {
        let files = self.mfq.files();
        let start = files
            .iter()
            .position(|f| !f.is_full())
            .unwrap_or(files.len());
        for f in files.iter().skip(start) {
            let data = f.raw();
            let mut pos = f.wrote_position();
            let full = loop {
                match parse_record(data.get(pos..).unwrap_or_default(), false) {
                    Parsed::Record(v) => pos += v.total_size,
                    Parsed::Blank => break true,
                    Parsed::End { .. } => break pos >= f.file_size(),
                }
            };
            f.set_positions(if full { f.file_size() } else { pos });
            if !full {
                return false;
            }
        }
        true
    }

    /// The valid record at `phy` (body CRC checked), with its bytes copied
    /// out; `None` for anything else (see [`CommitLog::read_checked`] for why).
    pub fn read_record(&self, phy: u64) -> Option<(RecordView, Vec<u8>)> {
        match self.read_checked(phy) {
            RecordRead::Found(v, raw) => Some((v, raw)),
            _ => None,
        }
    }

    /// Asks the CPU to start loading the record of `size` bytes at `phy`
    /// into its caches: a pull knows the offsets of the records it is about
    /// to read from their queue units, and records of one queue lie apart
    /// in the CommitLog (other queues' records between them), so the
    /// hardware does not guess them. Only a hint: nothing is read, checked
    /// or served here. `file` keeps the file of the last call (one lookup
    /// per file, not per record).
    #[inline]
    pub fn prefetch(&self, file: &mut Option<Arc<MappedFile>>, phy: i64, size: i32) {
        let (Ok(phy), Ok(size)) = (u64::try_from(phy), usize::try_from(size)) else {
            return;
        };
        let inside = |f: &MappedFile| {
            phy >= f.file_from_offset() && phy < f.file_from_offset() + f.file_size() as u64
        };
        if !file.as_deref().is_some_and(inside) {
            *file = self.mfq.find_by_offset(phy, false);
        }
        let Some(f) = file.as_deref() else {
            return;
        };
        let pos = (phy - f.file_from_offset()) as usize;
        f.prefetch(pos, size.min(PREFETCH_MAX));
    }

    /// What a read finds at `phy`: a valid record (its bytes copied out),
    /// or why there is none. A record whose bytes start with a record magic
    /// but fail [`check_read_record`] (size fields, body CRC), or whose size
    /// runs past the end of its file, is [`RecordRead::Damaged`]; it is never
    /// returned as a message.
    pub fn read_checked(&self, phy: u64) -> RecordRead {
        self.read_checked_at(phy)
            .map_found(|at| at.bytes().to_vec())
    }

    /// [`CommitLog::read_checked`] without the copy: a valid record is
    /// returned as where it lies in its mapped file ([`RecordAt`]), which
    /// stays mapped as long as the `RecordAt` (or a clone of its file) is held.
    pub fn read_checked_at(&self, phy: u64) -> RecordRead<RecordAt> {
        match self.read_frame_at(phy) {
            RecordRead::Found(frame, at) => match frame.view(at.bytes()) {
                Some(v) => RecordRead::Found(v, at),
                None => RecordRead::Damaged {
                    path: at.file.path().to_path_buf(),
                    reason: "field outside the record",
                },
            },
            RecordRead::NoFile => RecordRead::NoFile,
            RecordRead::NotYet => RecordRead::NotYet,
            RecordRead::NoRecord => RecordRead::NoRecord,
            RecordRead::Damaged { path, reason } => RecordRead::Damaged { path, reason },
        }
    }

    /// [`CommitLog::read_checked_at`] with the checks only: a valid record's
    /// frame (its size, where its variable fields lie), its fixed fields
    /// left in its bytes for the caller to read when it needs them
    /// (`RecordRef`). A pull reads each record so.
    pub fn read_frame_at(&self, phy: u64) -> RecordRead<RecordAt, RecordFrame> {
        self.read_frame_in(&mut None, phy)
    }

    /// [`CommitLog::read_frame_at`] for a reader of many records: `file`
    /// keeps the file of the last read, looked up again only for an
    /// offset outside it (a pull's records mostly lie in one file).
    pub fn read_frame_in(
        &self,
        file: &mut Option<Arc<MappedFile>>,
        phy: u64,
    ) -> RecordRead<RecordAt, RecordFrame> {
        let inside = |f: &MappedFile| {
            phy >= f.file_from_offset() && phy < f.file_from_offset() + f.file_size() as u64
        };
        if !file.as_deref().is_some_and(inside) {
            *file = self.mfq.find_by_offset(phy, false);
        }
        let Some(f) = file.clone() else {
            return RecordRead::NoFile;
        };
        let pos = (phy - f.file_from_offset()) as usize;
        let in_file = f.file_size() - pos;
        let Some(data) = self.readable(&f, pos) else {
            return RecordRead::NotYet;
        };
        if data.len() < 8 {
            return if in_file < 8 {
                RecordRead::NoRecord
            } else {
                RecordRead::NotYet
            };
        }
        let total = i32::from_be_bytes([data[0], data[1], data[2], data[3]]);
        let magic = i32::from_be_bytes([data[4], data[5], data[6], data[7]]);
        if magic != message::MAGIC_V1 && magic != message::MAGIC_V2 {
            return RecordRead::NoRecord;
        }
        let damaged = |reason| RecordRead::Damaged {
            path: f.path().to_path_buf(),
            reason,
        };
        if total <= 0 || total as usize > in_file {
            return damaged("record size outside its file");
        }
        let total = total as usize;
        if total > data.len() {
            // Not all of it is readable yet (a writer's pending bytes).
            return RecordRead::NotYet;
        }
        match check_read_frame_at(&data[..total], self.needs_prop_crc(phy)) {
            Ok(v) => RecordRead::Found(
                v,
                RecordAt {
                    file: f,
                    pos,
                    len: total,
                },
            ),
            Err(reason) => damaged(reason),
        }
    }
}

/// The most bytes of one record [`CommitLog::prefetch`] asks for.
const PREFETCH_MAX: usize = 1024;

/// A checked record where it lies: `len` bytes at `pos` of a mapped file.
/// Holding it keeps the file mapped (a file retention deleted stays
/// readable until the last holder lets go), and bytes below a file's read
/// position are never rewritten while the store is open, so the bytes stay
/// the record that was checked.
#[derive(Debug, Clone)]
pub struct RecordAt {
    /// The mapped file holding the record.
    pub file: Arc<MappedFile>,
    /// Where the record starts in the file.
    pub pos: usize,
    /// The record's TOTALSIZE.
    pub len: usize,
}

impl RecordAt {
    /// The record's bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        self.file
            .raw()
            .get(self.pos..self.pos + self.len)
            .unwrap_or_default()
    }
}

impl PartialEq for RecordAt {
    fn eq(&self, o: &Self) -> bool {
        Arc::ptr_eq(&self.file, &o.file) && self.pos == o.pos && self.len == o.len
    }
}

impl Eq for RecordAt {}

impl<B, V> RecordRead<B, V> {
    /// The same outcome with a found record's bytes turned by `f`.
    pub fn map_found<C>(self, f: impl FnOnce(B) -> C) -> RecordRead<C, V> {
        match self {
            RecordRead::Found(v, b) => RecordRead::Found(v, f(b)),
            RecordRead::NoFile => RecordRead::NoFile,
            RecordRead::NotYet => RecordRead::NotYet,
            RecordRead::NoRecord => RecordRead::NoRecord,
            RecordRead::Damaged { path, reason } => RecordRead::Damaged { path, reason },
        }
    }
}

/// What [`CommitLog::read_checked`] found at an offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordRead<B = Vec<u8>, V = RecordView> {
    /// A valid record (decoded, or its frame: [`RecordFrame`]) and its
    /// bytes (or where they lie: [`RecordAt`]).
    Found(V, B),
    /// No file holds the offset: below the first file (expired) or past the
    /// last one (for a read-only store: maybe not adopted yet).
    NoFile,
    /// The offset (or part of the record there) lies past what readers may
    /// see yet: bytes the writer has not made readable.
    NotYet,
    /// No record starts here: zeros, an end-of-file blank, no record magic.
    NoRecord,
    /// A record starts here but is not valid.
    Damaged {
        /// The CommitLog file holding it.
        path: PathBuf,
        /// Which check the record fails.
        reason: &'static str,
    },
}

/// The read path's record check: `rec` holds exactly one record (its
/// TOTALSIZE bytes). Valid when its fields add up to its size and its body
/// CRC matches (docs/format.md §3.3; reads always check the CRC).
/// Every read that serves a message goes through here.
pub fn check_read_record(rec: &[u8]) -> std::result::Result<RecordView, &'static str> {
    match parse_record(rec, true) {
        Parsed::Record(v) if v.total_size == rec.len() => Ok(v),
        Parsed::Record(_) => Err("record size differs from the sum of its fields"),
        Parsed::Blank => Err("end-of-file blank where a record was expected"),
        Parsed::End { reason } => Err(reason),
    }
}

/// [`check_read_record`]'s checks, returning the record's frame (its
/// fields are not decoded); with `prop_crc` (the record lies in a range
/// written with the property CRC) its property CRC must match instead of
/// its body CRC. The property CRC covers every byte before it, the body and
/// the stored body CRC among them, so a match proves the body as written:
/// the body CRC is not computed a second time (docs/format.md "Property
/// CRC").
#[inline]
pub fn check_read_frame_at(
    rec: &[u8],
    prop_crc: bool,
) -> std::result::Result<RecordFrame, &'static str> {
    let f = match parse_record_frame(rec, !prop_crc) {
        Ok(f) if f.total_size() == rec.len() => f,
        Ok(_) => return Err("record size differs from the sum of its fields"),
        Err(NotARecord::Blank) => return Err("end-of-file blank where a record was expected"),
        Err(NotARecord::End(reason)) => return Err(reason),
    };
    if prop_crc && !message::prop_crc_ok(rec, &f.properties()) {
        return Err(PROP_CRC_MISMATCH);
    }
    Ok(f)
}

pub use crate::log::message::PROP_CRC_MISMATCH;
