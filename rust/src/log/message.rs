//! CommitLog record codec (SPEC §1).
//!
//! ```text
//!  off  size  field                     off  size  field
//!    0    4   TOTALSIZE                  48  8|20  BORNHOST (ip + port int)
//!    4    4   MAGICCODE  DAA320A7 (V1)    ..    8   STORETIMESTAMP
//!    8    4   BODYCRC (crc32 & 0x7FFFFFFF) ..  8|20  STOREHOSTADDRESS
//!   12    4   QUEUEID                     ..    4   RECONSUMETIMES
//!   16    4   FLAG                        ..    8   PREPARED TX OFFSET
//!   20    8   QUEUEOFFSET                 ..  4+n   BODYLEN + BODY
//!   28    8   PHYSICALOFFSET              ..  1+t   TOPICLEN (V1; 2 bytes in V2) + TOPIC
//!   36    4   SYSFLAG                     ..  2+p   PROPLEN + PROPERTIES
//!   40    8   BORNTIMESTAMP
//! ```
//! All integers big-endian. We write V1 and read V1 and V2. A blank record
//! (`[int size][int CBD43194]`) marks the unused tail of a full file.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Magic of a V1 record (1-byte topic length).
pub const MAGIC_V1: i32 = 0xDAA3_20A7_u32 as i32;
/// Magic of a V2 record (2-byte topic length, RocketMQ 5.x).
pub const MAGIC_V2: i32 = 0xDAA3_20AB_u32 as i32;
/// Magic of the end-of-file blank.
pub const BLANK_MAGIC: i32 = 0xCBD4_3194_u32 as i32;
/// Bytes every full file keeps for the end-of-file blank header.
pub const END_FILE_MIN_BLANK_LENGTH: usize = 8;
/// Fixed record overhead with IPv4 born and store hosts.
pub const FIXED_OVERHEAD_V4: usize = 91;
/// Largest properties string in bytes (signed short length).
pub const MAX_PROPERTIES_LEN: usize = i16::MAX as usize;
/// Largest V1 topic in bytes (signed byte length).
pub const MAX_TOPIC_LEN: usize = i8::MAX as usize;
/// Separator between a property name and its value.
pub const NAME_VALUE_SEPARATOR: u8 = 1;
/// Separator between two properties.
pub const PROPERTY_SEPARATOR: u8 = 2;
/// Topic that delayed messages are parked in.
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";

/// Field positions shared by every record.
pub mod pos {
    pub const TOTAL_SIZE: usize = 0;
    pub const MAGIC: usize = 4;
    pub const BODY_CRC: usize = 8;
    pub const QUEUE_ID: usize = 12;
    pub const FLAG: usize = 16;
    pub const QUEUE_OFFSET: usize = 20;
    pub const PHYSICAL_OFFSET: usize = 28;
    pub const SYS_FLAG: usize = 36;
    pub const BORN_TIMESTAMP: usize = 40;
    pub const BORN_HOST: usize = 48;
}

/// `MessageSysFlag` bits (SPEC §1.6).
pub mod sysflag {
    pub const COMPRESSED: i32 = 0x1;
    pub const MULTI_TAGS: i32 = 0x2;
    pub const TRANSACTION_TYPE_MASK: i32 = 0xC;
    pub const TRANSACTION_NOT: i32 = 0x0;
    pub const TRANSACTION_PREPARED: i32 = 0x4;
    pub const TRANSACTION_COMMIT: i32 = 0x8;
    pub const TRANSACTION_ROLLBACK: i32 = 0xC;
    pub const BORNHOST_V6: i32 = 0x10;
    pub const STOREHOST_V6: i32 = 0x20;
    pub const COMPRESSION_TYPE_MASK: i32 = 0x700;
}

/// Well-known property names used by the store.
pub mod props {
    pub const KEYS: &str = "KEYS";
    pub const TAGS: &str = "TAGS";
    pub const WAIT: &str = "WAIT";
    pub const DELAY: &str = "DELAY";
    pub const REAL_TOPIC: &str = "REAL_TOPIC";
    pub const REAL_QID: &str = "REAL_QID";
    pub const UNIQ_KEY: &str = "UNIQ_KEY";
}

/// Java's `String.hashCode` over UTF-16 code units.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

/// CQ tagsCode of a TAGS string: the Java hash sign-extended; 0 when absent.
pub fn tags_code(tags: Option<&str>) -> i64 {
    match tags {
        Some(t) if !t.is_empty() => java_string_hash(t) as i64,
        _ => 0,
    }
}

/// `crc32(body) & 0x7FFFFFFF`, as RocketMQ's `UtilAll.crc32`.
#[inline]
pub fn body_crc(body: &[u8]) -> i32 {
    (crc32fast::hash(body) & 0x7FFF_FFFF) as i32
}

/// True if `topic` is a legal topic name: 1..=127 bytes of `[%|a-zA-Z0-9_-]`.
#[inline]
pub fn is_valid_topic(topic: &str) -> bool {
    !topic.is_empty()
        && topic.len() <= MAX_TOPIC_LEN
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'))
}

/// Why `topic` fails the put rule of [`is_valid_topic`], or `None` if it is
/// legal. The sentence names the field and the rule (RocketMQ's
/// `TopicValidator`: dots, spaces and slashes are refused).
pub fn topic_problem(topic: &str) -> Option<String> {
    if is_valid_topic(topic) {
        return None;
    }
    if topic.is_empty() {
        return Some("topic must not be empty".into());
    }
    if topic.len() > MAX_TOPIC_LEN {
        return Some(format!(
            "topic is {} bytes long; at most {MAX_TOPIC_LEN} are allowed",
            topic.len()
        ));
    }
    let bad = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '%' | '|' | '_' | '-')))
        .unwrap_or('?');
    Some(format!(
        "topic {topic:?} contains {bad:?}; a topic may use only letters, digits and % | _ -"
    ))
}

