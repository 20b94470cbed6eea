//! [`BatchBuilder`]: one column builder per column of a [`Projection`],
//! made from the column's registry type ([`ColumnType`]); bodies, topics
//! and properties are copied in, so every array owns its bytes. Columns the
//! projection leaves out have no builder and are not decoded.

use std::net::SocketAddr;
use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, Int32Builder, Int64Builder, ListBuilder, MapBuilder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, SchemaRef};

use crate::log::message::{iter_properties, props, sysflag, RecordView};

use super::{keys_item, map_field_names, Column, ColumnType, Projection};

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

/// The builder of one returned column, of its registry type.
enum ColumnBuilder {
    Utf8(StringBuilder),
    Int32(Int32Builder),
    Int64(Int64Builder),
    Binary(BinaryBuilder),
    Timestamp(TimestampMicrosecondBuilder),
    StringList(ListBuilder<StringBuilder>),
    StringMap(Box<MapBuilder<StringBuilder, StringBuilder>>),
    /// `store`: the same value in every row, written when the batch is
    /// finished.
    Store,
}

impl ColumnBuilder {
    /// A builder for `c`, sized for `rows` rows (`bytes`: of a binary
    /// column, the body).
    fn new(c: Column, rows: usize, bytes: usize) -> Self {
        if c == Column::Store {
            return ColumnBuilder::Store;
        }
        match c.spec().ty {
            ColumnType::Utf8 => ColumnBuilder::Utf8(StringBuilder::with_capacity(rows, rows * 16)),
            ColumnType::Int32 => ColumnBuilder::Int32(Int32Builder::with_capacity(rows)),
            ColumnType::Int64 => ColumnBuilder::Int64(Int64Builder::with_capacity(rows)),
            ColumnType::Binary => ColumnBuilder::Binary(BinaryBuilder::with_capacity(rows, bytes)),
            ColumnType::TimestampUtc => ColumnBuilder::Timestamp(
                TimestampMicrosecondBuilder::with_capacity(rows).with_timezone("UTC"),
            ),
            ColumnType::StringList => ColumnBuilder::StringList(
                ListBuilder::with_capacity(StringBuilder::new(), rows).with_field(keys_item()),
            ),
            ColumnType::StringMap => ColumnBuilder::StringMap(Box::new(MapBuilder::with_capacity(
                Some(map_field_names()),
                StringBuilder::new(),
                StringBuilder::new(),
                rows,
            ))),
        }
    }

    #[inline]
    fn str(&mut self, v: &str) {
        if let ColumnBuilder::Utf8(b) = self {
            b.append_value(v);
        }
    }

    #[inline]
    fn i32(&mut self, v: i32) {
        if let ColumnBuilder::Int32(b) = self {
            b.append_value(v);
        }
    }

    #[inline]
    fn i64(&mut self, v: i64) {
        if let ColumnBuilder::Int64(b) = self {
            b.append_value(v);
        }
    }

    #[inline]
    fn bytes(&mut self, v: &[u8]) {
        if let ColumnBuilder::Binary(b) = self {
            b.append_value(v);
        }
    }

    /// A time in ms, stored in µs.
    #[inline]
    fn time_ms(&mut self, ms: i64) {
        if let ColumnBuilder::Timestamp(b) = self {
            b.append_value(ms.saturating_mul(1000));
        }
    }

    /// The column's array of the rows appended (`rows` copies of
    /// `store_name` for `store`); the builder is empty afterwards.
    fn finish(&mut self, rows: usize, store_name: Option<&str>) -> ArrayRef {
        match self {
            ColumnBuilder::Utf8(b) => Arc::new(b.finish()),
            ColumnBuilder::Int32(b) => Arc::new(b.finish()),
            ColumnBuilder::Int64(b) => Arc::new(b.finish()),
            ColumnBuilder::Binary(b) => Arc::new(b.finish()),
            ColumnBuilder::Timestamp(b) => Arc::new(b.finish()),
            ColumnBuilder::StringList(b) => Arc::new(b.finish()),
            ColumnBuilder::StringMap(b) => Arc::new(b.finish()),
            ColumnBuilder::Store => {
                let name = store_name.unwrap_or_default();
                let mut b = StringBuilder::with_capacity(rows, rows * name.len());
                for _ in 0..rows {
                    b.append_value(name);
                }
                Arc::new(b.finish())
            }
        }
    }
}

/// The `TAGS` and `KEYS` values of one record's properties, as ranges of
/// its property bytes.
#[derive(Default)]
struct Found {
    tags: Option<(usize, usize)>,
    keys: Option<(usize, usize)>,
}

