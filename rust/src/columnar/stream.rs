//! A store's ranges as one stream of record batches
//! ([`Store::arrow_reader`], what `MessageStore.read_arrow` exports).

use std::sync::Arc;

use arrow_array::RecordBatchReader;

use super::{
    split_at_segments, Column, DecodeOptions, ParallelReader, Projection, Range, RangeReader,
    ReadStats, RowFilter,
};
use crate::error::{Result, StoreError};
use crate::store::Store;

/// A logical range of one queue: `(topic, queue_id, from, to)`.
pub type QueueRange = (String, i32, i64, i64);

/// A batch reader and the statistics it keeps.
pub type ArrowReader = (Box<dyn RecordBatchReader + Send>, Arc<ReadStats>);

/// One columnar read of a store ([`Store::arrow_reader`]): the ranges from
/// [`ArrowReadRequest::of`], everything else named, as in
/// `ArrowReadRequest { threads: 4, ..ArrowReadRequest::of(queues, vec![]) }`.
#[derive(Debug, Clone)]
pub struct ArrowReadRequest {
    /// Queue ranges, read first (a negative `from` reads from 0).
    pub queue_ranges: Vec<QueueRange>,
    /// `(from, to)` CommitLog offsets, read after the queue ranges (clamped
    /// to the bytes the CommitLog holds when the read starts; empty ones
    /// are dropped).
    pub commitlog_ranges: Vec<(i64, i64)>,
    /// Which records the read keeps.
    pub filter: RowFilter,
    /// Rows per batch at most.
    pub batch_rows: usize,
    /// The columns returned, in order (`None`: every column, with a `store`
    /// column when `store_name` is given).
    pub projection: Option<Projection>,
    /// The `store` column's value (a projection naming `store` needs it).
    pub store_name: Option<String>,
    /// Decode threads (above 1: the ranges decode in parallel, CommitLog
    /// ranges cut at segment boundaries; the batches keep the ranges' order).
    pub threads: usize,
}

impl ArrowReadRequest {
    /// Rows per batch unless told (`MessageStore.read_arrow`'s default).
    pub const DEFAULT_BATCH_ROWS: usize = 65_536;

    /// A read of `queue_ranges`, then `commitlog_ranges`: every record the
    /// row rules keep, every column, [`Self::DEFAULT_BATCH_ROWS`] rows per
    /// batch, on one thread.
    pub fn of(queue_ranges: Vec<QueueRange>, commitlog_ranges: Vec<(i64, i64)>) -> Self {
        Self {
            queue_ranges,
            commitlog_ranges,
            filter: RowFilter::default(),
            batch_rows: Self::DEFAULT_BATCH_ROWS,
            projection: None,
            store_name: None,
            threads: 1,
        }
    }
}

impl Store {
    /// A reader decoding the ranges of `req` in batches, as its fields say.
    pub fn arrow_reader(self: &Arc<Self>, req: ArrowReadRequest) -> Result<ArrowReader> {
        self.check_open()?;
        let ArrowReadRequest {
            queue_ranges,
            commitlog_ranges,
            filter,
            batch_rows,
            projection,
            store_name,
            threads,
        } = req;
        let projection = projection.unwrap_or_else(|| Projection::all(store_name.is_some()));
        if projection.contains(Column::Store) && store_name.is_none() {
            return Err(StoreError::InvalidArgument(
                "the store column needs a store name".into(),
            ));
        }
        let mut ranges: Vec<Range> = queue_ranges
            .into_iter()
            .map(|(topic, queue_id, from, to)| Range::Queue {
                topic,
                queue_id,
                from: from.max(0),
                to,
            })
            .collect();
        // Clamped to the bytes the CommitLog holds now, so the pieces a
        // parallel read cuts follow the store's size, not the range's.
        let cl = self.commitlog();
        let (lo, hi) = (cl.min_offset().max(0) as u64, cl.max_offset());
        for (from, to) in commitlog_ranges {
            let (from, to) = ((from.max(0) as u64).max(lo), (to.max(0) as u64).min(hi));
            if from < to {
                ranges.push(Range::CommitLog { from, to });
            }
        }
        let how = DecodeOptions {
            filter,
            batch_rows,
            projection,
            store_name,
        };
        let stats = Arc::new(ReadStats::default());
        if threads > 1 {
            // Pieces decode independently: CommitLog ranges are cut at
            // segment boundaries; queue ranges are pieces already.
            let ranges = split_at_segments(ranges, cl.file_size() as u64);
            let reader = ParallelReader::start(self.clone(), ranges, &how, threads, stats.clone())
                .map_err(|e| StoreError::io("start decode threads", e))?;
            return Ok((Box::new(reader), stats));
        }
        let reader = RangeReader::new(self.clone(), ranges, how).with_stats(stats.clone());
        Ok((Box::new(reader), stats))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::commitlog::PutStatus;
    use crate::log::message::MessageSpec;
    use crate::store::StoreOptions;
    use std::sync::atomic::Ordering;

    fn rows(reader: ArrowReader) -> usize {
        reader.0.map(|b| b.unwrap().num_rows()).sum()
    }

    #[test]
    fn ranges_are_clamped_and_read_on_one_or_several_threads() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(
            Store::open_running(StoreOptions {
                commit_log_file_size: Some(4 << 10),
                consume_queue_file_size: Some(20 * 100),
                max_hash_slot_num: 10,
                max_index_num: 40,
                ..StoreOptions::at(dir.path())
            })
            .unwrap(),
        );
        for i in 0..40 {
            let spec = MessageSpec::new("T", 0, vec![b'x'; 200]).born_at(i);
            let p = store.prepare(spec).unwrap().unwrap();
            assert_eq!(store.put_prepared(&p).unwrap().status, PutStatus::PutOk);
        }
        store.drain_dispatch().unwrap();
        for threads in [1, 3] {
            // A queue range from below 0; a CommitLog range past the end.
            let q = vec![("T".to_owned(), 0, -5, 10)];
            let req = |q, cl| ArrowReadRequest {
                batch_rows: 7,
                threads,
                ..ArrowReadRequest::of(q, cl)
            };
            let r = store.arrow_reader(req(q, vec![])).unwrap();
            assert_eq!(rows(r), 10, "threads {threads}");
            let r = store
                .arrow_reader(req(vec![], vec![(-1, i64::MAX)]))
                .unwrap();
            assert_eq!(rows(r), 40, "threads {threads}");
            // An empty CommitLog range reads nothing.
            let r = store.arrow_reader(req(vec![], vec![(100, 100)])).unwrap();
            assert_eq!(rows(r), 0, "threads {threads}");
        }
        store.shutdown().unwrap();
        assert!(matches!(
            store.arrow_reader(ArrowReadRequest::of(vec![], vec![])),
            Err(StoreError::Closed)
        ));
    }

