//! The record decoders: every read of bytes from disk is checked (a damaged
//! record ends a scan but never panics), the validity rule a recovery scan
//! and every read apply, and the search for the next valid record after
//! damage.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{
    body_crc, is_readable_topic_bytes, pos, prop_crc_ok, sysflag, BLANK_MAGIC, FIXED_OVERHEAD_V4,
    MAGIC_V1, MAGIC_V2, MAX_TOPIC_LEN, MAX_TOPIC_LEN_V2, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR,
    PROP_CRC_MISMATCH,
};

// The decoders below read bytes from disk: every access is checked
// (`clippy::indexing_slicing` and `unwrap_used` are denied on them), so a
// damaged record can end a scan but never panic. A field read is one bounds
// check (a fixed-length chunk), inlined; `None` means "does not fit".
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline(always)]
pub(super) fn be_i32(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(*b.get(at..)?.first_chunk::<4>()?))
}

#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline(always)]
pub(super) fn be_i64(b: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_be_bytes(*b.get(at..)?.first_chunk::<8>()?))
}

#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline(always)]
fn be_i16(b: &[u8], at: usize) -> Option<i16> {
    Some(i16::from_be_bytes(*b.get(at..)?.first_chunk::<2>()?))
}

/// Reads a host (`ip` + port int) at `at`.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline(always)]
pub(super) fn read_host(b: &[u8], at: usize, v6: bool) -> Option<SocketAddr> {
    let at_ip = b.get(at..)?;
    Some(if v6 {
        let o = *at_ip.first_chunk::<16>()?;
        SocketAddr::new(IpAddr::V6(Ipv6Addr::from(o)), be_i32(b, at + 16)? as u16)
    } else {
        let o = *at_ip.first_chunk::<4>()?;
        SocketAddr::new(IpAddr::V4(Ipv4Addr::from(o)), be_i32(b, at + 4)? as u16)
    })
}

/// Where the fields between BORNHOST and BODYLEN lie: they move with the
/// IP versions of the two hosts (SYSFLAG bits `BORNHOST_V6`,
/// `STOREHOST_V6`: 8 bytes for an IPv4 host, 20 for an IPv6 one).
#[derive(Debug, Clone, Copy)]
pub(super) struct TailLayout {
    /// BORNHOST is IPv6.
    pub born_v6: bool,
    /// STOREHOSTADDRESS is IPv6.
    pub store_v6: bool,
    /// Offset of STORETIMESTAMP.
    pub store_ts_at: usize,
    /// Offset of STOREHOSTADDRESS.
    pub store_host_at: usize,
    /// Offset of RECONSUMETIMES.
    pub reconsume_at: usize,
    /// Offset of PREPARED TRANSACTION OFFSET.
    pub prepared_at: usize,
    /// Offset of BODYLEN.
    pub body_len_at: usize,
}

impl TailLayout {
    /// The layout of a record whose SYSFLAG is `sys_flag`.
    #[inline(always)]
    pub(super) fn of(sys_flag: i32) -> Self {
        let born_v6 = sys_flag & sysflag::BORNHOST_V6 != 0;
        let store_v6 = sys_flag & sysflag::STOREHOST_V6 != 0;
        let store_ts_at = pos::BORN_HOST + if born_v6 { 20 } else { 8 };
        let store_host_at = store_ts_at + 8;
        let reconsume_at = store_host_at + if store_v6 { 20 } else { 8 };
        Self {
            born_v6,
            store_v6,
            store_ts_at,
            store_host_at,
            reconsume_at,
            prepared_at: reconsume_at + 4,
            body_len_at: reconsume_at + 12,
        }
    }
}

/// What a decoder reports when a field it was told fits does not (the frame
/// checks make this unreachable; a damaged record is then ended, not read).
const FIELD_OUTSIDE_RECORD: NotARecord = NotARecord::End("field outside the record");

