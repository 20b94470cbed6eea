//! Columnar decode: a range of the store into Arrow record batches.
//!
//! ```text
//!  CommitLog segment range [from, to)          ConsumeQueue range [start, end)
//!   record | record | ... | BLANK               unit | unit | ...  --(phy, size)--> record
//!        \      |      /                              \    |    /
//!         BatchBuilder (one column builder per field, bodies copied in)
//!                         |
//!                   RecordBatch (owns every byte)
//! ```
//!
//! One call decodes a whole range; no per-row work happens outside Rust.
//! Every array owns its buffers (bodies, topics and properties are copied
//! out of the mapping), so a store that is shut down or a segment deleted by
//! retention never leaves an array pointing at unmapped memory.
//!
//! Row rules (the same for every reader of ranges):
//! - a record whose body CRC does not match is skipped and counted
//!   (`skipped_corrupt`); so is a record whose structure is damaged (the rest
//!   of that segment cannot be delimited and is skipped too);
//! - transaction prepared and rolled-back records, and system topics
//!   (`SCHEDULE_TOPIC_XXXX`, `RMQ_SYS_*`), are left out of CommitLog scans
//!   unless asked for; a consume queue never holds the former, and a queue of
//!   a system topic is read only when that topic is named;
//! - a queue unit whose record is not that queue's message at that offset is
//!   skipped and counted as damaged; units below the queue's first offset, or
//!   whose CommitLog file is gone, were deleted by retention (`lost`).
//!
//! Schema: see [`schema`]. Timestamps are microseconds in UTC (Arrow's
//! `timestamp[us, tz=UTC]`, the type Spark exchanges); hosts are strings as
//! Rust prints a socket address (`1.2.3.4:10911`, `[::1]:10911`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, Int32Builder, Int64Builder, ListBuilder, MapBuilder, MapFieldNames,
    StringBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch, RecordBatchReader, StringArray};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::log::mapped_file::MappedFile;
use crate::log::message::{
    body_crc, iter_properties, parse_record, prop_crc_ok, props, sysflag, Parsed, RecordView,
    SCHEDULE_TOPIC,
};
use crate::queue::consume_queue::ConsumeQueue;
use crate::store::Store;

/// Prefix of RocketMQ's system topics.
pub const SYSTEM_TOPIC_PREFIX: &str = "RMQ_SYS_";
/// Body bytes one batch holds at most (Arrow binary offsets are 32-bit).
pub const MAX_BATCH_BODY_BYTES: usize = 1 << 30;

/// True for topics left out unless asked for.
pub fn is_system_topic(topic: &[u8]) -> bool {
    topic == SCHEDULE_TOPIC.as_bytes() || topic.starts_with(SYSTEM_TOPIC_PREFIX.as_bytes())
}

/// The Arrow schema of decoded messages; `with_store` appends a `store`
/// column naming the store the rows came from.
pub fn schema(with_store: bool) -> SchemaRef {
    let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let mut fields = vec![
        Field::new("topic", DataType::Utf8, true),
        Field::new("queue_id", DataType::Int32, true),
        Field::new("queue_offset", DataType::Int64, true),
        Field::new("commit_log_offset", DataType::Int64, true),
        Field::new("msg_id", DataType::Utf8, true),
        Field::new("tags", DataType::Utf8, true),
        Field::new("keys", DataType::List(Arc::new(keys_item())), true),
        Field::new("properties", map_type(), true),
        Field::new("body", DataType::Binary, true),
        Field::new("body_crc", DataType::Int32, true),
        Field::new("flag", DataType::Int32, true),
        Field::new("sys_flag", DataType::Int32, true),
        Field::new("born_timestamp", ts.clone(), true),
        Field::new("born_host", DataType::Utf8, true),
        Field::new("store_timestamp", ts, true),
        Field::new("store_host", DataType::Utf8, true),
        Field::new("reconsume_times", DataType::Int32, true),
    ];
    if with_store {
        fields.push(Field::new("store", DataType::Utf8, true));
    }
    Arc::new(Schema::new(fields))
}

