//! Per-message Python types: `Message`, `PutResult`, `BatchPutResult`
//! (`MessageExt` is in `message_ext.rs`).
//!
//! They sit on the hot path, so they are frozen Rust classes: building one
//! costs a fraction of a dataclass.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::OnceLock;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple, PyType};
use pyo3::IntoPyObjectExt;

use crate::log::commitlog::{PutOutcome, PutStatus, Refused};
use crate::log::message::{iter_properties, offset_msg_id, props, InlineProps, MessageSpec};
use crate::queue::reader::GetStatus;

use super::fast_method::new_instance;
use super::getset::{self, getter, GetSetDefs, Getter};
use super::gil::guarded;
use super::put_args::{put_fields_method, PutArgs};

static PUT_STATUS: GILOnceCell<Vec<PyObject>> = GILOnceCell::new();

/// The members of the Python enum `cls` (in `rocketstore.enums`) named like
/// the engine's members `names`, in the engine's order: looked up by name,
/// so a member missing on either side is an error, never a wrong status.
fn enum_members<'a>(
    py: Python<'_>,
    cls: &str,
    names: impl Iterator<Item = &'a str>,
) -> PyResult<Vec<PyObject>> {
    let cls = py.import("rocketstore.enums")?.getattr(cls)?;
    names.map(|n| Ok(cls.getattr(n)?.unbind())).collect()
}

/// The Python `PutStatus` member for `s`.
pub fn put_status_obj(py: Python<'_>, s: PutStatus) -> PyResult<PyObject> {
    let v = PUT_STATUS.get_or_try_init(py, || {
        enum_members(py, "PutStatus", PutStatus::ALL.iter().map(|m| m.name()))
    })?;
    Ok(v[s as usize].clone_ref(py))
}

static GET_STATUS: GILOnceCell<Vec<PyObject>> = GILOnceCell::new();

/// The Python `GetStatus` member for `s`.
pub fn get_status_obj(py: Python<'_>, s: GetStatus) -> PyResult<PyObject> {
    let v = GET_STATUS.get_or_try_init(py, || {
        enum_members(py, "GetStatus", GetStatus::ALL.iter().map(|m| m.name()))
    })?;
    Ok(v[s as usize].clone_ref(py))
}

/// The engine's members of `T` as `(ordinal, name)`, for the test that
/// pins the Python enums to them.
fn members<T: Copy + Into<u8>>(
    all: &[T],
    name: impl Fn(T) -> &'static str,
) -> Vec<(u8, &'static str)> {
    all.iter().map(|&m| (m.into(), name(m))).collect()
}

/// The engine's status enums, `{name: [(ordinal, member name), ...]}`.
#[pyfunction]
#[pyo3(name = "_engine_enums")]
pub fn engine_enums() -> std::collections::HashMap<&'static str, Vec<(u8, &'static str)>> {
    let mut m = std::collections::HashMap::new();
    m.insert("PutStatus", members(PutStatus::ALL, PutStatus::name));
    m.insert("GetStatus", members(GetStatus::ALL, GetStatus::name));
    m
}

pub(super) fn host_tuple<'py>(py: Python<'py>, a: &SocketAddr) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(
        py,
        [
            a.ip().to_string().into_pyobject(py)?.into_any(),
            a.port().into_pyobject(py)?.into_any(),
        ],
    )
}

/// A message to put.
#[pyclass(frozen, module = "rocketstore._native", name = "Message")]
pub struct PyMessage {
    /// Kept as the Python string: no copy per message.
    pub topic: Py<PyString>,
    pub body: Py<PyBytes>,
    pub queue_id: i32,
    pub flag: i32,
    pub born_timestamp: Option<i64>,
    pub born_host: Option<SocketAddr>,
    pub sys_flag: i32,
    pub delay_level: i32,
    /// Serialized properties (in the object: no allocation of their own),
    /// or why the message is illegal.
    pub props: std::result::Result<InlineProps, String>,
}