/// A validated record inside a buffer: fixed fields decoded, variable fields as ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView {
    /// TOTALSIZE: the record's length in bytes.
    pub total_size: usize,
    /// MAGICCODE (V1 or V2).
    pub magic: i32,
    /// BODYCRC as stored.
    pub body_crc: i32,
    /// QUEUEID.
    pub queue_id: i32,
    /// FLAG (the producer's).
    pub flag: i32,
    /// QUEUEOFFSET: the message's offset in its queue.
    pub queue_offset: i64,
    /// PHYSICALOFFSET: the record's CommitLog offset.
    pub physical_offset: i64,
    /// SYSFLAG (see [`sysflag`](super::sysflag)).
    pub sys_flag: i32,
    /// BORNTIMESTAMP (ms since the epoch).
    pub born_timestamp: i64,
    /// BORNHOST.
    pub born_host: SocketAddr,
    /// STORETIMESTAMP (ms since the epoch).
    pub store_timestamp: i64,
    /// STOREHOSTADDRESS.
    pub store_host: SocketAddr,
    /// RECONSUMETIMES.
    pub reconsume_times: i32,
    /// PREPARED TRANSACTION OFFSET.
    pub prepared_transaction_offset: i64,
    /// Where the body lies in the record's bytes.
    pub body: std::ops::Range<usize>,
    /// Where the topic lies in the record's bytes.
    pub topic: std::ops::Range<usize>,
    /// Where the properties lie in the record's bytes.
    pub properties: std::ops::Range<usize>,
}

/// What lies at a position of a CommitLog file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// A valid record.
    Record(RecordView),
    /// End-of-file blank: the rest of this file is unused.
    Blank,
    /// No record here: zeros, garbage or a torn record. `reason` says which.
    End {
        /// Which of them, in a few words.
        reason: &'static str,
    },
}

/// Where the fields of the record at the start of a buffer lie: what
/// [`parse_record`] checks (magic, sizes, field lengths), before any field
/// is decoded.
#[derive(Debug, Clone)]
struct Frame {
    total: usize,
    magic: i32,
    sys_flag: i32,
    /// Where the fields after the born host lie.
    tail: TailLayout,
    body: std::ops::Range<usize>,
    topic: std::ops::Range<usize>,
    properties: std::ops::Range<usize>,
}

/// What lies at a position instead of a valid record: [`Parsed`] without
/// its record (small enough to return by value in a hot loop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotARecord {
    /// End-of-file blank.
    Blank,
    /// Zeros, garbage or a torn record, and why.
    End(&'static str),
}

impl From<NotARecord> for Parsed {
    fn from(n: NotARecord) -> Self {
        match n {
            NotARecord::Blank => Parsed::Blank,
            NotARecord::End(reason) => Parsed::End { reason },
        }
    }
}