/// Field of a `keys` list element (Spark names it `element`).
fn keys_item() -> Field {
    Field::new("element", DataType::Utf8, true)
}

fn map_field_names() -> MapFieldNames {
    MapFieldNames {
        entry: "entries".into(),
        key: "key".into(),
        value: "value".into(),
    }
}

fn map_type() -> DataType {
    DataType::Map(
        Arc::new(Field::new(
            "entries",
            DataType::Struct(
                vec![
                    Field::new("key", DataType::Utf8, false),
                    Field::new("value", DataType::Utf8, true),
                ]
                .into(),
            ),
            false,
        )),
        false,
    )
}

/// Which records a read keeps.
#[derive(Debug, Clone, Default)]
pub struct RowFilter {
    /// Keep only these topics (`None`: every topic).
    pub topics: Option<Vec<Vec<u8>>>,
    /// Keep system topics in CommitLog scans.
    pub include_system: bool,
    /// Keep transaction prepared and rolled-back records in CommitLog scans.
    pub include_uncommitted: bool,
    /// Keep only records stored at or after this time (ms).
    pub min_store_timestamp: Option<i64>,
}

impl RowFilter {
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    fn keeps_scanned(&self, v: &RecordView, rec: &[u8]) -> bool {
        let topic = rec.get(v.topic.clone()).unwrap_or_default();
        if let Some(ts) = &self.topics {
            if !ts.iter().any(|t| t.as_slice() == topic) {
                return false;
            }
        } else if !self.include_system && is_system_topic(topic) {
            return false;
        }
        if !self.include_uncommitted {
            let tran = v.sys_flag & sysflag::TRANSACTION_TYPE_MASK;
            if tran == sysflag::TRANSACTION_PREPARED || tran == sysflag::TRANSACTION_ROLLBACK {
                return false;
            }
        }
        self.keeps_time(v)
    }

    #[inline]
    fn keeps_time(&self, v: &RecordView) -> bool {
        match self.min_store_timestamp {
            Some(t) => v.store_timestamp >= t,
            None => true,
        }
    }
}

/// Counters of one read, shared with whoever holds the reader's handle.
#[derive(Debug, Default)]
pub struct ReadStats {
    /// Rows produced.
    pub rows: AtomicU64,
    /// Records skipped because their body CRC or structure is damaged, or a
    /// queue unit points at a record that is not its message.
    pub skipped_corrupt: AtomicU64,
    /// Queue offsets deleted by retention before they were read.
    pub lost: AtomicU64,
    /// Records left out by the filter (topics, transactions, system, time).
    pub filtered: AtomicU64,
}

impl ReadStats {
    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

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
fn inflate(sys_flag: i32, data: &[u8]) -> Option<Vec<u8>> {
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

/// A range to decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Range {
    /// CommitLog records starting in `[from, to)` (physical offsets).
    CommitLog { from: u64, to: u64 },
    /// Messages of one queue at logical offsets `[from, to)`.
    Queue {
        topic: String,
        queue_id: i32,
        from: i64,
        to: i64,
    },
}

/// Decodes ranges of a store into record batches of at most `batch_rows`
/// rows (and [`MAX_BATCH_BODY_BYTES`] body bytes), one range after another.
/// An Arrow [`RecordBatchReader`]; each `next()` decodes one batch.
pub struct RangeReader {
    store: Arc<Store>,
    ranges: std::collections::VecDeque<Range>,
    filter: RowFilter,
    batch_rows: usize,
    builder: BatchBuilder,
    stats: Arc<ReadStats>,
    /// Position inside the front range.
    cursor: Option<Cursor>,
    /// The visibility horizon of this read (taken when it starts).
    visible: Option<u64>,
    schema: SchemaRef,
}

#[derive(Debug, Clone, Copy)]
enum Cursor {
    Phy(u64),
    Logical(i64),
}

impl RangeReader {
    /// A reader over `ranges` of `store`.
    pub fn new(
        store: Arc<Store>,
        ranges: Vec<Range>,
        filter: RowFilter,
        batch_rows: usize,
        store_name: Option<String>,
    ) -> Self {
        let batch_rows = batch_rows.max(1);
        let cap = batch_rows.min(1 << 16);
        let schema = schema(store_name.is_some());
        Self {
            store,
            ranges: ranges.into(),
            filter,
            batch_rows,
            builder: BatchBuilder::new(cap, cap * 128, store_name),
            stats: Arc::new(ReadStats::default()),
            cursor: None,
            visible: None,
            schema,
        }
    }

