//! One pull of a queue as one record batch ([`Store::get_arrow`], what
//! `MessageStore.get_arrow` and `Consumer.poll_arrow` return).
//!
//! ```text
//!  Store::pull_into (units, checks, tag filter, statuses: get_message's)
//!        | each message: (RecordView, RecordAt = file + position)
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
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};

use super::batch::inflate;
use super::{BatchBuilder, MAX_BATCH_BODY_BYTES};
use crate::error::{Result, StoreError};
use crate::log::commitlog::RecordAt;
use crate::log::mapped_file::MappedFile;
use crate::log::message::{sysflag, RecordView};
use crate::queue::reader::{limits_of_batch, GetResult, PullSink};
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
    fn push(&mut self, v: &RecordView, at: &RecordAt) {
        if v.sys_flag & sysflag::COMPRESSED != 0 {
            let stored = at.bytes().get(v.body.clone()).unwrap_or_default();
            let body = inflate(v.sys_flag, stored).unwrap_or_else(|| stored.to_vec());
            self.rows.push(Body::Owned(body));
            return;
        }
        let (pos, end) = (at.pos + v.body.start, at.pos + v.body.end);
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
    builder: BatchBuilder,
    views: Option<BodyViews>,
}

impl PullSink for PullBatch {
    #[inline]
    fn push(&mut self, view: RecordView, at: RecordAt) {
        self.builder.push(&view, at.bytes());
        if let Some(b) = &mut self.views {
            b.push(&view, &at);
        }
    }
}

impl PullBatch {
    fn finish(mut self) -> Result<RecordBatch> {
        let batch = self
            .builder
            .finish()
            // The columns are built to the schema: a refusal is an engine bug.
            .map_err(|e| StoreError::internal(format!("arrow: {e}")))?;
        let Some(views) = self.views else {
            return Ok(batch);
        };
        let Ok(i) = batch.schema().index_of("body") else {
            return Ok(batch);
        };
        let body = views.finish()?;
        let mut fields: Vec<Field> = batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        let mut cols: Vec<ArrayRef> = batch.columns().to_vec();
        if let (Some(f), Some(c)) = (fields.get_mut(i), cols.get_mut(i)) {
            *f = Field::new("body", DataType::BinaryView, true);
            debug_assert_eq!(c.len(), body.len());
            *c = body;
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
            .map_err(|e| StoreError::internal(format!("arrow: {e}")))
    }
}

/// A batch of no rows with the columns [`Store::get_arrow`] returns.
pub fn empty_pull_batch(zero_copy: bool) -> Result<RecordBatch> {
    PullBatch::new(0, zero_copy).finish()
}

impl PullBatch {
    fn new(max_msgs: usize, zero_copy: bool) -> Self {
        let rows = max_msgs.min(1 << 16);
        PullBatch {
            builder: BatchBuilder::new(rows, rows * 128, None),
            views: zero_copy.then(BodyViews::default),
        }
    }
}

impl Store {
    /// Pulls up to `max_msgs` messages of a queue from `offset` into one
    /// record batch: [`Store::get_message`]'s pull (statuses, next offset,
    /// damaged and skipped accounting, tag filter, CRC checks) without its
    /// per-pull transfer caps. `zero_copy`: the `body` column is a
    /// `BinaryView` over the mapped CommitLog files (see the module docs).
    pub fn get_arrow(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msgs: usize,
        tags: Option<&[String]>,
        zero_copy: bool,
    ) -> Result<GetResult<RecordBatch>> {
        let sink = PullBatch::new(max_msgs, zero_copy);
        let limits = limits_of_batch(MAX_BATCH_BODY_BYTES / 2);
        let r = self.pull_into(topic, queue_id, offset, max_msgs, tags, Some(&limits), sink)?;
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
