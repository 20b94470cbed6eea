//! Per-message Python types: `Message`, `PutResult`, `MessageExt`.
//!
//! They sit on the hot path, so they are frozen Rust classes: building one
//! costs a fraction of a dataclass.

use std::borrow::Cow;
use std::io::Read;
use std::net::{IpAddr, SocketAddr};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};

use crate::log::commitlog::{PutOutcome, PutStatus, Refused};
use crate::log::message::{
    iter_properties, offset_msg_id, props, sysflag, tags_code, MessageSpec, PropertiesBuilder,
    RecordView,
};

use super::args::{
    body_arg, defaulted, i32_arg, opt_dict_arg, opt_i64_arg, opt_str_arg, type_error, type_name,
};
use super::gil::guarded;

static PUT_STATUS: GILOnceCell<Vec<PyObject>> = GILOnceCell::new();

fn enum_members(py: Python<'_>, name: &str, count: usize) -> PyResult<Vec<PyObject>> {
    let cls = py.import("rocketstore.enums")?.getattr(name)?;
    (0..count).map(|i| Ok(cls.call1((i,))?.unbind())).collect()
}

/// The Python `PutStatus` member for `s`.
pub fn put_status_obj(py: Python<'_>, s: PutStatus) -> PyResult<PyObject> {
    let v = PUT_STATUS.get_or_try_init(py, || enum_members(py, "PutStatus", 10))?;
    Ok(v[s as usize].clone_ref(py))
}

static GET_STATUS: GILOnceCell<Vec<PyObject>> = GILOnceCell::new();

/// The Python `GetStatus` member for `s`.
pub fn get_status_obj(py: Python<'_>, s: crate::queue::reader::GetStatus) -> PyResult<PyObject> {
    let v = GET_STATUS.get_or_try_init(py, || enum_members(py, "GetStatus", 9))?;
    Ok(v[s as usize].clone_ref(py))
}

/// Parses an `(ip, port)` tuple.
pub fn parse_host(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<SocketAddr> {
    let (ip, port): (String, i64) = obj.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be an (ip: str, port: int) tuple, not {}",
            type_name(obj)
        ))
    })?;
    let ip: IpAddr = ip
        .parse()
        .map_err(|_| PyValueError::new_err(format!("{what}: {ip:?} is not an IP address")))?;
    if !(0..=65535).contains(&port) {
        return Err(PyValueError::new_err(format!(
            "{what}: port {port} out of range"
        )));
    }
    Ok(SocketAddr::new(ip, port as u16))
}

fn host_tuple<'py>(py: Python<'py>, a: &SocketAddr) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(
        py,
        [
            a.ip().to_string().into_pyobject(py)?.into_any(),
            a.port().into_pyobject(py)?.into_any(),
        ],
    )
}

/// Builds the serialized properties of a message. `Ok(Err(reason))` means the
/// message is illegal (MESSAGE_ILLEGAL at put, `reason` names the field and
/// the rule); `Err` is a Python error for a wrong argument type or a
/// contradiction.
pub fn build_properties(
    tags: Option<&str>,
    keys: Option<&Bound<'_, PyAny>>,
    properties: Option<&Bound<'_, PyDict>>,
    delay_level: i32,
) -> PyResult<std::result::Result<Vec<u8>, String>> {
    let mut b = PropertiesBuilder::with_capacity(32);
    Ok(build_properties_into(&mut b, tags, keys, properties, delay_level)?.map(|()| b.finish()))
}

