//! `NativeStore`: the engine store as a Python class. The public
//! `rocketstore.MessageStore` (Python) owns one and orchestrates it.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::commitlog::{now_ms, PutOutcome, PutStatus};
use crate::message::{decode_msg_id, parse_delay_levels, MessageSpec};
use crate::store::{Store, StoreOptions};

use super::gil::{guarded, nogil};
use super::types::{
    build_properties, check_queue_id, parse_host, PyMessage, PyMessageExt, PyPutResult,
    DEFAULT_BORN_HOST,
};

/// The engine store (private; use `rocketstore.MessageStore`).
#[pyclass(frozen, module = "rocketstore._native", name = "NativeStore")]
pub struct PyStore {
    store: Arc<Store>,
}

impl PyStore {
    fn result(&self, outcome: PutOutcome) -> PyPutResult {
        PyPutResult {
            outcome,
            store_host: self.store.options().store_host,
        }
    }

    fn put_spec(&self, py: Python<'_>, spec: MessageSpec<'_>) -> PyResult<PyPutResult> {
        let p = match self.store.prepare(spec)? {
            Ok(p) => p,
            Err(s) => return Ok(self.result(PutOutcome::rejected(s))),
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

#[pymethods]
impl PyStore {
    /// Takes the writer lock (unless `read_only`) and loads the CommitLog files.
    #[new]
    #[pyo3(signature = (store_path, commit_log_dir, commit_log_file_size, max_message_size, store_host, message_delay_level, sync_flush, read_only))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        store_path: PathBuf,
        commit_log_dir: PathBuf,
        commit_log_file_size: Option<usize>,
        max_message_size: usize,
        store_host: Bound<'_, PyAny>,
        message_delay_level: &str,
        sync_flush: bool,
        read_only: bool,
    ) -> PyResult<Self> {
        guarded(|| {
            let store_host = parse_host(&store_host, "store_host")?;
            let delay_levels = parse_delay_levels(message_delay_level).ok_or_else(|| {
                pyo3::exceptions::PyValueError::new_err(format!(
                    "cannot parse message_delay_level {message_delay_level:?}"
                ))
            })?;
            let opts = StoreOptions {
                root: store_path,
                commit_log_dir,
                commit_log_file_size,
                max_message_size,
                store_host,
                delay_levels,
                sync_flush,
                read_only,
            };
            let store = nogil(py, || Store::open(opts))?;
            Ok(Self {
                store: Arc::new(store),
            })
        })
    }

    /// Finds the end of valid data, cuts anything after it and rebuilds the
    /// queue-offset table. Returns a report dict.
    fn recover<'py>(&self, py: Python<'py>, check_crc: bool) -> PyResult<Bound<'py, PyDict>> {
        guarded(|| {
            let store = &self.store;
            let r = nogil(py, || store.recover(check_crc))?;
            let d = PyDict::new(py);
            d.set_item("mode", r.mode)?;
            d.set_item("files_scanned", r.files_scanned)?;
            d.set_item("bytes_scanned", r.bytes_scanned)?;
            d.set_item("records", r.records)?;
            d.set_item("end_offset", r.end_offset)?;
            d.set_item("bytes_truncated", r.bytes_truncated)?;
            d.set_item("stop_reason", r.stop_reason)?;
            Ok(d)
        })
    }