impl PyMessage {
    /// The spec to put, or why the message is illegal (MESSAGE_ILLEGAL).
    pub fn spec<'a>(
        &'a self,
        py: Python<'a>,
        now: i64,
    ) -> std::result::Result<MessageSpec<'a>, Refused> {
        let (topic, body) = self.parts(py)?;
        self.spec_with(topic, body, now)
    }

    /// The topic and body as borrowed data that stays valid while `self`
    /// lives (both are immutable Python objects this message holds), or why
    /// not (a topic that is not valid UTF-8).
    pub fn parts<'a>(
        &'a self,
        py: Python<'a>,
    ) -> std::result::Result<(&'a str, &'a [u8]), Refused> {
        let topic = super::put_args::topic_str(self.topic.bind(py))?;
        Ok((topic, self.body.bind(py).as_bytes()))
    }

    /// The spec from [`PyMessage::parts`]; needs no GIL.
    pub fn spec_with<'a>(
        &'a self,
        topic: &'a str,
        body: &'a [u8],
        now: i64,
    ) -> std::result::Result<MessageSpec<'a>, Refused> {
        let props = self
            .props
            .as_ref()
            .map_err(|why| Refused::illegal(why.clone()))?;
        Ok(MessageSpec {
            topic: Cow::Borrowed(topic),
            queue_id: self.queue_id,
            flag: self.flag,
            sys_flag: self.sys_flag,
            born_timestamp: self.born_timestamp.unwrap_or(now),
            born_host: self.born_host.unwrap_or(DEFAULT_BORN_HOST),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: Cow::Borrowed(body),
            properties: Cow::Borrowed(props),
        })
    }
}

pub use crate::log::message::DEFAULT_BORN_HOST;

pub(super) fn props_dict<'py>(py: Python<'py>, raw: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in iter_properties(raw) {
        d.set_item(String::from_utf8_lossy(k), String::from_utf8_lossy(v))?;
    }
    Ok(d)
}

pub(super) fn prop_value(raw: &[u8], name: &str) -> Option<String> {
    crate::log::message::find_property(raw, name).map(|v| String::from_utf8_lossy(v).into_owned())
}

pub(super) fn keys_list(raw: &[u8]) -> Vec<String> {
    prop_value(raw, props::KEYS)
        .map(|k| {
            k.split(' ')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

put_fields_method!(new PyMessage => PyMessage::from_args);

impl PyMessage {
    /// A message from the put fields (`Message(...)`).
    fn from_args(args: PutArgs<'_, '_>) -> PyResult<Self> {
        guarded(|| {
            let f = args.parse()?;
            Ok(Self {
                topic: f.topic.unbind(),
                body: f.body.unbind(),
                queue_id: f.queue_id,
                flag: f.flag,
                born_timestamp: f.born_timestamp,
                born_host: f.born_host,
                sys_flag: f.sys_flag,
                delay_level: f.delay_level,
                props: f.props,
            })
        })
    }
}

#[pymethods]
impl PyMessage {
    #[getter]
    fn topic(&self, py: Python<'_>) -> Py<PyString> {
        self.topic.clone_ref(py)
    }
    #[getter]
    fn body(&self, py: Python<'_>) -> Py<PyBytes> {
        self.body.clone_ref(py)
    }
    #[getter]
    fn queue_id(&self) -> i32 {
        self.queue_id
    }
    #[getter]
    fn flag(&self) -> i32 {
        self.flag
    }
    #[getter]
    fn sys_flag(&self) -> i32 {
        self.sys_flag
    }
    #[getter]
    fn delay_level(&self) -> i32 {
        self.delay_level
    }
    #[getter]
    fn born_timestamp(&self) -> Option<i64> {
        self.born_timestamp
    }
    #[getter]
    fn born_host<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.born_host
            .as_ref()
            .map(|h| host_tuple(py, h))
            .transpose()
    }
    #[getter]
    fn tags(&self) -> Option<String> {
        self.props
            .as_ref()
            .ok()
            .and_then(|p| prop_value(p, props::TAGS))
    }
    #[getter]
    fn keys(&self) -> Vec<String> {
        self.props
            .as_ref()
            .map(|p| keys_list(p))
            .unwrap_or_default()
    }
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        props_dict(py, self.props.as_deref().unwrap_or(&[]))
    }
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Message(topic={:?}, queue_id={}, body=<{} bytes>, tags={:?})",
            self.topic.bind(py).to_string_lossy(),
            self.queue_id,
            self.body.bind(py).as_bytes().len(),
            self.tags()
        )
    }
}

