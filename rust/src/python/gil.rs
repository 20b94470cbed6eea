//! The one helper that releases the GIL and the one that stops panics.
//!
//! Every binding body runs inside [`guarded`], so a Rust panic becomes a
//! `rocketstore.StoreError` instead of crossing into Python. Every call that
//! can block (fsync/msync, creating a file, scans, waits) runs inside
//! [`nogil`], which releases the GIL and maps engine errors.
//!
//! # Interpreter exit
//!
//! While the interpreter finalizes, CPython (3.11–3.13) ends a thread that
//! tries to take the GIL back with `pthread_exit`, which unwinds the thread
//! with a forced unwind. Crossing Rust frames, that unwind meets
//! `catch_unwind` (ours, and PyO3's around every method), which cannot stop
//! it: glibc aborts the process ("FATAL: exception not rethrown"). So no
//! thread may take the GIL back once finalization may have begun:
//!
//! - the exit hook (`_begin_exit`, run by `atexit` before finalization
//!   starts) sets [`EXITING`], then waits until no thread is between
//!   "decided to take the GIL back" and "has it" ([`RETAKING`]);
//! - a call that released the GIL, on its way back, announces itself in
//!   `RETAKING` and then checks `EXITING`: once it is set, the thread
//!   never takes the GIL back and parks for good (its result is dropped;
//!   the process is exiting). The announce-then-check order against the
//!   hook's set-then-wait order (both sequentially consistent) means the
//!   hook either sees the thread in `RETAKING` and lets it through before
//!   finalization, or the thread sees `EXITING` and parks;
//! - a call that starts once `EXITING` is set keeps the GIL (it blocks
//!   other Python threads for its duration, but never has to take the GIL
//!   back), so calls made by exit handlers and finalizers still work.
//!
//! This is what CPython 3.14 does itself for threads that take the GIL
//! during finalization: they hang instead of exiting.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

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

/// Set when the interpreter is exiting: blocking waits return at once, and
/// no thread takes the GIL back after releasing it.
pub static EXITING: AtomicBool = AtomicBool::new(false);
/// Threads currently running engine code with the GIL released.
pub static IN_ENGINE: AtomicUsize = AtomicUsize::new(0);
/// Threads that finished their engine call and are taking the GIL back.
pub static RETAKING: AtomicUsize = AtomicUsize::new(0);

/// Runs `f` with the GIL released (unless the interpreter is exiting), and
/// returns it with the GIL held again. At exit the thread may never return:
/// see the module documentation.
pub fn release_gil<T, F>(py: Python<'_>, f: F) -> T
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    if exiting() {
        return f();
    }
    IN_ENGINE.fetch_add(1, Ordering::SeqCst);
    let r = py.allow_threads(|| {
        let r = f();
        RETAKING.fetch_add(1, Ordering::SeqCst);
        IN_ENGINE.fetch_sub(1, Ordering::SeqCst);
        if EXITING.load(Ordering::SeqCst) {
            RETAKING.fetch_sub(1, Ordering::SeqCst);
            park_forever();
        }
        r
    });
    RETAKING.fetch_sub(1, Ordering::SeqCst);
    r
}

/// Never returns: the thread waits for the process to end. It holds no
/// engine lock here (the engine call returned), so the exiting thread can
/// still shut stores down.
fn park_forever() -> ! {
    loop {
        std::thread::park_timeout(Duration::from_secs(3600));
    }
}

/// Runs `f` with the GIL released, catching panics and mapping errors.
pub fn nogil<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    F: FnOnce() -> Result<T> + Send,
    T: Send,
{
    match release_gil(py, || catch_unwind(AssertUnwindSafe(f))) {
        Ok(r) => r.map_err(PyErr::from),
        Err(p) => Err(panic_to_pyerr(p)),
    }
}

/// Marks the interpreter as exiting (called by the `atexit` hook, with the
/// GIL held, before finalization begins), then lets every thread that is
/// already taking the GIL back through, releasing the GIL while it waits
/// (finalization has not begun, so this thread may take it back). Returns
/// how many threads are still inside engine calls (they park when done).
pub fn begin_exit(py: Python<'_>) -> usize {
    EXITING.store(true, Ordering::SeqCst);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while RETAKING.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
        py.allow_threads(|| std::thread::sleep(Duration::from_millis(1)));
    }
    IN_ENGINE.load(Ordering::SeqCst)
}

/// A forked child has one thread, which holds the GIL: no thread of the
/// child is inside the engine, whatever the parent's counts were.
extern "C" fn reset_counts_in_child() {
    IN_ENGINE.store(0, Ordering::SeqCst);
    RETAKING.store(0, Ordering::SeqCst);
}

/// Installs the fork handler that resets the counts (once per process).
pub fn install_fork_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain `extern "C"` function that lives forever.
        unsafe { libc::pthread_atfork(None, None, Some(reset_counts_in_child)) };
    });
}

/// True once the exit hook ran.
pub fn exiting() -> bool {
    EXITING.load(Ordering::Acquire)
}
