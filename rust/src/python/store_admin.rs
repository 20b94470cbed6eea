//! The running-state and service methods of `NativeStore`: offsets and
//! flags, poisoning and disk-full, the dispatch thread and
//! waiting for it, flushes, delayed delivery, and shutdown.

use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::consumer_offsets::{ConsumerOffsetTable, OffsetRow};

use super::args::{Seq, Timeout};
use super::gil::{guarded, nogil};
use super::results::{
    PyCheckpointTimes, PyDeliverStep, PyGroupCommitStats, PyRuntimeSample, PyVisibilityStats,
};
use super::store::{PyStore, SIGNAL_SLICE};

#[pymethods]
impl PyStore {
    #[getter]
    fn max_phy_offset(&self) -> PyResult<u64> {
        guarded(|| {
            self.store.check_open()?;
            Ok(self.store.commitlog().max_offset())
        })
    }

    #[getter]
    fn min_phy_offset(&self) -> PyResult<i64> {
        guarded(|| {
            self.store.check_open()?;
            Ok(self.store.commitlog().min_offset())
        })
    }

    #[getter]
    fn flushed_offset(&self) -> PyResult<u64> {
        guarded(|| {
            self.store.check_open()?;
            Ok(self.store.commitlog().flushed_offset())
        })
    }

    /// The CommitLog segment size in use.
    #[getter]
    fn commit_log_file_size(&self) -> usize {
        self.store.commitlog().file_size()
    }

    /// Why puts are refused, if they are (None when writeable).
    #[getter]
    fn poison_reason(&self) -> Option<String> {
        self.store.poison_reason()
    }

    /// The engine's running flags that are set, by name (RocketMQ's
    /// ``RunningFlags``: ``NOT_WRITEABLE``, ``WRITE_LOGICS_QUEUE_ERROR``,
    /// ``WRITE_INDEX_FILE_ERROR``, ``DISK_FULL``, ``FLUSH_FAILED``, and
    /// ours, ``RESOURCE_WAIT``). The flag of the first failure carries its
    /// reason (``"NAME: reason"``), as ``DISK_FULL`` carries the clean
    /// service's and ``RESOURCE_WAIT`` what waits for a resource and why
    /// (puts are still taken while only it is set). DISK_FULL and
    /// RESOURCE_WAIT are not listed once the store is closed. Empty when
    /// puts are taken and nothing waits.
    #[getter]
    fn running_flags(&self) -> Vec<String> {
        self.store.running_flags_shown()
    }

    /// Refuse every later put (reads keep working), keeping ``reason``.
    ///
    /// Used by the Python services when one of them fails: a store whose
    /// service died must not go on accepting writes it can no longer serve.
    /// The first reason given is kept.
    fn poison(&self, reason: String) {
        self.store.poison(reason);
    }

    /// Sets (``reason`` given) or clears (``None``) the DISK_FULL flag: while
    /// set, puts return ``SERVICE_NOT_AVAILABLE`` with the reason. Returns
    /// whether it was set before.
    #[pyo3(signature = (reason))]
    fn set_disk_full(&self, reason: Option<String>) -> bool {
        match reason {
            Some(r) => self.store.set_disk_full(true, &r),
            None => self.store.set_disk_full(false, ""),
        }
    }

    /// Why puts are refused for lack of disk space (None when they are not).
    #[getter]
    fn disk_full_reason(&self) -> Option<String> {
        self.store.disk_full_reason()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.store.is_closed()
    }