/// The result of a put.
#[pyclass(frozen, module = "rocketstore._native", name = "PutResult")]
pub struct PyPutResult {
    pub outcome: PutOutcome,
    pub store_host: SocketAddr,
}

impl PyPutResult {
    /// A new `PutResult` object (its type object kept: see
    /// `fast_method::new_instance`).
    pub fn new_bound(
        py: Python<'_>,
        outcome: PutOutcome,
        store_host: SocketAddr,
    ) -> PyResult<Bound<'_, Self>> {
        static TYPE: GILOnceCell<Py<PyType>> = GILOnceCell::new();
        let value = Self {
            outcome,
            store_host,
        };
        new_instance(py, value, &TYPE)
    }
}

#[pymethods]
impl PyPutResult {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let st = put_status_obj(py, self.outcome.status)?;
        let why = match &self.outcome.reason {
            Some(r) => format!(", reason={r:?}"),
            None => String::new(),
        };
        Ok(format!(
            "PutResult(status={}, wrote_offset={}, wrote_bytes={}, queue_offset={}{why})",
            st.bind(py).str()?,
            self.outcome.wrote_offset,
            self.outcome.wrote_bytes,
            self.outcome.queue_offset
        ))
    }
}

/// The result of a batch put: one object for the whole batch.
#[pyclass(frozen, module = "rocketstore._native", name = "BatchPutResult")]
pub struct PyBatchPutResult {
    pub status: PutStatus,
    pub reason: Option<String>,
    pub wrote_offset: i64,
    pub queue_offset: i64,
    pub count: usize,
    pub wrote_bytes: u64,
    pub store_timestamp: i64,
    /// `array('q')` of every message's CommitLog offset, when asked for.
    pub offsets: Option<PyObject>,
    pub store_host: SocketAddr,
}

#[pymethods]
impl PyBatchPutResult {
    /// Offset message ids of every message (needs `return_offsets=True`).
    fn msg_ids(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let Some(o) = &self.offsets else {
            return Err(PyValueError::new_err(
                "msg_ids() needs the offsets: put the batch with return_offsets=True",
            ));
        };
        let offsets: Vec<i64> = o.bind(py).call_method0("tolist")?.extract()?;
        Ok(offsets
            .into_iter()
            .map(|off| offset_msg_id(&self.store_host, off))
            .collect())
    }
    fn __len__(&self) -> usize {
        self.count
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let st = put_status_obj(py, self.status)?;
        Ok(format!(
            "BatchPutResult(status={}, count={}, wrote_offset={}, queue_offset={}, wrote_bytes={}{})",
            st.bind(py).str()?,
            self.count,
            self.wrote_offset,
            self.queue_offset,
            self.wrote_bytes,
            self.reason
                .as_ref()
                .map(|r| format!(", reason={r:?}"))
                .unwrap_or_default()
        ))
    }
}

