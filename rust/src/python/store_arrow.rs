//! `NativeStore.get_arrow`: one pull of a queue as one Arrow record batch,
//! handed to pyarrow through the Arrow PyCapsule interface
//! (`__arrow_c_array__`: a struct array and its schema).

use std::ffi::CString;

use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::{Array, RecordBatch, StructArray};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple};

use crate::columnar::Projection;
use crate::queue::reader::{GetStatus, PullRequest};

use super::args::{MaxMessages, Offset, QueueId, TagList, Topic};
use super::gil::{guarded, nogil};
use super::store::PyStore;
use super::types::get_status_obj;

/// The result of `get_arrow` (private; `MessageStore.get_arrow` wraps it):
/// the pull's status and offsets, and its batch through
/// `__arrow_c_array__`.
#[pyclass(frozen, module = "rocketstore._native", name = "ArrowPull")]
pub struct PyArrowPull {
    status: GetStatus,
    #[pyo3(get)]
    next_begin_offset: i64,
    #[pyo3(get)]
    min_offset: i64,
    #[pyo3(get)]
    max_offset: i64,
    /// Messages skipped because their record is damaged.
    #[pyo3(get)]
    damaged: usize,
    /// Offsets moved past because retention deleted their messages.
    #[pyo3(get)]
    skipped: u64,
    batch: RecordBatch,
}

#[pymethods]
impl PyArrowPull {
    /// The `GetStatus` of the pull.
    #[getter]
    fn status(&self, py: Python<'_>) -> PyResult<PyObject> {
        get_status_obj(py, self.status)
    }

    /// Rows of the batch.
    fn __len__(&self) -> usize {
        self.batch.num_rows()
    }

    /// The batch as `(schema, array)` PyCapsules (a struct array whose
    /// fields are the columns). Each call exports the same data again.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        // The schema is fixed; a requested schema is a hint we may ignore.
        let _ = requested_schema;
        guarded(|| {
            let data = StructArray::from(self.batch.clone()).into_data();
            let schema = FFI_ArrowSchema::try_from(data.data_type()).map_err(|e| {
                pyo3::exceptions::PyValueError::new_err(format!("arrow schema: {e}"))
            })?;
            let array = FFI_ArrowArray::new(&data);
            let schema = PyCapsule::new_with_destructor(
                py,
                schema,
                CString::new("arrow_schema").ok(),
                |s, _| drop(s),
            )?;
            let array = PyCapsule::new_with_destructor(
                py,
                array,
                CString::new("arrow_array").ok(),
                |a, _| drop(a),
            )?;
            PyTuple::new(py, [schema.into_any(), array.into_any()])
        })
    }
}

/// A pull result of no rows with the columns `get_arrow` returns (a
/// consumer's poll that found nothing).
#[pyfunction]
#[pyo3(signature = (columns=None, zero_copy=false))]
pub fn empty_arrow_batch(columns: Option<Vec<String>>, zero_copy: bool) -> PyResult<PyArrowPull> {
    guarded(|| {
        let projection = projection_arg(columns)?;
        Ok(PyArrowPull {
            status: GetStatus::NoMatchedMessage,
            next_begin_offset: 0,
            min_offset: 0,
            max_offset: 0,
            damaged: 0,
            skipped: 0,
            batch: crate::columnar::empty_pull_batch(projection, zero_copy)?,
        })
    })
}

/// The columns of a read (`None`: all of a one-store read); a bad list is
/// a `ValueError` naming the columns.
pub(super) fn projection_arg(columns: Option<Vec<String>>) -> PyResult<Projection> {
    match columns {
        None => Ok(Projection::all(false)),
        Some(c) => {
            Projection::of(&c).map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
        }
    }
}

#[pymethods]
impl PyStore {
    /// Pulls up to `max_msgs` messages of a queue from `offset` into one
    /// Arrow batch (see `Store::get_arrow`).
    #[pyo3(signature = (topic, queue_id, offset, max_msgs, tags=None, columns=None, zero_copy=false))]
    #[allow(clippy::too_many_arguments)] // one per Python argument
    fn get_arrow(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        queue_id: QueueId<'_>,
        offset: Offset<'_>,
        max_msgs: MaxMessages<'_>,
        tags: Option<TagList<'_>>,
        columns: Option<Vec<String>>,
        zero_copy: bool,
    ) -> PyResult<PyArrowPull> {
        guarded(|| {
            let projection = projection_arg(columns)?;
            let mut req = PullRequest::at(topic.get()?, queue_id.get()?, offset.get()?);
            req.max_msgs = max_msgs.get()?;
            if let Some(tags) = tags {
                req = req.tags(&tags.get()?);
            }
            self.store.check_read_topic(req.topic)?;
            self.visible(py)?;
            let store = &self.store;
            let r = nogil(py, || store.get_arrow(&req, projection, zero_copy))?;
            Ok(PyArrowPull {
                status: r.status,
                next_begin_offset: r.next_begin_offset,
                min_offset: r.min_offset,
                max_offset: r.max_offset,
                damaged: r.damaged.len(),
                skipped: r.skipped,
                batch: r.messages,
            })
        })
    }
}
