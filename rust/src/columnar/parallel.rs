//! [`ParallelReader`]: CommitLog ranges split at segment boundaries and
//! decoded on several threads, batches returned in range order.

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};

use crate::store::Store;

use super::{DecodeOptions, Range, RangeReader, ReadStats};

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
    /// Starts `threads` workers over `ranges` of `store`, each decoding
    /// as `how` says and counting into `stats`.
    pub fn start(
        store: Arc<Store>,
        ranges: Vec<Range>,
        how: &DecodeOptions,
        threads: usize,
        stats: Arc<ReadStats>,
    ) -> std::io::Result<Self> {
        let threads = threads.clamp(1, ranges.len().max(1));
        let schema = how.projection.schema();
        let remaining = ranges.len();
        let mut rx = Vec::with_capacity(threads);
        let mut handles = Vec::with_capacity(threads);
        for w in 0..threads {
            let mine: Vec<Range> = ranges.iter().skip(w).step_by(threads).cloned().collect();
            let (tx, r) = std::sync::mpsc::sync_channel::<Piece>(2);
            rx.push(r);
            let (store, how, stats) = (store.clone(), how.clone(), stats.clone());
            let h = std::thread::Builder::new()
                .name(format!("rocketstore-decode-{w}"))
                .spawn(move || {
                    for range in mine {
                        let mut rd = RangeReader::new(store.clone(), vec![range], how.clone())
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