/// The attributes of `PutResult` (the names and order of `_native.pyi`).
static PUT_RESULT_GETTERS: [Getter<PyPutResult>; 8] = [
    getter!(c"status", c"`PutStatus` of the put.", |r, py| {
        Ok(put_status_obj(py, r.outcome.status)?.into_bound(py))
    }),
    getter!(
        c"ok",
        c"True when the message was stored (and, under SYNC_FLUSH, flushed).",
        |r, py| (r.outcome.status == PutStatus::PutOk).into_bound_py_any(py)
    ),
    getter!(
        c"wrote_offset",
        c"CommitLog offset of the record (-1 when nothing was written).",
        |r, py| r.outcome.wrote_offset.into_bound_py_any(py)
    ),
    getter!(
        c"wrote_bytes",
        c"Record bytes written (0 when nothing was written).",
        |r, py| r.outcome.wrote_bytes.into_bound_py_any(py)
    ),
    getter!(
        c"queue_offset",
        c"The message's offset in its queue (-1 when nothing was written).",
        |r, py| r.outcome.queue_offset.into_bound_py_any(py)
    ),
    getter!(
        c"store_timestamp",
        c"When the store wrote the message (ms; 0 when nothing was written).",
        |r, py| r.outcome.store_timestamp.into_bound_py_any(py)
    ),
    getter!(
        c"msg_id",
        c"Offset message id (store host + port + physical offset, upper-case hex); \
the empty string when nothing was written.",
        |r, py| {
            let o = &r.outcome;
            if o.wrote_offset >= 0 && o.wrote_bytes > 0 {
                offset_msg_id(&r.store_host, o.wrote_offset).into_bound_py_any(py)
            } else {
                "".into_bound_py_any(py)
            }
        }
    ),
    getter!(
        c"reason",
        c"Why the put was not `PUT_OK`: a short sentence naming the field and the \
rule. None when the message was accepted.",
        |r, py| r.outcome.reason.as_deref().into_bound_py_any(py)
    ),
];

/// The attributes of `BatchPutResult` (the names and order of
/// `_native.pyi`).
static BATCH_RESULT_GETTERS: [Getter<PyBatchPutResult>; 9] = [
    getter!(c"status", c"`PutStatus` of the batch.", |r, py| {
        Ok(put_status_obj(py, r.status)?.into_bound(py))
    }),
    getter!(
        c"ok",
        c"True when every message was stored (and, under SYNC_FLUSH, flushed).",
        |r, py| (r.status == PutStatus::PutOk).into_bound_py_any(py)
    ),
    getter!(
        c"reason",
        c"Why the batch was refused (which message, and what is wrong), or None.",
        |r, py| r.reason.as_deref().into_bound_py_any(py)
    ),
    getter!(
        c"wrote_offset",
        c"CommitLog offset of the first message (-1 when nothing was written).",
        |r, py| r.wrote_offset.into_bound_py_any(py)
    ),
    getter!(
        c"queue_offset",
        c"Queue offset of the first message; message `i` has `queue_offset + i`.",
        |r, py| r.queue_offset.into_bound_py_any(py)
    ),
    getter!(c"count", c"Messages written.", |r, py| r
        .count
        .into_bound_py_any(py)),
    getter!(c"wrote_bytes", c"Record bytes written.", |r, py| r
        .wrote_bytes
        .into_bound_py_any(py)),
    getter!(
        c"store_timestamp",
        c"Store timestamp of the first message (0 when nothing was written).",
        |r, py| r.store_timestamp.into_bound_py_any(py)
    ),
    getter!(
        c"offsets",
        c"Every message's CommitLog offset as an `array('q')`, or None unless the put \
asked for them (`return_offsets=True`).",
        |r, py| r
            .offsets
            .as_ref()
            .map(|o| o.clone_ref(py))
            .into_bound_py_any(py)
    ),
];

/// The definitions behind the result getters' descriptors.
static PUT_RESULT_DEFS: OnceLock<GetSetDefs> = OnceLock::new();
static BATCH_RESULT_DEFS: OnceLock<GetSetDefs> = OnceLock::new();

/// Puts the attributes of `PutResult` and `BatchPutResult` on their
/// classes (module set-up, once, after the classes are added).
pub fn register_result_getters(py: Python<'_>) -> PyResult<()> {
    getset::install(
        &py.get_type::<PyPutResult>(),
        &PUT_RESULT_GETTERS,
        &PUT_RESULT_DEFS,
    )?;
    getset::install(
        &py.get_type::<PyBatchPutResult>(),
        &BATCH_RESULT_GETTERS,
        &BATCH_RESULT_DEFS,
    )
}
