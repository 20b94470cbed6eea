//! A store's ranges as one stream of record batches
//! ([`Store::arrow_reader`], what `MessageStore.read_arrow` exports).

use std::sync::Arc;

use arrow_array::RecordBatchReader;

use super::{split_at_segments, ParallelReader, Range, RangeReader, ReadStats, RowFilter};
use crate::error::{Result, StoreError};
use crate::store::Store;

/// A logical range of one queue: `(topic, queue_id, from, to)`.
pub type QueueRange = (String, i32, i64, i64);

/// A batch reader and the statistics it keeps.
pub type ArrowReader = (Box<dyn RecordBatchReader + Send>, Arc<ReadStats>);

impl Store {
    /// A reader decoding `queue_ranges` (a negative `from` reads from 0),
    /// then `commitlog_ranges` (`(from, to)` physical offsets, clamped to
    /// the bytes the CommitLog holds now; empty ones are dropped), in
    /// batches of at most `batch_rows` rows kept by `filter`, with a `store`
    /// column when `store_name` is given. With `threads` above 1 the ranges
    /// decode on that many threads (CommitLog ranges cut at segment
    /// boundaries); the batches keep the ranges' order.
    pub fn arrow_reader(
        self: &Arc<Self>,
        queue_ranges: Vec<QueueRange>,
        commitlog_ranges: Vec<(i64, i64)>,
        filter: RowFilter,
        batch_rows: usize,
        store_name: Option<String>,
        threads: usize,
    ) -> Result<ArrowReader> {
        self.check_open()?;
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
        let stats = Arc::new(ReadStats::default());
        if threads > 1 {
            // Pieces decode independently: CommitLog ranges are cut at
            // segment boundaries; queue ranges are pieces already.
            let ranges = split_at_segments(ranges, cl.file_size() as u64);
            let reader = ParallelReader::start(
                self.clone(),
                ranges,
                filter,
                batch_rows,
                store_name,
                threads,
                stats.clone(),
            )
            .map_err(|e| StoreError::io("start decode threads", e))?;
            return Ok((Box::new(reader), stats));
        }
        let reader = RangeReader::new(self.clone(), ranges, filter, batch_rows, store_name)
            .with_stats(stats.clone());
        Ok((Box::new(reader), stats))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::commitlog::PutStatus;
    use crate::log::message::MessageSpec;
    use crate::store::StoreOptions;

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
        let all = RowFilter::default();
        for threads in [1, 3] {
            // A queue range from below 0; a CommitLog range past the end.
            let q = vec![("T".to_owned(), 0, -5, 10)];
            let r = store
                .arrow_reader(q, vec![], all.clone(), 7, None, threads)
                .unwrap();
            assert_eq!(rows(r), 10, "threads {threads}");
            let r = store
                .arrow_reader(vec![], vec![(-1, i64::MAX)], all.clone(), 7, None, threads)
                .unwrap();
            assert_eq!(rows(r), 40, "threads {threads}");
            // An empty CommitLog range reads nothing.
            let r = store
                .arrow_reader(vec![], vec![(100, 100)], all.clone(), 7, None, threads)
                .unwrap();
            assert_eq!(rows(r), 0, "threads {threads}");
        }
        store.shutdown().unwrap();
        assert!(matches!(
            store.arrow_reader(vec![], vec![], all, 7, None, 1),
            Err(StoreError::Closed)
        ));
    }
}
