//! The V1 record encoder: [`MessageSpec`] (what a producer gives), record
//! lengths, hosts, the record itself (see the layout in `mod.rs`) and the
//! 8-byte end-of-file blank `[int size][int CBD43194]`.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use super::{
    body_crc, crc_hasher, prop_crc_digits, prop_crc_extra, sysflag, BLANK_MAGIC, FIXED_OVERHEAD_V4,
    MAGIC_V1, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, PROP_CRC_LEN, PROP_CRC_NAME,
};

/// Born host of a message that gives none (127.0.0.1, port 0).
pub const DEFAULT_BORN_HOST: SocketAddr =
    SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 1)), 0);

/// Length in bytes of one encoded host (`ip` + 4-byte port).
#[inline]
pub fn host_len(addr: &SocketAddr) -> usize {
    match addr.ip() {
        IpAddr::V4(_) => 8,
        IpAddr::V6(_) => 20,
    }
}

pub(super) fn put_host(buf: &mut [u8], addr: &SocketAddr) -> usize {
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

/// Total length of the V1 record of `m` written with STOREHOST `store_host`,
/// with the property CRC when `prop_crc`.
#[inline]
pub fn spec_record_len(m: &MessageSpec<'_>, store_host: &SocketAddr, prop_crc: bool) -> usize {
    let props_len = written_props_len(&m.properties, prop_crc);
    record_len(
        m.body.len(),
        m.topic.len(),
        props_len,
        &m.born_host,
        store_host,
    )
}

/// Length of properties `props` as written: with the property CRC when `prop_crc`.
#[inline]
fn written_props_len(props: &[u8], prop_crc: bool) -> usize {
    if prop_crc {
        props.len() + prop_crc_extra(props)
    } else {
        props.len()
    }
}

/// A message as the producer hands it to the store (before positions are known).
#[derive(Debug, Clone)]
pub struct MessageSpec<'a> {
    /// Topic.
    pub topic: Cow<'a, str>,
    /// Queue id.
    pub queue_id: i32,
    /// The producer's flag.
    pub flag: i32,
    /// SYSFLAG as given (the host bits are set when the record is written).
    pub sys_flag: i32,
    /// Born time (ms since the epoch).
    pub born_timestamp: i64,
    /// Born host.
    pub born_host: SocketAddr,
    /// Times the message was consumed again.
    pub reconsume_times: i32,
    /// PREPARED TRANSACTION OFFSET.
    pub prepared_transaction_offset: i64,
    /// Body.
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
    /// use _native::MessageSpec;
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
            born_host: DEFAULT_BORN_HOST,
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

/// What the store writes into a record besides the message: the fields a
/// put fills in (RocketMQ's append callback), and whether the record gets
/// the property CRC.
#[derive(Debug, Clone, Copy)]
pub struct StoreStamp<'h> {
    /// SYSFLAG: the message's, with the IPv6 bits of its hosts.
    pub sys_flag: i32,
    /// STOREHOSTADDRESS.
    pub store_host: &'h SocketAddr,
    /// QUEUEOFFSET.
    pub queue_offset: i64,
    /// PHYSICALOFFSET: where the record starts in the CommitLog.
    pub phy_offset: i64,
    /// STORETIMESTAMP (ms since the epoch).
    pub store_timestamp: i64,
    /// Whether to append 5.x's property CRC (docs/format.md "Property CRC").
    pub prop_crc: bool,
}

/// Writes a V1 record for `m` with body CRC `crc` into `dst[..len]` where
/// `len` was computed by [`record_len`].
#[inline]
pub fn encode_v1(dst: &mut [u8], m: &MessageSpec<'_>, crc: i32, stamp: &StoreStamp<'_>) -> usize {
    encode_v1_with(dst, m, Some(crc), stamp)
}

/// [`encode_v1`] with the body CRC computed over the bytes as copied into
/// `dst`, so the record is self-consistent even if the source buffer was
/// changed by another thread while it was read (a `bytearray` body).
#[inline]
pub fn encode_v1_crc_of_copy(dst: &mut [u8], m: &MessageSpec<'_>, stamp: &StoreStamp<'_>) -> usize {
    encode_v1_with(dst, m, None, stamp)
}

#[inline(always)]
fn encode_v1_with(
    dst: &mut [u8],
    m: &MessageSpec<'_>,
    crc: Option<i32>,
    stamp: &StoreStamp<'_>,
) -> usize {
    let StoreStamp {
        sys_flag,
        store_host,
        queue_offset,
        phy_offset,
        store_timestamp,
        prop_crc,
    } = *stamp;
    let body = &m.body[..];
    let topic = m.topic.as_bytes();
    let props = &m.properties[..];
    let props_len = written_props_len(props, prop_crc);
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
        let mut h = crc_hasher();
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
