//! `NativeStore`: the engine store as a Python class. The public
//! `rocketstore.MessageStore` (Python) opens one, orchestrates it, and
//! attaches it to its native base class (`store_base.rs`), whose
//! per-message methods call the ones here.

use std::borrow::Cow;
use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

use std::time::{Duration, Instant};

use crate::log::commitlog::{BatchInput, PutOutcome, PutStatus, Refused};
use crate::log::message::{
    decode_msg_id, is_valid_topic, topic_problem, MessageSpec, PropertiesBuilder,
};
use crate::queue::reader::GetStatus;
use crate::store::Store;

use super::args::{
    body_arg, defaulted, i32_arg, i64_arg, opt_dict_arg, opt_i64_arg, opt_str_arg, str_arg,
    type_error,
};
use super::config::options_from_config;
use super::gil::{guarded, nogil};
use super::recovery::{
    PyCommitLogScanReport, PyConsumeQueueReport, PyConsumerOffsetReport, PyDamageRule,
    PyFileSizeReport, PyIndexRebuildReport, PyQueueHoleReport, PyQueueOffsetTableReport,
    PyRecoveryMode, PyRecoveryReport, PyRedispatchReport, PyTruncateReport,
};
use super::results::{
    PyCheckpointTimes, PyCommitLogExpiry, PyDeliverStep, PyGroupCommitStats, PyQueueExpiry,
    PyVisibilityStats,
};
use super::types::{
    build_properties, build_properties_into, check_queue_id, get_status_obj, parse_host,
    queue_id_arg, PyBatchPutResult, PyMessage, PyMessageExt, PyPutResult, DEFAULT_BORN_HOST,
};

/// The engine store (private; use `rocketstore.MessageStore`).
#[pyclass(frozen, module = "rocketstore._native", name = "NativeStore")]
pub struct PyStore {
    store: Arc<Store>,
}

impl PyStore {
    /// Milliseconds now for born timestamps: the store's cached clock.
    #[inline]
    fn now_ms(&self) -> i64 {
        self.store.commitlog().clock_ms()
    }

    fn result(&self, outcome: PutOutcome) -> PyPutResult {
        PyPutResult {
            outcome,
            store_host: self.store.options().store_host,
        }
    }

    /// The result of a message refused before it reached the engine; the
    /// store's state (closed, read-only) is reported first, as for any put.
    fn refuse_illegal(&self, refused: Refused) -> PyResult<PyPutResult> {
        self.store.check_open()?;
        if self.store.is_read_only() {
            return Err(crate::error::StoreError::ReadOnly.into());
        }
        Ok(self.result(PutOutcome::rejected(refused)))
    }

    fn put_spec(&self, py: Python<'_>, spec: MessageSpec<'_>) -> PyResult<PyPutResult> {
        // A compressed body is inflated to check it: that may take a while,
        // so it is validated with the GIL released.
        let prepared = if spec.sys_flag & crate::log::message::sysflag::COMPRESSED != 0 {
            let store = &self.store;
            nogil(py, || store.prepare(spec))?
        } else {
            self.store.prepare(spec)?
        };
        let p = match prepared {
            Ok(p) => p,
            Err(r) => return Ok(self.result(PutOutcome::rejected(r))),
        };
        let out = match self.store.try_put_fast(&p) {
            Some(r) => r?,
            None => {
                let store = &self.store;
                nogil(py, || store.put_prepared(&p))?
            }
        };
        Ok(self.result(out))
    }
}

/// The items of a per-message argument of `put_batch`, which must have one
/// item per body.
fn per_message<'py>(
    what: &str,
    seq: &Option<Bound<'py, PyAny>>,
    n: usize,
) -> PyResult<Option<Vec<Bound<'py, PyAny>>>> {
    let Some(seq) = seq else { return Ok(None) };
    let v: Vec<Bound<'py, PyAny>> = seq
        .try_iter()
        .map_err(|_| {
            PyTypeError::new_err(format!("{what} must be a sequence with one item per body"))
        })?
        .collect::<PyResult<_>>()?;
    if v.len() != n {
        return Err(PyValueError::new_err(format!(
            "{what} has {} items for {n} bodies",
            v.len()
        )));
    }
    Ok(Some(v))
}

/// A `tags` argument of a read: None, or an iterable of str.
fn tag_list_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<String>>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    let iter = obj
        .try_iter()
        .map_err(|_| type_error("tags", "a list of str", obj))?;
    let mut out = Vec::new();
    for item in iter {
        let item = item?;
        out.push(str_arg(&item, "each tag")?.to_owned());
    }
    Ok(Some(out))
}

/// A message of a batch as borrowed parts, or why it is refused.
type Parts<'a> = std::result::Result<(&'a PyMessage, &'a str, &'a [u8]), Refused>;

/// Longest uninterrupted wait before checking for Ctrl-C.
const SIGNAL_SLICE: Duration = Duration::from_millis(100);

impl PyStore {
    /// Validates a topic given to a read. A topic that fails the put rule is
    /// refused only when the store does not hold it: a name that could never
    /// have been written is a mistake better reported at once (a consumer
    /// would otherwise poll nothing forever), while a topic that exists on
    /// disk is always readable.
    fn check_read_topic(&self, topic: &str) -> PyResult<()> {
        if is_valid_topic(topic) {
            return Ok(());
        }
        self.store.check_open()?;
        let exists = !self.store.consume_queues().queue_ids(topic).is_empty()
            || self
                .store
                .commitlog()
                .queue_offsets()
                .entries()
                .iter()
                .any(|(t, _, _)| t == topic);
        if exists {
            return Ok(());
        }
        let why = topic_problem(topic).unwrap_or_default();
        Err(pyo3::exceptions::PyValueError::new_err(format!(
            "{why}, and the store holds no such topic"
        )))
    }

    /// Validates a topic and queue id given to a read.
    fn check_read_args(&self, topic: &str, queue_id: i64) -> PyResult<i32> {
        self.check_read_topic(topic)?;
        check_queue_id(queue_id)
    }

    /// The queue id of a read of one queue, checked with its topic, once
    /// the puts acknowledged so far are visible.
    fn readable(&self, py: Python<'_>, topic: &str, queue_id: i64) -> PyResult<i32> {
        let qid = self.check_read_args(topic, queue_id)?;
        self.store.check_open()?;
        self.visible(py)?;
        Ok(qid)
    }

