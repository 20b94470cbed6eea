//! The one helper that releases the GIL and the one that stops panics.
//!
//! Every binding body runs inside [`guarded`], so a Rust panic becomes a
//! `rocketstore.StoreError` instead of crossing into Python. Every call that
//! can block (fsync/msync, creating a file, scans, waits) runs inside
//! [`nogil`], which releases the GIL and maps engine errors.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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

/// Set when the interpreter is exiting: blocking waits return at once.
pub static EXITING: AtomicBool = AtomicBool::new(false);
/// Threads currently running engine code with the GIL released.
pub static IN_ENGINE: AtomicUsize = AtomicUsize::new(0);

/// Runs `f` with the GIL released, catching panics and mapping errors.
///
/// At interpreter exit CPython terminates a daemon thread that tries to take
/// the GIL back (`pthread_exit`), which must not happen inside Rust frames;
/// `IN_ENGINE` lets the exit hook wait until no thread is in here.
pub fn nogil<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    F: FnOnce() -> Result<T> + Send,
    T: Send,
{
    IN_ENGINE.fetch_add(1, Ordering::AcqRel);
    let r = py.allow_threads(|| catch_unwind(AssertUnwindSafe(f)));
    IN_ENGINE.fetch_sub(1, Ordering::AcqRel);
    match r {
        Ok(r) => r.map_err(PyErr::from),
        Err(p) => Err(panic_to_pyerr(p)),
    }
}

/// True once the exit hook ran.
pub fn exiting() -> bool {
    EXITING.load(Ordering::Acquire)
}