    /// Puts one message given as arguments (no `Message` object needed).
    #[pyo3(signature = (topic, body, queue_id=0, tags=None, keys=None, properties=None, delay_level=0, flag=0, born_timestamp=None, born_host=None, sys_flag=0))]
    #[allow(clippy::too_many_arguments)]
    fn put(
        &self,
        py: Python<'_>,
        topic: &str,
        body: &[u8],
        queue_id: i64,
        tags: Option<&str>,
        keys: Option<Bound<'_, PyAny>>,
        properties: Option<Bound<'_, PyDict>>,
        delay_level: i32,
        flag: i32,
        born_timestamp: Option<i64>,
        born_host: Option<Bound<'_, PyAny>>,
        sys_flag: i32,
    ) -> PyResult<PyPutResult> {
        guarded(|| {
            let queue_id = check_queue_id(queue_id)?;
            let props =
                if tags.is_none() && keys.is_none() && properties.is_none() && delay_level == 0 {
                    Ok(Vec::new())
                } else {
                    build_properties(tags, keys.as_ref(), properties.as_ref(), delay_level)?
                };
            let born_host = match born_host {
                Some(h) => parse_host(&h, "born_host")?,
                None => DEFAULT_BORN_HOST,
            };
            let Ok(props) = props else {
                self.store
                    .prepare(MessageSpec {
                        topic: Cow::Borrowed(topic),
                        queue_id,
                        flag,
                        sys_flag,
                        born_timestamp: 0,
                        born_host,
                        reconsume_times: 0,
                        prepared_transaction_offset: 0,
                        body: Cow::Borrowed(b""),
                        properties: Cow::Borrowed(b""),
                    })?
                    .ok(); // state errors (closed, read-only) take precedence
                return Ok(self.result(PutOutcome::rejected(PutStatus::MessageIllegal)));
            };
            let spec = MessageSpec {
                topic: Cow::Borrowed(topic),
                queue_id,
                flag,
                sys_flag,
                born_timestamp: born_timestamp.unwrap_or_else(now_ms),
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
    fn put_message(&self, py: Python<'_>, msg: &Bound<'_, PyAny>) -> PyResult<PyPutResult> {
        guarded(|| {
            let m = msg
                .downcast::<PyMessage>()
                .map_err(|_| PyTypeError::new_err("put_message takes a rocketstore.Message"))?;
            let m = m.get();
            match m.spec(py, now_ms()) {
                Some(spec) => self.put_spec(py, spec),
                None => {
                    self.store.check_open()?;
                    if self.store.is_read_only() {
                        return Err(crate::error::StoreError::ReadOnly.into());
                    }
                    Ok(self.result(PutOutcome::rejected(PutStatus::MessageIllegal)))
                }
            }
        })
    }

    /// Puts messages in order under one lock hold and one flush wait.
    fn put_messages<'py>(
        &self,
        py: Python<'py>,
        msgs: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        guarded(|| {
            let mut held: Vec<Bound<'py, PyMessage>> = Vec::new();
            for item in msgs
                .try_iter()
                .map_err(|_| PyTypeError::new_err("put_messages takes a list of Message"))?
            {
                let item = item?;
                let m = item.downcast_into::<PyMessage>().map_err(|_| {
                    PyTypeError::new_err("put_messages takes a list of rocketstore.Message")
                })?;
                held.push(m);
            }
            let now = now_ms();
            let mut specs = Vec::with_capacity(held.len());
            let mut illegal = Vec::new();
            for (i, m) in held.iter().enumerate() {
                match m.get().spec(py, now) {
                    Some(s) => specs.push(s),
                    None => illegal.push(i),
                }
            }
            let store = &self.store;
            let outs = nogil(py, || store.put_batch(specs))?;
            let mut outs = outs.into_iter();
            let mut illegal = illegal.into_iter().peekable();
            let list = PyList::empty(py);
            for i in 0..held.len() {
                let o = if illegal.peek() == Some(&i) {
                    illegal.next();
                    PutOutcome::rejected(PutStatus::MessageIllegal)
                } else {
                    outs.next().expect("one outcome per legal message")
                };
                list.append(Bound::new(py, self.result(o))?)?;
            }
            Ok(list)
        })
    }

    /// The message whose record starts at `offset`, or None.
    fn look_message_by_offset(
        &self,
        py: Python<'_>,
        offset: i64,
    ) -> PyResult<Option<PyMessageExt>> {
        guarded(|| {
            self.store.check_open()?;
            if offset < 0 {
                return Ok(None);
            }
            let store = &self.store;
            let r = nogil(py, || Ok(store.commitlog().read_record(offset as u64)))?;
            Ok(r.map(|(view, raw)| PyMessageExt { raw, view }))
        })
    }

    /// The message with offset message id `msg_id`, or None.
    fn look_message_by_id(&self, py: Python<'_>, msg_id: &str) -> PyResult<Option<PyMessageExt>> {
        guarded(|| {
            self.store.check_open()?;
            let Some((host, off)) = decode_msg_id(msg_id) else {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "{msg_id:?} is not an offset message id (32 or 56 hex digits)"
                )));
            };
            Ok(self
                .look_message_by_offset(py, off)?
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

    /// Forces everything written to disk; returns the flushed offset.
    fn flush(&self, py: Python<'_>) -> PyResult<u64> {
        guarded(|| {
            let store = &self.store;
            nogil(py, || store.flush())
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
