//! `MessageStoreBase`: the native base class of `rocketstore.MessageStore`.
//!
//! The public store is a Python subclass of this class, so its put and
//! lookup methods (the calls made once per message) *are* these native
//! methods: a put costs one native call, with no Python frame in between,
//! and `MessageStore.put` carries its docstring and signature like any other
//! method. Everything else (lifecycle, services, config files) is Python.
//!
//! The object starts detached: every method raises `StoreClosedError` with
//! the reason given (not started yet; handle inherited through `fork()`).
//! `MessageStore.start()` attaches the engine store it opened. A closed
//! engine store raises `StoreClosedError` itself, and so does one inherited
//! by a forked child (the engine compares fork generations).

use std::cell::RefCell;

use crate::log::commitlog::Refused;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::GILProtected;
use pyo3::types::{PyDict, PyList, PyTuple};

use super::args::{Offset, QueueId, Topic};
use super::errors::store_closed;
use super::message_ext::PyMessageExt;
use super::put_args::{put_fields_method, PutArgs, TOPIC_NOT_UTF8};
use super::store::PyStore;
use super::types::{PyBatchPutResult, PyPutResult};

/// Why a detached store refuses calls before `start()`.
const NOT_STARTED: &str = "store is not started; call start() or use `with`";

/// The native base of `rocketstore.MessageStore` (subclass it, do not use it
/// directly): the per-message methods of the store.
#[pyclass(
    subclass,
    frozen,
    module = "rocketstore._native",
    name = "MessageStoreBase"
)]
pub struct PyStoreBase {
    /// The engine store, or why there is none. Written only by `_attach` and
    /// `_detach`. The GIL guards it (no atomic operation on the put path):
    /// each call clones the handle out (one reference count) and ends its
    /// borrow before the engine runs, since the engine may release the GIL.
    engine: GILProtected<RefCell<Result<Py<PyStore>, String>>>,
}

impl PyStoreBase {
    /// The engine store, as a `Bound` (its drop is a plain decref under the
    /// GIL, where dropping a `Py` first asks whether the GIL is held).
    #[inline]
    pub(super) fn engine<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyStore>> {
        match &*self.engine.get(py).borrow() {
            Ok(store) => Ok(store.bind(py).clone()),
            Err(why) => Err(store_closed(why.clone())),
        }
    }
}

put_fields_method!(
    /// Append one message given as arguments (the fast path: no `Message`).
    ///
    /// `body` may be any bytes-like object; anything but `bytes` is copied
    /// once and the CRC is taken over the copy.
    ///
    /// Raises:
    ///     InvalidMessageError: the message breaks a rule (also a
    ///         ValueError; `reason` says which field broke which rule);
    ///         nothing is written.
    ///     MessageRefusedError: the store took nothing (its `status`:
    ///         SERVICE_NOT_AVAILABLE, CREATE_MAPPED_FILE_FAILED, ...).
    ///     StoredNotFlushedError: stored, but not confirmed on disk within
    ///         `sync_flush_timeout` (FLUSH_DISK_TIMEOUT): do not put it again.
    ///
    /// With `check=False` none of these is raised: the result carries the
    /// status (`result.ok` is False) and `reason`.
    fn put in PyStoreBase -> Py<PyPutResult> => PyStoreBase::put_args
);

impl PyStoreBase {
    /// Puts one message given as the put fields: the engine store's put.
    pub(super) fn put_args(
        &self,
        py: Python<'_>,
        args: PutArgs<'_, '_>,
        check: bool,
    ) -> PyResult<Py<PyPutResult>> {
        self.engine(py)?.get().put_args(py, args, check)
    }
}