/// The structural checks of [`parse_record`].
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline(always)]
fn parse_frame(buf: &[u8]) -> std::result::Result<Frame, NotARecord> {
    const SHORT: NotARecord = NotARecord::End("fewer than 8 bytes left");
    let total = be_i32(buf, 0).ok_or(SHORT)?;
    let magic = be_i32(buf, 4).ok_or(SHORT)?;
    if magic == BLANK_MAGIC {
        return Err(NotARecord::Blank);
    }
    if magic != MAGIC_V1 && magic != MAGIC_V2 {
        return Err(NotARecord::End("no record magic"));
    }
    if total <= 0 || total as usize > buf.len() {
        return Err(NotARecord::End("record size outside the readable data"));
    }
    let total = total as usize;
    let b = buf.get(..total).ok_or(FIELD_OUTSIDE_RECORD)?;
    if total < FIXED_OVERHEAD_V4 {
        return Err(NotARecord::End("record shorter than its fixed fields"));
    }
    let sys_flag = be_i32(b, pos::SYS_FLAG).ok_or(FIELD_OUTSIDE_RECORD)?;
    let tail = TailLayout::of(sys_flag);
    let host_len = |v6: bool| if v6 { 20 } else { 8 };
    let fixed = FIXED_OVERHEAD_V4 - 16
        + host_len(tail.born_v6)
        + host_len(tail.store_v6)
        + usize::from(magic == MAGIC_V2);
    if total < fixed {
        return Err(NotARecord::End("record shorter than its fixed fields"));
    }
    let mut p = tail.body_len_at;
    let body_len = be_i32(b, p).ok_or(FIELD_OUTSIDE_RECORD)?;
    p += 4;
    if body_len < 0 || p + body_len as usize + 3 > total {
        return Err(NotARecord::End("body length does not fit the record"));
    }
    let body = p..p + body_len as usize;
    p = body.end;
    let topic_len = if magic == MAGIC_V1 {
        let l = *b.get(p).ok_or(FIELD_OUTSIDE_RECORD)? as i8;
        p += 1;
        l as i32
    } else {
        let l = be_i16(b, p).ok_or(FIELD_OUTSIDE_RECORD)?;
        p += 2;
        l as i32
    };
    if topic_len < 0 || p + topic_len as usize + 2 > total {
        return Err(NotARecord::End("topic length does not fit the record"));
    }
    let topic = p..p + topic_len as usize;
    p = topic.end;
    let props_len = be_i16(b, p).ok_or(FIELD_OUTSIDE_RECORD)?;
    p += 2;
    if props_len < 0 || p + props_len as usize != total {
        return Err(NotARecord::End(
            "record size differs from the sum of its fields",
        ));
    }
    Ok(Frame {
        total,
        magic,
        sys_flag,
        tail,
        body,
        topic,
        properties: p..total,
    })
}

/// The body CRC check of [`parse_record`] on a frame.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline(always)]
fn frame_crc_ok(b: &[u8], f: &Frame) -> bool {
    match (b.get(f.body.clone()), be_i32(b, pos::BODY_CRC)) {
        (Some(body), Some(stored)) => body_crc(body) == stored,
        _ => false,
    }
}

/// Parses the record at the start of `buf` (`buf` ends where readable data
/// ends). A record is valid only if its magic is V1/V2, its total size equals
/// the sum of its field lengths, it lies inside `buf`, and (with `check_crc`)
/// the body CRC matches (docs/format.md §3.3).
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline]
pub fn parse_record(buf: &[u8], check_crc: bool) -> Parsed {
    let f = match parse_checked_frame(buf, check_crc) {
        Ok(f) => f,
        Err(n) => return n.into(),
    };
    match buf.get(..f.total).and_then(|b| decode_fields(b, f)) {
        Some(v) => Parsed::Record(v),
        None => FIELD_OUTSIDE_RECORD.into(),
    }
}

/// [`parse_record`]'s checks without decoding the fixed fields: the frame
/// of the record at the start of `buf` (its size, where its variable fields
/// lie), or what lies there instead. The fields are read from the record's
/// bytes when asked for ([`RecordRef`](super::RecordRef)), or all at once
/// ([`RecordFrame::view`]).
#[inline]
pub fn parse_record_frame(
    buf: &[u8],
    check_crc: bool,
) -> std::result::Result<RecordFrame, NotARecord> {
    parse_checked_frame(buf, check_crc).map(|f| RecordFrame {
        total: f.total as u32,
        magic: f.magic,
        sys_flag: f.sys_flag,
        body: Span::of(&f.body),
        topic: Span::of(&f.topic),
        properties: Span::of(&f.properties),
    })
}

/// [`parse_frame`], and with `check_crc` the body CRC.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline(always)]
fn parse_checked_frame(buf: &[u8], check_crc: bool) -> std::result::Result<Frame, NotARecord> {
    let f = parse_frame(buf)?;
    if check_crc && !buf.get(..f.total).is_some_and(|b| frame_crc_ok(b, &f)) {
        return Err(NotARecord::End("body CRC mismatch"));
    }
    Ok(f)
}

