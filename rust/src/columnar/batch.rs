//! [`BatchBuilder`]: one typed column builder per column of a [`Projection`];
//! bodies, topics and properties are copied in, so every array owns its
//! bytes. Columns the projection leaves out are not decoded (their builders
//! stay empty and are never finished).
//!
//! The builders are fields, one per column, pushed in straight-line code:
//! a row pays one branch per column. (A vector of builders chosen from the
//! column list's types, matched per column and row, cost 66 ns more per
//! row of all 17 columns, 456 -> 523 ns.) Each builder's Arrow type is the
//! column list's ([`super::columns`]): a read returns the list's schema, and
//! `tests/read/test_read_columns.py` checks every column's type against it.

use std::net::SocketAddr;
use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, Int32Builder, Int64Builder, ListBuilder, MapBuilder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_schema::{ArrowError, SchemaRef};

use crate::log::message::{iter_properties, props, sysflag, RecordRef};

use super::{keys_item, map_field_names, Column, Projection};

/// What a host column holds for a record whose host field could not be
/// read (a checked record always has one).
const NO_HOST: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

/// A string cache for hosts: most records carry the same few hosts.
#[derive(Default)]
struct HostCache {
    last: Option<(SocketAddr, String)>,
}

impl HostCache {
    #[inline]
    fn get(&mut self, a: &SocketAddr) -> &str {
        if !matches!(&self.last, Some((h, _)) if h == a) {
            self.last = Some((*a, a.to_string()));
        }
        self.last.as_ref().map(|(_, s)| s.as_str()).unwrap_or("")
    }
}

/// Builds one record batch from decoded records.
pub struct BatchBuilder {
    schema: SchemaRef,
    projection: Projection,
    store_name: Option<String>,
    topic: StringBuilder,
    queue_id: Int32Builder,
    queue_offset: Int64Builder,
    commit_log_offset: Int64Builder,
    msg_id: BinaryBuilder,
    tags: StringBuilder,
    keys: ListBuilder<StringBuilder>,
    properties: MapBuilder<StringBuilder, StringBuilder>,
    body: BinaryBuilder,
    body_crc: Int32Builder,
    flag: Int32Builder,
    sys_flag: Int32Builder,
    born_timestamp: TimestampMicrosecondBuilder,
    born_host: StringBuilder,
    store_timestamp: TimestampMicrosecondBuilder,
    store_host: StringBuilder,
    reconsume_times: Int32Builder,
    born_cache: HostCache,
    store_cache: HostCache,
    last_topic: (Vec<u8>, String),
    rows: usize,
    body_bytes: usize,
    capacity: (usize, usize),
    pairs: Vec<(usize, usize, usize, usize)>,
    properties_parsed: u64,
}

impl BatchBuilder {
    /// A builder of the columns of `projection`, sized for `rows` rows of
    /// about `bytes` body bytes; `store_name` is the `store` column's value.
    pub fn new(
        rows: usize,
        bytes: usize,
        projection: Projection,
        store_name: Option<String>,
    ) -> Self {
        let schema = projection.schema();
        // A column left out gets no room: its builder is never appended to.
        let n = |c: Column| if projection.contains(c) { rows } else { 0 };
        let ts = |c: Column| TimestampMicrosecondBuilder::with_capacity(n(c)).with_timezone("UTC");
        Self {
            schema,
            store_name,
            topic: StringBuilder::with_capacity(n(Column::Topic), n(Column::Topic) * 16),
            queue_id: Int32Builder::with_capacity(n(Column::QueueId)),
            queue_offset: Int64Builder::with_capacity(n(Column::QueueOffset)),
            commit_log_offset: Int64Builder::with_capacity(n(Column::CommitLogOffset)),
            msg_id: BinaryBuilder::with_capacity(n(Column::MsgId), n(Column::MsgId) * 32),
            tags: StringBuilder::with_capacity(n(Column::Tags), n(Column::Tags) * 4),
            keys: ListBuilder::with_capacity(StringBuilder::new(), n(Column::Keys))
                .with_field(keys_item()),
            properties: MapBuilder::with_capacity(
                Some(map_field_names()),
                StringBuilder::new(),
                StringBuilder::new(),
                n(Column::Properties),
            ),
            body: BinaryBuilder::with_capacity(
                n(Column::Body),
                if projection.contains(Column::Body) {
                    bytes
                } else {
                    0
                },
            ),
            body_crc: Int32Builder::with_capacity(n(Column::BodyCrc)),
            flag: Int32Builder::with_capacity(n(Column::Flag)),
            sys_flag: Int32Builder::with_capacity(n(Column::SysFlag)),
            born_timestamp: ts(Column::BornTimestamp),
            born_host: StringBuilder::with_capacity(n(Column::BornHost), n(Column::BornHost) * 16),
            store_timestamp: ts(Column::StoreTimestamp),
            store_host: StringBuilder::with_capacity(
                n(Column::StoreHost),
                n(Column::StoreHost) * 16,
            ),
            reconsume_times: Int32Builder::with_capacity(n(Column::ReconsumeTimes)),
            born_cache: HostCache::default(),
            store_cache: HostCache::default(),
            last_topic: (Vec::new(), String::new()),
            rows: 0,
            body_bytes: 0,
            capacity: (rows, bytes),
            pairs: Vec::new(),
            properties_parsed: 0,
            projection,
        }
    }