    /// The counters of this read (shared; they grow as batches are read).
    pub fn stats(&self) -> Arc<ReadStats> {
        self.stats.clone()
    }

    /// Counts into `stats` (shared with other readers of the same read).
    pub fn with_stats(mut self, stats: Arc<ReadStats>) -> Self {
        self.stats = stats;
        self
    }

    fn full(&self) -> bool {
        self.builder.len() >= self.batch_rows
            || self.builder.body_bytes() >= MAX_BATCH_BODY_BYTES / 2
    }

    /// Decodes until the batch is full or every range is read.
    fn fill(&mut self) -> crate::Result<()> {
        if self.visible.is_none() {
            // The read rule of every read: puts acknowledged before the read
            // starts are visible, and a CommitLog scan stops at the horizon
            // (queue units never point above it: dispatch follows it).
            self.store.check_open()?;
            self.store.await_visible()?;
            self.visible = Some(self.store.visible_end());
        }
        while !self.full() {
            let Some(range) = self.ranges.front().cloned() else {
                return Ok(());
            };
            let done = match range {
                Range::CommitLog { from, to } => self.fill_commitlog(from, to)?,
                Range::Queue {
                    ref topic,
                    queue_id,
                    from,
                    to,
                } => self.fill_queue(topic, queue_id, from, to)?,
            };
            if done {
                self.ranges.pop_front();
                self.cursor = None;
            }
        }
        Ok(())
    }

    /// Scans CommitLog records; returns true when the range is finished.
    fn fill_commitlog(&mut self, from: u64, to: u64) -> crate::Result<bool> {
        self.store.check_open()?;
        let store = self.store.clone();
        let cl = store.commitlog();
        let to = to
            .min(cl.max_offset())
            .min(self.visible.unwrap_or(u64::MAX));
        let mut pos = match self.cursor {
            Some(Cursor::Phy(p)) => p,
            _ => {
                // Start at the first record of the segment holding `from`;
                // records before `from` are stepped over, not decoded.
                let fs = cl.file_size() as u64;
                let seg = from - from % fs.max(1);
                seg.max(cl.min_offset().max(0) as u64)
            }
        };
        while pos < to && !self.full() {
            let Some(f) = cl.file_for(pos) else {
                // Segment deleted (retention) or none yet: go to the next one.
                match cl
                    .queue()
                    .files()
                    .iter()
                    .find(|f| f.file_from_offset() > pos)
                {
                    Some(n) => {
                        pos = n.file_from_offset();
                        continue;
                    }
                    None => {
                        pos = to; // no file holds the rest of the range
                        break;
                    }
                }
            };
            let next = self.scan_file(&f, pos, from, to);
            // Every step moves forward (a file that yields nothing is left).
            pos = if next > pos {
                next
            } else {
                f.file_from_offset() + f.file_size() as u64
            };
        }
        self.cursor = Some(Cursor::Phy(pos));
        Ok(pos >= to)
    }

