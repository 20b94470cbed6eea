//! Read-only maps of the store's files (each file's size taken first, so
//! nothing is mapped past its end) and the numbered file and directory
//! listings.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

use crate::error::{Result, StoreError};
use crate::log::commitlog::{vouch_prop_crc_ranges, LogBytes};
use crate::log::message::{parse_record, parse_valid_record, Parsed, RecordView};
use crate::paths;

/// Read-only maps of the CommitLog files, by base offset.
pub(super) struct CommitLog {
    pub(super) segment: u64,
    pub(super) files: BTreeMap<u64, Mmap>,
    pub(super) start: u64,
    pub(super) end: u64,
    /// Ranges written with the property CRC (the checkpoint lists them).
    pub(super) prop_crc: Vec<(u64, u64)>,
    /// `[start, end)` is all the data and no writer adds to it (see
    /// [`super::Scope`]).
    pub(super) complete: bool,
    /// Damaged ranges a recovery skipped (the checkpoint's durable mark):
    /// pointers into them are the damaged records' own, and nothing is
    /// rebuilt from them.
    pub(super) known_damaged: Vec<(u64, u64)>,
}

pub(super) fn map_file(path: &Path) -> Result<Option<Mmap>> {
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

pub(super) fn numbered_files(dir: &Path) -> Result<Vec<(u64, std::path::PathBuf)>> {
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
    pub(super) fn open(
        root: &Path,
        segment: u64,
        start: u64,
        end: u64,
        complete: bool,
    ) -> Result<Self> {
        let mut files = BTreeMap::new();
        for (base, path) in numbered_files(&paths::commit_log_dir(root))? {
            if base + segment <= start || base >= end {
                continue;
            }
            if let Some(m) = map_file(&path)? {
                files.insert(base, m);
            }
        }
        let checkpoint =
            crate::checkpoint::Checkpoint::load_read_only(&paths::checkpoint_file(root)).ok();
        let mark = checkpoint.as_ref().and_then(|c| c.durable_mark());
        let read = checkpoint
            .as_ref()
            .map(|c| c.prop_crc_ranges().ranges)
            .unwrap_or_default();
        let known_damaged = mark.as_ref().map(|m| m.damaged.clone()).unwrap_or_default();
        let mut log = Self {
            segment,
            files,
            start,
            end,
            prop_crc: Vec::new(),
            complete,
            known_damaged,
        };
        // As far as the bytes still show them, as a store's recovery does
        // (docs/format.md §11).
        log.prop_crc = vouch_prop_crc_ranges(&log, &read, mark.is_some()).ranges;
        Ok(log)
    }

    /// True when `off` lies in a damaged range a recovery skipped.
    pub(super) fn in_known_damage(&self, off: u64) -> bool {
        self.known_damaged.iter().any(|&(s, e)| s <= off && off < e)
    }

    /// The readable bytes from `off` to the end of its file (or of the data).
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    pub(super) fn at(&self, off: u64) -> Option<&[u8]> {
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
    pub(super) fn record(
        &self,
        off: u64,
    ) -> std::result::Result<(RecordView, &[u8]), &'static str> {
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

pub(super) fn segment_name(base: u64) -> String {
    format!("{base:020}")
}

pub(super) fn numbered_files_dirs(dir: &Path) -> Result<Vec<(i32, std::path::PathBuf)>> {
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
pub(super) fn be_i32(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
pub(super) fn be_i64(b: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

impl LogBytes for CommitLog {
    fn segment(&self) -> u64 {
        self.segment
    }

    fn first_offset(&self) -> Option<u64> {
        self.files.keys().next().copied()
    }

    fn peek<R>(&self, phy: u64, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let (&base, map) = self.files.range(..=phy).next_back()?;
        let pos = usize::try_from(phy - base).ok()?;
        map.get(pos..).map(f)
    }
}
