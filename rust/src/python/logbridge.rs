//! Rust `log` records reach Python `logging` (logger `rocketstore`).
//!
//! Engine threads must never take the GIL (they may hold a Rust lock, and
//! dispatch is latency-critical), so records are queued here and a Python
//! thread drains them with `_drain_logs`, waiting with the GIL released.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use crate::sync::{Condvar, Mutex};
use pyo3::prelude::*;

/// Records kept at most while nobody drains; later ones are counted and dropped.
const CAPACITY: usize = 10_000;

struct QueueLogger {
    queue: Mutex<VecDeque<(u8, String, String)>>,
    ready: Condvar,
    dropped: AtomicU64,
}

impl log::Log for QueueLogger {
    fn enabled(&self, meta: &log::Metadata<'_>) -> bool {
        meta.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let mut q = self.queue.lock();
        if q.len() >= CAPACITY {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.push_back((
            record.level() as u8,
            record.target().to_owned(),
            record.args().to_string(),
        ));
        self.ready.notify_one();
    }

    fn flush(&self) {}
}

static LOGGER: OnceLock<&'static QueueLogger> = OnceLock::new();

/// Installs the queue as the process's `log` backend (once; if another
/// backend is already installed, records go there instead).
pub fn install() {
    LOGGER.get_or_init(|| {
        let l: &'static QueueLogger = Box::leak(Box::new(QueueLogger {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            dropped: AtomicU64::new(0),
        }));
        if log::set_logger(l).is_ok() {
            log::set_max_level(log::LevelFilter::Info);
        }
        l
    });
}

/// Sets the most verbose level queued: 1 error … 5 trace, 0 off.
#[pyfunction]
#[pyo3(name = "_set_log_level")]
pub fn set_log_level(level: u8) {
    let f = match level {
        0 => log::LevelFilter::Off,
        1 => log::LevelFilter::Error,
        2 => log::LevelFilter::Warn,
        3 => log::LevelFilter::Info,
        4 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    log::set_max_level(f);
}

/// Queued records `(level 1-5, target, message)`, waiting up to `timeout`
/// seconds (GIL released) for the first one; plus how many were dropped.
#[pyfunction]
#[pyo3(name = "_drain_logs")]
pub fn drain_logs(py: Python<'_>, timeout: f64) -> (Vec<(u8, String, String)>, u64) {
    let Some(l) = LOGGER.get() else {
        return (Vec::new(), 0);
    };
    let wait = Duration::from_secs_f64(timeout.clamp(0.0, 3600.0));
    let drain = || {
        let mut q = l.queue.lock();
        if q.is_empty() && !wait.is_zero() {
            l.ready.wait_for(&mut q, wait);
        }
        let out: Vec<_> = q.drain(..).collect();
        (out, l.dropped.swap(0, Ordering::Relaxed))
    };
    if wait.is_zero() {
        // Nothing to wait for: keep the GIL (the log pump polls this from a
        // daemon thread, which must not take the GIL back at exit).
        drain()
    } else {
        super::gil::release_gil(py, drain)
    }
}