    /// Decodes records of `f` from `pos` until the batch is full, `to`, or
    /// the file ends; returns the next position.
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    fn scan_file(&mut self, f: &MappedFile, mut pos: u64, from: u64, to: u64) -> u64 {
        let store = self.store.clone();
        let cl = store.commitlog();
        let base = f.file_from_offset();
        let next_file = base + f.file_size() as u64;
        let Some(data) = cl.readable(f, 0) else {
            return next_file;
        };
        let stats = self.stats.clone();
        while pos < to && !self.full() {
            let local = (pos - base) as usize;
            let Some(buf) = data.get(local..) else {
                return next_file;
            };
            match parse_record(buf, false) {
                Parsed::Record(v) => {
                    let rec = buf.get(..v.total_size).unwrap_or_default();
                    pos += v.total_size as u64;
                    if pos - (v.total_size as u64) < from {
                        continue;
                    }
                    let at = base + local as u64;
                    if v.physical_offset != at as i64
                        || body_crc(rec.get(v.body.clone()).unwrap_or_default()) != v.body_crc
                        || (cl.needs_prop_crc(at) && !prop_crc_ok(rec, &v.properties))
                    {
                        ReadStats::add(&stats.skipped_corrupt, 1);
                        continue;
                    }
                    if !self.filter.keeps_scanned(&v, rec) {
                        ReadStats::add(&stats.filtered, 1);
                        continue;
                    }
                    self.builder.push(&v, rec);
                }
                Parsed::Blank => return next_file,
                Parsed::End { .. } => {
                    // Zeros: the end of written data. Anything else inside
                    // the written range: a damaged record whose extent is
                    // unknown, so the rest of this segment is skipped.
                    if buf.iter().take(8).any(|&b| b != 0) {
                        ReadStats::add(&stats.skipped_corrupt, 1);
                    }
                    return next_file;
                }
            }
        }
        pos
    }

    /// Reads queue units; returns true when the range is finished.
    fn fill_queue(
        &mut self,
        topic: &str,
        queue_id: i32,
        from: i64,
        to: i64,
    ) -> crate::Result<bool> {
        self.store.check_open()?;
        let Some(cq) = self.store.consume_queues().get(topic, queue_id) else {
            return Ok(true);
        };
        let to = to.min(cq.max_offset_in_queue());
        let mut next = match self.cursor {
            Some(Cursor::Logical(n)) => n,
            _ => from,
        };
        let mut file: Option<Arc<MappedFile>> = None;
        while next < to && !self.full() {
            let min = cq.min_offset_in_queue();
            if next < min {
                ReadStats::add(&self.stats.lost, (min.min(to) - next) as u64);
                next = min;
                continue;
            }
            let want = ((to - next) as usize).min(self.batch_rows - self.builder.len());
            let Some(units) = cq.units(next, want) else {
                // No readable unit here: the queue file is missing.
                let n = cq.roll_next_file(next).min(to);
                ReadStats::add(&self.stats.lost, (n - next) as u64);
                next = n;
                continue;
            };
            if units.is_empty() {
                next = to; // nothing readable up to the range's end
                break;
            }
            for u in units {
                let logical = next;
                next += 1;
                self.queue_unit(&cq, &mut file, logical, u.phy_offset, u.size);
            }
        }
        self.cursor = Some(Cursor::Logical(next));
        Ok(next >= to)
    }

    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    fn queue_unit(
        &mut self,
        cq: &ConsumeQueue,
        file: &mut Option<Arc<MappedFile>>,
        logical: i64,
        phy: i64,
        size: i32,
    ) {
        let store = self.store.clone();
        let cl = store.commitlog();
        let Ok(phy_u) = u64::try_from(phy) else {
            ReadStats::add(&self.stats.skipped_corrupt, 1);
            return;
        };
        let holds = |f: &Arc<MappedFile>| {
            phy_u >= f.file_from_offset() && phy_u < f.file_from_offset() + f.file_size() as u64
        };
        if !file.as_ref().is_some_and(holds) {
            *file = cl.file_for(phy_u);
        }
        let Some(f) = file.as_ref() else {
            if phy < cl.min_offset() {
                ReadStats::add(&self.stats.lost, 1);
            } else {
                ReadStats::add(&self.stats.skipped_corrupt, 1);
            }
            return;
        };
        let local = (phy_u - f.file_from_offset()) as usize;
        let parsed = cl.readable(f, local).map(|d| (parse_record(d, false), d));
        let Some((Parsed::Record(v), data)) = parsed else {
            ReadStats::add(&self.stats.skipped_corrupt, 1);
            return;
        };
        let rec = data.get(..v.total_size).unwrap_or_default();
        if v.total_size as i64 != size as i64
            || v.queue_id != cq.queue_id()
            || v.queue_offset != logical
            || rec.get(v.topic.clone()) != Some(cq.topic().as_bytes())
            || body_crc(rec.get(v.body.clone()).unwrap_or_default()) != v.body_crc
            || (cl.needs_prop_crc(phy_u) && !prop_crc_ok(rec, &v.properties))
        {
            ReadStats::add(&self.stats.skipped_corrupt, 1);
            return;
        }
        if !self.filter.keeps_time(&v) {
            ReadStats::add(&self.stats.filtered, 1);
            return;
        }
        self.builder.push(&v, rec);
    }