/// A record's frame: what [`parse_record_frame`] found (its size, magic and
/// sysFlag, where its body, topic and properties lie), small enough to
/// pass by value; records are far smaller than 4 GiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordFrame {
    total: u32,
    magic: i32,
    sys_flag: i32,
    body: Span,
    topic: Span,
    properties: Span,
}

/// A range of a record's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u32,
    end: u32,
}

impl Span {
    #[inline(always)]
    fn of(r: &std::ops::Range<usize>) -> Self {
        Self {
            start: r.start as u32,
            end: r.end as u32,
        }
    }

    #[inline(always)]
    fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

impl RecordFrame {
    /// The frame of a decoded record.
    #[inline]
    pub fn of(v: &RecordView) -> Self {
        Self {
            total: v.total_size as u32,
            magic: v.magic,
            sys_flag: v.sys_flag,
            body: Span::of(&v.body),
            topic: Span::of(&v.topic),
            properties: Span::of(&v.properties),
        }
    }

    /// TOTALSIZE: the record's length in bytes.
    #[inline]
    pub fn total_size(&self) -> usize {
        self.total as usize
    }

    /// SYSFLAG.
    #[inline]
    pub fn sys_flag(&self) -> i32 {
        self.sys_flag
    }

    /// Where the body lies in the record's bytes.
    #[inline]
    pub fn body(&self) -> std::ops::Range<usize> {
        self.body.range()
    }

    /// Where the topic lies in the record's bytes.
    #[inline]
    pub fn topic(&self) -> std::ops::Range<usize> {
        self.topic.range()
    }

    /// Where the properties lie in the record's bytes.
    #[inline]
    pub fn properties(&self) -> std::ops::Range<usize> {
        self.properties.range()
    }

    /// Every field of the record whose bytes are `rec` (this frame's
    /// record), decoded; `None` when `rec` is not that record's bytes.
    pub fn view(&self, rec: &[u8]) -> Option<RecordView> {
        if rec.len() != self.total_size() {
            return None;
        }
        let f = Frame {
            total: self.total_size(),
            magic: self.magic,
            sys_flag: self.sys_flag,
            tail: TailLayout::of(self.sys_flag),
            body: self.body(),
            topic: self.topic(),
            properties: self.properties(),
        };
        decode_fields(rec, f)
    }
}

/// The fixed fields of a record whose frame [`parse_frame`] accepted.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline(always)]
fn decode_fields(b: &[u8], f: Frame) -> Option<RecordView> {
    let t = f.tail;
    let born_host = read_host(b, pos::BORN_HOST, t.born_v6)?;
    let store_timestamp = be_i64(b, t.store_ts_at)?;
    let store_host = read_host(b, t.store_host_at, t.store_v6)?;
    let reconsume_times = be_i32(b, t.reconsume_at)?;
    let prepared = be_i64(b, t.prepared_at)?;
    Some(RecordView {
        total_size: f.total,
        magic: f.magic,
        body_crc: be_i32(b, pos::BODY_CRC)?,
        queue_id: be_i32(b, pos::QUEUE_ID)?,
        flag: be_i32(b, pos::FLAG)?,
        queue_offset: be_i64(b, pos::QUEUE_OFFSET)?,
        physical_offset: be_i64(b, pos::PHYSICAL_OFFSET)?,
        sys_flag: f.sys_flag,
        born_timestamp: be_i64(b, pos::BORN_TIMESTAMP)?,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        prepared_transaction_offset: prepared,
        body: f.body,
        topic: f.topic,
        properties: f.properties,
    })
}

/// [`valid_record_size_with`] checking the body CRC (`check_crc`) or none.
#[cfg(test)]
pub fn valid_record_size(
    buf: &[u8],
    phy: u64,
    check_crc: bool,
) -> std::result::Result<usize, NotARecord> {
    let crc = if check_crc {
        RecordCrc::Body
    } else {
        RecordCrc::None
    };
    valid_record_size_with(buf, phy, crc)
}

/// Which CRC a record check computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordCrc {
    /// None: the structural rules only.
    None,
    /// The body CRC.
    Body,
    /// The property CRC `__CRC32#` alone (a record in a range written with
    /// it): it covers every byte before it, the body and the stored body CRC
    /// among them, so a match proves the body as written and the body CRC is
    /// not computed a second time (docs/format.md "Property CRC").
    Prop,
}