    /// `{(topic, queue_id): next_queue_offset}` as the put path sees it.
    fn queue_offset_table<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guarded(|| {
            self.store.check_open()?;
            let d = PyDict::new(py);
            for (t, q, n) in self.store.commitlog().queue_offsets().entries() {
                d.set_item((t, q), n)?;
            }
            Ok(d)
        })
    }

    /// Commits transient buffers and dispatches everything written.
    fn drain_dispatch(&self, py: Python<'_>) -> PyResult<()> {
        guarded(|| {
            let store = &self.store;
            nogil(py, || store.drain_dispatch())
        })
    }

    /// Starts the flush threads and creates the abort file.
    fn start_flush(&self) -> PyResult<()> {
        guarded(|| Ok(self.store.start_flush()?))
    }

    /// True when the previous writer stopped cleanly (no abort file at open).
    #[getter]
    fn last_exit_ok(&self) -> bool {
        self.store.last_exit_ok()
    }

    /// Starts the dispatch thread.
    fn start_dispatch(&self) -> PyResult<()> {
        guarded(|| Ok(self.store.start_dispatch()?))
    }

    /// Stops the dispatch thread after its current step, waiting at most
    /// ``timeout`` seconds (``None``: the engine's bound, 30 s). True if
    /// the thread ended; one that did not is logged and left behind.
    #[pyo3(signature = (timeout=None))]
    fn stop_dispatch(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        guarded(|| {
            let timeout = match timeout {
                Some(t) if t.is_nan() || t < 0.0 => {
                    return Err(pyo3::exceptions::PyValueError::new_err(
                        "timeout must be >= 0",
                    ))
                }
                Some(t) => Duration::from_secs_f64(t.min(1e9)),
                None => crate::services::service_thread::STOP_TIMEOUT,
            };
            let store = &self.store;
            nogil(py, || Ok(store.stop_dispatch_within(timeout)))
        })
    }

    /// Group-commit statistics since open (SYNC_FLUSH).
    #[getter]
    fn group_commit_stats(&self) -> PyGroupCommitStats {
        self.store.flusher().group_stats().into()
    }

    /// Wakes the dispatch thread now instead of at its next poll.
    fn wakeup_dispatch(&self) {
        self.store.dispatcher().wakeup();
    }

    /// True while the dispatch thread runs (False before it is started,
    /// after it is stopped, or once it died).
    #[getter]
    fn dispatch_running(&self) -> bool {
        self.store.dispatch_running()
    }

    /// CommitLog bytes not yet in the consume queues and index (a
    /// read-only store measures its files: see ``runtime_stats``).
    fn dispatch_behind_bytes(&self) -> PyResult<u64> {
        guarded(|| {
            self.store.check_open()?;
            Ok(self.store.dispatch_behind_bytes())
        })
    }

    /// One sample of the running state: put and pull counters, CommitLog
    /// offsets, dispatch lag, running flags and every queue's ends. A
    /// read-only store has no put counts and no flushed offset (None), and
    /// samples what it knows of the files (call ``refresh`` first).
    fn runtime_stats(&self) -> PyResult<PyRuntimeSample> {
        guarded(|| Ok(self.store.runtime_stats()?.into()))
    }

    /// Changes whenever new messages become visible to readers. Read after
    /// the puts acknowledged so far became visible, so a consumer that
    /// compares it with the last value it saw notices their queues.
    #[getter]
    fn dispatch_seq(&self, py: Python<'_>) -> PyResult<u64> {
        guarded(|| {
            if !self.store.is_closed() {
                self.visible(py)?;
            }
            Ok(self.store.dispatcher().seq())
        })
    }

    /// Why dispatch stopped, if it failed.
    #[getter]
    fn dispatch_failure(&self) -> Option<String> {
        self.store.dispatcher().failure()
    }

    /// Blocks (GIL released; Ctrl-C works) until `dispatch_seq != seen` or
    /// `timeout` seconds pass (`None`: forever). Returns the current sequence.
    #[pyo3(signature = (seen, timeout=None))]
    fn wait_for_dispatch(
        &self,
        py: Python<'_>,
        seen: Seq<'_>,
        timeout: Option<Timeout<'_>>,
    ) -> PyResult<u64> {
        guarded(|| {
            let seen = seen.get()?;
            let timeout = timeout.map(|t| t.get()).transpose()?;
            let deadline = timeout.map(|t| Instant::now() + Duration::from_secs_f64(t.min(1e9)));
            loop {
                if super::gil::exiting() {
                    return Ok(self.store.dispatcher().seq());
                }
                let slice = match deadline {
                    Some(d) => d
                        .saturating_duration_since(Instant::now())
                        .min(SIGNAL_SLICE),
                    None => SIGNAL_SLICE,
                };
                let store = &self.store;
                let s = nogil(py, || store.wait_for_dispatch(seen, slice))?;
                if s != seen || deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(s);
                }
                py.check_signals()?;
            }
        })
    }

    /// Makes the CommitLog durable up to the messages below the committed
    /// offsets (the table's rows ``(topic, group, queue_id, next_offset)``),
    /// before they are persisted.
    fn flush_for_offsets(&self, py: Python<'_>, offsets: Vec<OffsetRow>) -> PyResult<()> {
        guarded(|| {
            let table = ConsumerOffsetTable::from_rows(offsets)?;
            let store = &self.store;
            nogil(py, || store.flush_for_offsets(&table))
        })
    }

    /// For tests and benchmarks: how often reads waited for acknowledged
    /// puts to become visible.
    #[getter]
    fn _visibility_stats(&self) -> PyVisibilityStats {
        let (waits, inline_dispatches, commits, timeouts, failed) = self.store.visibility_stats();
        PyVisibilityStats {
            waits,
            inline_dispatches,
            commits,
            timeouts,
            failed,
        }
    }

    /// Wakes every thread waiting in `wait_for_dispatch` (interpreter exit).
    fn _wake_waiters(&self) {
        self.store.dispatcher().bump_seq();
    }

    /// The consume queue file size in use.
    #[getter]
    fn consume_queue_file_size(&self) -> usize {
        self.store.consume_queues().file_size()
    }

    /// The checkpoint's timestamps.
    fn checkpoint(&self) -> PyCheckpointTimes {
        self.store.checkpoint().into()
    }

    /// Forces everything written to disk; returns the flushed offset.
    fn flush(&self, py: Python<'_>) -> PyResult<u64> {
        guarded(|| {
            let store = &self.store;
            nogil(py, || store.flush())
        })
    }

    /// One delivery step for each `(level, offset)` (level 1-based): re-puts
    /// the messages of `SCHEDULE_TOPIC_XXXX` queue `level - 1` due at
    /// `now_ms`, from consume-queue offset `offset`, at most `max_msgs` per
    /// level, one batch per level, all with the GIL released once. Returns
    /// one `DeliverStep` per level, in order.
    fn deliver_delayed(
        &self,
        py: Python<'_>,
        levels: Vec<(usize, i64)>,
        now_ms: i64,
        max_msgs: usize,
    ) -> PyResult<Vec<PyDeliverStep>> {
        guarded(|| {
            let store = &self.store;
            let steps = nogil(py, || {
                levels
                    .iter()
                    .map(|&(level, offset)| {
                        crate::store::schedule::deliver_due(store, level, offset, now_ms, max_msgs)
                    })
                    .collect::<crate::error::Result<Vec<_>>>()
            })?;
            Ok(steps.into_iter().map(PyDeliverStep::from).collect())
        })
    }

    /// Forces the CommitLog to disk (not the queues); returns the flushed offset.
    fn flush_commit_log(&self, py: Python<'_>) -> PyResult<u64> {
        guarded(|| {
            let store = &self.store;
            nogil(py, || store.flush_commit_log())
        })
    }

    /// For tests: stop as if the process were killed (no final flush, the
    /// abort file stays, the lock is released).
    fn _simulate_crash(&self, py: Python<'_>) -> PyResult<()> {
        guarded(|| {
            let store = &self.store;
            nogil(py, || {
                store.abandon();
                Ok(())
            })
        })
    }

    /// Flushes and closes the store (idempotent).
    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        guarded(|| {
            let store = &self.store;
            nogil(py, || store.shutdown())
        })
    }
}
