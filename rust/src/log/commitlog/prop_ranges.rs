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

/// CommitLog bytes as a reader holds them (the store's mapped files, or
/// `verify`'s own maps).
pub trait LogBytes {
    /// Size of every CommitLog file.
    fn segment(&self) -> u64;
    /// Start of the first file held (`None`: no file).
    fn first_offset(&self) -> Option<u64>;
    /// `f` of the bytes from `phy` to the end of its file; `None` when no
    /// file holds `phy`.
    fn peek<R>(&self, phy: u64, f: impl FnOnce(&[u8]) -> R) -> Option<R>;
}

impl LogBytes for CommitLog {
    fn segment(&self) -> u64 {
        self.file_size() as u64
    }

    fn first_offset(&self) -> Option<u64> {
        u64::try_from(self.min_offset()).ok()
    }

    fn peek<R>(&self, phy: u64, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let file = self.file_for(phy)?;
        let pos = usize::try_from(phy.checked_sub(file.file_from_offset())?).ok()?;
        file.raw().get(pos..).map(f)
    }
}

/// The checkpoint's property-CRC ranges (`ranges`, ascending) as far as the
/// bytes of `log` still show them; `mark_valid` says the durable mark was
/// written with the checkpoint's current `physicMsgTimestamp`.
pub fn vouch_prop_crc_ranges(
    log: &impl LogBytes,
    ranges: &[(u64, u64)],
    mark_valid: bool,
) -> VouchedRanges {
    // Below the first file the records are gone (retention).
    let min = log.first_offset().unwrap_or(u64::MAX);
    let ranges: Vec<(u64, u64)> = ranges
        .iter()
        .map(|&(s, e)| (s.max(min), e))
        .filter(|&(s, e)| s < e)
        .collect();
    let whole = VouchedRanges {
        ranges: ranges.clone(),
        stale_from: None,
    };
    if ranges.is_empty() || (mark_valid && ranges.iter().all(|&(s, e)| bounds_hold(log, s, e))) {
        return whole;
    }
    let Some(p) = ranges
        .iter()
        .find_map(|&(s, e)| first_record_without_prop_crc(log, s, e))
    else {
        return whole;
    };
    let kept = ranges
        .iter()
        .map(|&(s, e)| (s, e.min(p)))
        .filter(|&(s, e)| s < e)
        .collect();
    VouchedRanges {
        ranges: kept,
        stale_from: Some(p),
    }
}

/// True when `[s, e)` still looks written with the property: a record
/// ending with it (or a file's end blank) starts at `s`, and unless `e` is
/// a file's end, the property's 20 bytes end at `e`.
fn bounds_hold(log: &impl LogBytes, s: u64, e: u64) -> bool {
    let start_ok = log
        .peek(s, |b| match parse_record(b, false) {
            Parsed::Record(v) => ends_with_prop_crc(b, &v),
            Parsed::Blank => true,
            Parsed::End { .. } => false,
        })
        .unwrap_or(false);
    let size = log.segment();
    if !start_ok || size == 0 || e % size == 0 {
        return start_ok;
    }
    e % size >= PROP_CRC_LEN as u64
        && log
            .peek(e - PROP_CRC_LEN as u64, |b| {
                b.get(..PROP_CRC_LEN).is_some_and(is_prop_crc_trailer)
            })
            .unwrap_or(false)
}

/// Walks the records of `[s, e)`: the offset of the first one whose
/// properties do not end with the property CRC, or of the first bytes that
/// are no record; `None` when every record has it.
fn first_record_without_prop_crc(log: &impl LogBytes, s: u64, e: u64) -> Option<u64> {
    let size = log.segment();
    let mut at = s;
    while at < e {
        // The length to move on by, or `None` where the walk stops.
        let step = log.peek(at, |b| match parse_record(b, false) {
            Parsed::Record(v) if ends_with_prop_crc(b, &v) && v.physical_offset == at as i64 => {
                Some(v.total_size as u64)
            }
            Parsed::Blank if size > 0 => Some(size - at % size),
            _ => None,
        });
        match step.flatten() {
            Some(n) if n > 0 => at += n,
            _ => return Some(at),
        }
    }
    None
}