/// Builds one record batch from decoded records.
pub struct BatchBuilder {
    schema: SchemaRef,
    projection: Projection,
    store_name: Option<String>,
    /// One builder per returned column, in the projection's order.
    columns: Vec<ColumnBuilder>,
    born_cache: HostCache,
    store_cache: HostCache,
    last_topic: (Vec<u8>, String),
    rows: usize,
    body_bytes: usize,
    capacity: (usize, usize),
    /// A record's properties (name and value ranges, a repeated name's last
    /// value), when a returned column needs them.
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
        let columns = projection
            .columns()
            .iter()
            .map(|&c| ColumnBuilder::new(c, rows, bytes))
            .collect();
        Self {
            schema: projection.schema(),
            store_name,
            columns,
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

    /// Appends the record `v` whose bytes are `rec`, decoding only the
    /// projection's columns.
    /// (The view's ranges lie inside `rec`: the parser checked them.)
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    pub fn push(&mut self, v: &RecordView, rec: &[u8]) {
        let raw = rec.get(v.properties.clone()).unwrap_or_default();
        let found = if self.projection.needs_properties() {
            self.parse_properties(raw)
        } else {
            Found::default()
        };
        let at = |r: Option<(usize, usize)>| r.and_then(|(a, b)| raw.get(a..b));
        for (&c, b) in self.projection.columns().iter().zip(&mut self.columns) {
            match c {
                Column::Topic => {
                    let topic = rec.get(v.topic.clone()).unwrap_or_default();
                    if self.last_topic.0 != topic {
                        self.last_topic =
                            (topic.to_vec(), String::from_utf8_lossy(topic).into_owned());
                    }
                    b.str(&self.last_topic.1);
                }
                Column::QueueId => b.i32(v.queue_id),
                Column::QueueOffset => b.i64(v.queue_offset),
                Column::CommitLogOffset => b.i64(v.physical_offset),
                Column::MsgId => b.str(msg_id(v).as_str()),
                Column::Tags => match (at(found.tags), b) {
                    (Some(t), b) => b.str(&String::from_utf8_lossy(t)),
                    (None, ColumnBuilder::Utf8(b)) => b.append_null(),
                    (None, _) => {}
                },
                Column::Keys => {
                    if let ColumnBuilder::StringList(b) = b {
                        if let Some(k) = at(found.keys) {
                            let k = String::from_utf8_lossy(k);
                            for part in k.split(' ').filter(|s| !s.is_empty()) {
                                b.values().append_value(part);
                            }
                        }
                        b.append(true);
                    }
                }
                Column::Properties => {
                    if let ColumnBuilder::StringMap(b) = b {
                        for &(ks, ke, vs, ve) in &self.pairs {
                            let k = raw.get(ks..ke).unwrap_or_default();
                            let v = raw.get(vs..ve).unwrap_or_default();
                            b.keys().append_value(String::from_utf8_lossy(k));
                            b.values().append_value(String::from_utf8_lossy(v));
                        }
                        // Cannot fail: keys and values were appended in pairs.
                        let _ = b.append(true);
                    }
                }
                Column::Body => {
                    let body = body_of(v, rec);
                    self.body_bytes += body.len();
                    b.bytes(&body);
                }
                Column::BodyCrc => b.i32(v.body_crc),
                Column::Flag => b.i32(v.flag),
                Column::SysFlag => b.i32(v.sys_flag),
                Column::BornTimestamp => b.time_ms(v.born_timestamp),
                Column::BornHost => b.str(self.born_cache.get(&v.born_host)),
                Column::StoreTimestamp => b.time_ms(v.store_timestamp),
                Column::StoreHost => b.str(self.store_cache.get(&v.store_host)),
                Column::ReconsumeTimes => b.i32(v.reconsume_times),
                Column::Store => {}
            }
        }
        self.rows += 1;
    }

    /// Parses a record's properties into `pairs` (a repeated name keeps its
    /// last value, as the Python `properties` dict does) and finds `TAGS`
    /// and `KEYS`. No properties: no pairs, no tags, no keys.
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    fn parse_properties(&mut self, raw: &[u8]) -> Found {
        self.pairs.clear();
        let mut found = Found::default();
        if raw.is_empty() {
            return found;
        }
        self.properties_parsed += 1;
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
        for &(ks, ke, vs, ve) in &self.pairs {
            let k = raw.get(ks..ke).unwrap_or_default();
            if k == props::TAGS.as_bytes() {
                found.tags = Some((vs, ve));
            } else if k == props::KEYS.as_bytes() {
                found.keys = Some((vs, ve));
            }
        }
        found
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
        let name = self.store_name.as_deref();
        let cols: Vec<ArrayRef> = self
            .columns
            .iter_mut()
            .map(|b| b.finish(rows, name))
            .collect();
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

/// The body, inflated when it is stored compressed.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
fn body_of<'a>(v: &RecordView, rec: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
    let stored = rec.get(v.body.clone()).unwrap_or_default();
    if v.sys_flag & sysflag::COMPRESSED != 0 {
        if let Some(inflated) = inflate(v.sys_flag, stored) {
            return std::borrow::Cow::Owned(inflated);
        }
    }
    std::borrow::Cow::Borrowed(stored)
}

/// The offset message id (store host ‖ port ‖ offset, upper-case hex).
struct MsgId {
    hex: [u8; 56],
    len: usize,
}

impl MsgId {
    fn as_str(&self) -> &str {
        // ASCII by construction.
        self.hex
            .get(..self.len)
            .and_then(|h| std::str::from_utf8(h).ok())
            .unwrap_or_default()
    }
}

fn msg_id(v: &RecordView) -> MsgId {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut raw = [0u8; 28];
    let n = match v.store_host {
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
    raw[n..n + 8].copy_from_slice(&v.physical_offset.to_be_bytes());
    let mut hex = [0u8; 56];
    for (i, b) in raw[..n + 8].iter().enumerate() {
        hex[2 * i] = HEX[(b >> 4) as usize];
        hex[2 * i + 1] = HEX[(b & 0xF) as usize];
    }
    MsgId {
        hex,
        len: 2 * (n + 8),
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
