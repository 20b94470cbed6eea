//! The read methods of `NativeStore`: pulls, lookups by offset, id and
//! key, queue offsets and times, topics and queues, Arrow decodes, and
//! following a writer (read-only stores).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyList, PyType};

use crate::columnar::ArrowReadRequest;
use crate::log::commitlog::RecordAt;
use crate::log::message::RecordFrame;
use crate::queue::reader::{GetStatus, PullRequest, PullSink};

use super::args::{
    BeginTimestamp, CqOffset, EndTimestamp, Key, MaxMsgNums, MaxNum, MsgId, Offset, QueueId,
    TagList, Timestamp, Topic,
};
use super::fast_method::new_instance;
use super::gil::{guarded, nogil};
use super::message_ext::{PyMessageExt, RecordBytes};
use super::store::PyStore;
use super::types::get_status_obj;

/// The records of one `get_message` pull, copied into one buffer (one
/// allocation per pull, not one per message).
#[derive(Default)]
struct PullBuf {
    buf: Vec<u8>,
    /// Each message's frame, and where its record lies in `buf`.
    msgs: Vec<(RecordFrame, usize, usize)>,
}

/// Pulls whose records take more bytes than this give each message its own
/// copy instead: a message kept alive keeps its whole buffer alive.
const SHARE_MAX: usize = 64 << 10;

impl PullSink for PullBuf {
    #[inline]
    fn push(&mut self, frame: RecordFrame, rec: RecordAt) {
        let bytes = rec.bytes();
        if self.buf.capacity() == 0 {
            self.buf.reserve(8 << 10);
            self.msgs.reserve(PullRequest::DEFAULT_MAX_MSGS);
        }
        self.msgs.push((frame, self.buf.len(), bytes.len()));
        self.buf.extend_from_slice(bytes);
    }
    fn served(&self) -> usize {
        self.msgs.len()
    }
}

impl PullBuf {
    /// The messages as a list of `MessageExt`.
    fn into_list(self, py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
        let shared = self.buf.len() <= SHARE_MAX;
        let buf = Arc::new(self.buf);
        let items = self.msgs.into_iter().map(|(frame, start, len)| {
            let raw = if shared {
                RecordBytes::Shared {
                    buf: buf.clone(),
                    start,
                    len,
                }
            } else {
                RecordBytes::Own(buf[start..start + len].to_vec())
            };
            PyMessageExt::new_bound(py, raw, frame)
        });
        let objs = items.collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, objs)
    }
}

/// The result of `get_message`. Its attributes are fields read by PyO3's
/// field getters (a getter method checks the type of `self` again, an
/// allocation per read with this build; a pull reads `status` and
/// `messages` every time).
#[pyclass(frozen, module = "rocketstore._native", name = "GetMessageResult")]
pub struct PyGetResult {
    /// The engine's status of the pull.
    engine_status: GetStatus,
    /// The `GetStatus` of the pull.
    #[pyo3(get)]
    status: PyObject,
    #[pyo3(get)]
    next_begin_offset: i64,
    #[pyo3(get)]
    min_offset: i64,
    #[pyo3(get)]
    max_offset: i64,
    /// Messages skipped because their record is damaged (body CRC, size
    /// fields, or not the message its queue unit names); they are never
    /// served, and `next_begin_offset` moves past them.
    #[pyo3(get)]
    damaged: usize,
    /// Offsets the pull moved past because retention deleted their
    /// messages (below the min offset, or pointing into a deleted CommitLog
    /// file); also inside a `FOUND` pull.
    #[pyo3(get)]
    skipped: u64,
    /// The messages found (a list of MessageExt).
    #[pyo3(get)]
    messages: Py<PyList>,
}

impl PyGetResult {
    /// The engine's status of the pull.
    pub(super) fn engine_status(&self) -> GetStatus {
        self.engine_status
    }
}

