//! [`BatchBuilder`]: one column builder per field of [`schema`](super::schema);
//! bodies, topics and properties are copied in, so every array owns its
//! bytes.

use std::net::SocketAddr;
use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, Int32Builder, Int64Builder, ListBuilder, MapBuilder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_schema::{ArrowError, SchemaRef};

use crate::log::message::{iter_properties, props, sysflag, RecordView};

use super::{keys_item, map_field_names, schema};

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
}

impl BatchBuilder {
    /// A builder sized for `rows` rows of about `bytes` body bytes.
    pub fn new(rows: usize, bytes: usize, store_name: Option<String>) -> Self {
        let schema = schema(store_name.is_some());
        let ts = || TimestampMicrosecondBuilder::with_capacity(rows).with_timezone("UTC");
        Self {
            schema,
            store_name,
            topic: StringBuilder::with_capacity(rows, rows * 16),
            queue_id: Int32Builder::with_capacity(rows),
            queue_offset: Int64Builder::with_capacity(rows),
            commit_log_offset: Int64Builder::with_capacity(rows),
            msg_id: BinaryBuilder::with_capacity(rows, rows * 32),
            tags: StringBuilder::with_capacity(rows, rows * 4),
            keys: ListBuilder::with_capacity(StringBuilder::new(), rows).with_field(keys_item()),
            properties: MapBuilder::with_capacity(
                Some(map_field_names()),
                StringBuilder::new(),
                StringBuilder::new(),
                rows,
            ),
            body: BinaryBuilder::with_capacity(rows, bytes),
            body_crc: Int32Builder::with_capacity(rows),
            flag: Int32Builder::with_capacity(rows),
            sys_flag: Int32Builder::with_capacity(rows),
            born_timestamp: ts(),
            born_host: StringBuilder::with_capacity(rows, rows * 16),
            store_timestamp: ts(),
            store_host: StringBuilder::with_capacity(rows, rows * 16),
            reconsume_times: Int32Builder::with_capacity(rows),
            born_cache: HostCache::default(),
            store_cache: HostCache::default(),
            last_topic: (Vec::new(), String::new()),
            rows: 0,
            body_bytes: 0,
            capacity: (rows, bytes),
            pairs: Vec::new(),
        }
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

    /// Appends the record `v` whose bytes are `rec`.
    /// (The view's ranges lie inside `rec`: the parser checked them.)
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    pub fn push(&mut self, v: &RecordView, rec: &[u8]) {
        let topic = rec.get(v.topic.clone()).unwrap_or_default();
        if self.last_topic.0 != topic {
            self.last_topic = (topic.to_vec(), String::from_utf8_lossy(topic).into_owned());
        }
        self.topic.append_value(&self.last_topic.1);
        self.queue_id.append_value(v.queue_id);
        self.queue_offset.append_value(v.queue_offset);
        self.commit_log_offset.append_value(v.physical_offset);
        self.push_msg_id(v);
        self.push_properties(rec.get(v.properties.clone()).unwrap_or_default());
        let stored = rec.get(v.body.clone()).unwrap_or_default();
        let inflated = if v.sys_flag & sysflag::COMPRESSED != 0 {
            inflate(v.sys_flag, stored)
        } else {
            None
        };
        let body = inflated.as_deref().unwrap_or(stored);
        self.body_bytes += body.len();
        self.body.append_value(body);
        self.body_crc.append_value(v.body_crc);
        self.flag.append_value(v.flag);
        self.sys_flag.append_value(v.sys_flag);
        self.born_timestamp
            .append_value(v.born_timestamp.saturating_mul(1000));
        self.born_host
            .append_value(self.born_cache.get(&v.born_host));
        self.store_timestamp
            .append_value(v.store_timestamp.saturating_mul(1000));
        self.store_host
            .append_value(self.store_cache.get(&v.store_host));
        self.reconsume_times.append_value(v.reconsume_times);
        self.rows += 1;
    }

    /// The offset message id (store host ‖ port ‖ offset, upper-case hex),
    /// written straight into the column.
    fn push_msg_id(&mut self, v: &RecordView) {
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
        // ASCII by construction; the column is checked once per batch.
        self.msg_id.append_value(&hex[..2 * (n + 8)]);
    }

    /// Properties as a map (a repeated name keeps its last value, as the
    /// Python `properties` dict does), plus the `tags` and `keys` columns.
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    fn push_properties(&mut self, raw: &[u8]) {
        if raw.is_empty() {
            // No properties: an empty map, no tags, no keys.
            let _ = self.properties.append(true);
            self.tags.append_null();
            self.keys.append(true);
            return;
        }
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
            self.properties
                .keys()
                .append_value(String::from_utf8_lossy(k));
            self.properties
                .values()
                .append_value(String::from_utf8_lossy(v));
            if k == props::TAGS.as_bytes() {
                tags = Some(v);
            } else if k == props::KEYS.as_bytes() {
                keys = Some(v);
            }
        }
        // Cannot fail: keys and values were appended in pairs.
        let _ = self.properties.append(true);
        match tags {
            Some(t) => self.tags.append_value(String::from_utf8_lossy(t)),
            None => self.tags.append_null(),
        }
        if let Some(k) = keys {
            let k = String::from_utf8_lossy(k);
            for part in k.split(' ').filter(|s| !s.is_empty()) {
                self.keys.values().append_value(part);
            }
        }
        self.keys.append(true);
    }

    /// The batch of the rows appended; the builder is empty afterwards.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let rows = self.rows;
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(self.topic.finish()),
            Arc::new(self.queue_id.finish()),
            Arc::new(self.queue_offset.finish()),
            Arc::new(self.commit_log_offset.finish()),
            Arc::new(StringArray::try_from_binary(self.msg_id.finish())?),
            Arc::new(self.tags.finish()),
            Arc::new(self.keys.finish()),
            Arc::new(self.properties.finish()),
            Arc::new(self.body.finish()),
            Arc::new(self.body_crc.finish()),
            Arc::new(self.flag.finish()),
            Arc::new(self.sys_flag.finish()),
            Arc::new(self.born_timestamp.finish()),
            Arc::new(self.born_host.finish()),
            Arc::new(self.store_timestamp.finish()),
            Arc::new(self.store_host.finish()),
            Arc::new(self.reconsume_times.finish()),
        ];
        if let Some(name) = &self.store_name {
            let mut b = StringBuilder::with_capacity(rows, rows * name.len());
            for _ in 0..rows {
                b.append_value(name);
            }
            cols.push(Arc::new(b.finish()));
        }
        let batch = RecordBatch::try_new(self.schema.clone(), cols);
        // Start the next batch with full-size buffers (finished builders
        // restart empty and would grow by copying).
        let (r, b) = self.capacity;
        *self = BatchBuilder::new(r, b, self.store_name.take());
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