    /// The next batch, `None` at the end.
    pub fn next_batch(&mut self) -> crate::Result<Option<RecordBatch>> {
        self.fill()?;
        if self.builder.is_empty() {
            return Ok(None);
        }
        ReadStats::add(&self.stats.rows, self.builder.len() as u64);
        self.builder
            .finish()
            .map(Some)
            // The columns are built to the schema: a refusal is an engine bug.
            .map_err(|e| crate::StoreError::internal(format!("arrow: {e}")))
    }
}

impl Iterator for RangeReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        // A panic must not unwind into the C caller of the stream.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.next_batch()));
        match r {
            Ok(Ok(b)) => b.map(Ok),
            Ok(Err(e)) => Some(Err(ArrowError::ExternalError(Box::new(e)))),
            Err(_) => Some(Err(ArrowError::ComputeError(
                "rocketstore: internal error while decoding".into(),
            ))),
        }
    }
}

impl RecordBatchReader for RangeReader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// Splits CommitLog ranges at segment boundaries, so each piece can be
/// decoded on its own (a piece starts at a record boundary).
pub fn split_at_segments(ranges: Vec<Range>, segment: u64) -> Vec<Range> {
    let segment = segment.max(1);
    let mut out = Vec::with_capacity(ranges.len());
    for r in ranges {
        match r {
            Range::CommitLog { from, to } => {
                let mut a = from;
                while a < to {
                    let b = (a - a % segment + segment).min(to);
                    out.push(Range::CommitLog { from: a, to: b });
                    a = b;
                }
            }
            q => out.push(q),
        }
    }
    out
}

enum Piece {
    Batch(RecordBatch),
    RangeDone,
    Failed(ArrowError),
}

