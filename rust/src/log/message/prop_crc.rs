//! RocketMQ 5.x's property CRC `__CRC32#` (docs/format.md §6.1): the last
//! 20 bytes of a record's properties, the CRC32 of everything before them.

use super::{NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR};

/// Why a record in a range written with the property CRC is damaged.
pub const PROP_CRC_MISMATCH: &str = "property CRC missing or mismatched";

/// Name of the property CRC (RocketMQ 5.x `MessageConst.PROPERTY_CRC32`).
pub const PROP_CRC_NAME: &[u8; 8] = b"__CRC32#";
/// Bytes the property CRC takes at the end of the properties: the name,
/// `\x01`, ten digits and `\x02` (5.x `CommitLog.CRC32_RESERVED_LEN`).
pub const PROP_CRC_LEN: usize = PROP_CRC_NAME.len() + 1 + 10 + 1;

/// Bytes the property CRC adds to properties `props`: the 20 bytes, and a
/// `\x02` before them when other properties precede it and do not already
/// end with one (docs/format.md "Property CRC").
#[inline]
pub fn prop_crc_extra(props: &[u8]) -> usize {
    PROP_CRC_LEN + usize::from(props.last().is_some_and(|&b| b != PROPERTY_SEPARATOR))
}

/// The ten ASCII digits of a property CRC: `crc` in decimal, least
/// significant digit first (5.x `MessageDecoder.createCrc32`).
#[inline]
pub fn prop_crc_digits(crc: u32) -> [u8; 10] {
    let mut d = [b'0'; 10];
    let mut v = crc;
    for c in &mut d {
        *c = b'0' + (v % 10) as u8;
        v /= 10;
    }
    d
}

/// The value of ten property-CRC digits (least significant first), or
/// `None` when one is not an ASCII digit or the value does not fit a
/// masked CRC (31 bits). Every read of a record written with the property
/// CRC parses them, so the first eight are parsed as one word: checked to
/// be digits (each byte's high nibble 3, and its low nibble at most 9: 6
/// more stays below 16), then combined in pairs, fours and eights
/// (`d0 + 10 d1`, `p0 + 100 p1`, `q0 + 10^4 q1`).
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline]
pub fn parse_prop_crc_digits(d: &[u8]) -> Option<u32> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let d: &[u8; 10] = d.try_into().ok()?;
    let (low, _) = d.split_first_chunk::<8>()?;
    let w = u64::from_le_bytes(*low);
    if w & (0xF0 * ONES) != 0x30 * ONES || (w + 6 * ONES) & (0xF0 * ONES) != 0x30 * ONES {
        return None;
    }
    let v = w - 0x30 * ONES;
    let pairs = (v & 0x00FF_00FF_00FF_00FF) + ((v >> 8) & 0x00FF_00FF_00FF_00FF) * 10;
    let fours = (pairs & 0x0000_FFFF_0000_FFFF) + ((pairs >> 16) & 0x0000_FFFF_0000_FFFF) * 100;
    let eight = (fours & 0xFFFF_FFFF) + (fours >> 32) * 10_000;
    let [.., d8, d9] = *d;
    if !d8.is_ascii_digit() || !d9.is_ascii_digit() {
        return None;
    }
    let v = eight + u64::from(d8 - b'0') * 100_000_000 + u64::from(d9 - b'0') * 1_000_000_000;
    u32::try_from(v).ok().filter(|&v| v <= 0x7FFF_FFFF)
}

/// True when the record `rec` (exactly its TOTALSIZE bytes, its properties
/// at `props`) ends with a property CRC that matches: the last 20 bytes of
/// the properties are `__CRC32#\x01`, ten digits and `\x02`, a `\x02`
/// separates them from any property before, and the digits are the CRC32
/// (masked with 0x7FFFFFFF) of the record's first TOTALSIZE - 20 bytes.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline]
pub fn prop_crc_ok(rec: &[u8], props: &std::ops::Range<usize>) -> bool {
    let total = rec.len();
    if props.end != total || props.end < props.start || props.len() < PROP_CRC_LEN {
        return false;
    }
    let cut = total - PROP_CRC_LEN;
    let (Some(head), Some(trailer)) = (rec.get(..cut), rec.get(cut..)) else {
        return false;
    };
    let Some((name, rest)) = trailer.split_first_chunk::<8>() else {
        return false;
    };
    if name != PROP_CRC_NAME
        || rest.first() != Some(&NAME_VALUE_SEPARATOR)
        || rest.last() != Some(&PROPERTY_SEPARATOR)
    {
        return false;
    }
    if props.len() > PROP_CRC_LEN && head.last() != Some(&PROPERTY_SEPARATOR) {
        return false;
    }
    let Some(value) = rest.get(1..11).and_then(parse_prop_crc_digits) else {
        return false;
    };
    (super::crc32(head) & 0x7FFF_FFFF) == value
}

/// True when `t` (20 bytes) has the shape of a property CRC: the name,
/// `0x01`, ten ASCII digits and `0x02` (whatever value the digits hold).
#[inline]
pub fn is_prop_crc_trailer(t: &[u8]) -> bool {
    t.len() == PROP_CRC_LEN
        && t.starts_with(PROP_CRC_NAME)
        && t.get(PROP_CRC_NAME.len()) == Some(&NAME_VALUE_SEPARATOR)
        && t.last() == Some(&PROPERTY_SEPARATOR)
        && t.get(PROP_CRC_NAME.len() + 1..PROP_CRC_LEN - 1)
            .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
}

/// True when the record `rec` (its properties at `props`) ends with
/// something shaped like a property CRC, matching or not: it was written
/// by a writer that appends the property.
#[inline]
pub fn has_prop_crc_trailer(rec: &[u8], props: &std::ops::Range<usize>) -> bool {
    props.end == rec.len()
        && props.len() >= PROP_CRC_LEN
        && rec
            .get(rec.len() - PROP_CRC_LEN..)
            .is_some_and(is_prop_crc_trailer)
}

/// `props` without any `__CRC32#` property; every other byte as it was.
pub fn strip_prop_crc(props: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(props.len());
    let mut first = true;
    for seg in props.split(|&b| b == PROPERTY_SEPARATOR) {
        if seg.starts_with(PROP_CRC_NAME)
            && seg.get(PROP_CRC_NAME.len()) == Some(&NAME_VALUE_SEPARATOR)
        {
            continue;
        }
        if !first {
            out.push(PROPERTY_SEPARATOR);
        }
        first = false;
        out.extend_from_slice(seg);
    }
    out
}
