//! The one helper that releases the GIL and the one that stops panics.
//!
//! Every binding body runs inside [`guarded`], so a Rust panic becomes a
//! `rocketstore.StoreError` instead of crossing into Python. Every call that
//! can block (fsync/msync, creating a file, scans, waits) runs inside
//! [`nogil`], which releases the GIL and maps engine errors.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::prelude::*;
use pyo3::Python;

use super::errors::panic_to_pyerr;
use crate::error::Result;

/// Runs `f`, turning a panic into a Python exception.
#[inline]
pub fn guarded<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(panic_to_pyerr(p)),
    }
}

/// Runs `f` with the GIL released, catching panics and mapping errors.
pub fn nogil<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    F: FnOnce() -> Result<T> + Send,
    T: Send,
{
    match py.allow_threads(|| catch_unwind(AssertUnwindSafe(f))) {
        Ok(r) => r.map_err(PyErr::from),
        Err(p) => Err(panic_to_pyerr(p)),
    }
}
