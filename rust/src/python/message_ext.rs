//! `MessageExt`: a stored message as read back, its fields decoded from
//! the record's bytes when they are read.
//!
//! A read checks each record once (sizes, body or property CRC) and makes
//! one object per message that keeps where the record's bytes lie: its own
//! copy, or its place in the buffer the messages of one pull share
//! ([`RecordBytes`]), plus its frame: where its body, topic and properties
//! lie (known from the check, `RecordFrame`). Nothing else is decoded up front: `m.queue_offset`
//! reads the field at its position (`RecordRef`), `m.body` copies the body
//! out, `m.tags` looks the property up.
//!
//! The attributes are C-level getters (`getset.rs`): PyO3's `#[getter]`
//! checks the type of `self` a second time, at the price of an allocation
//! per read with this build, and runs in a trampoline a getter does not
//! need.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBytes, PyType};
use pyo3::BoundObject;

use crate::error::StoreError;
use crate::log::message::{offset_msg_id, props, sysflag, tags_code, RecordFrame, RecordRef};

use super::fast_method::new_instance;
use super::getset::{self, getter, GetSetDefs, Getter};
use super::types::{host_tuple, keys_list, prop_value, props_dict};

/// A stored message as read back: decoded lazily from its record bytes.
#[pyclass(frozen, module = "rocketstore._native", name = "MessageExt")]
pub struct PyMessageExt {
    raw: RecordBytes,
    /// Where its body, topic and properties lie (known from the read's check).
    frame: RecordFrame,
}

/// The bytes of one record as read: a copy of its own, or its place in a
/// buffer the messages of one pull share (one allocation per pull instead
/// of one per message; the buffer lives until its last message is gone).
pub enum RecordBytes {
    /// The record's own copy.
    Own(Vec<u8>),
    /// `len` bytes at `start` of a pull's buffer.
    Shared {
        /// The pull's buffer.
        buf: Arc<Vec<u8>>,
        /// Where the record starts in it.
        start: usize,
        /// The record's length.
        len: usize,
    },
}

impl From<Vec<u8>> for RecordBytes {
    fn from(v: Vec<u8>) -> Self {
        RecordBytes::Own(v)
    }
}

impl std::ops::Deref for RecordBytes {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            RecordBytes::Own(v) => v,
            RecordBytes::Shared { buf, start, len } => {
                buf.get(*start..*start + *len).unwrap_or_default()
            }
        }
    }
}

impl PyMessageExt {
    /// The message of the checked record `raw`, whose frame is `frame`.
    pub fn new(raw: RecordBytes, frame: RecordFrame) -> Self {
        Self { raw, frame }
    }

    /// A new `MessageExt` object (its type object kept: see
    /// `fast_method::new_instance`).
    pub fn new_bound<'py>(
        py: Python<'py>,
        raw: RecordBytes,
        frame: RecordFrame,
    ) -> PyResult<Bound<'py, Self>> {
        static TYPE: GILOnceCell<Py<PyType>> = GILOnceCell::new();
        new_instance(py, Self::new(raw, frame), &TYPE)
    }

    fn rec(&self) -> RecordRef<'_> {
        RecordRef::new(&self.raw, self.frame)
    }
    fn props_raw(&self) -> &[u8] {
        self.rec().properties()
    }
    fn stored(&self) -> &[u8] {
        self.rec().body()
    }
    fn topic_str(&self) -> String {
        String::from_utf8_lossy(self.rec().topic()).into_owned()
    }
    fn commit_log_offset(&self) -> i64 {
        self.rec().physical_offset().unwrap_or(-1)
    }
    fn tags(&self) -> Option<String> {
        prop_value(self.props_raw(), props::TAGS)
    }

    /// A field the record was checked to hold; `None` (which a checked
    /// record never gives) is damage in the record.
    fn field<T>(&self, v: Option<T>) -> PyResult<T> {
        v.ok_or_else(|| {
            StoreError::corrupted(
                "CommitLog",
                self.commit_log_offset().max(0) as u64,
                "a field lies outside the record",
            )
            .into()
        })
    }

    fn int<'py, T: IntoPyObject<'py>>(
        &self,
        py: Python<'py>,
        v: Option<T>,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        PyErr: From<T::Error>,
    {
        Ok(self.field(v)?.into_pyobject(py)?.into_bound().into_any())
    }

    fn host<'py>(&self, py: Python<'py>, h: Option<SocketAddr>) -> PyResult<Bound<'py, PyAny>> {
        Ok(host_tuple(py, &self.field(h)?)?.into_any())
    }
}