/// [`build_properties`] appending to `b` (after what it holds, as the
/// properties of a new message), so a batch builds all its messages'
/// properties in one buffer.
pub fn build_properties_into(
    b: &mut PropertiesBuilder,
    tags: Option<&str>,
    keys: Option<&Bound<'_, PyAny>>,
    properties: Option<&Bound<'_, PyDict>>,
    delay_level: i32,
) -> PyResult<std::result::Result<(), String>> {
    b.next_message();
    let mut illegal: Option<String> = None;
    fn note(
        illegal: &mut Option<String>,
        r: std::result::Result<(), crate::log::message::PropertyError>,
    ) {
        if let Err(crate::log::message::PropertyError::Illegal(m)) = r {
            illegal.get_or_insert(m);
        }
    }
    if let Some(d) = properties {
        for (k, v) in d.iter() {
            let k: Bound<'_, PyString> = k
                .downcast_into()
                .map_err(|e| type_error("property names", "str", &e.into_inner()))?;
            let v: Bound<'_, PyString> = v
                .downcast_into()
                .map_err(|e| type_error("property values", "str", &e.into_inner()))?;
            let ks = k.to_cow()?;
            if tags.is_some() && ks == props::TAGS {
                return Err(PyValueError::new_err(
                    "give tags= or a TAGS property, not both",
                ));
            }
            if keys.is_some() && ks == props::KEYS {
                return Err(PyValueError::new_err(
                    "give keys= or a KEYS property, not both",
                ));
            }
            if delay_level != 0 && ks == props::DELAY {
                return Err(PyValueError::new_err(
                    "give delay_level= or a DELAY property, not both",
                ));
            }
            note(&mut illegal, b.push(&ks, &v.to_cow()?));
        }
    }
    if let Some(t) = tags {
        if t.is_empty() {
            illegal.get_or_insert_with(|| {
                "tags must not be empty (give tags=None for a message without tags)".into()
            });
        } else if let Err(crate::log::message::PropertyError::Illegal(_)) = b.push(props::TAGS, t) {
            illegal.get_or_insert_with(|| {
                format!(
                    "tags {t:?} contain a control character 0x01 or 0x02, which separates \
                     properties in a record"
                )
            });
        }
    }
    if let Some(k) = keys {
        // Keys go straight into the buffer (no joined string per message).
        let mut started = false;
        if let Ok(s) = k.downcast::<PyString>() {
            note(&mut illegal, b.push_key(&s.to_cow()?, &mut started));
        } else {
            for item in k
                .try_iter()
                .map_err(|_| type_error("keys", "a str or an iterable of str", k))?
            {
                let item = item?;
                let s: Bound<'_, PyString> = item
                    .downcast_into()
                    .map_err(|e| type_error("each key", "str", &e.into_inner()))?;
                note(&mut illegal, b.push_key(&s.to_cow()?, &mut started));
            }
        }
    }
    if delay_level < 0 {
        return Err(PyValueError::new_err(format!(
            "delay_level must be >= 0, got {delay_level}"
        )));
    }
    if delay_level > 0 {
        note(&mut illegal, b.push(props::DELAY, &delay_level.to_string()));
    }
    Ok(match illegal {
        Some(m) => Err(m),
        None => Ok(()),
    })
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
    /// Serialized properties, or why the message is illegal.
    pub props: std::result::Result<Vec<u8>, String>,
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
        let topic = self.topic.bind(py).to_str().map_err(|_| {
            Refused::illegal("topic is not valid UTF-8 text (it holds a lone surrogate)")
        })?;
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

/// Born host used when a message gives none.
pub const DEFAULT_BORN_HOST: SocketAddr =
    SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 1)), 0);

fn props_dict<'py>(py: Python<'py>, raw: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in iter_properties(raw) {
        d.set_item(String::from_utf8_lossy(k), String::from_utf8_lossy(v))?;
    }
    Ok(d)
}

fn prop_value(raw: &[u8], name: &str) -> Option<String> {
    crate::log::message::find_property(raw, name).map(|v| String::from_utf8_lossy(v).into_owned())
}