/// Why `sys_flag` may not be given by a producer, or `None` if it may.
///
/// Accepted: the compressed bit (0x1; the body must then inflate, checked
/// by the put), multi-tags (0x2) and the transaction type (0x4, 0x8, 0xC).
/// Refused: the host-format bits 0x10 and 0x20, which the store derives from
/// `born_host` and the store host, and every bit from 0x40 up (compression
/// types and bits RocketMQ 4.9.8 does not define).
pub fn sys_flag_problem(sys_flag: i32) -> Option<String> {
    if sys_flag & sysflag::BORNHOST_V6 != 0 {
        return Some(
            "sys_flag bit 0x10 (born host is IPv6) is set by the store from born_host; \
             leave it 0"
                .into(),
        );
    }
    if sys_flag & sysflag::STOREHOST_V6 != 0 {
        return Some(
            "sys_flag bit 0x20 (store host is IPv6) is set by the store from its store_host; \
             leave it 0"
                .into(),
        );
    }
    let high = (sys_flag as u32) & !0x3F;
    if high != 0 {
        let bit = 1u32 << high.trailing_zeros();
        return Some(format!(
            "sys_flag bit {bit:#x} is not accepted; a producer may set only 0x1 (compressed), \
             0x2 (multi-tags) and the transaction type bits 0x4/0x8"
        ));
    }
    None
}

/// Why a body flagged as compressed (sysFlag bit 0x1) cannot be stored, or
/// `None` if it inflates as a zlib stream (what readers will do with it).
/// The inflated bytes are discarded as they are produced.
pub fn compressed_body_problem(body: &[u8]) -> Option<String> {
    let mut dec = flate2::read::ZlibDecoder::new(body);
    match std::io::copy(&mut dec, &mut std::io::sink()) {
        Ok(_) if dec.total_in() as usize == body.len() => None,
        Ok(_) => Some(format!(
            "sys_flag bit 0x1 (compressed) is set but the body has {} bytes after its zlib \
             stream",
            body.len() - dec.total_in() as usize
        )),
        Err(e) => Some(format!(
            "sys_flag bit 0x1 (compressed) is set but the body does not inflate as zlib ({e})"
        )),
    }
}

/// Length in bytes of one encoded host (`ip` + 4-byte port).
#[inline]
pub fn host_len(addr: &SocketAddr) -> usize {
    match addr.ip() {
        IpAddr::V4(_) => 8,
        IpAddr::V6(_) => 20,
    }
}

fn put_host(buf: &mut [u8], addr: &SocketAddr) -> usize {
    match addr.ip() {
        IpAddr::V4(ip) => {
            buf[..4].copy_from_slice(&ip.octets());
            buf[4..8].copy_from_slice(&(addr.port() as i32).to_be_bytes());
            8
        }
        IpAddr::V6(ip) => {
            buf[..16].copy_from_slice(&ip.octets());
            buf[16..20].copy_from_slice(&(addr.port() as i32).to_be_bytes());
            20
        }
    }
}

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
/// masked CRC (31 bits).
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline]
pub fn parse_prop_crc_digits(d: &[u8]) -> Option<u32> {
    if d.len() != 10 {
        return None;
    }
    let mut v = 0u64;
    for &c in d.iter().rev() {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u64::from(c - b'0');
    }
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
    (crc32fast::hash(head) & 0x7FFF_FFFF) == value
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

/// Total record length of a V1 record.
#[inline]
pub fn record_len(
    body: usize,
    topic: usize,
    props: usize,
    born: &SocketAddr,
    store: &SocketAddr,
) -> usize {
    FIXED_OVERHEAD_V4 - 16 + host_len(born) + host_len(store) + body + topic + props
}

/// The offset message id: store ip ‖ port ‖ physical offset, upper-case hex.
pub fn offset_msg_id(store_host: &SocketAddr, phy_offset: i64) -> String {
    let mut raw = [0u8; 28];
    let n = put_host(&mut raw, store_host);
    raw[n..n + 8].copy_from_slice(&phy_offset.to_be_bytes());
    to_hex_upper(&raw[..n + 8])
}

/// Upper-case hex of `bytes`.
pub fn to_hex_upper(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 0xF) as usize] as char);
    }
    s
}

/// Decodes an offset message id into `(store host, physical offset)`.
pub fn decode_msg_id(id: &str) -> Option<(SocketAddr, i64)> {
    if !id.is_ascii() || (id.len() != 32 && id.len() != 56) {
        return None;
    }
    let mut raw = Vec::with_capacity(id.len() / 2);
    for i in (0..id.len()).step_by(2) {
        raw.push(u8::from_str_radix(&id[i..i + 2], 16).ok()?);
    }
    let (ip, rest): (IpAddr, &[u8]) = if raw.len() == 16 {
        let o: [u8; 4] = raw[..4].try_into().ok()?;
        (IpAddr::V4(Ipv4Addr::from(o)), &raw[4..])
    } else {
        let o: [u8; 16] = raw[..16].try_into().ok()?;
        (IpAddr::V6(Ipv6Addr::from(o)), &raw[16..])
    };
    let port = i32::from_be_bytes(rest[..4].try_into().ok()?);
    let off = i64::from_be_bytes(rest[4..12].try_into().ok()?);
    Some((SocketAddr::new(ip, port as u16), off))
}

/// A message as the producer hands it to the store (before positions are known).
#[derive(Debug, Clone)]
pub struct MessageSpec<'a> {
    pub topic: Cow<'a, str>,
    pub queue_id: i32,
    pub flag: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: Cow<'a, [u8]>,
    /// Serialized properties (`k\x01v\x02k\x01v`), already validated.
    pub properties: Cow<'a, [u8]>,
}