    /// Waits (GIL released) until the puts acknowledged so far are visible;
    /// one atomic comparison when nothing is pending. Waits in slices, so
    /// Ctrl-C works and interpreter exit is not held up.
    #[inline]
    fn visible(&self, py: Python<'_>) -> PyResult<()> {
        if self.store.visibility_pending() {
            self.visible_slow(py)?;
        }
        Ok(())
    }

    #[cold]
    fn visible_slow(&self, py: Python<'_>) -> PyResult<()> {
        let store = &self.store;
        let deadline = store.visibility_deadline();
        loop {
            if super::gil::exiting() {
                store.give_up_visibility();
                return Ok(());
            }
            let stop_at = (Instant::now() + SIGNAL_SLICE).min(deadline);
            if nogil(py, || store.await_visible_until(deadline, stop_at))? {
                return Ok(());
            }
            py.check_signals()?;
        }
    }
}

/// A row an Arrow append refused: `(row index, PutStatus value, reason)`.
type RefusedRow = (u64, u8, String);

/// The result of `get_message`.
#[pyclass(frozen, module = "rocketstore._native", name = "GetMessageResult")]
pub struct PyGetResult {
    status: GetStatus,
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
    messages: Py<PyList>,
}

#[pymethods]
impl PyGetResult {
    /// The `GetStatus` of the pull.
    #[getter]
    fn status(&self, py: Python<'_>) -> PyResult<PyObject> {
        get_status_obj(py, self.status)
    }
    /// The messages found (a list of MessageExt).
    #[getter]
    fn messages(&self, py: Python<'_>) -> Py<PyList> {
        self.messages.clone_ref(py)
    }
    fn __len__(&self, py: Python<'_>) -> usize {
        self.messages.bind(py).len()
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "GetMessageResult(status={}, next_begin_offset={}, min_offset={}, max_offset={}, messages=<{}>{}{})",
            self.status(py)?.bind(py).str()?,
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
    /// Takes the writer lock (unless `read_only`) and loads the store's
    /// files. `config` is a `rocketstore.StoreConfig`, read field by field.
    #[new]
    #[pyo3(signature = (config, read_only=false))]
    fn new(py: Python<'_>, config: &Bound<'_, PyAny>, read_only: bool) -> PyResult<Self> {
        guarded(|| {
            let opts = options_from_config(config, read_only)?;
            let store = nogil(py, || Store::open(opts))?;
            Ok(Self {
                store: Arc::new(store),
            })
        })
    }

    // -- recovery steps (crate::recovery; the order is enforced there) ----

    /// How recovery scans the CommitLog: ``RecoveryMode.ABNORMAL`` when the
    /// abort file says the last writer crashed (never for read-only opens).
    #[getter]
    fn recovery_mode(&self) -> PyRecoveryMode {
        self.store.recovery_mode().into()
    }

    /// Step 1: extends short newest files, creates or extends the
    /// checkpoint, removes a short newest index file.
    fn check_file_sizes(&self, py: Python<'_>) -> PyResult<PyFileSizeReport> {
        guarded(|| Ok(nogil(py, || self.store.check_file_sizes())?.into()))
    }

    /// Step 2: the rule telling a torn tail from damage (the durable mark).
    #[pyo3(signature = (skip_damaged=false))]
    fn judge_damage(&self, py: Python<'_>, skip_damaged: bool) -> PyResult<PyDamageRule> {
        guarded(|| Ok(nogil(py, || self.store.judge_damage(skip_damaged))?.into()))
    }

    /// Step 3 after a clean stop: scans the CommitLog's last three files.
    fn scan_commit_log_normally(
        &self,
        py: Python<'_>,
        check_crc: bool,
    ) -> PyResult<PyCommitLogScanReport> {
        guarded(|| Ok(nogil(py, || self.store.scan_commit_log_normally(check_crc))?.into()))
    }

    /// Step 3 for a repair: scans from the first file, in either mode.
    fn scan_whole_commit_log(
        &self,
        py: Python<'_>,
        check_crc: bool,
    ) -> PyResult<PyCommitLogScanReport> {
        guarded(|| Ok(nogil(py, || self.store.scan_whole_commit_log(check_crc))?.into()))
    }

    /// Step 3 after a crash: scans from the file the checkpoint points at.
    fn scan_commit_log_abnormally(
        &self,
        py: Python<'_>,
        check_crc: bool,
    ) -> PyResult<PyCommitLogScanReport> {
        guarded(|| Ok(nogil(py, || self.store.scan_commit_log_abnormally(check_crc))?.into()))
    }

    /// Step 4: every consume queue keeps its good units, cut past the last.
    fn recover_consume_queues(&self, py: Python<'_>) -> PyResult<PyConsumeQueueReport> {
        guarded(|| Ok(nogil(py, || self.store.recover_consume_queues())?.into()))
    }

    /// Step 5: rebuilds the queue units between good ones from the CommitLog.
    fn rebuild_queue_holes(&self, py: Python<'_>) -> PyResult<PyQueueHoleReport> {
        guarded(|| Ok(nogil(py, || self.store.rebuild_queue_holes())?.into()))
    }

    /// Step 6: cuts and zeroes the CommitLog and the queues past the end.
    fn truncate(&self, py: Python<'_>) -> PyResult<PyTruncateReport> {
        guarded(|| Ok(nogil(py, || self.store.truncate())?.into()))
    }

    /// Step 7: destroys stale index files and re-indexes from the oldest.
    fn rebuild_index(&self, py: Python<'_>) -> PyResult<PyIndexRebuildReport> {
        guarded(|| Ok(nogil(py, || self.store.rebuild_index())?.into()))
    }

    /// Step 8: re-dispatches the scanned records (after a crash) and what
    /// the queues miss.
    fn redispatch(&self, py: Python<'_>) -> PyResult<PyRedispatchReport> {
        guarded(|| Ok(nogil(py, || self.store.redispatch())?.into()))
    }

    /// Step 9: the stored consumer offsets (``{"topic@group": {queue_id:
    /// offset}}``) above their queue's recovered end, with that end.
    fn clamp_consumer_offsets(
        &self,
        py: Python<'_>,
        offsets: std::collections::HashMap<String, std::collections::HashMap<i32, i64>>,
    ) -> PyResult<PyConsumerOffsetReport> {
        guarded(|| {
            let mut entries: Vec<(String, i32, i64)> = offsets
                .into_iter()
                .flat_map(|(k, q)| q.into_iter().map(move |(qid, off)| (k.clone(), qid, off)))
                .collect();
            entries.sort();
            Ok(nogil(py, || self.store.clamp_consumer_offsets(&entries))?.into())
        })
    }

    /// Step 10: the queue-offset table and the durable mark; the store is
    /// recovered.
    fn rebuild_queue_offset_table(&self, py: Python<'_>) -> PyResult<PyQueueOffsetTableReport> {
        guarded(|| Ok(nogil(py, || self.store.rebuild_queue_offset_table())?.into()))
    }

    /// What the recovery found and did (after its last step).
    fn recovery_report(&self) -> PyResult<PyRecoveryReport> {
        guarded(|| Ok(self.store.recovery_report()?.into()))
    }

    /// Puts one message given as arguments (no `Message` object needed).
    #[pyo3(signature = (topic, body, queue_id=None, tags=None, keys=None, properties=None, delay_level=None, flag=None, born_timestamp=None, born_host=None, sys_flag=None), text_signature = "($self, topic, body, queue_id=0, tags=None, keys=None, properties=None, delay_level=0, flag=0, born_timestamp=None, born_host=None, sys_flag=0)")]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn put(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyAny>,
        body: &Bound<'_, PyAny>,
        queue_id: Option<&Bound<'_, PyAny>>,
        tags: Option<&Bound<'_, PyAny>>,
        keys: Option<Bound<'_, PyAny>>,
        properties: Option<&Bound<'_, PyAny>>,
        delay_level: Option<&Bound<'_, PyAny>>,
        flag: Option<&Bound<'_, PyAny>>,
        born_timestamp: Option<&Bound<'_, PyAny>>,
        born_host: Option<Bound<'_, PyAny>>,
        sys_flag: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyPutResult> {
        guarded(|| {
            let topic_obj = topic;
            let topic = topic_obj
                .downcast::<PyString>()
                .map_err(|_| type_error("topic", "str", topic_obj))?;
            // Copied once (unless bytes): the CRC and the record come from the copy.
            let body = body_arg(body)?;
            let body = body.as_bytes();
            let queue_id = defaulted(queue_id, 0, queue_id_arg)?;
            let tags = opt_str_arg(tags, "tags")?;
            let keys = keys.filter(|k| !k.is_none());
            let properties = opt_dict_arg(properties, "properties", "a dict of str to str")?;
            let delay_level = defaulted(delay_level, 0, |o| i32_arg(o, "delay_level"))?;
            let flag = defaulted(flag, 0, |o| i32_arg(o, "flag"))?;
            let sys_flag = defaulted(sys_flag, 0, |o| i32_arg(o, "sys_flag"))?;
            let born_timestamp = opt_i64_arg(born_timestamp, "born_timestamp")?;
            let props =
                if tags.is_none() && keys.is_none() && properties.is_none() && delay_level == 0 {
                    Ok(Vec::new())
                } else {
                    build_properties(tags, keys.as_ref(), properties, delay_level)?
                };
            let born_host = match born_host.filter(|h| !h.is_none()) {
                Some(h) => parse_host(&h, "born_host")?,
                None => DEFAULT_BORN_HOST,
            };
            let Ok(topic) = topic.to_str() else {
                return self.refuse_illegal(Refused::illegal(
                    "topic is not valid UTF-8 text (it holds a lone surrogate)",
                ));
            };
            let props = match props {
                Ok(p) => p,
                Err(why) => return self.refuse_illegal(Refused::illegal(why)),
            };
            let spec = MessageSpec {
                topic: Cow::Borrowed(topic),
                queue_id,
                flag,
                sys_flag,
                born_timestamp: born_timestamp.unwrap_or_else(|| self.now_ms()),
                born_host,
                reconsume_times: 0,
                prepared_transaction_offset: 0,
                body: Cow::Borrowed(body),
                properties: Cow::Owned(props),
            };
            self.put_spec(py, spec)
        })
    }

    /// Puts one `Message`.
    pub(crate) fn put_message(
        &self,
        py: Python<'_>,
        msg: &Bound<'_, PyAny>,
    ) -> PyResult<PyPutResult> {
        guarded(|| {
            let m = msg
                .downcast::<PyMessage>()
                .map_err(|_| type_error("msg", "rocketstore.Message", msg))?;
            let m = m.get();
            match m.spec(py, self.now_ms()) {
                Ok(spec) => self.put_spec(py, spec),
                Err(refused) => self.refuse_illegal(refused),
            }
        })
    }

    /// Puts messages in order under one lock hold and one flush wait.
    pub(crate) fn put_messages<'py>(
        &self,
        py: Python<'py>,
        msgs: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        guarded(|| {
            let mut held: Vec<Bound<'py, PyMessage>> = Vec::new();
            for item in msgs
                .try_iter()
                .map_err(|_| type_error("msgs", "a list of rocketstore.Message", msgs))?
            {
                let item = item?;
                let m = item.downcast_into::<PyMessage>().map_err(|e| {
                    type_error("each message", "rocketstore.Message", &e.into_inner())
                })?;
                held.push(m);
            }
            let now = self.now_ms();
            // Borrowed views only (no per-batch copies): topic and body are
            // immutable Python objects kept alive by `held`.
            let parts: Vec<Parts<'_>> = held
                .iter()
                .map(|m| {
                    let m = m.get();
                    m.parts(py).map(|(t, b)| (m, t, b))
                })
                .collect();
            let store = &self.store;
            let outs = nogil(py, || {
                store.put_batch(parts.iter().map(|p| match p {
                    Ok((m, t, b)) => m.spec_with(t, b, now),
                    Err(r) => Err(r.clone()),
                }))
            })?;
            let list = PyList::empty(py);
            for o in outs {
                list.append(Bound::new(py, self.result(o))?)?;
            }
            Ok(list)
        })
    }