#[pymethods]
impl PyGetResult {
    fn __len__(&self, py: Python<'_>) -> usize {
        self.messages.bind(py).len()
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "GetMessageResult(status={}, next_begin_offset={}, min_offset={}, max_offset={}, messages=<{}>{}{})",
            self.status.bind(py).str()?,
            self.next_begin_offset,
            self.min_offset,
            self.max_offset,
            self.messages.bind(py).len(),
            if self.skipped > 0 {
                format!(", skipped={}", self.skipped)
            } else {
                String::new()
            },
            if self.damaged > 0 {
                format!(", damaged={}", self.damaged)
            } else {
                String::new()
            }
        ))
    }
}

#[pymethods]
impl PyStore {
    /// The message whose record starts at `offset`, or None.
    pub(crate) fn look_message_by_offset(
        &self,
        py: Python<'_>,
        offset: Offset<'_>,
    ) -> PyResult<Option<PyMessageExt>> {
        guarded(|| {
            let offset = offset.get()?;
            self.store.check_open()?;
            if offset < 0 {
                return Ok(None);
            }
            self.visible(py)?;
            let store = &self.store;
            let r = nogil(py, || store.look_message_by_offset(offset as u64))?;
            Ok(r.map(|(view, raw)| PyMessageExt::new(raw.into(), RecordFrame::of(&view))))
        })
    }

    /// The message with offset message id `msg_id`, or None.
    fn look_message_by_id(
        &self,
        py: Python<'_>,
        msg_id: MsgId<'_>,
    ) -> PyResult<Option<PyMessageExt>> {
        guarded(|| {
            let msg_id = msg_id.get()?;
            self.store.check_open()?;
            self.visible(py)?;
            let store = &self.store;
            let r = nogil(py, || store.look_message_by_id(msg_id))?;
            Ok(r.map(|(view, raw)| PyMessageExt::new(raw.into(), RecordFrame::of(&view))))
        })
    }

    /// Read-only stores: picks up what the writer appended. True if new
    /// messages became visible.
    fn refresh(&self, py: Python<'_>) -> PyResult<bool> {
        guarded(|| {
            let store = &self.store;
            nogil(py, || store.refresh())
        })
    }