/// True when the record at the start of `b` (its view `v`) ends with a
/// property CRC (its shape: name, separator, ten digits, separator).
fn ends_with_prop_crc(b: &[u8], v: &RecordView) -> bool {
    b.get(..v.total_size)
        .is_some_and(|rec| has_prop_crc_trailer(rec, &v.properties))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::message::{
        body_crc, encode_blank, encode_v1, record_len, MessageSpec, StoreStamp,
    };
    use std::net::SocketAddr;

    const SEG: u64 = 4096;

    /// A log of one or more segments in memory.
    struct Mem(Vec<u8>);

    impl LogBytes for Mem {
        fn segment(&self) -> u64 {
            SEG
        }
        fn first_offset(&self) -> Option<u64> {
            Some(0)
        }
        fn peek<R>(&self, phy: u64, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
            let p = phy as usize;
            let end = (p / SEG as usize + 1) * SEG as usize;
            self.0.get(p..end.min(self.0.len())).map(f)
        }
    }

    /// Appends a record (with the property when `prop`); its end.
    fn put(log: &mut Vec<u8>, prop: bool) -> u64 {
        let spec = MessageSpec::new("T", 0, &b"body"[..]).born_at(1);
        let store: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let plen = if prop { PROP_CRC_LEN } else { 0 };
        let len = record_len(4, 1, plen, &spec.born_host, &store);
        let at = log.len();
        if (at % SEG as usize) + len + 8 > SEG as usize {
            let rest = SEG as usize - at % SEG as usize;
            let mut b = vec![0u8; rest];
            encode_blank(&mut b, rest);
            log.extend_from_slice(&b);
        }
        let at = log.len();
        let mut buf = vec![0u8; len];
        let stamp = StoreStamp {
            sys_flag: 0,
            store_host: &store,
            queue_offset: 0,
            phy_offset: at as i64,
            store_timestamp: 2,
            prop_crc: prop,
        };
        encode_v1(&mut buf, &spec, body_crc(b"body"), &stamp);
        log.extend_from_slice(&buf);
        log.len() as u64
    }

    #[test]
    fn ranges_end_where_the_bytes_stop_showing_the_property() {
        let mut v = Vec::new();
        let ends: Vec<u64> = (0..60).map(|i| put(&mut v, i < 40)).collect();
        let (ours, theirs) = (ends[39], ends[50]);
        v.resize(v.len() + 64, 0);
        let log = Mem(v);
        // The truth, with a valid mark: taken at its word (no walk).
        let ok = vouch_prop_crc_ranges(&log, &[(0, ours)], true);
        assert_eq!((ok.ranges, ok.stale_from), (vec![(0, ours)], None));
        // The same with a stale mark: walked, nothing to cut.
        let walked = vouch_prop_crc_ranges(&log, &[(0, ours)], false);
        assert_eq!(walked.ranges, vec![(0, ours)]);
        // The end no longer holds the property: cut at the first record
        // written without it.
        let cut = vouch_prop_crc_ranges(&log, &[(0, theirs)], true);
        assert_eq!((cut.ranges, cut.stale_from), (vec![(0, ours)], Some(ours)));
        // Its end still holds a record of ours, but the mark is stale.
        let stale = vouch_prop_crc_ranges(&log, &[(0, ends[20]), (ends[30], ends[45])], false);
        assert_eq!(stale.ranges, vec![(0, ends[20]), (ends[30], ours)]);
        // A start that is not a record of ours.
        let start = vouch_prop_crc_ranges(&log, &[(ends[45], ends[50])], true);
        assert_eq!((start.ranges, start.stale_from), (vec![], Some(ends[45])));
        // A range past the log's end stops at its end.
        let past = vouch_prop_crc_ranges(&log, &[(0, ours), (ends[59], ends[59] + 40)], true);
        assert_eq!(past.ranges, vec![(0, ours)]);
        // Nothing listed, nothing to check.
        assert_eq!(vouch_prop_crc_ranges(&log, &[], false).ranges, vec![]);
    }
}