/// Decodes ranges on several threads and yields their batches in range order
/// (the same rows in the same order as one [`RangeReader`]; a batch never
/// spans two ranges here).
/// Range `i` is decoded by worker `i % threads`; each worker keeps at most two
/// batches ahead. Dropping the reader stops the workers.
pub struct ParallelReader {
    rx: Vec<std::sync::mpsc::Receiver<Piece>>,
    current: usize,
    remaining: usize,
    schema: SchemaRef,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl ParallelReader {
    /// Starts `threads` workers over `ranges` of `store`.
    pub fn start(
        store: Arc<Store>,
        ranges: Vec<Range>,
        filter: RowFilter,
        batch_rows: usize,
        store_name: Option<String>,
        threads: usize,
        stats: Arc<ReadStats>,
    ) -> std::io::Result<Self> {
        let threads = threads.clamp(1, ranges.len().max(1));
        let schema = schema(store_name.is_some());
        let remaining = ranges.len();
        let mut rx = Vec::with_capacity(threads);
        let mut handles = Vec::with_capacity(threads);
        for w in 0..threads {
            let mine: Vec<Range> = ranges.iter().skip(w).step_by(threads).cloned().collect();
            let (tx, r) = std::sync::mpsc::sync_channel::<Piece>(2);
            rx.push(r);
            let (store, filter, name, stats) = (
                store.clone(),
                filter.clone(),
                store_name.clone(),
                stats.clone(),
            );
            let h = std::thread::Builder::new()
                .name(format!("rocketstore-decode-{w}"))
                .spawn(move || {
                    for range in mine {
                        let mut rd = RangeReader::new(
                            store.clone(),
                            vec![range],
                            filter.clone(),
                            batch_rows,
                            name.clone(),
                        )
                        .with_stats(stats.clone());
                        loop {
                            let piece = match rd.next() {
                                Some(Ok(b)) => Piece::Batch(b),
                                Some(Err(e)) => Piece::Failed(e),
                                None => break,
                            };
                            let failed = matches!(piece, Piece::Failed(_));
                            if tx.send(piece).is_err() || failed {
                                return;
                            }
                        }
                        if tx.send(Piece::RangeDone).is_err() {
                            return;
                        }
                    }
                })?;
            handles.push(h);
        }
        Ok(Self {
            rx,
            current: 0,
            remaining,
            schema,
            handles,
        })
    }
}

impl Iterator for ParallelReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.remaining > 0 {
            let w = self.current % self.rx.len().max(1);
            match self.rx.get(w).map(|r| r.recv()) {
                Some(Ok(Piece::Batch(b))) => return Some(Ok(b)),
                Some(Ok(Piece::RangeDone)) => {
                    self.current += 1;
                    self.remaining -= 1;
                }
                Some(Ok(Piece::Failed(e))) => {
                    self.remaining = 0;
                    return Some(Err(e));
                }
                _ => {
                    self.remaining = 0;
                    return Some(Err(ArrowError::ComputeError(
                        "rocketstore: a decode thread stopped".into(),
                    )));
                }
            }
        }
        None
    }
}

impl RecordBatchReader for ParallelReader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

impl Drop for ParallelReader {
    fn drop(&mut self) {
        // Closing the channels makes every worker's next send fail.
        self.rx.clear();
        for h in self.handles.drain(..) {
            // A panic was already turned into a failed batch for the
            // reader; it is still a bug, and is never dropped silently.
            if h.join().is_err() {
                log::error!("an Arrow decode thread panicked (a bug: please report it)");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commitlog_ranges_split_at_segment_boundaries() {
        let q = Range::Queue {
            topic: "t".into(),
            queue_id: 1,
            from: 0,
            to: 9,
        };
        let r = split_at_segments(vec![Range::CommitLog { from: 50, to: 250 }, q.clone()], 100);
        assert_eq!(
            r,
            vec![
                Range::CommitLog { from: 50, to: 100 },
                Range::CommitLog { from: 100, to: 200 },
                Range::CommitLog { from: 200, to: 250 },
                q
            ]
        );
    }

    #[test]
    fn system_topics() {
        assert!(is_system_topic(b"SCHEDULE_TOPIC_XXXX"));
        assert!(is_system_topic(b"RMQ_SYS_TRACE_TOPIC"));
        assert!(!is_system_topic(b"orders"));
        assert!(!is_system_topic(b"%RETRY%g"));
    }

    #[test]
    fn schema_matches_the_spark_columns() {
        let s = schema(true);
        let names: Vec<_> = s.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names.first(), Some(&"topic"));
        assert_eq!(names.last(), Some(&"store"));
        assert_eq!(names.len(), 18);
        assert!(s.fields().iter().all(|f| f.is_nullable()));
    }
}
