//! One pull of a queue as one record batch ([`Store::get_arrow`], what
//! `MessageStore.get_arrow` and `Consumer.poll_arrow` return).
//!
//! ```text
//!  Store::pull (units, checks, tag filter, statuses: get_message's)
//!        | each message: (RecordFrame, RecordAt = file + position)
//!        v
//!  PullBatch ── BatchBuilder (columns copied out)
//!            └─ BodyViews (zero_copy: body views into the mapped files)
//!        v
//!  GetResult<RecordBatch>
//! ```
//!
//! The pull is [`Store::get_message`]'s, without RocketMQ's per-pull
//! transfer caps (32 messages, 256 KiB): a batch holds up to `max_msgs`
//! messages and [`MAX_BATCH_BODY_BYTES`]` / 2` bytes of records.
//!
//! By default bodies are copied, so the batch owns every byte and outlives
//! the store. With `zero_copy` the `body` column is an Arrow `BinaryView`
//! whose data buffers point into the mapped CommitLog files: each buffer
//! holds its file mapped until the batch (and every array sharing it) is
//! released, whatever the store does meanwhile (close, retention deleting
//! the file). Bodies stored compressed are inflated into owned memory, and
//! bodies of 12 bytes or less are inlined in their view (Arrow's rule).

use std::sync::Arc;

use arrow_array::builder::BinaryViewBuilder;
use arrow_array::{Array, ArrayRef, RecordBatch, RecordBatchOptions};
use arrow_schema::{DataType, Field, Schema};

use super::batch::inflate;
use super::{BatchBuilder, Column, Projection, MAX_BATCH_BODY_BYTES};
use crate::error::{Result, StoreError};
use crate::log::commitlog::RecordAt;
use crate::log::mapped_file::MappedFile;
use crate::log::message::{sysflag, RecordFrame, RecordRef};
use crate::queue::reader::{limits_of_batch, GetResult, PullRequest, PullSink};
use crate::store::Store;

/// Where one body of a zero-copy batch lies.
enum Body {
    /// `len` bytes at `pos` of file number `file` of [`BodyViews::files`].
    Mapped { file: usize, pos: usize, len: usize },
    /// A body inflated from its stored (compressed) bytes.
    Owned(Vec<u8>),
}

/// The `body` column of a zero-copy batch, collected as the pull serves
/// messages; the files it points into, and the byte range used in each.
#[derive(Default)]
struct BodyViews {
    files: Vec<(Arc<MappedFile>, usize, usize)>,
    rows: Vec<Body>,
}

impl BodyViews {
    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    fn push(&mut self, r: &RecordRef<'_>, at: &RecordAt) {
        if r.sys_flag() & sysflag::COMPRESSED != 0 {
            let stored = r.body();
            let body = inflate(r.sys_flag(), stored).unwrap_or_else(|| stored.to_vec());
            self.rows.push(Body::Owned(body));
            return;
        }
        let body = r.frame().body();
        let (pos, end) = (at.pos + body.start, at.pos + body.end);
        let file = match self
            .files
            .iter()
            .rposition(|(f, _, _)| Arc::ptr_eq(f, &at.file))
        {
            Some(i) => i,
            None => {
                self.files.push((at.file.clone(), pos, end));
                self.files.len() - 1
            }
        };
        if let Some((_, lo, hi)) = self.files.get_mut(file) {
            *lo = (*lo).min(pos);
            *hi = (*hi).max(end);
        }
        self.rows.push(Body::Mapped {
            file,
            pos,
            len: end - pos,
        });
    }

    /// The column: one data buffer per file (its used range, holding the
    /// file mapped), views into them.
    fn finish(self) -> Result<ArrayRef> {
        let mut b = BinaryViewBuilder::with_capacity(self.rows.len());
        let mut blocks = Vec::with_capacity(self.files.len());
        for (f, lo, hi) in &self.files {
            let buf = f.arrow_buffer(*lo, *hi).ok_or_else(|| {
                StoreError::internal(format!(
                    "body range {lo}..{hi} outside {}",
                    f.path().display()
                ))
            })?;
            blocks.push((b.append_block(buf), *lo));
        }
        for row in self.rows {
            match row {
                Body::Owned(v) => b.append_value(v),
                Body::Mapped { file, pos, len } => {
                    let (block, lo) = blocks.get(file).copied().unwrap_or_default();
                    b.try_append_view(block, (pos - lo) as u32, len as u32)
                        .map_err(|e| StoreError::internal(format!("arrow: {e}")))?;
                }
            }
        }
        Ok(Arc::new(b.finish()))
    }
}

