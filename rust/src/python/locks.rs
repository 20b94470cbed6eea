//! `FileLock`: the engine's open-file-description lock on any file, for the
//! consumer offsets file and the consumer groups (docs/format.md §13.1).

use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::prelude::*;

use super::gil::nogil;
use crate::lock::FileLock;

/// An exclusive lock on byte 0 of a file, held until `release()` (or the
/// object is dropped, or the process ends).
#[pyclass(module = "rocketstore._native", name = "FileLock", frozen)]
pub struct PyFileLock {
    inner: Mutex<Option<FileLock>>,
}

#[pymethods]
impl PyFileLock {
    /// Takes the lock on `path` (the file and its folder are created if
    /// missing). `wait=True` blocks, without the GIL, until it is free;
    /// `wait=False` returns None at once when another holder has it.
    #[staticmethod]
    #[pyo3(signature = (path, wait))]
    fn acquire(py: Python<'_>, path: PathBuf, wait: bool) -> PyResult<Option<Self>> {
        let lock = nogil(py, move || FileLock::acquire(&path, wait))?;
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
