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
//! Schema: [`COLUMNS`] lists the columns, [`schema`] is their Arrow
//! schema. Timestamps are microseconds in UTC (Arrow's
//! `timestamp[us, tz=UTC]`, the type Spark exchanges); hosts are strings as
//! Rust prints a socket address (`1.2.3.4:10911`, `[::1]:10911`).
//!
//! # Files
//!
//! - `mod.rs`: the schema, the row filter and the read statistics.
//! - `columns.rs`: [`COLUMNS`], the read schema's registry (one row per
//!   column: name, Arrow type, nulls, pushdown), and [`Projection`], the
//!   columns a read returns, in order.
//! - `batch.rs`: [`BatchBuilder`], one column builder per returned column.
//! - `range.rs`: [`RangeReader`], decoding CommitLog and queue ranges.
//! - `parallel.rs`: [`ParallelReader`], ranges split at segments and
//!   decoded on several threads.
//! - `pull.rs`: one pull of a queue as one batch
//!   ([`Store::get_arrow`](crate::store::Store::get_arrow)), bodies copied
//!   or, zero-copy, viewed in the mapped CommitLog.
//! - `stream.rs`: a store's ranges as one batch reader
//!   ([`Store::arrow_reader`](crate::store::Store::arrow_reader)).
//! - `append.rs`: the other way, Arrow rows appended as messages
//!   ([`Store::append_arrow_batch`](crate::store::Store::append_arrow_batch)).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow_array::builder::MapFieldNames;
use arrow_schema::{DataType, Field};

use crate::log::message::{is_system_topic, sysflag, RecordRef};
use crate::queue::reader::TagFilter;
mod append;
mod batch;
mod columns;
mod parallel;
mod pull;
mod range;
mod stream;

pub use append::{AppendError, ArrowAppend, RefusedRow};
pub use batch::BatchBuilder;
pub use columns::{Column, ColumnSpec, Nulls, Projection, ProjectionError, COLUMNS};
pub use parallel::{split_at_segments, ParallelReader};
pub use pull::empty_pull_batch;
pub use range::{DecodeOptions, Range, RangeReader};
pub use stream::ArrowReadRequest;

/// Body bytes one batch holds at most (Arrow binary offsets are 32-bit).
pub const MAX_BATCH_BODY_BYTES: usize = 1 << 30;

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
    /// Keep only records stored at or before this time (ms).
    pub max_store_timestamp: Option<i64>,
    /// Keep only records whose TAGS is one of these. Queue reads of
    /// non-system topics first skip units whose tag hash code cannot match,
    /// without touching the CommitLog (a system topic's unit codes are not tag
    /// hashes: `SCHEDULE_TOPIC_XXXX` keeps delivery times there).
    pub tags: Option<TagFilter>,
}

impl RowFilter {
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    fn keeps_scanned(&self, r: &RecordRef<'_>) -> bool {
        let topic = r.topic();
        if let Some(ts) = &self.topics {
            if !ts.iter().any(|t| t.as_slice() == topic) {
                return false;
            }
        } else if !self.include_system && is_system_topic(topic) {
            return false;
        }
        if !self.include_uncommitted {
            let tran = r.sys_flag() & sysflag::TRANSACTION_TYPE_MASK;
            if tran == sysflag::TRANSACTION_PREPARED || tran == sysflag::TRANSACTION_ROLLBACK {
                return false;
            }
        }
        self.keeps_time_and_tags(r)
    }

    /// The store time and tag rules (every read applies them).
    #[inline]
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    fn keeps_time_and_tags(&self, r: &RecordRef<'_>) -> bool {
        if self.min_store_timestamp.is_some() || self.max_store_timestamp.is_some() {
            let ts = r.store_timestamp().unwrap_or_default();
            if self.min_store_timestamp.is_some_and(|t| ts < t)
                || self.max_store_timestamp.is_some_and(|t| ts > t)
            {
                return false;
            }
        }
        match &self.tags {
            Some(f) => f.matches_record(r.properties()),
            None => true,
        }
    }

    /// False when a queue unit's tag hash code rules its record out.
    #[inline]
    fn keeps_unit(&self, tags_code: i64, system_topic: bool) -> bool {
        match &self.tags {
            Some(f) if !system_topic => f.matches_code(tags_code),
            _ => true,
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
    /// Records left out by the filter (topics, transactions, system, time,
    /// tags; queue units ruled out by their tag hash code included).
    pub filtered: AtomicU64,
    /// CommitLog records decoded (parsed and checked) to produce the rows:
    /// what a read cost. Records a scan steps over before its range and
    /// queue units ruled out by their tag hash code are not counted.
    pub decoded: AtomicU64,
    /// Returned records whose property bytes were parsed: only reads that
    /// return `properties`, `tags` or `keys` parse them (records without
    /// properties are not counted).
    pub properties_parsed: AtomicU64,
}

impl ReadStats {
    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
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
    fn schema_matches_the_spark_columns() {
        let s = Projection::all(true).schema();
        let names: Vec<_> = s.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names.first(), Some(&"topic"));
        assert_eq!(names.last(), Some(&"store"));
        assert_eq!(names.len(), COLUMNS.len());
        assert!(s.fields().iter().all(|f| f.is_nullable()));
    }
}
