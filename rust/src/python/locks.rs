//! `FileLock`: the engine's open-file-description lock on any file, for the
//! consumer offsets file and the consumer groups (docs/format.md §13.1).

use std::path::PathBuf;
use std::sync::Mutex;

use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::gil::nogil;
use crate::lock::{holder_pid, FileLock};

/// An exclusive lock on byte 0 of a file, held until `release()` (or the
/// object is dropped, or the process ends).
#[pyclass(module = "rocketstore._native", name = "FileLock", frozen)]
pub struct PyFileLock {
    inner: Mutex<Option<FileLock>>,
}

#[pymethods]
impl PyFileLock {
    /// Takes the lock on `path` (the file and its folder are created if
    /// missing; anything but a regular file in its place is refused) and
    /// writes this process's pid into it. `wait=True` blocks, without the
    /// GIL, until it is free, for at most `timeout` seconds when given
    /// (then `TimeoutError` names the holder's pid); `wait=False` returns
    /// None at once when another holder has it.
    #[staticmethod]
    #[pyo3(signature = (path, wait, timeout=None))]
    fn acquire(
        py: Python<'_>,
        path: PathBuf,
        wait: bool,
        timeout: Option<f64>,
    ) -> PyResult<Option<Self>> {
        let limit = match timeout {
            Some(t) if wait => Some(Duration::try_from_secs_f64(t).map_err(|_| {
                PyValueError::new_err(format!("timeout must be a number of seconds >= 0, got {t}"))
            })?),
            _ => None,
        };
        let lock = nogil(py, move || match limit {
            Some(t) => FileLock::acquire_within(&path, t).map(Some),
            None => FileLock::acquire(&path, wait),
        })?;
        Ok(lock.map(|l| Self {
            inner: Mutex::new(Some(l)),
        }))
    }

    /// Whether another open of the file holds the lock; takes nothing and
    /// creates nothing (a missing file is not held).
    #[staticmethod]
    fn is_held(py: Python<'_>, path: PathBuf) -> PyResult<bool> {
        nogil(py, move || FileLock::is_held(&path))
    }

    /// The pid the lock file names (its last exclusive holder wrote it);
    /// None when the file is missing or names none.
    #[staticmethod]
    fn holder_pid(py: Python<'_>, path: PathBuf) -> PyResult<Option<u32>> {
        nogil(py, move || Ok(holder_pid(&path)))
    }

    /// Releases the lock (idempotent).
    fn release(&self) {
        let taken = match self.inner.lock() {
            Ok(mut g) => g.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        drop(taken);
    }

    /// True until `release()`.
    #[getter]
    fn held(&self) -> bool {
        match self.inner.lock() {
            Ok(g) => g.is_some(),
            Err(poisoned) => poisoned.into_inner().is_some(),
        }
    }
}
