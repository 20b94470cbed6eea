//! [`RangeReader`]: decodes CommitLog segment ranges and ConsumeQueue
//! ranges into record batches, following the row rules of `mod.rs`.

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};

use crate::log::mapped_file::MappedFile;
use crate::log::message::{
    body_crc, is_system_topic, parse_record_frame, prop_crc_ok, NotARecord, RecordRef,
};
use crate::queue::consume_queue::ConsumeQueue;
use crate::store::Store;

use super::{BatchBuilder, Projection, ReadStats, RowFilter, MAX_BATCH_BODY_BYTES};

/// A range to decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Range {
    /// CommitLog records starting in `[from, to)` (physical offsets).
    CommitLog {
        /// First CommitLog offset.
        from: u64,
        /// End CommitLog offset (exclusive).
        to: u64,
    },
    /// Messages of one queue at logical offsets `[from, to)`.
    Queue {
        /// The queue's topic.
        topic: String,
        /// The queue's id.
        queue_id: i32,
        /// First logical offset.
        from: i64,
        /// End logical offset (exclusive).
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

/// How a read decodes its ranges: which rows it keeps, how many per batch,
/// which columns it returns. One value per read, shared by its threads.
#[derive(Debug, Clone)]
pub struct DecodeOptions {
    /// Which records the read keeps.
    pub filter: RowFilter,
    /// Rows per batch at most (at least 1).
    pub batch_rows: usize,
    /// The columns returned, in order.
    pub projection: Projection,
    /// The `store` column's value (reads of several stores).
    pub store_name: Option<String>,
}

impl RangeReader {
    /// A reader over `ranges` of `store`, decoding as `how` says.
    pub fn new(store: Arc<Store>, ranges: Vec<Range>, how: DecodeOptions) -> Self {
        let batch_rows = how.batch_rows.max(1);
        let cap = batch_rows.min(1 << 16);
        let schema = how.projection.schema();
        Self {
            store,
            ranges: ranges.into(),
            filter: how.filter,
            batch_rows,
            builder: BatchBuilder::new(cap, cap * 128, how.projection, how.store_name),
            stats: Arc::new(ReadStats::default()),
            cursor: None,
            visible: None,
            schema,
        }
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
            match parse_record_frame(buf, false) {
                Ok(frame) => {
                    let total = frame.total_size();
                    let r = RecordRef::new(buf.get(..total).unwrap_or_default(), frame);
                    pos += total as u64;
                    if pos - (total as u64) < from {
                        continue;
                    }
                    let at = base + local as u64;
                    ReadStats::add(&stats.decoded, 1);
                    if r.physical_offset() != Some(at as i64)
                        || Some(body_crc(r.body())) != r.body_crc()
                        || (cl.needs_prop_crc(at) && !prop_crc_ok(r.bytes(), &frame.properties()))
                    {
                        ReadStats::add(&stats.skipped_corrupt, 1);
                        continue;
                    }
                    if !self.filter.keeps_scanned(&r) {
                        ReadStats::add(&stats.filtered, 1);
                        continue;
                    }
                    self.builder.push(&r);
                }
                Err(NotARecord::Blank) => return next_file,
                Err(NotARecord::End(_)) => {
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
            let system = is_system_topic(topic.as_bytes());
            for u in units {
                let logical = next;
                next += 1;
                if !self.filter.keeps_unit(u.tags_code, system) {
                    ReadStats::add(&self.stats.filtered, 1);
                    continue;
                }
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
        let parsed = cl
            .readable(f, local)
            .map(|d| (parse_record_frame(d, false), d));
        ReadStats::add(&self.stats.decoded, 1);
        let Some((Ok(frame), data)) = parsed else {
            ReadStats::add(&self.stats.skipped_corrupt, 1);
            return;
        };
        let r = RecordRef::new(data.get(..frame.total_size()).unwrap_or_default(), frame);
        if frame.total_size() as i64 != size as i64
            || r.queue_id() != Some(cq.queue_id())
            || r.queue_offset() != Some(logical)
            || r.topic() != cq.topic().as_bytes()
            || Some(body_crc(r.body())) != r.body_crc()
            || (cl.needs_prop_crc(phy_u) && !prop_crc_ok(r.bytes(), &frame.properties()))
        {
            ReadStats::add(&self.stats.skipped_corrupt, 1);
            return;
        }
        if !self.filter.keeps_time_and_tags(&r) {
            ReadStats::add(&self.stats.filtered, 1);
            return;
        }
        self.builder.push(&r);
    }

    /// The next batch, `None` at the end.
    pub fn next_batch(&mut self) -> crate::Result<Option<RecordBatch>> {
        self.fill()?;
        if self.builder.is_empty() {
            return Ok(None);
        }
        ReadStats::add(&self.stats.rows, self.builder.len() as u64);
        let parsed = self.builder.take_properties_parsed();
        ReadStats::add(&self.stats.properties_parsed, parsed);
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