    /// Records whose property bytes were parsed since the last call (only
    /// reads returning `properties`, `tags` or `keys` parse them).
    pub fn take_properties_parsed(&mut self) -> u64 {
        std::mem::take(&mut self.properties_parsed)
    }

    /// Rows appended so far.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// True when no row was appended.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Body bytes appended so far.
    pub fn body_bytes(&self) -> usize {
        self.body_bytes
    }

    /// Appends the record `r`, decoding only the projection's columns (its
    /// fields are read from its bytes as each column needs them; a checked
    /// record holds every field, a field it lacked would read as 0).
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    pub fn push(&mut self, r: &RecordRef<'_>) {
        let p = self.projection.set();
        let want = |c: Column| p.contains(c);
        if want(Column::Topic) {
            let topic = r.topic();
            if self.last_topic.0 != topic {
                self.last_topic = (topic.to_vec(), String::from_utf8_lossy(topic).into_owned());
            }
            self.topic.append_value(&self.last_topic.1);
        }
        if want(Column::QueueId) {
            self.queue_id.append_value(r.queue_id().unwrap_or_default());
        }
        if want(Column::QueueOffset) {
            self.queue_offset
                .append_value(r.queue_offset().unwrap_or_default());
        }
        if want(Column::CommitLogOffset) {
            self.commit_log_offset
                .append_value(r.physical_offset().unwrap_or_default());
        }
        if want(Column::MsgId) {
            self.push_msg_id(r);
        }
        if p.needs_properties() {
            self.push_properties(r.properties());
        }
        if want(Column::Body) {
            self.push_body(r);
        }
        if want(Column::BodyCrc) {
            self.body_crc.append_value(r.body_crc().unwrap_or_default());
        }
        if want(Column::Flag) {
            self.flag.append_value(r.flag().unwrap_or_default());
        }
        if want(Column::SysFlag) {
            self.sys_flag.append_value(r.sys_flag());
        }
        if want(Column::BornTimestamp) {
            let t = r.born_timestamp().unwrap_or_default();
            self.born_timestamp.append_value(t.saturating_mul(1000));
        }
        if want(Column::BornHost) {
            let h = r.born_host().unwrap_or(NO_HOST);
            self.born_host.append_value(self.born_cache.get(&h));
        }
        if want(Column::StoreTimestamp) {
            let t = r.store_timestamp().unwrap_or_default();
            self.store_timestamp.append_value(t.saturating_mul(1000));
        }
        if want(Column::StoreHost) {
            let h = r.store_host().unwrap_or(NO_HOST);
            self.store_host.append_value(self.store_cache.get(&h));
        }
        if want(Column::ReconsumeTimes) {
            self.reconsume_times
                .append_value(r.reconsume_times().unwrap_or_default());
        }
        self.rows += 1;
    }

    /// The body, inflated when it is stored compressed.
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    fn push_body(&mut self, r: &RecordRef<'_>) {
        let stored = r.body();
        let sys_flag = r.sys_flag();
        let inflated = if sys_flag & sysflag::COMPRESSED != 0 {
            inflate(sys_flag, stored)
        } else {
            None
        };
        let body = inflated.as_deref().unwrap_or(stored);
        self.body_bytes += body.len();
        self.body.append_value(body);
    }

    /// The offset message id (store host ‖ port ‖ offset, upper-case hex),
    /// written straight into the column.
    fn push_msg_id(&mut self, r: &RecordRef<'_>) {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        let mut raw = [0u8; 28];
        let n = match r.store_host().unwrap_or(NO_HOST) {
            SocketAddr::V4(a) => {
                raw[..4].copy_from_slice(&a.ip().octets());
                raw[4..8].copy_from_slice(&(a.port() as i32).to_be_bytes());
                8
            }
            SocketAddr::V6(a) => {
                raw[..16].copy_from_slice(&a.ip().octets());
                raw[16..20].copy_from_slice(&(a.port() as i32).to_be_bytes());
                20
            }
        };
        let offset = r.physical_offset().unwrap_or_default();
        raw[n..n + 8].copy_from_slice(&offset.to_be_bytes());
        let mut hex = [0u8; 56];
        for (i, b) in raw[..n + 8].iter().enumerate() {
            hex[2 * i] = HEX[(b >> 4) as usize];
            hex[2 * i + 1] = HEX[(b & 0xF) as usize];
        }
        // ASCII by construction; the column is checked once per batch.
        self.msg_id.append_value(&hex[..2 * (n + 8)]);
    }

