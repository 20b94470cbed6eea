//! Whether the checkpoint's property-CRC ranges still describe the
//! CommitLog's bytes (docs/format.md §11, "Ranges another writer wrote
//! over").
//!
//! The ranges say which records rocketstore wrote with `__CRC32#`. Another
//! writer — a RocketMQ broker that cut the log at a damaged record and
//! appended from there — writes records without it over part of a range and
//! leaves the list as it was. The list is vouched for when the durable mark
//! is valid (nobody rewrote `physicMsgTimestamp` since rocketstore wrote
//! both) and every range's boundaries still hold what a range written with
//! the property has there. Otherwise each range counts only up to the first
//! record in it that does not end with the property, or the first bytes
//! that are no record: past that point the bytes are not the ones the list
//! describes.

use super::CommitLog;
use crate::log::message::{
    has_prop_crc_trailer, is_prop_crc_trailer, parse_record, Parsed, RecordView, PROP_CRC_LEN,
};

/// The property-CRC ranges an open uses, and where they stopped describing
/// the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VouchedRanges {
    /// The ranges to check (those read, cut at `stale_from`).
    pub ranges: Vec<(u64, u64)>,
    /// The offset from which the ranges read no longer describe the bytes
    /// (another writer wrote there), if one was found.
    pub stale_from: Option<u64>,
}

impl CommitLog {
    /// The ranges of the checkpoint (`ranges`, ascending) as far as the
    /// bytes still show them; `mark_valid` says the durable mark was written
    /// with the checkpoint's current `physicMsgTimestamp`.
    pub fn vouch_prop_crc_ranges(&self, ranges: &[(u64, u64)], mark_valid: bool) -> VouchedRanges {
        // Below the first file the records are gone (retention).
        let min = u64::try_from(self.min_offset()).unwrap_or(u64::MAX);
        let ranges: Vec<(u64, u64)> = ranges
            .iter()
            .map(|&(s, e)| (s.max(min), e))
            .filter(|&(s, e)| s < e)
            .collect();
        let whole = VouchedRanges {
            ranges: ranges.clone(),
            stale_from: None,
        };
        if ranges.is_empty()
            || (mark_valid && ranges.iter().all(|&(s, e)| self.range_bounds_hold(s, e)))
        {
            return whole;
        }
        let Some(p) = ranges
            .iter()
            .find_map(|&(s, e)| self.first_record_without_prop_crc(s, e))
        else {
            return whole;
        };
        let mut kept = Vec::with_capacity(ranges.len());
        for &(s, e) in &ranges {
            let e = e.min(p);
            if s < e {
                kept.push((s, e));
            }
        }
        VouchedRanges {
            ranges: kept,
            stale_from: Some(p),
        }
    }

    /// True when `[s, e)` still looks written with the property: a record
    /// ending with it (or a file's end blank) starts at `s`, and unless `e`
    /// is a file's end, the property's 20 bytes end at `e`.
    fn range_bounds_hold(&self, s: u64, e: u64) -> bool {
        let start_ok = self
            .with_bytes_at(s, |b| match parse_record(b, false) {
                Parsed::Record(v) => ends_with_prop_crc(b, &v),
                Parsed::Blank => true,
                Parsed::End { .. } => false,
            })
            .unwrap_or(false);
        let size = self.file_size() as u64;
        if !start_ok || size == 0 || e % size == 0 {
            return start_ok;
        }
        let Some(f) = self.file_for(e - 1) else {
            return false;
        };
        let pos = (e - f.file_from_offset()) as usize;
        let Some(t) = pos
            .checked_sub(PROP_CRC_LEN)
            .and_then(|from| f.raw().get(from..pos))
        else {
            return false;
        };
        is_prop_crc_trailer(t)
    }

    /// `f` of the CommitLog's bytes from `phy` to the end of its file.
    fn with_bytes_at<R>(&self, phy: u64, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let file = self.file_for(phy)?;
        let pos = usize::try_from(phy.checked_sub(file.file_from_offset())?).ok()?;
        file.raw().get(pos..).map(f)
    }

    /// Walks the records of `[s, e)`: the offset of the first one whose
    /// properties do not end with the property CRC, or of the first bytes
    /// that are no record; `None` when every record has it.
    fn first_record_without_prop_crc(&self, s: u64, e: u64) -> Option<u64> {
        let mut at = s;
        while at < e {
            // The length to move on by, or `None` where the walk stops.
            let step = self.with_bytes_at(at, |b| match parse_record(b, false) {
                Parsed::Record(v) if ends_with_prop_crc(b, &v) && v.physical_offset == at as i64 => {
                    Some(v.total_size as u64)
                }
                Parsed::Blank => Some(self.roll_next_file(at) - at),
                _ => None,
            });
            match step.flatten() {
                Some(n) if n > 0 => at += n,
                _ => return Some(at),
            }
        }
        None
    }
}

/// True when the record at the start of `b` (its view `v`) ends with a
/// property CRC (its shape: name, separator, ten digits, separator).
fn ends_with_prop_crc(b: &[u8], v: &RecordView) -> bool {
    b.get(..v.total_size)
        .is_some_and(|rec| has_prop_crc_trailer(rec, &v.properties))
}
