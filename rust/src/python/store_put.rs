//! The put methods of `NativeStore`: one message given as arguments, a
//! `Message`, a list of messages, a batch of bodies for one queue, and the
//! rows of an Arrow stream. Arguments are converted by `put_args.rs`; what
//! a put does is the engine's (`crate::store::Store`).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::columnar::ArrowAppend;
use crate::log::commitlog::{BatchOutcome, BatchRefusal, PutOutcome, PutStatus, Refused};
use crate::log::message::MessageSpec;

use super::args::check_queue_id;
use super::args::type_error;
use super::errors::put_error;
use super::gil::{guarded, nogil};
use super::put_args::{batch_properties, put_fields_method, BatchBodies, PutArgs};
use super::store::PyStore;
use super::types::{PyBatchPutResult, PyMessage, PyPutResult};

/// A message of a batch as borrowed parts, or why it is refused.
type Parts<'a> = std::result::Result<(&'a PyMessage, &'a str, &'a [u8]), Refused>;

/// A row an Arrow append refused: `(row index, PutStatus value, reason)`.
type RefusedRow = (u64, u8, String);

put_fields_method!(
    /// Puts one message given as arguments (no `Message` object needed).
    fn put in PyStore -> Py<PyPutResult> => PyStore::put_args
);

/// The exception for a put that was not `PUT_OK`: off the hot path.
#[cold]
#[inline(never)]
fn refusal(py: Python<'_>, r: PyResult<Bound<'_, PyPutResult>>) -> PyErr {
    match r {
        Ok(obj) => put_error(py, "_put_error", obj.into_any()),
        Err(e) => e,
    }
}

impl PyStore {
    /// Puts one message given as the put fields (`put(...)`).
    pub(crate) fn put_args(
        &self,
        py: Python<'_>,
        args: PutArgs<'_, '_>,
        check: bool,
    ) -> PyResult<Py<PyPutResult>> {
        guarded(|| {
            let fields = args.parse()?;
            match fields.spec(self.now_ms()) {
                Ok(spec) => self.put_spec(py, spec, check),
                Err(refused) => self.finish(py, self.store.refused(refused)?, check),
            }
        })
    }

    /// The result of a put, or, when `check` and its status is not
    /// `PUT_OK`, the exception for it: the one check of every single put
    /// (a put that succeeds pays one comparison; the result is built in
    /// place, as without the check).
    #[inline]
    fn finish(&self, py: Python<'_>, out: PutOutcome, check: bool) -> PyResult<Py<PyPutResult>> {
        if check && out.status != PutStatus::PutOk {
            return Err(refusal(py, self.result(py, out)));
        }
        Ok(self.result(py, out)?.unbind())
    }