    #[test]
    fn a_projection_returns_the_same_columns_of_a_full_read() {
        use crate::columnar::Projection;
        use arrow_array::{Array, RecordBatch};
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(
            Store::open_running(StoreOptions {
                commit_log_file_size: Some(4 << 10),
                consume_queue_file_size: Some(20 * 100),
                max_hash_slot_num: 10,
                max_index_num: 40,
                ..StoreOptions::at(dir.path())
            })
            .unwrap(),
        );
        for i in 0..30 {
            let spec = MessageSpec::new("T", i % 2, vec![b'a' + i as u8; 100])
                .born_at(i as i64)
                .with_properties(b"TAGS\x01t\x02KEYS\x01k1 k2\x02".to_vec());
            let p = store.prepare(spec).unwrap().unwrap();
            assert_eq!(store.put_prepared(&p).unwrap().status, PutStatus::PutOk);
        }
        store.drain_dispatch().unwrap();
        let read = |p: Option<Projection>, threads| {
            let (r, stats) = store
                .arrow_reader(ArrowReadRequest {
                    batch_rows: 7,
                    projection: p,
                    store_name: Some("S".into()),
                    threads,
                    ..ArrowReadRequest::of(vec![], vec![(0, i64::MAX)])
                })
                .unwrap();
            let batches: Vec<RecordBatch> = r.map(|b| b.unwrap()).collect();
            (batches, stats)
        };
        for threads in [1, 2] {
            let (full, stats) = read(None, threads);
            assert_eq!(full.iter().map(|b| b.num_rows()).sum::<usize>(), 30);
            assert_eq!(stats.properties_parsed.load(Ordering::Relaxed), 30);
            for names in [
                vec!["body", "queue_offset", "store", "topic"],
                vec!["keys", "msg_id"],
                vec!["store_host"],
            ] {
                let p = Projection::of(&names).unwrap();
                let needs = p.needs_properties();
                let (got, stats) = read(Some(p), threads);
                // Same batching (same ranges, same rows per batch).
                assert_eq!(got.len(), full.len());
                for (g, f) in got.iter().zip(&full) {
                    assert_eq!(g.num_columns(), names.len());
                    for (i, n) in names.iter().enumerate() {
                        assert_eq!(g.schema().field(i).name(), n);
                        let want = f.column_by_name(n).unwrap();
                        assert_eq!(&g.column(i).to_data(), &want.to_data(), "{n}");
                    }
                }
                let parsed = stats.properties_parsed.load(Ordering::Relaxed);
                assert_eq!(parsed, if needs { 30 } else { 0 }, "{names:?}");
            }
        }
        // The store column needs its value.
        let p = Projection::of(&["store"]).unwrap();
        assert!(matches!(
            store.arrow_reader(ArrowReadRequest {
                projection: Some(p),
                ..ArrowReadRequest::of(vec![], vec![])
            }),
            Err(StoreError::InvalidArgument(_))
        ));
        store.shutdown().unwrap();
    }
}