/// Inflates a compressed body (zlib for type 0 and 3). A stored body that
/// does not inflate is damage in the record at CommitLog offset `offset`
/// (`CorruptedError`), not a mistake of the caller.
fn decompress(sys_flag: i32, data: &[u8], offset: i64) -> PyResult<Vec<u8>> {
    let corrupted = |why: String| -> PyErr {
        StoreError::corrupted("CommitLog", offset.max(0) as u64, why).into()
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

/// The body, decompressed when the record is compressed (sysFlag bit 0).
fn body<'py>(m: &PyMessageExt, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
    let sys_flag = m.frame.sys_flag();
    if sys_flag & sysflag::COMPRESSED != 0 {
        let d = decompress(sys_flag, m.stored(), m.commit_log_offset())?;
        Ok(PyBytes::new(py, &d).into_any())
    } else {
        Ok(PyBytes::new(py, m.stored()).into_any())
    }
}

/// The attributes of `MessageExt` (the names and order of `_native.pyi`).
static GETTERS: [Getter<PyMessageExt>; 21] = [
    getter!(c"topic", c"The message's topic.", |m, py| {
        Ok(m.topic_str().into_pyobject(py)?.into_any())
    }),
    getter!(c"queue_id", c"The queue the message is in.", |m, py| {
        m.int(py, m.rec().queue_id())
    }),
    getter!(
        c"queue_offset",
        c"The message's offset in its queue.",
        |m, py| { m.int(py, m.rec().queue_offset()) }
    ),
    getter!(
        c"commit_log_offset",
        c"Where the record starts in the CommitLog.",
        |m, py| { m.int(py, m.rec().physical_offset()) }
    ),
    getter!(c"store_size", c"The record's size in bytes.", |m, py| {
        m.int(py, Some(m.rec().total_size()))
    }),
    getter!(
        c"body",
        c"The body, decompressed when the record is compressed (sysFlag bit 0).",
        body
    ),
    getter!(
        c"stored_body",
        c"The body bytes exactly as stored.",
        |m, py| { Ok(PyBytes::new(py, m.stored()).into_any()) }
    ),
    getter!(c"body_crc", c"The body CRC as stored.", |m, py| {
        m.int(py, m.rec().body_crc())
    }),
    getter!(c"flag", c"The producer's flag.", |m, py| m
        .int(py, m.rec().flag())),
    getter!(c"sys_flag", c"The record's sysFlag.", |m, py| {
        m.int(py, Some(m.frame.sys_flag()))
    }),
    getter!(c"tags", c"The TAGS property, or None.", |m, py| {
        Ok(m.tags().into_pyobject(py)?.into_any())
    }),
    getter!(
        c"tags_code",
        c"The consume-queue tag hash of this message (Java `String.hashCode`).",
        |m, py| Ok(tags_code(m.tags().as_deref()).into_pyobject(py)?.into_any())
    ),
    getter!(c"keys", c"The KEYS property's keys.", |m, py| {
        Ok(keys_list(m.props_raw()).into_pyobject(py)?.into_any())
    }),
    getter!(c"properties", c"Every property as a dict.", |m, py| {
        Ok(props_dict(py, m.props_raw())?.into_any())
    }),
    getter!(
        c"born_timestamp",
        c"When the producer made the message (ms).",
        |m, py| { m.int(py, m.rec().born_timestamp()) }
    ),
    getter!(
        c"born_host",
        c"The producer's host as (ip, port).",
        |m, py| { m.host(py, m.rec().born_host()) }
    ),
    getter!(
        c"store_timestamp",
        c"When the store wrote the message (ms).",
        |m, py| { m.int(py, m.rec().store_timestamp()) }
    ),
    getter!(
        c"store_host",
        c"The store's host as (ip, port).",
        |m, py| { m.host(py, m.rec().store_host()) }
    ),
    getter!(
        c"reconsume_times",
        c"How often the message was consumed again.",
        |m, py| { m.int(py, m.rec().reconsume_times()) }
    ),
    getter!(
        c"prepared_transaction_offset",
        c"The prepared transaction's offset.",
        |m, py| m.int(py, m.rec().prepared_transaction_offset())
    ),
    getter!(
        c"msg_id",
        c"Offset message id, from the record's store host and physical offset.",
        |m, py| {
            let id = offset_msg_id(&m.field(m.rec().store_host())?, m.commit_log_offset());
            Ok(id.into_pyobject(py)?.into_any())
        }
    ),
];

/// The definitions behind [`GETTERS`]' descriptors.
static DEFS: OnceLock<GetSetDefs> = OnceLock::new();

/// Adds `MessageExt` to the module, with its attributes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyMessageExt>()?;
    getset::install(&m.py().get_type::<PyMessageExt>(), &GETTERS, &DEFS)
}

#[pymethods]
impl PyMessageExt {
    /// The whole record as stored in the CommitLog.
    fn record_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.raw)
    }
    fn __repr__(&self) -> String {
        let r = self.rec();
        format!(
            "MessageExt(topic={:?}, queue_id={}, queue_offset={}, commit_log_offset={}, body=<{} bytes>)",
            self.topic_str(),
            r.queue_id().unwrap_or(-1),
            r.queue_offset().unwrap_or(-1),
            self.commit_log_offset(),
            self.stored().len()
        )
    }
}