    /// Puts many bodies to one topic and queue: all or nothing, one result.
    #[pyo3(signature = (topic, bodies, queue_id=0, *, keys=None, tags=None, properties=None, return_offsets=false))]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn put_batch(
        &self,
        py: Python<'_>,
        topic: &str,
        bodies: &Bound<'_, PyAny>,
        queue_id: i64,
        keys: Option<Bound<'_, PyAny>>,
        tags: Option<Bound<'_, PyAny>>,
        properties: Option<Bound<'_, PyAny>>,
        return_offsets: bool,
    ) -> PyResult<PyBatchPutResult> {
        guarded(|| {
            let queue_id = check_queue_id(queue_id)?;
            if bodies.is_instance_of::<PyBytes>() || bodies.is_instance_of::<PyString>() {
                return Err(PyTypeError::new_err(
                    "put_batch takes a sequence of bodies, not one body",
                ));
            }
            let items: Vec<Bound<'_, PyAny>> = bodies
                .try_iter()
                .map_err(|_| {
                    PyTypeError::new_err("bodies must be a sequence of bytes-like objects")
                })?
                .collect::<PyResult<_>>()?;
            let n = items.len();
            // Bodies are borrowed, not copied: bytes directly, other
            // bytes-like objects through the buffer protocol (the buffers
            // stay exported, so they cannot be resized, until the put ends).
            let mut buffers: Vec<PyBuffer<u8>> = Vec::new();
            let mut bytes_at: Vec<Option<usize>> = Vec::with_capacity(n);
            for (i, item) in items.iter().enumerate() {
                if item.is_instance_of::<PyBytes>() {
                    bytes_at.push(None);
                    continue;
                }
                let buf = PyBuffer::<u8>::get(item).map_err(|_| {
                    PyTypeError::new_err(format!(
                        "body {i} must be bytes-like (bytes, bytearray, memoryview of bytes), not {}",
                        item.get_type().name().map(|s| s.to_string()).unwrap_or_default()
                    ))
                })?;
                if !buf.is_c_contiguous() {
                    return Err(PyValueError::new_err(format!(
                        "body {i} is not a contiguous buffer"
                    )));
                }
                bytes_at.push(Some(buffers.len()));
                buffers.push(buf);
            }
            let slices: Vec<&[u8]> = items
                .iter()
                .zip(&bytes_at)
                .map(|(item, at)| match at {
                    None => item
                        .downcast::<PyBytes>()
                        .map(|b| b.as_bytes())
                        .unwrap_or_default(),
                    Some(k) => {
                        let b = &buffers[*k];
                        // SAFETY: the buffer is exported (kept alive and
                        // unresizable) until `buffers` drops after the put;
                        // the record's CRC is computed over the copied bytes,
                        // so a concurrent change of a mutable buffer cannot
                        // make the record inconsistent.
                        unsafe {
                            std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes())
                        }
                    }
                })
                .collect();
            let keys = per_message("keys", &keys, n)?;
            let tags = per_message("tags", &tags, n)?;
            let properties = per_message("properties", &properties, n)?;
            let mut pb = PropertiesBuilder::new();
            let mut ends: Vec<usize> = Vec::new();
            let mut illegal: Option<String> = None;
            if keys.is_some() || tags.is_some() || properties.is_some() {
                ends.reserve_exact(n);
                for i in 0..n {
                    let k = keys.as_ref().map(|v| &v[i]).filter(|o| !o.is_none());
                    let t = match tags.as_ref().map(|v| &v[i]).filter(|o| !o.is_none()) {
                        Some(t) => Some(
                            t.downcast::<PyString>()
                                .map_err(|_| {
                                    PyTypeError::new_err(format!("tags[{i}] must be a str or None"))
                                })?
                                .to_cow()?,
                        ),
                        None => None,
                    };
                    let p = match properties.as_ref().map(|v| &v[i]).filter(|o| !o.is_none()) {
                        Some(p) => Some(
                            p.downcast::<PyDict>()
                                .map_err(|_| {
                                    PyTypeError::new_err(format!(
                                        "properties[{i}] must be a dict or None"
                                    ))
                                })?
                                .clone(),
                        ),
                        None => None,
                    };
                    if let Err(m) = build_properties_into(&mut pb, t.as_deref(), k, p.as_ref(), 0)?
                    {
                        illegal.get_or_insert_with(|| format!("message {i}: {m}"));
                    }
                    ends.push(pb.len());
                }
            }
            let born_timestamp = self.now_ms();
            let result = |o: Result<
                crate::log::commitlog::BatchOutcome,
                crate::log::commitlog::BatchRefusal,
            >|
             -> PyResult<PyBatchPutResult> {
                let store_host = self.store.options().store_host;
                Ok(match o {
                    Ok(o) => {
                        let offsets = if return_offsets {
                            let raw: Vec<u8> =
                                o.offsets.iter().flat_map(|x| x.to_ne_bytes()).collect();
                            let array = py.import("array")?.getattr("array")?;
                            Some(array.call1(("q", PyBytes::new(py, &raw)))?.unbind())
                        } else {
                            None
                        };
                        PyBatchPutResult {
                            status: o.status,
                            reason: (o.status != PutStatus::PutOk).then(|| {
                                let why = o
                                    .reason
                                    .clone()
                                    .unwrap_or_else(|| format!("{:?}", o.status));
                                format!("{why} ({} of {n} messages were written)", o.count)
                            }),
                            wrote_offset: o.first_offset,
                            queue_offset: if o.count > 0 {
                                o.first_queue_offset
                            } else {
                                -1
                            },
                            count: o.count,
                            wrote_bytes: o.bytes,
                            store_timestamp: o.store_timestamp,
                            offsets,
                            store_host,
                        }
                    }
                    Err(r) => PyBatchPutResult {
                        status: r.status,
                        reason: Some(r.reason),
                        wrote_offset: -1,
                        queue_offset: -1,
                        count: 0,
                        wrote_bytes: 0,
                        store_timestamp: 0,
                        offsets: None,
                        store_host,
                    },
                })
            };
            if let Some(m) = illegal {
                // State errors (closed, read-only) take precedence.
                self.store
                    .prepare(MessageSpec {
                        topic: Cow::Borrowed("x"),
                        queue_id: 0,
                        flag: 0,
                        sys_flag: 0,
                        born_timestamp: 0,
                        born_host: DEFAULT_BORN_HOST,
                        reconsume_times: 0,
                        prepared_transaction_offset: 0,
                        body: Cow::Borrowed(b""),
                        properties: Cow::Borrowed(b""),
                    })?
                    .ok();
                return result(Err(crate::log::commitlog::BatchRefusal {
                    status: PutStatus::MessageIllegal,
                    reason: m,
                }));
            }
            let props = pb.finish();
            let input = BatchInput {
                topic,
                queue_id,
                flag: 0,
                born_timestamp,
                born_host: DEFAULT_BORN_HOST,
                bodies: &slices,
                props: &props,
                props_ends: &ends,
            };
            let store = &self.store;
            let r = nogil(py, || store.put_bodies(&input, return_offsets))?;
            result(r)
        })
    }

    /// The message whose record starts at `offset`, or None.
    pub(crate) fn look_message_by_offset(
        &self,
        py: Python<'_>,
        offset: &Bound<'_, PyAny>,
    ) -> PyResult<Option<PyMessageExt>> {
        guarded(|| {
            let offset = i64_arg(offset, "offset")?;
            self.store.check_open()?;
            if offset < 0 {
                return Ok(None);
            }
            self.visible(py)?;
            let store = &self.store;
            let r = nogil(py, || store.look_message_by_offset(offset as u64))?;
            Ok(r.map(|(view, raw)| PyMessageExt { raw, view }))
        })
    }

    /// The message with offset message id `msg_id`, or None.
    fn look_message_by_id(
        &self,
        py: Python<'_>,
        msg_id: &Bound<'_, PyAny>,
    ) -> PyResult<Option<PyMessageExt>> {
        guarded(|| {
            let msg_id = str_arg(msg_id, "msg_id")?;
            self.store.check_open()?;
            let Some((host, off)) = decode_msg_id(msg_id) else {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "{msg_id:?} is not an offset message id (32 or 56 hex digits)"
                )));
            };
            if off < 0 {
                return Ok(None);
            }
            self.visible(py)?;
            let store = &self.store;
            let r = nogil(py, || store.look_message_by_offset(off as u64))?;
            Ok(r.map(|(view, raw)| PyMessageExt { raw, view })
                .filter(|m| m.view.store_host == host))
        })
    }

    #[getter]
    fn max_phy_offset(&self) -> PyResult<u64> {
        guarded(|| {
            self.store.check_open()?;
            Ok(self.store.commitlog().max_offset())
        })
    }

    #[getter]
    fn min_phy_offset(&self) -> PyResult<i64> {
        guarded(|| {
            self.store.check_open()?;
            Ok(self.store.commitlog().min_offset())
        })
    }

    #[getter]
    fn flushed_offset(&self) -> PyResult<u64> {
        guarded(|| {
            self.store.check_open()?;
            Ok(self.store.commitlog().flushed_offset())
        })
    }

    /// The CommitLog segment size in use.
    #[getter]
    fn commit_log_file_size(&self) -> usize {
        self.store.commitlog().file_size()
    }

    /// Why puts are refused, if they are (None when writeable).
    #[getter]
    fn poison_reason(&self) -> Option<String> {
        self.store.poison_reason()
    }

    /// The engine's running flags that are set, by name (RocketMQ's
    /// ``RunningFlags``: ``NOT_WRITEABLE``, ``WRITE_LOGICS_QUEUE_ERROR``,
    /// ``WRITE_INDEX_FILE_ERROR``, ``DISK_FULL``, ``FLUSH_FAILED``, and
    /// ours, ``RESOURCE_WAIT``). The flag of the first failure carries its
    /// reason (``"NAME: reason"``), as ``DISK_FULL`` carries the clean
    /// service's and ``RESOURCE_WAIT`` what waits for a resource and why
    /// (puts are still taken while only it is set). DISK_FULL and
    /// RESOURCE_WAIT are not listed once the store is closed. Empty when
    /// puts are taken and nothing waits.
    #[getter]
    fn running_flags(&self) -> Vec<String> {
        let mut flags = self.store.running_flags().describe();
        if self.store.is_closed() {
            flags.retain(|f| !f.starts_with("DISK_FULL") && !f.starts_with("RESOURCE_WAIT"));
        }
        flags
    }

    /// Refuse every later put (reads keep working), keeping ``reason``.
    ///
    /// Used by the Python services when one of them fails: a store whose
    /// service died must not go on accepting writes it can no longer serve.
    /// The first reason given is kept.
    fn poison(&self, reason: String) {
        self.store.poison(reason);
    }

    /// Sets (``reason`` given) or clears (``None``) the DISK_FULL flag: while
    /// set, puts return ``SERVICE_NOT_AVAILABLE`` with the reason. Returns
    /// whether it was set before.
    #[pyo3(signature = (reason))]
    fn set_disk_full(&self, reason: Option<String>) -> bool {
        match reason {
            Some(r) => self.store.set_disk_full(true, &r),
            None => self.store.set_disk_full(false, ""),
        }
    }

    /// Why puts are refused for lack of disk space (None when they are not).
    #[getter]
    fn disk_full_reason(&self) -> Option<String> {
        self.store.disk_full_reason()
    }

    /// One CommitLog step of the clean service, with the GIL released:
    /// deletes the oldest files whose mtime is at least ``reserved_ms`` before
    /// ``now_ms`` (any age with ``immediately``), never the last file, at
    /// most ``max_files``, sleeping ``interval_ms`` between two deletions.
    fn delete_expired_commit_log(
        &self,
        py: Python<'_>,
        now_ms: i64,
        reserved_ms: i64,
        interval_ms: u64,
        immediately: bool,
        max_files: usize,
    ) -> PyResult<PyCommitLogExpiry> {
        guarded(|| {
            let store = &self.store;
            let r = nogil(py, || {
                store.delete_expired_commit_log(
                    now_ms,
                    reserved_ms,
                    Duration::from_millis(interval_ms),
                    immediately,
                    max_files,
                )
            })?;
            Ok(r.into())
        })
    }

    /// The queue step of the clean service, with the GIL released: deletes
    /// ConsumeQueue files wholly below CommitLog offset ``min_phy`` (then
    /// corrects every queue's min offset; ``interval_ms`` pause after each
    /// queue that lost files) and index files below it.
    fn delete_expired_queues(
        &self,
        py: Python<'_>,
        min_phy: i64,
        interval_ms: u64,
    ) -> PyResult<PyQueueExpiry> {
        guarded(|| {
            let store = &self.store;
            let r = nogil(py, || {
                store.delete_expired_queues(min_phy, Duration::from_millis(interval_ms))
            })?;
            Ok(r.into())
        })
    }

    #[getter]
    fn closed(&self) -> bool {
        self.store.is_closed()
    }

    /// `{(topic, queue_id): next_queue_offset}` as the put path sees it.
    fn queue_offset_table<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guarded(|| {
            self.store.check_open()?;
            let d = PyDict::new(py);
            for (t, q, n) in self.store.commitlog().queue_offsets().entries() {
                d.set_item((t, q), n)?;
            }
            Ok(d)
        })
    }

    /// Commits transient buffers and dispatches everything written.
    fn drain_dispatch(&self, py: Python<'_>) -> PyResult<()> {
        guarded(|| {
            let store = &self.store;
            nogil(py, || store.drain_dispatch())
        })
    }

    /// Starts the flush threads and creates the abort file.
    fn start_flush(&self) -> PyResult<()> {
        guarded(|| Ok(self.store.start_flush()?))
    }

    /// True when the previous writer stopped cleanly (no abort file at open).
    #[getter]
    fn last_exit_ok(&self) -> bool {
        self.store.last_exit_ok()
    }

    /// Starts the dispatch (reput) thread.
    fn start_dispatch(&self) -> PyResult<()> {
        guarded(|| Ok(self.store.start_dispatch()?))
    }

    /// Stops the dispatch thread after its current step, waiting at most
    /// ``timeout`` seconds (``None``: the engine's bound, 30 s). True if
    /// the thread ended; one that did not is logged and left behind.
    #[pyo3(signature = (timeout=None))]
    fn stop_dispatch(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        guarded(|| {
            let timeout = match timeout {
                Some(t) if t.is_nan() || t < 0.0 => {
                    return Err(pyo3::exceptions::PyValueError::new_err(
                        "timeout must be >= 0",
                    ))
                }
                Some(t) => Duration::from_secs_f64(t.min(1e9)),
                None => crate::service::STOP_TIMEOUT,
            };
            let store = &self.store;
            nogil(py, || Ok(store.stop_dispatch_within(timeout)))
        })
    }

    /// Group-commit statistics since open (SYNC_FLUSH).
    #[getter]
    fn group_commit_stats(&self) -> PyGroupCommitStats {
        self.store.flusher().group_stats().into()
    }

    /// Wakes the dispatch thread now instead of at its next poll.
    fn wakeup_dispatch(&self) {
        self.store.dispatcher().wakeup();
    }

    /// True while the dispatch thread runs (False before it is started,
    /// after it is stopped, or once it died).
    #[getter]
    fn dispatch_running(&self) -> bool {
        self.store.dispatch_running()
    }

    /// CommitLog bytes not yet in the consume queues and index.
    fn dispatch_behind_bytes(&self) -> PyResult<u64> {
        guarded(|| {
            self.store.check_open()?;
            Ok(self.store.dispatcher().behind_bytes())
        })
    }

    /// Changes whenever new messages become visible to readers. Read after
    /// the puts acknowledged so far became visible, so a consumer that
    /// compares it with the last value it saw notices their queues.
    #[getter]
    fn dispatch_seq(&self, py: Python<'_>) -> PyResult<u64> {
        guarded(|| {
            if !self.store.is_closed() {
                self.visible(py)?;
            }
            Ok(self.store.dispatcher().seq())
        })
    }

    /// Why dispatch stopped, if it failed.
    #[getter]
    fn dispatch_failure(&self) -> Option<String> {
        self.store.dispatcher().failure()
    }

    /// Blocks (GIL released; Ctrl-C works) until `dispatch_seq != seen` or
    /// `timeout` seconds pass (`None`: forever). Returns the current sequence.
    #[pyo3(signature = (seen, timeout=None))]
    fn wait_for_dispatch(
        &self,
        py: Python<'_>,
        seen: &Bound<'_, PyAny>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        guarded(|| {
            let seen = u64::try_from(i64_arg(seen, "seq")?).map_err(|_| {
                pyo3::exceptions::PyValueError::new_err("seq must be >= 0 (a dispatch_seq value)")
            })?;
            let timeout = match timeout.filter(|t| !t.is_none()) {
                Some(t) if t.is_instance_of::<pyo3::types::PyFloat>() => Some(t.extract::<f64>()?),
                Some(t) if t.is_instance_of::<pyo3::types::PyInt>() => {
                    Some(i64_arg(t, "timeout")? as f64)
                }
                Some(t) => return Err(type_error("timeout", "a number of seconds or None", t)),
                None => None,
            };
            let deadline = match timeout {
                Some(t) if t.is_nan() || t < 0.0 => {
                    return Err(pyo3::exceptions::PyValueError::new_err(
                        "timeout must be >= 0",
                    ))
                }
                Some(t) => Some(Instant::now() + Duration::from_secs_f64(t.min(1e9))),
                None => None,
            };
            loop {
                if super::gil::exiting() {
                    return Ok(self.store.dispatcher().seq());
                }
                let slice = match deadline {
                    Some(d) => d
                        .saturating_duration_since(Instant::now())
                        .min(SIGNAL_SLICE),
                    None => SIGNAL_SLICE,
                };
                let store = &self.store;
                let s = nogil(py, || store.wait_for_dispatch(seen, slice))?;
                if s != seen || deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(s);
                }
                py.check_signals()?;
            }
        })
    }

    /// Makes the CommitLog durable up to the messages below the committed
    /// offsets `[(topic, queue_id, next_offset), ...]`, before they are
    /// persisted.
    fn flush_for_offsets(&self, py: Python<'_>, entries: Vec<(String, i32, i64)>) -> PyResult<()> {
        guarded(|| {
            let store = &self.store;
            nogil(py, || store.flush_for_offsets(&entries))
        })
    }

    /// For tests and benchmarks: how often reads waited for acknowledged
    /// puts to become visible.
    #[getter]
    fn _visibility_stats(&self) -> PyVisibilityStats {
        let (waits, inline_dispatches, commits, timeouts, failed) = self.store.visibility_stats();
        PyVisibilityStats {
            waits,
            inline_dispatches,
            commits,
            timeouts,
            failed,
        }
    }

    /// Wakes every thread waiting in `wait_for_dispatch` (interpreter exit).
    fn _wake_waiters(&self) {
        self.store.dispatcher().bump_seq();
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
    fn get_message(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyAny>,
        queue_id: &Bound<'_, PyAny>,
        offset: &Bound<'_, PyAny>,
        max_msg_nums: Option<&Bound<'_, PyAny>>,
        tags: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyGetResult> {
        guarded(|| {
            let topic = str_arg(topic, "topic")?;
            let queue_id = i64_arg(queue_id, "queue_id")?;
            let offset = i64_arg(offset, "offset")?;
            let max_msg_nums = defaulted(max_msg_nums, 32, |o| i64_arg(o, "max_msg_nums"))?;
            let tags = tag_list_arg(tags)?;
            let queue_id = self.check_read_args(topic, queue_id)?;
            if max_msg_nums <= 0 {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "max_msg_nums must be > 0, got {max_msg_nums}"
                )));
            }
            self.visible(py)?;
            let store = &self.store;
            let r = nogil(py, || {
                store.get_message(
                    topic,
                    queue_id,
                    offset,
                    max_msg_nums as usize,
                    tags.as_deref(),
                )
            })?;
            let list = PyList::empty(py);
            for (view, raw) in r.messages {
                list.append(Bound::new(py, PyMessageExt { raw, view })?)?;
            }
            Ok(PyGetResult {
                status: r.status,
                next_begin_offset: r.next_begin_offset,
                min_offset: r.min_offset,
                max_offset: r.max_offset,
                damaged: r.damaged.len(),
                skipped: r.skipped,
                messages: list.unbind(),
            })
        })
    }

    /// One past the last logical offset of a queue (0 if unknown).
    pub(crate) fn get_max_offset_in_queue(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyAny>,
        queue_id: &Bound<'_, PyAny>,
    ) -> PyResult<i64> {
        guarded(|| {
            let (topic, queue_id) = (str_arg(topic, "topic")?, i64_arg(queue_id, "queue_id")?);
            let qid = self.readable(py, topic, queue_id)?;
            Ok(self.store.max_offset_in_queue(topic, qid)?)
        })
    }

    /// The first logical offset of a queue (0 if unknown).
    pub(crate) fn get_min_offset_in_queue(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyAny>,
        queue_id: &Bound<'_, PyAny>,
    ) -> PyResult<i64> {
        guarded(|| {
            let (topic, queue_id) = (str_arg(topic, "topic")?, i64_arg(queue_id, "queue_id")?);
            let qid = self.readable(py, topic, queue_id)?;
            Ok(self.store.min_offset_in_queue(topic, qid)?)
        })
    }

    /// CommitLog offset of the message at `cq_offset` (0 if none).
    fn get_commit_log_offset_in_queue(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyAny>,
        queue_id: &Bound<'_, PyAny>,
        cq_offset: &Bound<'_, PyAny>,
    ) -> PyResult<i64> {
        guarded(|| {
            let (topic, queue_id) = (str_arg(topic, "topic")?, i64_arg(queue_id, "queue_id")?);
            let cq_offset = i64_arg(cq_offset, "cq_offset")?;
            let qid = self.readable(py, topic, queue_id)?;
            Ok(self
                .store
                .commit_log_offset_in_queue(topic, qid, cq_offset)?)
        })
    }

    /// Logical offset of the message stored nearest to `timestamp` (ms).
    fn get_offset_in_queue_by_time(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyAny>,
        queue_id: &Bound<'_, PyAny>,
        timestamp: &Bound<'_, PyAny>,
    ) -> PyResult<i64> {
        guarded(|| {
            let (topic, queue_id) = (str_arg(topic, "topic")?, i64_arg(queue_id, "queue_id")?);
            let timestamp = i64_arg(timestamp, "timestamp")?;
            let qid = self.readable(py, topic, queue_id)?;
            let store = &self.store;
            nogil(py, || store.offset_in_queue_by_time(topic, qid, timestamp))
        })
    }

    /// Store time of the first message of a queue (-1 if none).
    fn get_earliest_message_time(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyAny>,
        queue_id: &Bound<'_, PyAny>,
    ) -> PyResult<i64> {
        guarded(|| {
            let (topic, queue_id) = (str_arg(topic, "topic")?, i64_arg(queue_id, "queue_id")?);
            let qid = self.readable(py, topic, queue_id)?;
            Ok(self.store.earliest_message_time(topic, qid)?)
        })
    }

    /// Store time of the message at `cq_offset` (-1 if none).
    fn get_message_store_timestamp(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyAny>,
        queue_id: &Bound<'_, PyAny>,
        cq_offset: &Bound<'_, PyAny>,
    ) -> PyResult<i64> {
        guarded(|| {
            let (topic, queue_id) = (str_arg(topic, "topic")?, i64_arg(queue_id, "queue_id")?);
            let cq_offset = i64_arg(cq_offset, "cq_offset")?;
            let qid = self.readable(py, topic, queue_id)?;
            Ok(self.store.message_store_timestamp(topic, qid, cq_offset)?)
        })
    }

    /// Messages of `topic` carrying `key`, stored in `[begin, end]` (ms).
    #[pyo3(signature = (topic, key, max_num=None, begin_timestamp=None, end_timestamp=None), text_signature = "($self, topic, key, max_num=32, begin_timestamp=0, end_timestamp=None)")]
    fn query_message<'py>(
        &self,
        py: Python<'py>,
        topic: &Bound<'_, PyAny>,
        key: &Bound<'_, PyAny>,
        max_num: Option<&Bound<'_, PyAny>>,
        begin_timestamp: Option<&Bound<'_, PyAny>>,
        end_timestamp: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        guarded(|| {
            let topic = str_arg(topic, "topic")?;
            let key = str_arg(key, "key")?;
            let max_num = defaulted(max_num, 32, |o| i64_arg(o, "max_num"))?;
            let begin_timestamp = defaulted(begin_timestamp, 0, |o| i64_arg(o, "begin_timestamp"))?;
            let end_timestamp = opt_i64_arg(end_timestamp, "end_timestamp")?;
            self.check_read_topic(topic)?;
            if max_num <= 0 {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "max_num must be > 0",
                ));
            }
            let end = end_timestamp.unwrap_or(i64::MAX);
            self.visible(py)?;
            let store = &self.store;
            let found = nogil(py, || {
                store.query_message(topic, key, max_num as usize, begin_timestamp, end)
            })?;
            let list = PyList::empty(py);
            for (view, raw) in found {
                list.append(Bound::new(py, PyMessageExt { raw, view })?)?;
            }
            Ok(list)
        })
    }

    /// Appends every row of an Arrow stream (columns `topic, body` and
    /// optional `queue_id, tags, keys, properties`) in order, batch by batch
    /// with batch puts; `properties` are added to every message. Stops after
    /// the first batch with a refused row. Returns `(appended, refused)`
    /// where `refused` is `None` or `(row index, PutStatus value, reason)`; rows after a
    /// refused one in the same batch may be appended too (they are counted).
    #[pyo3(signature = (stream, properties=None))]
    fn put_arrow(
        &self,
        py: Python<'_>,
        stream: &Bound<'_, PyAny>,
        properties: Option<Vec<(String, String)>>,
    ) -> PyResult<(u64, Option<RefusedRow>)> {
        guarded(|| {
            self.store.check_open()?;
            if self.store.is_read_only() {
                return Err(crate::error::StoreError::ReadOnly.into());
            }
            let extra = properties.unwrap_or_default();
            let reader = super::arrow::import_stream(stream)?;
            let mut appended = 0u64;
            let mut row = 0u64;
            for batch in reader {
                let batch = batch.map_err(|e| {
                    pyo3::exceptions::PyValueError::new_err(format!("arrow stream: {e}"))
                })?;
                let mut specs = super::arrow::specs_of_batch(&batch, self.now_ms(), &extra)?;
                // A row refused before writing (bad topic, properties, null)
                // ends the append: only the rows before it are put.
                let mut refused = specs.iter().position(|s| s.is_err()).map(|i| {
                    let (status, why) = match &specs[i] {
                        Err(r) => (r.status as u8, r.reason.clone()),
                        Ok(_) => (0, String::new()),
                    };
                    (row + i as u64, status, why)
                });
                if let Some((r, _, _)) = refused {
                    specs.truncate((r - row) as usize);
                }
                let store = &self.store;
                let outs = nogil(py, || store.put_batch(specs))?;
                for (i, o) in outs.iter().enumerate() {
                    if o.status == crate::log::commitlog::PutStatus::PutOk {
                        appended += 1;
                    } else if refused.as_ref().map_or(true, |r| row + (i as u64) < r.0) {
                        let why = o.reason.clone().unwrap_or_default();
                        refused = Some((row + i as u64, o.status as u8, why));
                    }
                }
                if refused.is_some() {
                    return Ok((appended, refused));
                }
                row += outs.len() as u64;
            }
            Ok((appended, None))
        })
    }

    /// Decodes ranges into an Arrow stream: `queue_ranges` as
    /// `(topic, queue_id, from, to)` logical offsets, then `commitlog_ranges`
    /// as `(from, to)` physical offsets. See `rocketstore.columnar` rules.
    #[pyo3(signature = (queue_ranges=None, commitlog_ranges=None, *, topics=None, include_system=false, include_uncommitted=false, min_store_timestamp=None, batch_size=65_536, store_name=None, threads=1))]
    #[allow(clippy::too_many_arguments)]
    fn read_arrow(
        &self,
        queue_ranges: Option<Vec<(String, i64, i64, i64)>>,
        commitlog_ranges: Option<Vec<(i64, i64)>>,
        topics: Option<Vec<String>>,
        include_system: bool,
        include_uncommitted: bool,
        min_store_timestamp: Option<i64>,
        batch_size: i64,
        store_name: Option<String>,
        threads: usize,
    ) -> PyResult<super::arrow::PyArrowStream> {
        use crate::columnar::{
            split_at_segments, ParallelReader, Range, RangeReader, ReadStats, RowFilter,
        };
        guarded(|| {
            self.store.check_open()?;
            if batch_size <= 0 {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "batch_size must be > 0, got {batch_size}"
                )));
            }
            let mut ranges = Vec::new();
            for (topic, qid, from, to) in queue_ranges.unwrap_or_default() {
                let queue_id = self.check_read_args(&topic, qid)?;
                ranges.push(Range::Queue {
                    topic,
                    queue_id,
                    from: from.max(0),
                    to,
                });
            }
            // Clamped to the bytes the CommitLog holds now, so the pieces a
            // parallel read cuts follow the store's size, not the range's.
            let cl = self.store.commitlog();
            let (lo, hi) = (cl.min_offset().max(0) as u64, cl.max_offset());
            for (from, to) in commitlog_ranges.unwrap_or_default() {
                let (from, to) = ((from.max(0) as u64).max(lo), (to.max(0) as u64).min(hi));
                if from < to {
                    ranges.push(Range::CommitLog { from, to });
                }
            }
            let filter = RowFilter {
                topics: topics.map(|t| t.into_iter().map(String::into_bytes).collect()),
                include_system,
                include_uncommitted,
                min_store_timestamp,
            };
            let stats = Arc::new(ReadStats::default());
            if threads > 1 {
                // Pieces decode independently: CommitLog ranges are cut at
                // segment boundaries; queue ranges are pieces already.
                let seg = self.store.commitlog().file_size() as u64;
                let ranges = split_at_segments(ranges, seg);
                let reader = ParallelReader::start(
                    self.store.clone(),
                    ranges,
                    filter,
                    batch_size as usize,
                    store_name,
                    threads,
                    stats.clone(),
                )
                .map_err(|e| crate::error::StoreError::io("start decode threads", e))?;
                return Ok(super::arrow::PyArrowStream::new(Box::new(reader), stats));
            }
            let reader = RangeReader::new(
                self.store.clone(),
                ranges,
                filter,
                batch_size as usize,
                store_name,
            )
            .with_stats(stats.clone());
            Ok(super::arrow::PyArrowStream::new(Box::new(reader), stats))
        })
    }

    /// Queue ids of `topic` that exist, sorted.
    fn queue_ids(&self, py: Python<'_>, topic: &Bound<'_, PyAny>) -> PyResult<Vec<i32>> {
        guarded(|| {
            let topic = str_arg(topic, "topic")?;
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

    /// The consume queue file size in use.
    #[getter]
    fn consume_queue_file_size(&self) -> usize {
        self.store.consume_queues().file_size()
    }

    /// The checkpoint's timestamps.
    fn checkpoint(&self) -> PyCheckpointTimes {
        self.store.checkpoint().into()
    }

    /// Forces everything written to disk; returns the flushed offset.
    fn flush(&self, py: Python<'_>) -> PyResult<u64> {
        guarded(|| {
            let store = &self.store;
            nogil(py, || store.flush())
        })
    }

    /// One delivery step for each `(level, offset)` (level 1-based): re-puts
    /// the messages of `SCHEDULE_TOPIC_XXXX` queue `level - 1` due at
    /// `now_ms`, from consume-queue offset `offset`, at most `max_msgs` per
    /// level, one batch per level, all with the GIL released once. Returns
    /// one `DeliverStep` per level, in order.
    fn deliver_delayed(
        &self,
        py: Python<'_>,
        levels: Vec<(usize, i64)>,
        now_ms: i64,
        max_msgs: usize,
    ) -> PyResult<Vec<PyDeliverStep>> {
        guarded(|| {
            let store = &self.store;
            let steps = nogil(py, || {
                levels
                    .iter()
                    .map(|&(level, offset)| {
                        crate::store::schedule::deliver_due(store, level, offset, now_ms, max_msgs)
                    })
                    .collect::<crate::error::Result<Vec<_>>>()
            })?;
            Ok(steps.into_iter().map(PyDeliverStep::from).collect())
        })
    }

    /// Forces the CommitLog to disk (not the queues); returns the flushed offset.
    fn flush_commit_log(&self, py: Python<'_>) -> PyResult<u64> {
        guarded(|| {
            let store = &self.store;
            nogil(py, || store.flush_commit_log())
        })
    }

    /// For tests: stop as if the process were killed (no final flush, the
    /// abort file stays, the lock is released).
    fn _simulate_crash(&self, py: Python<'_>) -> PyResult<()> {
        guarded(|| {
            let store = &self.store;
            nogil(py, || {
                store.abandon();
                Ok(())
            })
        })
    }

    /// Flushes and closes the store (idempotent).
    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        guarded(|| {
            let store = &self.store;
            nogil(py, || store.shutdown())
        })
    }
}
