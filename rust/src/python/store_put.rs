//! The put methods of `NativeStore`: one message given as arguments, a
//! `Message`, a list of messages, a batch of bodies for one queue, and the
//! rows of an Arrow stream.

use std::borrow::Cow;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

use crate::log::commitlog::{BatchInput, PutOutcome, PutStatus, Refused};
use crate::log::message::{MessageSpec, PropertiesBuilder};

use super::args::{
    body_arg, defaulted, i32_arg, opt_dict_arg, opt_i64_arg, opt_str_arg, type_error,
};
use super::gil::{guarded, nogil};
use super::store::PyStore;
use super::types::{
    build_properties, build_properties_into, check_queue_id, parse_host, queue_id_arg,
    PyBatchPutResult, PyMessage, PyPutResult, DEFAULT_BORN_HOST,
};

/// A message of a batch as borrowed parts, or why it is refused.
type Parts<'a> = std::result::Result<(&'a PyMessage, &'a str, &'a [u8]), Refused>;

/// A row an Arrow append refused: `(row index, PutStatus value, reason)`.
type RefusedRow = (u64, u8, String);

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

impl PyStore {
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

#[pymethods]
impl PyStore {
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
}