impl<'a> MessageSpec<'a> {
    /// A plain message: `body` for `queue_id` of `topic`, with empty
    /// properties, flag, sys flag, reconsume count and prepared transaction
    /// offset 0, born at timestamp 0 on `127.0.0.1:0`. Other fields can be set
    /// with [`with_properties`](Self::with_properties),
    /// [`born_at`](Self::born_at) or struct update syntax.
    ///
    /// ```
    /// use _native::log::message::MessageSpec;
    ///
    /// let body = vec![1u8, 2, 3];
    /// let m = MessageSpec::new("TopicTest", 3, &body)
    ///     .with_properties(b"TAGS\x01t")
    ///     .born_at(1_700_000_000_000);
    /// assert_eq!(m.topic, "TopicTest");
    /// assert_eq!(m.queue_id, 3);
    /// assert_eq!(&*m.body, &[1, 2, 3]);
    /// assert_eq!(&*m.properties, b"TAGS\x01t");
    /// assert_eq!(m.born_timestamp, 1_700_000_000_000);
    /// assert_eq!((m.flag, m.sys_flag, m.reconsume_times), (0, 0, 0));
    /// assert_eq!(m.born_host, "127.0.0.1:0".parse().unwrap());
    /// ```
    #[inline]
    pub fn new(
        topic: impl Into<Cow<'a, str>>,
        queue_id: i32,
        body: impl Into<Cow<'a, [u8]>>,
    ) -> Self {
        MessageSpec {
            topic: topic.into(),
            queue_id,
            flag: 0,
            sys_flag: 0,
            born_timestamp: 0,
            born_host: SocketAddr::from(([127, 0, 0, 1], 0)),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: body.into(),
            properties: Cow::Borrowed(&[]),
        }
    }

    /// Sets the serialized properties (`k\x01v\x02k\x01v`, already validated).
    #[inline]
    #[must_use]
    pub fn with_properties(mut self, properties: impl Into<Cow<'a, [u8]>>) -> Self {
        self.properties = properties.into();
        self
    }

    /// Sets the born timestamp (milliseconds since the epoch).
    #[inline]
    #[must_use]
    pub fn born_at(mut self, born_timestamp_ms: i64) -> Self {
        self.born_timestamp = born_timestamp_ms;
        self
    }
}

impl MessageSpec<'_> {
    /// Transaction type bits of the sys flag.
    #[inline]
    pub fn transaction_type(&self) -> i32 {
        self.sys_flag & sysflag::TRANSACTION_TYPE_MASK
    }
}

/// Writes a V1 record for `m` into `dst[..len]` where `len` was computed by
/// [`record_len`]. `sys_flag` must already carry the IPv6 bits.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn encode_v1(
    dst: &mut [u8],
    m: &MessageSpec<'_>,
    sys_flag: i32,
    crc: i32,
    store_host: &SocketAddr,
    queue_offset: i64,
    phy_offset: i64,
    store_timestamp: i64,
    prop_crc: bool,
) -> usize {
    encode_v1_with(
        dst,
        m,
        sys_flag,
        Some(crc),
        store_host,
        queue_offset,
        phy_offset,
        store_timestamp,
        prop_crc,
    )
}

/// [`encode_v1`] with the body CRC computed over the bytes as copied into
/// `dst`, so the record is self-consistent even if the source buffer was
/// changed by another thread while it was read (a `bytearray` body).
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn encode_v1_crc_of_copy(
    dst: &mut [u8],
    m: &MessageSpec<'_>,
    sys_flag: i32,
    store_host: &SocketAddr,
    queue_offset: i64,
    phy_offset: i64,
    store_timestamp: i64,
    prop_crc: bool,
) -> usize {
    encode_v1_with(
        dst,
        m,
        sys_flag,
        None,
        store_host,
        queue_offset,
        phy_offset,
        store_timestamp,
        prop_crc,
    )
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn encode_v1_with(
    dst: &mut [u8],
    m: &MessageSpec<'_>,
    sys_flag: i32,
    crc: Option<i32>,
    store_host: &SocketAddr,
    queue_offset: i64,
    phy_offset: i64,
    store_timestamp: i64,
    prop_crc: bool,
) -> usize {
    let body = &m.body[..];
    let topic = m.topic.as_bytes();
    let props = &m.properties[..];
    let props_len = if prop_crc {
        props.len() + prop_crc_extra(props)
    } else {
        props.len()
    };
    let total = record_len(body.len(), topic.len(), props_len, &m.born_host, store_host);
    let d = &mut dst[..total];
    // TOTALSIZE is written last (below), after a release fence, so a reader
    // in another process that sees a non-zero size sees the whole record.
    d[4..8].copy_from_slice(&MAGIC_V1.to_be_bytes());
    if let Some(crc) = crc {
        d[8..12].copy_from_slice(&crc.to_be_bytes());
    }
    d[12..16].copy_from_slice(&m.queue_id.to_be_bytes());
    d[16..20].copy_from_slice(&m.flag.to_be_bytes());
    d[20..28].copy_from_slice(&queue_offset.to_be_bytes());
    d[28..36].copy_from_slice(&phy_offset.to_be_bytes());
    d[36..40].copy_from_slice(&sys_flag.to_be_bytes());
    d[40..48].copy_from_slice(&m.born_timestamp.to_be_bytes());
    let mut p = 48 + put_host(&mut d[48..], &m.born_host);
    d[p..p + 8].copy_from_slice(&store_timestamp.to_be_bytes());
    p += 8;
    p += put_host(&mut d[p..], store_host);
    d[p..p + 4].copy_from_slice(&m.reconsume_times.to_be_bytes());
    p += 4;
    d[p..p + 8].copy_from_slice(&m.prepared_transaction_offset.to_be_bytes());
    p += 8;
    d[p..p + 4].copy_from_slice(&(body.len() as i32).to_be_bytes());
    p += 4;
    d[p..p + body.len()].copy_from_slice(body);
    if crc.is_none() {
        let c = body_crc(&d[p..p + body.len()]);
        d[8..12].copy_from_slice(&c.to_be_bytes());
    }
    p += body.len();
    d[p] = topic.len() as u8;
    p += 1;
    d[p..p + topic.len()].copy_from_slice(topic);
    p += topic.len();
    d[p..p + 2].copy_from_slice(&(props_len as i16).to_be_bytes());
    p += 2;
    d[p..p + props.len()].copy_from_slice(props);
    p += props.len();
    if prop_crc {
        // 5.x's property CRC: over the first TOTALSIZE - 20 bytes, with
        // TOTALSIZE as it will be (it is written last), then the 20 bytes.
        if props_len - props.len() > PROP_CRC_LEN {
            d[p] = PROPERTY_SEPARATOR;
            p += 1;
        }
        let mut h = crc32fast::Hasher::new();
        h.update(&(total as i32).to_be_bytes());
        h.update(&d[4..p]);
        let crc = h.finalize() & 0x7FFF_FFFF;
        d[p..p + 8].copy_from_slice(PROP_CRC_NAME);
        d[p + 8] = NAME_VALUE_SEPARATOR;
        d[p + 9..p + 19].copy_from_slice(&prop_crc_digits(crc));
        d[p + 19] = PROPERTY_SEPARATOR;
        p += PROP_CRC_LEN;
    }
    debug_assert_eq!(p, total);
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
    d[0..4].copy_from_slice(&(total as i32).to_be_bytes());
    total
}

/// Writes the 8-byte end-of-file blank header; the file's remaining
/// `max_blank` bytes are considered used.
#[inline]
pub fn encode_blank(dst: &mut [u8], max_blank: usize) {
    dst[0..4].copy_from_slice(&(max_blank as i32).to_be_bytes());
    dst[4..8].copy_from_slice(&BLANK_MAGIC.to_be_bytes());
}

// The decoders below read bytes from disk: every access is checked
// (`clippy::indexing_slicing` and `unwrap_used` are denied on them), so a
// damaged record can end a scan but never panic. A field read is one bounds
// check (a fixed-length chunk), inlined; `None` means "does not fit".
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline(always)]
fn be_i32(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(*b.get(at..)?.first_chunk::<4>()?))
}