/// The size of the record at the start of `buf`, stored at CommitLog offset
/// `phy`, if [`parse_valid_record`] accepts it (the same rules, in the same
/// order) with the CRC to check named: `Err` says what `parse_valid_record`
/// would return instead. Decodes only the fields the rules read, for scans
/// that need nothing but where each record ends (recovery's scan of the
/// CommitLog). With [`RecordCrc::Prop`] a missing or mismatched property
/// CRC is [`PROP_CRC_MISMATCH`].
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline]
pub fn valid_record_size_with(
    buf: &[u8],
    phy: u64,
    crc: RecordCrc,
) -> std::result::Result<usize, NotARecord> {
    let f = parse_frame(buf)?;
    let b = buf.get(..f.total).ok_or(FIELD_OUTSIDE_RECORD)?;
    match crc {
        RecordCrc::None => {}
        RecordCrc::Body if !frame_crc_ok(b, &f) => {
            return Err(NotARecord::End("body CRC mismatch"));
        }
        RecordCrc::Body => {}
        RecordCrc::Prop if !prop_crc_ok(b, &f.properties) => {
            return Err(NotARecord::End(PROP_CRC_MISMATCH));
        }
        RecordCrc::Prop => {}
    }
    let fields = RuleFields {
        magic: f.magic,
        physical_offset: be_i64(b, pos::PHYSICAL_OFFSET).ok_or(FIELD_OUTSIDE_RECORD)?,
        queue_id: be_i32(b, pos::QUEUE_ID).ok_or(FIELD_OUTSIDE_RECORD)?,
        queue_offset: be_i64(b, pos::QUEUE_OFFSET).ok_or(FIELD_OUTSIDE_RECORD)?,
        topic: &f.topic,
        properties: &f.properties,
    };
    let rule = record_rule_violation_at(b, &fields, phy);
    match rule {
        Some(reason) => Err(NotARecord::End(reason)),
        None => Ok(f.total),
    }
}

/// True when `props` is empty or a run of `name\x01value` pairs separated
/// by `\x02` (one trailing `\x02` allowed, as 5.x's property CRC writes it).
/// Names are non-empty and hold neither `\x01` nor NUL; values hold no
/// `\x02` (RocketMQ's parser takes everything after the first `\x01`).
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
pub fn properties_well_formed(props: &[u8]) -> bool {
    let body = match props.split_last() {
        None => return true,
        Some((&PROPERTY_SEPARATOR, rest)) => rest,
        Some(_) => props,
    };
    // One pass: a name (non-empty, no 0x01/0x02/NUL) up to its 0x01, then a
    // value up to the next 0x02.
    let mut in_name = true;
    let mut name_len = 0usize;
    for &b in body {
        if in_name {
            match b {
                NAME_VALUE_SEPARATOR if name_len > 0 => in_name = false,
                NAME_VALUE_SEPARATOR | PROPERTY_SEPARATOR | 0 => return false,
                _ => name_len += 1,
            }
        } else if b == PROPERTY_SEPARATOR {
            in_name = true;
            name_len = 0;
        }
    }
    !in_name
}

/// The record-validity rule of recovery and dispatch (docs/format.md §3.3): the record at the start of
/// `buf`, stored at CommitLog offset `phy`, is valid only if
/// [`parse_record`] accepts it (magic, sizes, CRC when `check_crc`), its
/// PHYSICALOFFSET equals `phy`, its properties are well-formed, its topic
/// passes the read rule for its version, and its queue id and queue offset
/// are not negative.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline]
pub fn parse_valid_record(buf: &[u8], phy: u64, check_crc: bool) -> Parsed {
    let parsed = parse_record(buf, check_crc);
    if let Parsed::Record(v) = &parsed {
        if let Some(reason) = record_rule_violation(buf, v, phy) {
            return Parsed::End { reason };
        }
    }
    parsed
}

