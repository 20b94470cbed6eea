//! Arrow streams handed to pyarrow through the Arrow PyCapsule interface.
//!
//! `ArrowStream` implements `__arrow_c_stream__`: it exports a
//! [`RangeReader`] as an `ArrowArrayStream` (the C stream interface) in a
//! capsule named `arrow_array_stream`, which pyarrow (and Polars, DuckDB)
//! import without copying. Each batch is decoded when the consumer asks for
//! it, in Rust, with the GIL released by the consumer (pyarrow reads streams
//! without the GIL). The batches own their memory, so they outlive the store.

use std::ffi::CString;
use std::sync::Arc;

use crate::sync::Mutex;
use arrow_array::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use arrow_array::RecordBatchReader;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::columnar::ReadStats;

use super::gil::guarded;

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

    /// CommitLog records decoded so far (what the read cost; see
    /// `ReadStats::decoded`).
    #[getter]
    fn decoded(&self) -> u64 {
        load(&self.stats.decoded)
    }

    /// Records left out by the filter so far.
    #[getter]
    fn filtered(&self) -> u64 {
        load(&self.stats.filtered)
    }

    /// Returned records whose properties were parsed so far (none unless
    /// `properties`, `tags` or `keys` is among the columns).
    #[getter]
    fn properties_parsed(&self) -> u64 {
        load(&self.stats.properties_parsed)
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
