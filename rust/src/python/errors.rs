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

/// The Python exception each engine error kind becomes, by name: a class of
/// `rocketstore.errors`, or a builtin (`OSError` is raised with the errno,
/// so Python picks the subclass: `FileNotFoundError` for `ENOENT`, ...).
/// `tests/store/test_errors.py` pins this table from Python.
pub fn python_exception(e: &StoreError) -> &'static str {
    match e {
        StoreError::Io { .. } => "OSError",
        StoreError::Corrupted { .. } => "CorruptedError",
        StoreError::Mismatch(_) => "ConfigMismatchError",
        StoreError::Locked(_) => "StoreLockedError",
        StoreError::InvalidArgument(_) => "ValueError",
        StoreError::Poisoned(_) => "PoisonedError",
        StoreError::Closed => "StoreClosedError",
        StoreError::ReadOnly => "ReadOnlyStoreError",
        StoreError::Internal(_) => "InternalError",
        StoreError::RecoveryOrder(_) => "RecoveryOrderError",
        StoreError::NotAStore(_) => "NotAStoreError",
        StoreError::GroupBusy(_) => "ConsumerGroupBusyError",
        StoreError::Fenced(_) => "FencedError",
    }
}

/// Converts an engine error into the matching Python exception.
pub fn to_pyerr(e: StoreError) -> PyErr {
    let msg = e.to_string();
    let name = python_exception(&e);
    match e {
        StoreError::Io { context, source } => match source.raw_os_error() {
            Some(errno) => PyOSError::new_err((errno, format!("{context}: {source}"))),
            None => PyOSError::new_err(msg),
        },
        StoreError::InvalidArgument(_) => PyValueError::new_err(msg),
        // Also a FileNotFoundError: raised with ENOENT so `errno` is set.
        StoreError::NotAStore(_) => Python::with_gil(|py| match class(py, name) {
            Ok(t) => PyErr::from_type(t, (libc::ENOENT, msg)),
            Err(e) => e,
        }),
        _ => raise(name, msg),
    }
}

/// `StoreClosedError(msg)`: a handle refusing calls for a reason of its own
/// (not started yet, inherited through `fork()`).
pub fn store_closed(msg: String) -> PyErr {
    raise(python_exception(&StoreError::Closed), msg)
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
    let msg = StoreError::internal(format!("panic: {what}")).to_string();
    Python::with_gil(|py| match class(py, "InternalError") {
        Ok(t) => PyErr::from_type(t, msg),
        Err(_) => PyRuntimeError::new_err(msg),
    })
}

impl From<crate::columnar::AppendError> for PyErr {
    /// A column of the wrong type is the caller's: a `TypeError`.
    fn from(e: crate::columnar::AppendError) -> Self {
        match e {
            crate::columnar::AppendError::Store(e) => e.into(),
            crate::columnar::AppendError::Column(c) => {
                pyo3::exceptions::PyTypeError::new_err(c.to_string())
            }
        }
    }
}

/// The exception a checked put raises for its result, which is not
/// `PUT_OK`: `rocketstore.errors._put_error(result)` (one put or one batch)
/// or `_put_messages_error(results)` (a list, from `put_messages`) picks
/// the class (`MessageRefusedError`, `InvalidMessageError`,
/// `StoredNotFlushedError`) and words the message. Called on that path
/// only: a put that succeeds never reaches Python.
pub fn put_error(py: Python<'_>, builder: &str, result: Bound<'_, PyAny>) -> PyErr {
    let made = ERRORS_MODULE
        .get_or_try_init(py, || py.import("rocketstore.errors").map(|m| m.unbind()))
        .and_then(|m| m.bind(py).getattr(builder))
        .and_then(|f| f.call1((result,)));
    match made {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}