    /// Properties as a map (a repeated name keeps its last value, as the
    /// Python `properties` dict does), plus the `tags` and `keys` columns:
    /// those of the three the projection returns.
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    fn push_properties(&mut self, raw: &[u8]) {
        let p = self.projection.set();
        let want_map = p.contains(Column::Properties);
        let want_tags = p.contains(Column::Tags);
        let want_keys = p.contains(Column::Keys);
        if raw.is_empty() {
            // No properties: an empty map, no tags, no keys.
            if want_map {
                let _ = self.properties.append(true);
            }
            if want_tags {
                self.tags.append_null();
            }
            if want_keys {
                self.keys.append(true);
            }
            return;
        }
        self.properties_parsed += 1;
        self.pairs.clear();
        let base = raw.as_ptr() as usize;
        for (k, v) in iter_properties(raw) {
            let ks = k.as_ptr() as usize - base;
            let vs = v.as_ptr() as usize - base;
            let entry = (ks, ks + k.len(), vs, vs + v.len());
            if let Some(p) = self
                .pairs
                .iter_mut()
                .find(|p| raw.get(p.0..p.1) == raw.get(entry.0..entry.1))
            {
                *p = entry;
            } else {
                self.pairs.push(entry);
            }
        }
        let mut tags = None;
        let mut keys = None;
        for &(ks, ke, vs, ve) in &self.pairs {
            let k = raw.get(ks..ke).unwrap_or_default();
            let v = raw.get(vs..ve).unwrap_or_default();
            if want_map {
                self.properties
                    .keys()
                    .append_value(String::from_utf8_lossy(k));
                self.properties
                    .values()
                    .append_value(String::from_utf8_lossy(v));
            }
            if k == props::TAGS.as_bytes() {
                tags = Some(v);
            } else if k == props::KEYS.as_bytes() {
                keys = Some(v);
            }
        }
        if want_map {
            // Cannot fail: keys and values were appended in pairs.
            let _ = self.properties.append(true);
        }
        if want_tags {
            match tags {
                Some(t) => self.tags.append_value(String::from_utf8_lossy(t)),
                None => self.tags.append_null(),
            }
        }
        if !want_keys {
            return;
        }
        if let Some(k) = keys {
            let k = String::from_utf8_lossy(k);
            for part in k.split(' ').filter(|s| !s.is_empty()) {
                self.keys.values().append_value(part);
            }
        }
        self.keys.append(true);
    }

    /// The batch of the rows appended, from a builder used for one batch
    /// only: no buffers are made for a next one.
    pub fn into_batch(mut self) -> Result<RecordBatch, ArrowError> {
        self.capacity = (0, 0);
        self.finish()
    }

    /// The batch of the rows appended (the projection's columns, in its
    /// order); the builder is empty afterwards.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let rows = self.rows;
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(self.projection.columns().len());
        for &c in self.projection.columns() {
            let a: ArrayRef = match c {
                Column::Topic => Arc::new(self.topic.finish()),
                Column::QueueId => Arc::new(self.queue_id.finish()),
                Column::QueueOffset => Arc::new(self.queue_offset.finish()),
                Column::CommitLogOffset => Arc::new(self.commit_log_offset.finish()),
                Column::MsgId => Arc::new(StringArray::try_from_binary(self.msg_id.finish())?),
                Column::Tags => Arc::new(self.tags.finish()),
                Column::Keys => Arc::new(self.keys.finish()),
                Column::Properties => Arc::new(self.properties.finish()),
                Column::Body => Arc::new(self.body.finish()),
                Column::BodyCrc => Arc::new(self.body_crc.finish()),
                Column::Flag => Arc::new(self.flag.finish()),
                Column::SysFlag => Arc::new(self.sys_flag.finish()),
                Column::BornTimestamp => Arc::new(self.born_timestamp.finish()),
                Column::BornHost => Arc::new(self.born_host.finish()),
                Column::StoreTimestamp => Arc::new(self.store_timestamp.finish()),
                Column::StoreHost => Arc::new(self.store_host.finish()),
                Column::ReconsumeTimes => Arc::new(self.reconsume_times.finish()),
                Column::Store => {
                    let name = self.store_name.as_deref().unwrap_or_default();
                    let mut b = StringBuilder::with_capacity(rows, rows * name.len());
                    for _ in 0..rows {
                        b.append_value(name);
                    }
                    Arc::new(b.finish())
                }
            };
            cols.push(a);
        }
        // A projection of no decoded column still has its rows.
        let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(rows));
        let batch = RecordBatch::try_new_with_options(self.schema.clone(), cols, &options);
        // Start the next batch with full-size buffers (finished builders
        // restart empty and would grow by copying).
        let (r, b) = self.capacity;
        let parsed = self.properties_parsed;
        *self = BatchBuilder::new(r, b, self.projection.clone(), self.store_name.take());
        self.properties_parsed = parsed;
        batch
    }
}

/// Inflates a zlib body (compression types 0 and 3); `None` for other
/// compressions or a damaged stream, in which case the stored bytes are used.
pub(super) fn inflate(sys_flag: i32, data: &[u8]) -> Option<Vec<u8>> {
    use std::io::Read;
    let kind = (sys_flag & sysflag::COMPRESSION_TYPE_MASK) >> 8;
    if kind != 0 && kind != 3 {
        return None;
    }
    let mut out = Vec::with_capacity(data.len() * 4);
    flate2::read::ZlibDecoder::new(data)
        .read_to_end(&mut out)
        .ok()?;
    Some(out)
}