#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline(always)]
fn be_i64(b: &[u8], at: usize) -> Option<i64> {
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
fn read_host(b: &[u8], at: usize, v6: bool) -> Option<SocketAddr> {
    let at_ip = b.get(at..)?;
    Some(if v6 {
        let o = *at_ip.first_chunk::<16>()?;
        SocketAddr::new(IpAddr::V6(Ipv6Addr::from(o)), be_i32(b, at + 16)? as u16)
    } else {
        let o = *at_ip.first_chunk::<4>()?;
        SocketAddr::new(IpAddr::V4(Ipv4Addr::from(o)), be_i32(b, at + 4)? as u16)
    })
}

/// What a decoder reports when a field it was told fits does not (the frame
/// checks make this unreachable; a damaged record is then ended, not read).
const FIELD_OUTSIDE_RECORD: NotARecord = NotARecord::End("field outside the record");

/// A validated record inside a buffer: fixed fields decoded, variable fields as ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView {
    pub total_size: usize,
    pub magic: i32,
    pub body_crc: i32,
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: std::ops::Range<usize>,
    pub topic: std::ops::Range<usize>,
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
    End { reason: &'static str },
}

/// Where the fields of the record at the start of a buffer lie: what
/// [`parse_record`] checks (magic, sizes, field lengths), before any field
/// is decoded.
#[derive(Debug, Clone)]
struct Frame {
    total: usize,
    magic: i32,
    sys_flag: i32,
    born_v6: bool,
    store_v6: bool,
    /// Offset of the store timestamp (after the born host).
    store_ts_at: usize,
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
    let born_v6 = sys_flag & sysflag::BORNHOST_V6 != 0;
    let store_v6 = sys_flag & sysflag::STOREHOST_V6 != 0;
    let born_len = if born_v6 { 20 } else { 8 };
    let store_len = if store_v6 { 20 } else { 8 };
    let fixed = FIXED_OVERHEAD_V4 - 16 + born_len + store_len + usize::from(magic == MAGIC_V2);
    if total < fixed {
        return Err(NotARecord::End("record shorter than its fixed fields"));
    }
    let store_ts_at = pos::BORN_HOST + born_len;
    // store timestamp, store host, reconsume times, prepared offset.
    let mut p = store_ts_at + 8 + store_len + 4 + 8;
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
        born_v6,
        store_v6,
        store_ts_at,
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
/// the body CRC matches (SPEC "A record is valid").
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline]
pub fn parse_record(buf: &[u8], check_crc: bool) -> Parsed {
    let f = match parse_frame(buf) {
        Ok(f) => f,
        Err(n) => return n.into(),
    };
    let Some(b) = buf.get(..f.total) else {
        return FIELD_OUTSIDE_RECORD.into();
    };
    if check_crc && !frame_crc_ok(b, &f) {
        return Parsed::End {
            reason: "body CRC mismatch",
        };
    }
    match decode_fields(b, f) {
        Some(v) => Parsed::Record(v),
        None => FIELD_OUTSIDE_RECORD.into(),
    }
}

/// The fixed fields of a record whose frame [`parse_frame`] accepted.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline(always)]
fn decode_fields(b: &[u8], f: Frame) -> Option<RecordView> {
    let born_host = read_host(b, pos::BORN_HOST, f.born_v6)?;
    let mut p = f.store_ts_at;
    let store_timestamp = be_i64(b, p)?;
    p += 8;
    let store_host = read_host(b, p, f.store_v6)?;
    p += if f.store_v6 { 20 } else { 8 };
    let reconsume_times = be_i32(b, p)?;
    p += 4;
    let prepared = be_i64(b, p)?;
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

/// The size of the record at the start of `buf`, stored at CommitLog offset
/// `phy`, if [`parse_valid_record`] accepts it (the same rules, in the same
/// order): `Err` says what `parse_valid_record` would return instead.
/// Decodes only the fields the rules read, for scans that need nothing but
/// where each record ends (recovery's scan of the CommitLog).
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline]
pub fn valid_record_size(
    buf: &[u8],
    phy: u64,
    check_crc: bool,
) -> std::result::Result<usize, NotARecord> {
    let f = parse_frame(buf)?;
    let b = buf.get(..f.total).ok_or(FIELD_OUTSIDE_RECORD)?;
    if check_crc && !frame_crc_ok(b, &f) {
        return Err(NotARecord::End("body CRC mismatch"));
    }
    let rule = record_rule_violation_at(
        b,
        f.magic,
        be_i64(b, pos::PHYSICAL_OFFSET).ok_or(FIELD_OUTSIDE_RECORD)?,
        be_i32(b, pos::QUEUE_ID).ok_or(FIELD_OUTSIDE_RECORD)?,
        be_i64(b, pos::QUEUE_OFFSET).ok_or(FIELD_OUTSIDE_RECORD)?,
        &f.topic,
        &f.properties,
        phy,
    );
    match rule {
        Some(reason) => Err(NotARecord::End(reason)),
        None => Ok(f.total),
    }
}

/// Longest topic a V2 record can carry (signed 2-byte length).
pub const MAX_TOPIC_LEN_V2: usize = i16::MAX as usize;

/// The topic *read* rule (what a stored record may carry; laxer than the
/// put rule of [`is_valid_topic`]): non-empty UTF-8 of at most `max_len`
/// bytes (127 for V1 records, 32,767 for V2), without `/` or NUL, and not
/// `.` or `..` — so it is always a single, harmless directory name.
#[inline]
pub fn is_readable_topic_bytes(topic: &[u8], max_len: usize) -> bool {
    !topic.is_empty()
        && topic.len() <= max_len
        && topic != b"."
        && topic != b".."
        && !topic.iter().any(|&b| b == b'/' || b == 0)
        && (topic.is_ascii() || std::str::from_utf8(topic).is_ok())
}

/// [`is_readable_topic_bytes`] with the V2 length limit: every topic some
/// stored record may carry, the rule the read APIs accept.
#[inline]
pub fn is_readable_topic(topic: &str) -> bool {
    is_readable_topic_bytes(topic.as_bytes(), MAX_TOPIC_LEN_V2)
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

/// The record-validity rule of recovery and dispatch (SPEC "A record is
/// valid", docs/format.md "Record validity"): the record at the start of
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
    record_rule_violation_at(
        buf,
        v.magic,
        v.physical_offset,
        v.queue_id,
        v.queue_offset,
        &v.topic,
        &v.properties,
        phy,
    )
}

/// [`record_rule_violation`] on the fields it reads.
#[allow(clippy::too_many_arguments)]
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline(always)]
fn record_rule_violation_at(
    buf: &[u8],
    magic: i32,
    physical_offset: i64,
    queue_id: i32,
    queue_offset: i64,
    topic: &std::ops::Range<usize>,
    properties: &std::ops::Range<usize>,
    phy: u64,
) -> Option<&'static str> {
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