/// The sink of one columnar pull.
struct PullBatch {
    /// The columns returned, in order.
    projection: Projection,
    /// Builds the returned columns, but for `body` when `views` does.
    builder: BatchBuilder,
    /// Zero-copy: the `body` column, as views into the mapping.
    views: Option<BodyViews>,
}

impl PullSink for PullBatch {
    #[inline]
    fn push(&mut self, frame: RecordFrame, at: RecordAt) {
        let r = RecordRef::new(at.bytes(), frame);
        self.builder.push(&r);
        if let Some(b) = &mut self.views {
            b.push(&r, &at);
        }
    }

    fn served(&self) -> usize {
        self.builder.len()
    }
}

impl PullBatch {
    /// A sink for up to `max_msgs` rows of `projection`; with `zero_copy`
    /// (and `body` returned) the body is viewed, not copied.
    fn new(max_msgs: usize, projection: Projection, zero_copy: bool) -> Result<Self> {
        if projection.contains(Column::Store) {
            return Err(StoreError::InvalidArgument(
                "the store column exists only in reads of several stores".into(),
            ));
        }
        let rows = max_msgs.min(1 << 16);
        let view_body = zero_copy && projection.contains(Column::Body);
        let built = if view_body {
            // Every column but the body; at least one, so rows are counted.
            let rest: Vec<Column> = projection
                .columns()
                .iter()
                .copied()
                .filter(|&c| c != Column::Body)
                .collect();
            let rest = if rest.is_empty() {
                vec![Column::QueueOffset]
            } else {
                rest
            };
            Projection::from_columns(rest)
                .map_err(|e| StoreError::internal(format!("projection: {e}")))?
        } else {
            projection.clone()
        };
        let bytes = if view_body { 0 } else { rows * 128 };
        Ok(PullBatch {
            builder: BatchBuilder::new(rows, bytes, built, None),
            views: view_body.then(BodyViews::default),
            projection,
        })
    }

    fn finish(self) -> Result<RecordBatch> {
        let arrow = |e: arrow_schema::ArrowError| StoreError::internal(format!("arrow: {e}"));
        // The columns are built to the schema: a refusal is an engine bug.
        let batch = self.builder.into_batch().map_err(arrow)?;
        let Some(views) = self.views else {
            return Ok(batch);
        };
        let body = views.finish()?;
        let mut fields = Vec::with_capacity(self.projection.columns().len());
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(fields.capacity());
        for &c in self.projection.columns() {
            if c == Column::Body {
                fields.push(Field::new(c.name(), DataType::BinaryView, true));
                cols.push(body.clone());
            } else {
                fields.push(c.field());
                let col = batch.column_by_name(c.name()).ok_or_else(|| {
                    StoreError::internal(format!("column {} was not built", c.name()))
                })?;
                cols.push(col.clone());
            }
        }
        let options = RecordBatchOptions::new().with_row_count(Some(body.len()));
        RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), cols, &options)
            .map_err(arrow)
    }
}

/// A batch of no rows with the columns [`Store::get_arrow`] returns.
pub fn empty_pull_batch(projection: Projection, zero_copy: bool) -> Result<RecordBatch> {
    PullBatch::new(0, projection, zero_copy)?.finish()
}

impl Store {
    /// Pulls up to `req.max_msgs` messages of a queue from `req.offset`
    /// into one record batch: [`Store::pull`] (statuses, next offset,
    /// damaged and skipped accounting, tag filter, CRC checks) without its
    /// per-pull transfer caps (unless `req.limits` names some). Only the
    /// columns of `projection` are decoded (`store` is refused: a store
    /// does not name itself). `zero_copy`: the `body` column is a
    /// `BinaryView` over the mapped CommitLog files (see the module docs).
    pub fn get_arrow(
        &self,
        req: &PullRequest<'_>,
        projection: Projection,
        zero_copy: bool,
    ) -> Result<GetResult<RecordBatch>> {
        // Buffers sized for what the queue holds past `offset` (a hint: a
        // follower's queue may grow meanwhile).
        let ahead = self.max_offset_in_queue(req.topic, req.queue_id)? - req.offset;
        let rows = req.max_msgs.min(usize::try_from(ahead).unwrap_or(0).max(1));
        let sink = PullBatch::new(rows, projection, zero_copy)?;
        let limits = limits_of_batch(MAX_BATCH_BODY_BYTES / 2);
        let r = self.pull_within(req, &limits, sink)?;
        let batch = r.messages.finish()?;
        Ok(GetResult {
            status: r.status,
            next_begin_offset: r.next_begin_offset,
            min_offset: r.min_offset,
            max_offset: r.max_offset,
            messages: batch,
            damaged: r.damaged,
            skipped: r.skipped,
        })
    }
}