    /// Pulls up to `max_msg_nums` messages of a queue from `offset`.
    #[pyo3(signature = (topic, queue_id, offset, max_msg_nums=None, tags=None), text_signature = "($self, topic, queue_id, offset, max_msg_nums=32, tags=None)")]
    pub(crate) fn get_message<'py>(
        &self,
        py: Python<'py>,
        topic: Topic<'_>,
        queue_id: QueueId<'_>,
        offset: Offset<'_>,
        max_msg_nums: Option<MaxMsgNums<'_>>,
        tags: Option<TagList<'_>>,
    ) -> PyResult<Bound<'py, PyGetResult>> {
        guarded(|| {
            // A closed store refuses first, whatever the arguments.
            self.store.check_not_closed()?;
            let mut req = PullRequest::at(topic.get()?, queue_id.get()?, offset.get()?);
            if let Some(max) = max_msg_nums {
                req.max_msgs = max.get()?;
            }
            if let Some(tags) = tags {
                req = req.tags(&tags.get()?);
            }
            self.store.check_read_topic(req.topic)?;
            self.visible(py)?;
            let store = &self.store;
            let r = nogil(py, || store.pull(&req, PullBuf::default()))?;
            let list = r.messages.into_list(py)?;
            static TYPE: GILOnceCell<Py<PyType>> = GILOnceCell::new();
            let result = PyGetResult {
                engine_status: r.status,
                status: get_status_obj(py, r.status)?,
                next_begin_offset: r.next_begin_offset,
                min_offset: r.min_offset,
                max_offset: r.max_offset,
                damaged: r.damaged.len(),
                skipped: r.skipped,
                messages: list.unbind(),
            };
            new_instance(py, result, &TYPE)
        })
    }

    /// One past the last logical offset of a queue (0 if unknown).
    pub(crate) fn get_max_offset_in_queue(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        queue_id: QueueId<'_>,
    ) -> PyResult<i64> {
        self.queue_read(py, topic, queue_id, |store, topic, qid| {
            store.max_offset_in_queue(topic, qid)
        })
    }

    /// The first logical offset of a queue (0 if unknown).
    pub(crate) fn get_min_offset_in_queue(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        queue_id: QueueId<'_>,
    ) -> PyResult<i64> {
        self.queue_read(py, topic, queue_id, |store, topic, qid| {
            store.min_offset_in_queue(topic, qid)
        })
    }

    /// CommitLog offset of the message at `cq_offset` (0 if none).
    fn get_commit_log_offset_in_queue(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        queue_id: QueueId<'_>,
        cq_offset: CqOffset<'_>,
    ) -> PyResult<i64> {
        guarded(|| {
            let (topic, qid) = (topic.get()?, queue_id.get()?);
            let cq_offset = cq_offset.get()?;
            self.readable(py, topic)?;
            Ok(self
                .store
                .commit_log_offset_in_queue(topic, qid, cq_offset)?)
        })
    }

    /// Logical offset of the message stored nearest to `timestamp` (ms).
    fn get_offset_in_queue_by_time(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        queue_id: QueueId<'_>,
        timestamp: Timestamp<'_>,
    ) -> PyResult<i64> {
        guarded(|| {
            let (topic, qid, timestamp) = (topic.get()?, queue_id.get()?, timestamp.get()?);
            self.readable(py, topic)?;
            let store = &self.store;
            nogil(py, || store.offset_in_queue_by_time(topic, qid, timestamp))
        })
    }

    /// Store time of the first message of a queue (-1 if none).
    fn get_earliest_message_time(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        queue_id: QueueId<'_>,
    ) -> PyResult<i64> {
        self.queue_read(py, topic, queue_id, |store, topic, qid| {
            store.earliest_message_time(topic, qid)
        })
    }

    /// Store time of the message at `cq_offset` (-1 if none).
    fn get_message_store_timestamp(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        queue_id: QueueId<'_>,
        cq_offset: CqOffset<'_>,
    ) -> PyResult<i64> {
        guarded(|| {
            let (topic, qid) = (topic.get()?, queue_id.get()?);
            let cq_offset = cq_offset.get()?;
            self.readable(py, topic)?;
            Ok(self.store.message_store_timestamp(topic, qid, cq_offset)?)
        })
    }

    /// Whether the store times of a queue's messages from `from` on never
    /// decrease (after `prev`): `(monotone, end, last)`, see
    /// `Store::queue_times_monotone`.
    #[pyo3(signature = (topic, queue_id, from_offset=0, prev=None))]
    fn queue_times_monotone(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        queue_id: QueueId<'_>,
        from_offset: i64,
        prev: Option<i64>,
    ) -> PyResult<(bool, i64, i64)> {
        guarded(|| {
            let (topic, qid) = (topic.get()?, queue_id.get()?);
            self.readable(py, topic)?;
            let store = &self.store;
            nogil(py, || {
                store.queue_times_monotone(topic, qid, from_offset, prev.unwrap_or(i64::MIN))
            })
        })
    }

    /// `(queue_id, queue_offset)` of every message of `topic` carrying
    /// `key` by the index, and the damaged records it pointed at; None
    /// without a usable index.
    fn key_hits(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        key: Key<'_>,
    ) -> PyResult<Option<crate::store::KeyHits>> {
        guarded(|| {
            let (topic, key) = (topic.get()?, key.get()?);
            self.store.check_read_topic(topic)?;
            self.visible(py)?;
            let store = &self.store;
            nogil(py, || store.key_hits(topic, key))
        })
    }

    /// CommitLog offsets of the first and last record the index holds.
    fn index_coverage(&self) -> PyResult<Option<(i64, i64)>> {
        guarded(|| {
            self.store.check_open()?;
            Ok(self.store.index_coverage())
        })
    }

    /// Messages of `topic` carrying `key`, stored in `[begin, end]` (ms).
    #[pyo3(signature = (topic, key, max_num=None, begin_timestamp=None, end_timestamp=None), text_signature = "($self, topic, key, max_num=32, begin_timestamp=0, end_timestamp=None)")]
    pub(crate) fn query_message<'py>(
        &self,
        py: Python<'py>,
        topic: Topic<'_>,
        key: Key<'_>,
        max_num: Option<MaxNum<'_>>,
        begin_timestamp: Option<BeginTimestamp<'_>>,
        end_timestamp: Option<EndTimestamp<'_>>,
    ) -> PyResult<Bound<'py, PyList>> {
        guarded(|| {
            // A closed store refuses first, whatever the arguments (as
            // the Python wrapper's closed check did).
            self.store.check_not_closed()?;
            let (topic, key) = (topic.get()?, key.get()?);
            // The index slot loads while the arguments are checked and the
            // GIL is released.
            let lookup = self.store.prefetch_key(topic, key);
            let max_num = max_num.map_or(Ok(32), |m| m.get())?;
            let begin_timestamp = begin_timestamp.map_or(Ok(0), |t| t.get())?;
            let end_timestamp = end_timestamp.map(|t| t.get()).transpose()?;
            self.store.check_read_topic(topic)?;
            let end = end_timestamp.unwrap_or(i64::MAX);
            self.visible(py)?;
            let store = &self.store;
            let found = nogil(py, || {
                store.query_key(&lookup, max_num, begin_timestamp, end)
            })?;
            let list = PyList::empty(py);
            for (frame, raw) in found {
                list.append(PyMessageExt::new_bound(py, raw.into(), frame)?)?;
            }
            Ok(list)
        })
    }

    /// Decodes ranges into an Arrow stream: `queue_ranges` as
    /// `(topic, queue_id, from, to)` logical offsets, then `commitlog_ranges`
    /// as `(from, to)` physical offsets. See `rocketstore.columnar` rules.
    /// `columns`: the columns returned, in that order (`None`: all).
    #[pyo3(signature = (queue_ranges=None, commitlog_ranges=None, *, topics=None, include_system=false, include_uncommitted=false, min_store_timestamp=None, max_store_timestamp=None, tags=None, batch_size=65_536, store_name=None, threads=1, columns=None))]
    #[allow(clippy::too_many_arguments)] // one per Python argument
    fn read_arrow(
        &self,
        queue_ranges: Option<Vec<(String, i64, i64, i64)>>,
        commitlog_ranges: Option<Vec<(i64, i64)>>,
        topics: Option<Vec<String>>,
        include_system: bool,
        include_uncommitted: bool,
        min_store_timestamp: Option<i64>,
        max_store_timestamp: Option<i64>,
        tags: Option<Vec<String>>,
        batch_size: i64,
        store_name: Option<String>,
        threads: usize,
        columns: Option<Vec<String>>,
    ) -> PyResult<super::arrow::PyArrowStream> {
        guarded(|| {
            self.store.check_open()?;
            let projection = columns
                .map(|c| crate::columnar::Projection::of(&c))
                .transpose()
                .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
            if batch_size <= 0 {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "batch_size must be > 0, got {batch_size}"
                )));
            }
            let mut queues = Vec::new();
            for (topic, qid, from, to) in queue_ranges.unwrap_or_default() {
                let queue_id = self.check_read_args(&topic, qid)?;
                queues.push((topic, queue_id, from, to));
            }
            let filter = crate::columnar::RowFilter {
                topics: topics.map(|t| t.into_iter().map(String::into_bytes).collect()),
                include_system,
                include_uncommitted,
                min_store_timestamp,
                max_store_timestamp,
                tags: tags.map(|t| crate::queue::reader::TagFilter::exact(&t)),
            };
            let (reader, stats) = self.store.arrow_reader(ArrowReadRequest {
                filter,
                batch_rows: batch_size as usize,
                projection,
                store_name,
                threads,
                ..ArrowReadRequest::of(queues, commitlog_ranges.unwrap_or_default())
            })?;
            Ok(super::arrow::PyArrowStream::new(reader, stats))
        })
    }

    /// Queue ids of `topic` that exist, sorted.
    fn queue_ids(&self, py: Python<'_>, topic: Topic<'_>) -> PyResult<Vec<i32>> {
        guarded(|| {
            let topic = topic.get()?;
            self.store.check_read_topic(topic)?;
            self.store.check_open()?;
            self.visible(py)?;
            Ok(self.store.consume_queues().queue_ids(topic))
        })
    }

    /// Topics that have at least one queue, sorted.
    fn topics(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        guarded(|| {
            self.store.check_open()?;
            self.visible(py)?;
            Ok(self.store.consume_queues().topics())
        })
    }
}