/// Iterates `(name, value)` pairs of a serialized properties string, skipping
/// malformed segments exactly as RocketMQ's parser does, and the property
/// CRC `__CRC32#` (record metadata the store checks, never a message's
/// property: readers do not show it and copies do not carry it over).
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
pub fn iter_properties(props: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    props.split(|&b| b == PROPERTY_SEPARATOR).filter_map(|seg| {
        if seg.len() < 3 {
            return None;
        }
        let i = seg.iter().position(|&b| b == NAME_VALUE_SEPARATOR)?;
        if i == 0 || i >= seg.len() - 1 {
            return None;
        }
        let name = seg.get(..i)?;
        if name == PROP_CRC_NAME {
            return None;
        }
        Some((name, seg.get(i + 1..)?))
    })
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

/// True when serialized properties hold a `__CRC32#` property anywhere
/// (a producer's, or a stale copy): the store drops it before writing.
#[inline]
pub fn has_prop_crc(props: &[u8]) -> bool {
    props.len() >= PROP_CRC_NAME.len()
        && props
            .windows(PROP_CRC_NAME.len())
            .any(|w| w == PROP_CRC_NAME)
}

/// The value of property `name`, if present.
pub fn find_property<'p>(props: &'p [u8], name: &str) -> Option<&'p [u8]> {
    iter_properties(props)
        .find(|(k, _)| *k == name.as_bytes())
        .map(|(_, v)| v)
}

/// Why the property `name=value` cannot be stored, or `None`.
pub fn property_problem(name: &str, value: &str) -> Option<String> {
    let sep = |s: &str| {
        s.bytes()
            .find(|&b| b == NAME_VALUE_SEPARATOR || b == PROPERTY_SEPARATOR)
    };
    if name.is_empty() {
        return Some("property names must not be empty".into());
    }
    if name.as_bytes() == PROP_CRC_NAME {
        return Some(
            "property name \"__CRC32#\" is the store's own (the record's property CRC); \
             it cannot be set"
                .into(),
        );
    }
    if let Some(b) = sep(name) {
        return Some(format!(
            "property name {name:?} contains the control character {b:#04x}, which separates \
             properties in a record"
        ));
    }
    if value.is_empty() {
        return Some(format!("property {name:?} has an empty value"));
    }
    if let Some(b) = sep(value) {
        return Some(format!(
            "property {name:?} has a value containing the control character {b:#04x}, which \
             separates properties in a record"
        ));
    }
    None
}

/// Why a property could not be added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropertyError {
    /// Name or value empty, or containing a separator byte.
    Illegal(String),
}

/// Builds a serialized properties string, validating names and values.
#[derive(Debug, Default, Clone)]
pub struct PropertiesBuilder {
    buf: Vec<u8>,
    /// Where the current message's properties start (several messages'
    /// properties can be built back to back in one buffer).
    start: usize,
}

