//! The one place engine errors become Python exceptions.

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::PyType;

use crate::error::StoreError;

static ERRORS_MODULE: GILOnceCell<Py<PyModule>> = GILOnceCell::new();

fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    let m = ERRORS_MODULE
        .get_or_try_init(py, || py.import("rocketstore.errors").map(|m| m.unbind()))?;
    Ok(m.bind(py).getattr(name)?.downcast_into::<PyType>()?)
}

fn raise(name: &str, msg: String) -> PyErr {
    Python::with_gil(|py| match class(py, name) {
        Ok(t) => PyErr::from_type(t, msg),
        Err(e) => e,
    })
}

/// Converts an engine error into the matching Python exception.
pub fn to_pyerr(e: StoreError) -> PyErr {
    let msg = e.to_string();
    match e {
        StoreError::Io { context, source } => match source.raw_os_error() {
            Some(errno) => PyOSError::new_err((errno, format!("{context}: {source}"))),
            None => PyOSError::new_err(msg),
        },
        StoreError::Corrupted { .. } => raise("CorruptedError", msg),
        StoreError::Mismatch(_) => raise("ConfigMismatchError", msg),
        StoreError::Locked(_) => raise("StoreLockedError", msg),
        StoreError::InvalidArgument(_) => PyValueError::new_err(msg),
        StoreError::Poisoned(_) => raise("PoisonedError", msg),
        StoreError::Closed => raise("StoreClosedError", msg),
        StoreError::ReadOnly => raise("ReadOnlyStoreError", msg),
    }
}

impl From<StoreError> for PyErr {
    fn from(e: StoreError) -> Self {
        to_pyerr(e)
    }
}

/// A caught Rust panic, as a Python exception (never a `PanicException`).
pub fn panic_to_pyerr(payload: Box<dyn std::any::Any + Send>) -> PyErr {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    let msg = format!("internal error in the rocketstore engine (please report): {what}");
    Python::with_gil(|py| match class(py, "StoreError") {
        Ok(t) => PyErr::from_type(t, msg),
        Err(_) => PyRuntimeError::new_err(msg),
    })
}