    fn put_spec(
        &self,
        py: Python<'_>,
        spec: MessageSpec<'_>,
        check: bool,
    ) -> PyResult<Py<PyPutResult>> {
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
            Err(r) => return self.finish(py, PutOutcome::rejected(r), check),
        };
        let out = match self.store.try_put_fast(&p) {
            Some(r) => r?,
            None => {
                let store = &self.store;
                nogil(py, || store.put_prepared(&p))?
            }
        };
        self.finish(py, out, check)
    }

    /// The result of a batch put.
    /// A batch's result, raised (`check`) when it is not `PUT_OK`.
    fn checked_batch(
        &self,
        py: Python<'_>,
        r: std::result::Result<BatchOutcome, BatchRefusal>,
        return_offsets: bool,
        check: bool,
    ) -> PyResult<PyBatchPutResult> {
        let r = self.batch_result(py, r, return_offsets)?;
        if check && r.status != PutStatus::PutOk {
            return Err(match Bound::new(py, r) {
                Ok(obj) => put_error(py, "_put_error", obj.into_any()),
                Err(e) => e,
            });
        }
        Ok(r)
    }

    /// The result of a batch refused before the engine saw it (a topic
    /// that is no UTF-8 text), raised or returned as any refused batch.
    pub(crate) fn refuse_batch(
        &self,
        py: Python<'_>,
        refused: Refused,
        check: bool,
    ) -> PyResult<PyBatchPutResult> {
        self.checked_batch(py, Err(refused), false, check)
    }

    fn batch_result(
        &self,
        py: Python<'_>,
        r: std::result::Result<BatchOutcome, BatchRefusal>,
        return_offsets: bool,
    ) -> PyResult<PyBatchPutResult> {
        let store_host = self.store.options().store_host;
        Ok(match r {
            Ok(o) => {
                let offsets = if return_offsets {
                    let raw: Vec<u8> = o.offsets.iter().flat_map(|x| x.to_ne_bytes()).collect();
                    let array = py.import("array")?.getattr("array")?;
                    Some(array.call1(("q", PyBytes::new(py, &raw)))?.unbind())
                } else {
                    None
                };
                PyBatchPutResult {
                    status: o.status,
                    reason: o.reason,
                    wrote_offset: o.first_offset,
                    queue_offset: o.first_queue_offset,
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
    }
}

#[pymethods]
impl PyStore {
    /// Puts one `Message`.
    #[pyo3(signature = (msg, *, check=true))]
    pub(crate) fn put_message(
        &self,
        py: Python<'_>,
        msg: &Bound<'_, PyAny>,
        check: bool,
    ) -> PyResult<Py<PyPutResult>> {
        guarded(|| {
            let m = msg
                .downcast::<PyMessage>()
                .map_err(|_| type_error("msg", "rocketstore.Message", msg))?;
            let m = m.get();
            match m.spec(py, self.now_ms()) {
                Ok(spec) => self.put_spec(py, spec, check),
                Err(refused) => self.finish(py, self.store.refused(refused)?, check),
            }
        })
    }

    /// Puts messages in order under one lock hold and one flush wait.
    #[pyo3(signature = (msgs, *, check=true))]
    pub(crate) fn put_messages<'py>(
        &self,
        py: Python<'py>,
        msgs: &Bound<'py, PyAny>,
        check: bool,
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
            let mut all_ok = true;
            for o in outs {
                all_ok &= o.status == PutStatus::PutOk;
                list.append(self.result(py, o)?)?;
            }
            if check && !all_ok {
                return Err(put_error(py, "_put_messages_error", list.into_any()));
            }
            Ok(list)
        })
    }

    /// Puts many bodies to one topic and queue: all or nothing, one result.
    #[pyo3(signature = (topic, bodies, queue_id=0, *, keys=None, tags=None, properties=None, return_offsets=false, check=true))]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn put_batch(
        &self,
        py: Python<'_>,
        topic: &str,
        bodies: &Bound<'_, PyAny>,
        queue_id: i64,
        keys: Option<&Bound<'_, PyAny>>,
        tags: Option<&Bound<'_, PyAny>>,
        properties: Option<&Bound<'_, PyAny>>,
        return_offsets: bool,
        check: bool,
    ) -> PyResult<PyBatchPutResult> {
        guarded(|| {
            let queue_id = check_queue_id(queue_id)?;
            let bodies = BatchBodies::of(bodies)?;
            let props = batch_properties(bodies.count(), keys, tags, properties)?;
            let slices = bodies.slices();
            let store = &self.store;
            let r = nogil(py, || {
                store.put_bodies(topic, queue_id, &slices, &props, return_offsets)
            })?;
            self.checked_batch(py, r, return_offsets, check)
        })
    }

    /// Checks every row of an Arrow stream (the columns of `put_arrow`)
    /// against the put rules `put_arrow` applies with the same `properties`,
    /// writing nothing. Returns `(rows, refused)`: the rows checked (all of
    /// them when none is refused) and `None` or the first refused row as
    /// `(row index, PutStatus value, reason)`.
    #[pyo3(signature = (stream, properties=None))]
    fn check_arrow(
        &self,
        py: Python<'_>,
        stream: &Bound<'_, PyAny>,
        properties: Option<Vec<(String, String)>>,
    ) -> PyResult<(u64, Option<RefusedRow>)> {
        guarded(|| {
            self.store.check_open_writer()?;
            let extra = properties.unwrap_or_default();
            let reader = super::arrow::import_stream(stream)?;
            let mut row = 0u64;
            for batch in reader {
                let batch = batch.map_err(|e| {
                    pyo3::exceptions::PyValueError::new_err(format!("arrow stream: {e}"))
                })?;
                let store = &self.store;
                let r = nogil(py, || Ok(store.check_arrow_batch(&batch, row, &extra)))??;
                if let Some(r) = r {
                    return Ok((r.row, Some((r.row, r.status as u8, r.reason))));
                }
                row += batch.num_rows() as u64;
            }
            Ok((row, None))
        })
    }

    /// Appends every row of an Arrow stream (columns `topic, body` and
    /// optional `queue_id, tags, keys, properties`) in order, batch by batch
    /// with batch puts; `properties` are added to every message. Stops after
    /// the first batch with a refused row. Returns `(appended, refused,
    /// unconfirmed)`: the rows written, `None` or the first refused row as
    /// `(row index, PutStatus value, reason)` (rows after a refused one in
    /// the same batch may be appended too: they are counted), and `None` or
    /// the first row written but not confirmed on disk or by a slave, the
    /// same way: it and the rows after it are stored, not confirmed (see
    /// `ArrowAppend`).
    #[pyo3(signature = (stream, properties=None))]
    fn put_arrow(
        &self,
        py: Python<'_>,
        stream: &Bound<'_, PyAny>,
        properties: Option<Vec<(String, String)>>,
    ) -> PyResult<(u64, Option<RefusedRow>, Option<RefusedRow>)> {
        guarded(|| {
            self.store.check_open_writer()?;
            let extra = properties.unwrap_or_default();
            let reader = super::arrow::import_stream(stream)?;
            let store = &self.store;
            let mut append = ArrowAppend::default();
            for batch in reader {
                let batch = batch.map_err(|e| {
                    pyo3::exceptions::PyValueError::new_err(format!("arrow stream: {e}"))
                })?;
                if !nogil(py, || Ok(append.batch(store, &batch, &extra)))?? {
                    break;
                }
            }
            nogil(py, || {
                append.finish(store);
                Ok(())
            })?;
            let row = |r: crate::columnar::RefusedRow| (r.row, r.status as u8, r.reason);
            Ok((
                append.appended,
                append.refused.map(row),
                append.unconfirmed.map(|u| row(u.first)),
            ))
        })
    }
}
