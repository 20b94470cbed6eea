//! Arrow streams handed to pyarrow through the Arrow PyCapsule interface.
//!
//! `ArrowStream` implements `__arrow_c_stream__`: it exports a
//! [`RangeReader`] as an `ArrowArrayStream` (the C stream interface) in a
//! capsule named `arrow_array_stream`, which pyarrow (and Polars, DuckDB)
//! import without copying. Each batch is decoded when the consumer asks for
//! it, in Rust, with the GIL released by the consumer (pyarrow reads streams
//! without the GIL). The batches own their memory, so they outlive the store.

use std::borrow::Cow;
use std::ffi::CString;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use arrow_array::types::Int32Type;
use arrow_array::{Array, RecordBatch, RecordBatchReader};
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::columnar::ReadStats;
use crate::log::commitlog::{PutStatus, Refused};
use crate::log::message::{props, topic_problem, MessageSpec, PropertiesBuilder};

use super::gil::guarded;
use super::types::DEFAULT_BORN_HOST;

/// A one-shot stream of record batches (private; see `MessageStore.read_arrow`).
#[pyclass(frozen, module = "rocketstore._native", name = "ArrowStream")]
pub struct PyArrowStream {
    reader: Mutex<Option<Box<dyn RecordBatchReader + Send>>>,
    stats: Arc<ReadStats>,
}

impl PyArrowStream {
    pub fn new(reader: Box<dyn RecordBatchReader + Send>, stats: Arc<ReadStats>) -> Self {
        Self {
            reader: Mutex::new(Some(reader)),
            stats,
        }
    }
}

fn load(c: &std::sync::atomic::AtomicU64) -> u64 {
    c.load(std::sync::atomic::Ordering::Relaxed)
}

#[pymethods]
impl PyArrowStream {
    /// Exports the stream (once) as an `arrow_array_stream` PyCapsule.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        // The schema is fixed; a requested schema is a hint we may ignore
        // (the consumer casts if it wants another).
        let _ = requested_schema;
        guarded(|| {
            let reader = self.reader.lock().take().ok_or_else(|| {
                pyo3::exceptions::PyValueError::new_err("this Arrow stream was already consumed")
            })?;
            let stream = FFI_ArrowArrayStream::new(reader);
            let name = CString::new("arrow_array_stream").ok();
            PyCapsule::new_with_destructor(py, stream, name, |s, _| drop(s))
        })
    }

    /// Rows produced so far.
    #[getter]
    fn rows(&self) -> u64 {
        load(&self.stats.rows)
    }

    /// Records skipped so far because they are damaged (body CRC, structure,
    /// or a queue unit that does not point at its message).
    #[getter]
    fn skipped_corrupt(&self) -> u64 {
        load(&self.stats.skipped_corrupt)
    }

    /// Queue offsets found deleted by retention so far.
    #[getter]
    fn lost(&self) -> u64 {
        load(&self.stats.lost)
    }

    /// Records left out by the filter so far.
    #[getter]
    fn filtered(&self) -> u64 {
        load(&self.stats.filtered)
    }
}

/// Imports an object implementing `__arrow_c_stream__` as a batch reader.
pub fn import_stream(obj: &Bound<'_, PyAny>) -> PyResult<ArrowArrayStreamReader> {
    let capsule = obj
        .call_method1("__arrow_c_stream__", (obj.py().None(),))
        .map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(
                "expected an Arrow stream (an object with __arrow_c_stream__, e.g. a pyarrow Table)",
            )
        })?;
    let capsule = capsule.downcast::<PyCapsule>()?;
    let ptr = capsule.pointer() as *mut FFI_ArrowArrayStream;
    if ptr.is_null() {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "empty Arrow stream capsule",
        ));
    }
    // SAFETY: the capsule holds a valid `ArrowArrayStream` (the PyCapsule
    // interface's contract); `from_raw` moves it out and marks the capsule's
    // copy released, so the capsule's destructor does not release it again.
    unsafe { ArrowArrayStreamReader::from_raw(ptr) }
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("arrow stream: {e}")))
}