#[pymethods]
impl PyStoreBase {
    /// Accepts (and ignores) the subclass's constructor arguments: the
    /// Python `__init__` takes them; nothing is opened before `start()`.
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        Self {
            engine: GILProtected::new(RefCell::new(Err(NOT_STARTED.to_owned()))),
        }
    }

    /// Serves calls with `store` from now on.
    fn _attach(&self, py: Python<'_>, store: Py<PyStore>) {
        let old = self.engine.get(py).replace(Ok(store));
        drop(old); // after the borrow: dropping an engine store may release the GIL
    }

    /// Refuses every call from now on with `StoreClosedError(reason)`, and
    /// lets go of the engine store.
    fn _detach(&self, py: Python<'_>, reason: String) {
        let old = self.engine.get(py).replace(Err(reason));
        drop(old);
    }

    /// Append one message; returns its `PutResult`.
    ///
    /// Raises as `put` does (a refused message writes nothing);
    /// `check=False` returns the result with its status instead.
    #[pyo3(signature = (msg, *, check=true))]
    fn put_message(
        &self,
        py: Python<'_>,
        msg: &Bound<'_, PyAny>,
        check: bool,
    ) -> PyResult<Py<PyPutResult>> {
        self.engine(py)?.get().put_message(py, msg, check)
    }

    /// Append messages in order under one lock and one flush wait; returns
    /// their results, in order.
    ///
    /// Messages may go to any topics and queues. Every acceptable message
    /// is written, even when others are refused; then, if any was refused,
    /// one `MessageRefusedError` names each refused message's index and
    /// reason (`error.refused` maps indexes to their results, `error.result`
    /// holds every result). It is an `InvalidMessageError` (a ValueError)
    /// when every refusal is the message's own fault. When all were stored
    /// but some not confirmed on disk in time, `StoredNotFlushedError`.
    /// With `check=False` the results are returned whatever their statuses.
    #[pyo3(signature = (msgs, *, check=true))]
    fn put_messages<'py>(
        &self,
        py: Python<'py>,
        msgs: &Bound<'py, PyAny>,
        check: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        self.engine(py)?.get().put_messages(py, msgs, check)
    }

    /// Append many bodies to one topic and queue; one result for the batch.
    ///
    /// Bodies are bytes-like objects, read in place (no copy into Python
    /// objects) and encoded straight into the CommitLog. `keys`, `tags`
    /// and `properties`, when given, hold one item (or None) per body.
    ///
    /// All or nothing: every message is checked before any is written, and
    /// one refused message refuses the batch (the reason names its index). Queue offsets are consecutive from `result.queue_offset`.
    /// With `return_offsets=True`, `result.offsets` is an `array('q')`
    /// of each message's CommitLog offset and `result.msg_ids()` their
    /// offset message ids. Under SYNC_FLUSH the call waits once, for the
    /// whole batch. A batch may span CommitLog files: they are made (and
    /// their blocks reserved) before its first byte is written, and other
    /// writers wait until it ends. Delayed messages cannot be batched.
    ///
    /// Raises `InvalidMessageError` (a ValueError; the reason names the
    /// message's index) or `MessageRefusedError` when the batch was refused:
    /// nothing of it is stored. `StoredNotFlushedError`: the whole batch is
    /// stored but not confirmed on disk within `sync_flush_timeout`.
    /// `check=False` returns the result with its status instead.
    #[pyo3(signature = (topic, bodies, queue_id=None, *, keys=None, tags=None, properties=None, return_offsets=false, check=true), text_signature = "($self, topic, bodies, queue_id=0, *, keys=None, tags=None, properties=None, return_offsets=False, check=True)")]
    #[allow(clippy::too_many_arguments)] // one per Python argument
    fn put_batch(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        bodies: &Bound<'_, PyAny>,
        queue_id: Option<QueueId<'_>>,
        keys: Option<Bound<'_, PyAny>>,
        tags: Option<Bound<'_, PyAny>>,
        properties: Option<Bound<'_, PyAny>>,
        return_offsets: bool,
        check: bool,
    ) -> PyResult<PyBatchPutResult> {
        let topic = match topic.get() {
            Ok(t) => t,
            // A str that is no UTF-8 text (a lone surrogate): refused as a
            // single put refuses it, not raised as a bad argument.
            Err(e) if e.is_instance_of::<PyValueError>(py) => {
                let refused = Refused::illegal(TOPIC_NOT_UTF8);
                return self.engine(py)?.get().refuse_batch(py, refused, check);
            }
            Err(e) => return Err(e),
        };
        let queue_id = queue_id.map_or(Ok(0), |q| q.get())?;
        self.engine(py)?.get().put_batch(
            py,
            topic,
            bodies,
            i64::from(queue_id),
            keys.as_ref(),
            tags.as_ref(),
            properties.as_ref(),
            return_offsets,
            check,
        )
    }

    /// The message whose record starts at CommitLog offset `phy_offset`.
    ///
    /// `None` when no record starts there.
    ///
    /// Raises:
    ///     CorruptedError: the record there is damaged (its body CRC or its
    ///         size fields do not match); the message names file and offset.
    fn look_message_by_offset(
        &self,
        py: Python<'_>,
        phy_offset: Offset<'_>,
    ) -> PyResult<Option<PyMessageExt>> {
        self.engine(py)?
            .get()
            .look_message_by_offset(py, phy_offset)
    }

    /// One past the last logical offset of the queue (0 when unknown).
    fn get_max_offset_in_queue(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        queue_id: QueueId<'_>,
    ) -> PyResult<i64> {
        self.engine(py)?
            .get()
            .get_max_offset_in_queue(py, topic, queue_id)
    }

    /// The first logical offset of the queue (0 when unknown).
    fn get_min_offset_in_queue(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        queue_id: QueueId<'_>,
    ) -> PyResult<i64> {
        self.engine(py)?
            .get()
            .get_min_offset_in_queue(py, topic, queue_id)
    }
}