/// Why a structurally valid record at `phy` breaks the record rules of
/// [`parse_valid_record`], if it does.
#[inline]
fn record_rule_violation(buf: &[u8], v: &RecordView, phy: u64) -> Option<&'static str> {
    let fields = RuleFields {
        magic: v.magic,
        physical_offset: v.physical_offset,
        queue_id: v.queue_id,
        queue_offset: v.queue_offset,
        topic: &v.topic,
        properties: &v.properties,
    };
    record_rule_violation_at(buf, &fields, phy)
}

/// The fields of a record the record rules read, from a decoded
/// [`RecordView`] or straight from a [`Frame`]'s bytes.
#[derive(Clone, Copy)]
struct RuleFields<'r> {
    magic: i32,
    physical_offset: i64,
    queue_id: i32,
    queue_offset: i64,
    topic: &'r std::ops::Range<usize>,
    properties: &'r std::ops::Range<usize>,
}

/// [`record_rule_violation`] on the fields it reads.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline(always)]
fn record_rule_violation_at(buf: &[u8], f: &RuleFields<'_>, phy: u64) -> Option<&'static str> {
    let RuleFields {
        magic,
        physical_offset,
        queue_id,
        queue_offset,
        topic,
        properties,
    } = *f;
    if physical_offset != phy as i64 {
        return Some("record carries another physical offset than its position");
    }
    if queue_id < 0 {
        return Some("negative queue id");
    }
    if queue_offset < 0 {
        return Some("negative queue offset");
    }
    let max_topic = if magic == MAGIC_V1 {
        MAX_TOPIC_LEN
    } else {
        MAX_TOPIC_LEN_V2
    };
    let Some(topic) = buf.get(topic.clone()) else {
        return Some("topic outside the record");
    };
    if !is_readable_topic_bytes(topic, max_topic) {
        return Some("illegal topic");
    }
    let Some(properties) = buf.get(properties.clone()) else {
        return Some("properties outside the record");
    };
    if !properties_well_formed(properties) {
        return Some("malformed properties");
    }
    None
}

/// Offset (from the start of `data`, at or after `from`) of the first valid
/// record (by [`parse_valid_record`], with `check_crc`) when `data` starts at
/// CommitLog offset `base`; `None` when there is none. Used to find where
/// intact data resumes after a damaged record.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
pub fn find_next_valid_record(
    data: &[u8],
    from: usize,
    base: u64,
    check_crc: bool,
) -> Option<usize> {
    let v1 = MAGIC_V1.to_be_bytes();
    let v2 = MAGIC_V2.to_be_bytes();
    const BLOCK: usize = 256;
    let mut i = from;
    while i + FIXED_OVERHEAD_V4 <= data.len() {
        // Zeroed space (the common case past the end of data) is skipped a
        // block at a time: no magic starts inside an all-zero block.
        if let Some(block) = data.get(i + 4..i + 4 + BLOCK) {
            if block.iter().fold(0u8, |a, &b| a | b) == 0 {
                i += BLOCK - 4;
                continue;
            }
        }
        let Some(at) = data.get(i..) else { break };
        let m = at.get(4..8);
        if (m == Some(&v1[..]) || m == Some(&v2[..]))
            && be_i64(at, pos::PHYSICAL_OFFSET) == Some((base + i as u64) as i64)
            && matches!(
                parse_valid_record(at, base + i as u64, check_crc),
                Parsed::Record(_)
            )
        {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// [`prop_crc_ok`] for the record at the start of `buf` (which may run on
/// past it): false when no record frame is there.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
pub fn record_prop_crc_ok(buf: &[u8]) -> bool {
    match parse_frame(buf) {
        Ok(f) => buf
            .get(..f.total)
            .is_some_and(|rec| prop_crc_ok(rec, &f.properties)),
        Err(_) => false,
    }
}