/// The rows of a batch with columns `topic, body` and optional `queue_id,
/// tags, keys, properties` as message specs (`Err(MessageIllegal)` for a row
/// whose properties are illegal, or whose topic or body is null). `extra`
/// properties are added to every row.
pub fn specs_of_batch<'a>(
    batch: &'a RecordBatch,
    born_timestamp: i64,
    extra: &[(String, String)],
) -> PyResult<Vec<std::result::Result<MessageSpec<'a>, Refused>>> {
    let col = |name: &str| batch.column_by_name(name);
    let bad = |name: &str, want: &str| {
        pyo3::exceptions::PyTypeError::new_err(format!("column {name} must be {want}"))
    };
    let topic = col("topic")
        .ok_or_else(|| bad("topic", "present"))?
        .as_string_opt::<i32>()
        .ok_or_else(|| bad("topic", "a string"))?;
    let body = col("body")
        .ok_or_else(|| bad("body", "present"))?
        .as_binary_opt::<i32>()
        .ok_or_else(|| bad("body", "binary"))?;
    let queue_id = match col("queue_id") {
        Some(c) => Some(
            c.as_primitive_opt::<Int32Type>()
                .ok_or_else(|| bad("queue_id", "an int"))?,
        ),
        None => None,
    };
    let tags = match col("tags") {
        Some(c) => Some(
            c.as_string_opt::<i32>()
                .ok_or_else(|| bad("tags", "a string"))?,
        ),
        None => None,
    };
    let keys = match col("keys") {
        Some(c) => Some(
            c.as_list_opt::<i32>()
                .ok_or_else(|| bad("keys", "an array<string>"))?,
        ),
        None => None,
    };
    let props = match col("properties") {
        Some(c) => Some(
            c.as_map_opt()
                .ok_or_else(|| bad("properties", "a map<string,string>"))?,
        ),
        None => None,
    };
    let mut out = Vec::with_capacity(batch.num_rows());
    for i in 0..batch.num_rows() {
        let illegal = |why: String| Err(Refused::new(PutStatus::MessageIllegal, why));
        if topic.is_null(i) || body.is_null(i) {
            out.push(illegal("topic and body must not be null".into()));
            continue;
        }
        if let Some(why) = topic_problem(topic.value(i)) {
            out.push(illegal(why));
            continue;
        }
        let qid = queue_id.map_or(0, |q| if q.is_null(i) { 0 } else { q.value(i) });
        let mut b = PropertiesBuilder::new();
        let mut problem: Option<String> = None;
        let mut note = |r: std::result::Result<(), crate::log::message::PropertyError>| {
            if let Err(crate::log::message::PropertyError::Illegal(m)) = r {
                problem.get_or_insert(m);
            }
        };
        let mut has = (false, false);
        if let Some(m) = props.filter(|m| m.is_valid(i)) {
            let entries = m.value(i);
            let (ks, vs) = (entries.column(0), entries.column(1));
            let (Some(ks), Some(vs)) = (ks.as_string_opt::<i32>(), vs.as_string_opt::<i32>())
            else {
                return Err(bad("properties", "a map<string,string>"));
            };
            for j in 0..ks.len() {
                if vs.is_null(j) {
                    continue;
                }
                let k = ks.value(j);
                has.0 |= k == props::TAGS;
                has.1 |= k == props::KEYS;
                note(b.push(k, vs.value(j)));
            }
        }
        let both = |name: &str| {
            crate::log::message::PropertyError::Illegal(format!(
                "give a {} column or a {name} property, not both",
                name.to_lowercase()
            ))
        };
        if let Some(t) = tags.filter(|t| t.is_valid(i)) {
            note(if has.0 {
                Err(both(props::TAGS))
            } else {
                b.push(props::TAGS, t.value(i))
            });
        }
        if let Some(l) = keys.filter(|l| l.is_valid(i)) {
            let v = l.value(i);
            let Some(v) = v.as_string_opt::<i32>() else {
                return Err(bad("keys", "an array<string>"));
            };
            let joined = v.iter().flatten().collect::<Vec<_>>().join(" ");
            if !joined.is_empty() {
                note(if has.1 {
                    Err(both(props::KEYS))
                } else {
                    b.push(props::KEYS, &joined)
                });
            }
        }
        for (k, v) in extra {
            note(b.push(k, v));
        }
        if let Some(why) = problem {
            out.push(illegal(why));
            continue;
        }
        out.push(Ok(MessageSpec {
            topic: Cow::Borrowed(topic.value(i)),
            queue_id: qid,
            flag: 0,
            sys_flag: 0,
            born_timestamp,
            born_host: DEFAULT_BORN_HOST,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: Cow::Borrowed(body.value(i)),
            properties: Cow::Owned(b.finish()),
        }));
    }
    Ok(out)
}