impl PropertiesBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_capacity(n: usize) -> Self {
        Self {
            buf: Vec::with_capacity(n),
            start: 0,
        }
    }

    /// Starts the next message's properties after what was built so far.
    pub fn next_message(&mut self) {
        self.start = self.buf.len();
    }

    /// Bytes built so far (every message's).
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Drops the current message's properties.
    pub fn discard_message(&mut self) {
        self.buf.truncate(self.start);
    }

    /// Appends one key to the current message's `KEYS` property (`started`
    /// tracks whether the property was begun). Empty keys are skipped; a key
    /// with a space or a separator byte is illegal.
    pub fn push_key(&mut self, k: &str, started: &mut bool) -> Result<(), PropertyError> {
        if k.is_empty() {
            return Ok(());
        }
        if k.contains(' ') {
            return Err(PropertyError::Illegal(format!(
                "key {k:?} contains a space; keys are stored space-separated, so a key \
                 cannot hold one"
            )));
        }
        if k.bytes()
            .any(|b| b == NAME_VALUE_SEPARATOR || b == PROPERTY_SEPARATOR)
        {
            return Err(PropertyError::Illegal(format!(
                "key {k:?} contains a control character 0x01 or 0x02, which separates \
                 properties in a record"
            )));
        }
        if *started {
            self.buf.push(b' ');
        } else {
            if self.buf.len() > self.start {
                self.buf.push(PROPERTY_SEPARATOR);
            }
            self.buf.extend_from_slice(props::KEYS.as_bytes());
            self.buf.push(NAME_VALUE_SEPARATOR);
            *started = true;
        }
        self.buf.extend_from_slice(k.as_bytes());
        Ok(())
    }

    /// Appends `name=value`; both must be non-empty and free of 0x01/0x02
    /// (the record's separators). The error names the property and the rule.
    pub fn push(&mut self, name: &str, value: &str) -> Result<(), PropertyError> {
        if let Some(why) = property_problem(name, value) {
            return Err(PropertyError::Illegal(why));
        }
        if self.buf.len() > self.start {
            self.buf.push(PROPERTY_SEPARATOR);
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(NAME_VALUE_SEPARATOR);
        self.buf.extend_from_slice(value.as_bytes());
        Ok(())
    }

    /// Appends raw, already-validated serialized properties.
    pub fn push_serialized(&mut self, raw: &[u8]) {
        if raw.is_empty() {
            return;
        }
        if self.buf.len() > self.start {
            self.buf.push(PROPERTY_SEPARATOR);
        }
        self.buf.extend_from_slice(raw);
    }

    /// Appends a pair taken from an already-parsed properties string.
    pub fn push_pair_raw(&mut self, name: &[u8], value: &[u8]) {
        if self.buf.len() > self.start {
            self.buf.push(PROPERTY_SEPARATOR);
        }
        self.buf.extend_from_slice(name);
        self.buf.push(NAME_VALUE_SEPARATOR);
        self.buf.extend_from_slice(value);
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// Parses a delay-level string such as `"1s 5s 10s 30s 1m 2h 1d"` into
/// milliseconds per level (index 0 = level 1); `None` when it breaks the
/// grammar of [`delay_level_table`].
pub fn parse_delay_levels(s: &str) -> Option<Vec<i64>> {
    delay_level_table(s).ok()
}

/// The delay-level grammar (RocketMQ's `messageDelayLevel`): levels
/// separated by whitespace, each a positive decimal number (ASCII digits)
/// followed by `s`, `m`, `h` or `d`, at least one level, each at most
/// `i64::MAX` ms. The one definition: `StoreConfig` validates with it too.
/// `Err` says which level is wrong and why.
pub fn delay_level_table(s: &str) -> std::result::Result<Vec<i64>, String> {
    let mut out = Vec::new();
    for tok in s.split_whitespace() {
        let bad =
            || format!("bad level {tok:?}: expected a positive number followed by s, m, h or d");
        let (num, unit) = tok.split_at(tok.len() - tok.chars().last().map_or(0, char::len_utf8));
        let mult: i64 = match unit {
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let n: i64 = match num.parse() {
            Ok(n) => n,
            // All digits, so only too many of them.
            Err(_) => return Err(format!("level {tok:?} is too long")),
        };
        if n == 0 {
            return Err(bad());
        }
        out.push(
            n.checked_mul(mult)
                .ok_or_else(|| format!("level {tok:?} is too long"))?,
        );
    }
    if out.is_empty() {
        return Err("must name at least one level".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_hash_matches_known_values() {
        assert_eq!(java_string_hash("TagA"), 2598919);
        assert_eq!(java_string_hash("TAG1"), 2567159);
        assert_eq!(java_string_hash("中文"), 646394);
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(tags_code(Some("polygenelubricants")), -2147483648i64);
        // a character outside the BMP hashes as its two UTF-16 surrogates
        assert_eq!(java_string_hash("😀"), 0xD83Di32 * 31 + 0xDE00);
        assert_eq!(tags_code(None), 0);
        assert_eq!(tags_code(Some("")), 0);
        assert_eq!(java_string_hash("Aa"), java_string_hash("BB"));
    }

    #[test]
    fn topic_validation() {
        assert!(is_valid_topic("TopicTest"));
        assert!(is_valid_topic("%RETRY%g-1|x_y"));
        assert!(!is_valid_topic(""));
        assert!(!is_valid_topic("../x"));
        assert!(!is_valid_topic("a/b"));
        assert!(!is_valid_topic("a b"));
        assert!(is_valid_topic(&"a".repeat(127)));
        assert!(!is_valid_topic(&"a".repeat(128)));
    }

    #[test]
    fn topic_read_rule() {
        assert!(is_readable_topic("TopicTest"));
        assert!(is_readable_topic("a b"));
        assert!(is_readable_topic("中文"));
        assert!(is_readable_topic(&"t".repeat(200)));
        assert!(!is_readable_topic(""));
        assert!(!is_readable_topic("."));
        assert!(!is_readable_topic(".."));
        assert!(!is_readable_topic("../x"));
        assert!(!is_readable_topic("a/b"));
        assert!(!is_readable_topic("a\0b"));
        assert!(is_readable_topic_bytes(&[b'a'; 127], MAX_TOPIC_LEN));
        assert!(!is_readable_topic_bytes(&[b'a'; 128], MAX_TOPIC_LEN));
        assert!(is_readable_topic_bytes(&[b'a'; 32767], MAX_TOPIC_LEN_V2));
        assert!(!is_readable_topic_bytes(&[0xff, 0xfe], MAX_TOPIC_LEN_V2));
    }

    #[test]
    fn properties_must_be_pairs() {
        assert!(properties_well_formed(b""));
        assert!(properties_well_formed(b"A\x011"));
        assert!(properties_well_formed(b"A\x011\x02B\x01two"));
        assert!(properties_well_formed(
            b"A\x01\x02__CRC32#\x011234567890\x02"
        ));
        assert!(!properties_well_formed(&[0u8; 11]));
        assert!(!properties_well_formed(b"A"));
        assert!(!properties_well_formed(b"\x01x"));
        assert!(!properties_well_formed(b"A\x011\x02\x02B\x012"));
        assert!(!properties_well_formed(b"\x02"));
        assert!(!properties_well_formed(b"A\0\x011"));
    }

    fn record_at(phy: i64, topic: &str, queue_id: i32, props: &[u8]) -> Vec<u8> {
        let spec = MessageSpec {
            born_host: "127.0.0.1:1".parse().unwrap(),
            ..MessageSpec::new(topic, queue_id, b"body")
                .with_properties(props)
                .born_at(1)
        };
        let store: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let len = record_len(4, topic.len(), props.len(), &spec.born_host, &store);
        let mut buf = vec![0u8; len];
        encode_v1(
            &mut buf,
            &spec,
            0,
            body_crc(b"body"),
            &store,
            0,
            phy,
            2,
            false,
        );
        buf
    }

    #[test]
    fn record_validity_rule() {
        let ok = record_at(500, "T", 1, b"K\x01v");
        assert!(matches!(
            parse_valid_record(&ok, 500, true),
            Parsed::Record(_)
        ));
        assert!(matches!(
            parse_valid_record(&ok, 501, true),
            Parsed::End { .. }
        ));
        let bad_qid = record_at(500, "T", -5, b"");
        assert!(matches!(parse_record(&bad_qid, true), Parsed::Record(_)));
        assert!(matches!(
            parse_valid_record(&bad_qid, 500, true),
            Parsed::End { .. }
        ));
        let bad_props = record_at(500, "T", 1, &[0u8; 5]);
        assert!(matches!(
            parse_valid_record(&bad_props, 500, true),
            Parsed::End { .. }
        ));
        let bad_topic = record_at(500, "a/b", 1, b"");
        assert!(matches!(
            parse_valid_record(&bad_topic, 500, true),
            Parsed::End { .. }
        ));
        // Garbage, zeros, then the record: found where it starts.
        let mut data = vec![0x55u8; 37];
        data.extend_from_slice(&[0u8; 1000]);
        let at = data.len();
        data.extend_from_slice(&record_at(10_000 + at as i64, "T", 1, b""));
        data.extend_from_slice(&[0u8; 100]);
        assert_eq!(find_next_valid_record(&data, 1, 10_000, true), Some(at));
        assert_eq!(find_next_valid_record(&data, 1, 10_001, true), None);
    }

    /// `valid_record_size` (recovery's scan) judges every record exactly as
    /// `parse_valid_record` does: same acceptance, same size, same reason.
    #[test]
    fn valid_record_size_agrees_with_parse_valid_record() {
        let mut records = vec![
            record_at(500, "T", 1, b"K\x01v"),
            record_at(500, "T", -5, b""),
            record_at(500, "T", 1, &[0u8; 5]),
            record_at(500, "a/b", 1, b""),
            record_at(500, "tópico", 1, b"A\x011\x02"),
        ];
        // A record with IPv6 hosts, and one with a V2 magic (2-byte topic length).
        let mut v6 = record_at(500, "T", 1, b"");
        let spec = MessageSpec {
            born_host: "[::1]:1".parse().unwrap(),
            ..MessageSpec::new("T6", 2, b"body").born_at(1)
        };
        let store: SocketAddr = "[::2]:2".parse().unwrap();
        v6.resize(record_len(4, 2, 0, &spec.born_host, &store), 0);
        let flags = sysflag::BORNHOST_V6 | sysflag::STOREHOST_V6;
        encode_v1(
            &mut v6,
            &spec,
            flags,
            body_crc(b"body"),
            &store,
            0,
            500,
            2,
            false,
        );
        assert!(matches!(
            parse_valid_record(&v6, 500, true),
            Parsed::Record(_)
        ));
        records.push(v6);
        let mut v2 = record_at(500, "T", 1, b"");
        v2[4..8].copy_from_slice(&MAGIC_V2.to_be_bytes());
        records.push(v2);
        let check = |buf: &[u8], phy: u64, crc: bool| {
            let want = match parse_valid_record(buf, phy, crc) {
                Parsed::Record(v) => Ok(v.total_size),
                other => Err(other),
            };
            let got = valid_record_size(buf, phy, crc).map_err(Parsed::from);
            assert_eq!(got, want, "{buf:?} at {phy}");
        };
        let mut accepted = 0;
        for rec in &records {
            for crc in [true, false] {
                check(rec, 500, crc);
                check(rec, 501, crc);
                accepted += usize::from(valid_record_size(rec, 500, crc).is_ok());
                for k in 0..rec.len() {
                    check(&rec[..k], 500, crc);
                    for x in [0x01u8, 0x80, 0xff] {
                        let mut m = rec.clone();
                        m[k] ^= x;
                        check(&m, 500, crc);
                    }
                }
            }
        }
        assert_eq!(
            accepted,
            2 * 3,
            "ok, non-ASCII topic and IPv6 records are valid"
        );
    }

    /// The digits by hand: least significant first, zero-padded after.
    #[test]
    fn prop_crc_digits_are_least_significant_first() {
        assert_eq!(&prop_crc_digits(1_234_567_890), b"0987654321");
        assert_eq!(&prop_crc_digits(7), b"7000000000");
        assert_eq!(&prop_crc_digits(0), b"0000000000");
        assert_eq!(&prop_crc_digits(0x7FFF_FFFF), b"7463847412");
        assert_eq!(parse_prop_crc_digits(b"0987654321"), Some(1_234_567_890));
        assert_eq!(parse_prop_crc_digits(b"7000000000"), Some(7));
        assert_eq!(parse_prop_crc_digits(b"8463847412"), None, "over 31 bits");
        assert_eq!(parse_prop_crc_digits(b"09876543x1"), None);
        assert_eq!(parse_prop_crc_digits(b"098765432"), None);
    }

    fn record_with_crc(props: &[u8]) -> Vec<u8> {
        let spec = MessageSpec::new("T", 1, &b"body"[..])
            .with_properties(props)
            .born_at(1);
        let store: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let plen = props.len() + prop_crc_extra(props);
        let len = record_len(4, 1, plen, &spec.born_host, &store);
        let mut buf = vec![0u8; len];
        let n = encode_v1(
            &mut buf,
            &spec,
            0,
            body_crc(b"body"),
            &store,
            3,
            500,
            2,
            true,
        );
        assert_eq!(n, len);
        buf
    }

    #[test]
    fn prop_crc_layout_and_check() {
        for (props, before) in [
            (&b""[..], &b""[..]),
            (b"A\x011", b"A\x011\x02"),
            (b"A\x011\x02", b"A\x011\x02"),
        ] {
            let rec = record_with_crc(props);
            let v = match parse_valid_record(&rec, 500, true) {
                Parsed::Record(v) => v,
                other => panic!("{other:?}"),
            };
            let p = &rec[v.properties.clone()];
            assert_eq!(
                p.len(),
                before.len() + PROP_CRC_LEN,
                "length includes the 20 bytes"
            );
            assert_eq!(&p[..before.len()], before);
            let t = &p[before.len()..];
            assert_eq!(&t[..9], b"__CRC32#\x01");
            assert_eq!(t[19], PROPERTY_SEPARATOR);
            let want = crc32fast::hash(&rec[..rec.len() - 20]) & 0x7FFF_FFFF;
            assert_eq!(t[9..19], prop_crc_digits(want));
            assert!(prop_crc_ok(&rec, &v.properties));
            // Readers do not see it.
            assert!(iter_properties(p).all(|(k, _)| k != b"__CRC32#"));
            // Any 1..4 bytes changed anywhere but the TOTALSIZE is caught.
            for at in 4..rec.len() {
                for n in 1..=4usize.min(rec.len() - at) {
                    let mut m = rec.clone();
                    for b in &mut m[at..at + n] {
                        *b ^= 0x5A;
                    }
                    let ok = match parse_record(&m, false) {
                        Parsed::Record(v) => prop_crc_ok(&m, &v.properties),
                        _ => false,
                    };
                    assert!(!ok, "change at {at}+{n} not caught");
                }
            }
        }
        // Without the property, or a short one: not ok.
        let plain = record_at(500, "T", 1, b"K\x01v");
        let Parsed::Record(v) = parse_record(&plain, true) else {
            panic!()
        };
        assert!(!prop_crc_ok(&plain, &v.properties));
    }

    #[test]
    fn msg_id_round_trip() {
        let h: SocketAddr = "192.168.1.2:10911".parse().unwrap();
        let id = offset_msg_id(&h, 1234);
        assert_eq!(id, "C0A8010200002A9F00000000000004D2");
        assert_eq!(decode_msg_id(&id), Some((h, 1234)));
        let h6: SocketAddr = "[2001:db8::1]:10911".parse().unwrap();
        let id6 = offset_msg_id(&h6, 99);
        assert_eq!(id6.len(), 56);
        assert_eq!(decode_msg_id(&id6), Some((h6, 99)));
        assert_eq!(decode_msg_id("zz"), None);
    }

    #[test]
    fn properties_parse_like_rocketmq() {
        let raw = b"A\x011\x02\x02B\x01\x02\x01x\x02C\x01three";
        let v: Vec<_> = iter_properties(raw).collect();
        assert_eq!(v, vec![(&b"A"[..], &b"1"[..]), (&b"C"[..], &b"three"[..])]);
        let mut b = PropertiesBuilder::new();
        b.push("K", "v").unwrap();
        b.push("L", "w w").unwrap();
        assert_eq!(b.finish(), b"K\x01v\x02L\x01w w");
        assert!(PropertiesBuilder::new().push("", "v").is_err());
        assert!(PropertiesBuilder::new().push("k", "a\x02b").is_err());
    }

    #[test]
    fn delay_levels() {
        let v = parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
            .unwrap();
        assert_eq!(v.len(), 18);
        assert_eq!(v[0], 1000);
        assert_eq!(v[17], 7_200_000);
        assert_eq!(parse_delay_levels("1x"), None);
        assert_eq!(parse_delay_levels(""), None);
        assert_eq!(parse_delay_levels("0s"), None);
        // ASCII digits only: no sign, no other scripts' digits.
        assert_eq!(parse_delay_levels("+5s"), None);
        assert_eq!(parse_delay_levels("\u{0663}s"), None);
        assert_eq!(parse_delay_levels("5"), None);
        assert_eq!(parse_delay_levels("s"), None);
        assert_eq!(parse_delay_levels("5é"), None);
        assert_eq!(
            parse_delay_levels("2d").as_deref(),
            Some(&[172_800_000][..])
        );
        assert_eq!(
            delay_level_table("1s 99999999999999999999s"),
            Err("level \"99999999999999999999s\" is too long".to_owned())
        );
        assert_eq!(
            delay_level_table("9999999999999999d"),
            Err("level \"9999999999999999d\" is too long".to_owned())
        );
        assert_eq!(
            delay_level_table(" "),
            Err("must name at least one level".to_owned())
        );
    }
}