fn keys_list(raw: &[u8]) -> Vec<String> {
    prop_value(raw, props::KEYS)
        .map(|k| {
            k.split(' ')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[pymethods]
impl PyMessage {
    #[new]
    #[pyo3(signature = (topic, body, queue_id=None, tags=None, keys=None, properties=None, delay_level=None, flag=None, born_timestamp=None, born_host=None, sys_flag=None), text_signature = "(topic, body, queue_id=0, tags=None, keys=None, properties=None, delay_level=0, flag=0, born_timestamp=None, born_host=None, sys_flag=0)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
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
    ) -> PyResult<Self> {
        guarded(|| {
            let topic = topic
                .downcast::<PyString>()
                .map_err(|_| type_error("topic", "str", topic))?
                .clone();
            let body = body_arg(body)?;
            let queue_id = defaulted(queue_id, 0, queue_id_arg)?;
            let tags = opt_str_arg(tags, "tags")?;
            let keys = keys.filter(|k| !k.is_none());
            let properties = opt_dict_arg(properties, "properties", "a dict of str to str")?;
            let delay_level = defaulted(delay_level, 0, |o| i32_arg(o, "delay_level"))?;
            let flag = defaulted(flag, 0, |o| i32_arg(o, "flag"))?;
            let sys_flag = defaulted(sys_flag, 0, |o| i32_arg(o, "sys_flag"))?;
            let born_timestamp = opt_i64_arg(born_timestamp, "born_timestamp")?;
            let born_host = born_host
                .filter(|h| !h.is_none())
                .map(|h| parse_host(&h, "born_host"))
                .transpose()?;
            let props =
                if tags.is_none() && keys.is_none() && properties.is_none() && delay_level == 0 {
                    Ok(Vec::new())
                } else {
                    build_properties(tags, keys.as_ref(), properties, delay_level)?
                };
            Ok(Self {
                topic: topic.unbind(),
                body: body.unbind(),
                queue_id,
                flag,
                born_timestamp,
                born_host,
                sys_flag,
                delay_level,
                props,
            })
        })
    }

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

/// Converts and validates a queue id argument (an int in 0..=2**31-1).
pub fn queue_id_arg(obj: &Bound<'_, PyAny>) -> PyResult<i32> {
    let q = super::args::i64_arg(obj, "queue_id").map_err(|e| {
        if e.is_instance_of::<PyValueError>(obj.py()) {
            PyValueError::new_err("queue_id is out of range: it must be in 0..2147483647")
        } else {
            e
        }
    })?;
    check_queue_id(q)
}

/// Validates a queue id argument.
pub fn check_queue_id(q: i64) -> PyResult<i32> {
    if q < 0 {
        return Err(PyValueError::new_err(format!(
            "queue_id must be >= 0, got {q}"
        )));
    }
    i32::try_from(q).map_err(|_| {
        PyValueError::new_err(format!("queue_id is out of range: {q} is over 2147483647"))
    })
}

/// The result of a put.
#[pyclass(frozen, module = "rocketstore._native", name = "PutResult")]
pub struct PyPutResult {
    pub outcome: PutOutcome,
    pub store_host: SocketAddr,
}

#[pymethods]
impl PyPutResult {
    /// `PutStatus` of the put.
    #[getter]
    fn status(&self, py: Python<'_>) -> PyResult<PyObject> {
        put_status_obj(py, self.outcome.status)
    }
    /// True when the message was stored (and, under SYNC_FLUSH, flushed).
    #[getter]
    fn ok(&self) -> bool {
        self.outcome.status == PutStatus::PutOk
    }
    #[getter]
    fn wrote_offset(&self) -> i64 {
        self.outcome.wrote_offset
    }
    #[getter]
    fn wrote_bytes(&self) -> i32 {
        self.outcome.wrote_bytes
    }
    #[getter]
    fn queue_offset(&self) -> i64 {
        self.outcome.queue_offset
    }
    #[getter]
    fn store_timestamp(&self) -> i64 {
        self.outcome.store_timestamp
    }
    /// Offset message id (store host + port + physical offset, upper-case
    /// hex); the empty string when nothing was written.
    #[getter]
    fn msg_id(&self) -> String {
        if self.outcome.wrote_offset >= 0 && self.outcome.wrote_bytes > 0 {
            offset_msg_id(&self.store_host, self.outcome.wrote_offset)
        } else {
            String::new()
        }
    }
    /// Why the put was not `PUT_OK`: a short sentence naming the field and
    /// the rule. None when the message was accepted.
    #[getter]
    fn reason(&self) -> Option<&str> {
        self.outcome.reason.as_deref()
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let st = self.status(py)?;
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
    /// `PutStatus` of the batch.
    #[getter]
    fn status(&self, py: Python<'_>) -> PyResult<PyObject> {
        put_status_obj(py, self.status)
    }
    /// True when every message was stored (and, under SYNC_FLUSH, flushed).
    #[getter]
    fn ok(&self) -> bool {
        self.status == PutStatus::PutOk
    }
    /// Why the batch was refused (which message, and what is wrong), or None.
    #[getter]
    fn reason(&self) -> Option<String> {
        self.reason.clone()
    }
    /// CommitLog offset of the first message (-1 when nothing was written).
    #[getter]
    fn wrote_offset(&self) -> i64 {
        self.wrote_offset
    }
    /// Queue offset of the first message; message `i` has `queue_offset + i`.
    #[getter]
    fn queue_offset(&self) -> i64 {
        self.queue_offset
    }
    /// Messages written.
    #[getter]
    fn count(&self) -> usize {
        self.count
    }
    /// Record bytes written.
    #[getter]
    fn wrote_bytes(&self) -> u64 {
        self.wrote_bytes
    }
    /// Store timestamp of the first message (0 when nothing was written).
    #[getter]
    fn store_timestamp(&self) -> i64 {
        self.store_timestamp
    }
    /// Every message's CommitLog offset as an `array('q')`, or None unless
    /// the put asked for them (`return_offsets=True`).
    #[getter]
    fn offsets(&self, py: Python<'_>) -> Option<PyObject> {
        self.offsets.as_ref().map(|o| o.clone_ref(py))
    }
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
        let st = self.status(py)?;
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

/// A stored message as read back: decoded lazily from its record bytes.
#[pyclass(frozen, module = "rocketstore._native", name = "MessageExt")]
pub struct PyMessageExt {
    pub raw: Vec<u8>,
    pub view: RecordView,
}

impl PyMessageExt {
    fn props_raw(&self) -> &[u8] {
        &self.raw[self.view.properties.clone()]
    }
    fn stored(&self) -> &[u8] {
        &self.raw[self.view.body.clone()]
    }
}

/// Inflates a compressed body (zlib for type 0 and 3). A stored body that
/// does not inflate is damage in the record at CommitLog offset `offset`
/// (`CorruptedError`), not a mistake of the caller.
fn decompress(sys_flag: i32, data: &[u8], offset: i64) -> PyResult<Vec<u8>> {
    let corrupted = |why: String| -> PyErr {
        crate::error::StoreError::corrupted("CommitLog", offset.max(0) as u64, why).into()
    };
    let kind = (sys_flag & sysflag::COMPRESSION_TYPE_MASK) >> 8;
    match kind {
        0 | 3 => {
            let mut out = Vec::with_capacity(data.len() * 4);
            flate2::read::ZlibDecoder::new(data)
                .read_to_end(&mut out)
                .map_err(|e| corrupted(format!("the compressed body does not inflate: {e}")))?;
            Ok(out)
        }
        1 => Err(PyValueError::new_err(
            "LZ4-compressed bodies are not supported by this build; use stored_body",
        )),
        2 => Err(PyValueError::new_err(
            "ZSTD-compressed bodies are not supported by this build; use stored_body",
        )),
        k => Err(corrupted(format!(
            "the record's sysFlag names unknown compression type {k}"
        ))),
    }
}

#[pymethods]
impl PyMessageExt {
    #[getter]
    fn topic(&self) -> String {
        String::from_utf8_lossy(&self.raw[self.view.topic.clone()]).into_owned()
    }
    #[getter]
    fn queue_id(&self) -> i32 {
        self.view.queue_id
    }
    #[getter]
    fn queue_offset(&self) -> i64 {
        self.view.queue_offset
    }
    #[getter]
    fn commit_log_offset(&self) -> i64 {
        self.view.physical_offset
    }
    #[getter]
    fn store_size(&self) -> usize {
        self.view.total_size
    }
    /// The body, decompressed when the record is compressed (sysFlag bit 0).
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        if self.view.sys_flag & sysflag::COMPRESSED != 0 {
            let d = decompress(self.view.sys_flag, self.stored(), self.view.physical_offset)?;
            Ok(PyBytes::new(py, &d))
        } else {
            Ok(PyBytes::new(py, self.stored()))
        }
    }
    /// The body bytes exactly as stored.
    #[getter]
    fn stored_body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.stored())
    }
    #[getter]
    fn body_crc(&self) -> i32 {
        self.view.body_crc
    }
    #[getter]
    fn flag(&self) -> i32 {
        self.view.flag
    }
    #[getter]
    fn sys_flag(&self) -> i32 {
        self.view.sys_flag
    }
    #[getter]
    fn tags(&self) -> Option<String> {
        prop_value(self.props_raw(), props::TAGS)
    }
    /// The consume-queue tag hash of this message (Java `String.hashCode`).
    #[getter]
    fn tags_code(&self) -> i64 {
        tags_code(self.tags().as_deref())
    }
    #[getter]
    fn keys(&self) -> Vec<String> {
        keys_list(self.props_raw())
    }
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        props_dict(py, self.props_raw())
    }
    #[getter]
    fn born_timestamp(&self) -> i64 {
        self.view.born_timestamp
    }
    #[getter]
    fn born_host<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        host_tuple(py, &self.view.born_host)
    }
    #[getter]
    fn store_timestamp(&self) -> i64 {
        self.view.store_timestamp
    }
    #[getter]
    fn store_host<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        host_tuple(py, &self.view.store_host)
    }
    #[getter]
    fn reconsume_times(&self) -> i32 {
        self.view.reconsume_times
    }
    #[getter]
    fn prepared_transaction_offset(&self) -> i64 {
        self.view.prepared_transaction_offset
    }
    /// Offset message id, from the record's store host and physical offset.
    #[getter]
    fn msg_id(&self) -> String {
        offset_msg_id(&self.view.store_host, self.view.physical_offset)
    }
    /// The whole record as stored in the CommitLog.
    fn record_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.raw)
    }
    fn __repr__(&self) -> String {
        format!(
            "MessageExt(topic={:?}, queue_id={}, queue_offset={}, commit_log_offset={}, body=<{} bytes>)",
            self.topic(),
            self.view.queue_id,
            self.view.queue_offset,
            self.view.physical_offset,
            self.view.body.len()
        )
    }
}
