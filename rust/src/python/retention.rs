//! Retention in the binding: the [`RetentionPolicy`] a CommitLog step takes
//! (the frozen `RetentionPolicy` class, built by the Python retention
//! service and passed whole), the two step methods of `NativeStore` (GIL
//! released), and what they did (`CommitLogRetention`, `QueueRetention`).
//! The rules are the engine's ([`crate::services::retention`]).

use std::time::Duration;

use pyo3::prelude::*;

use super::gil::{guarded, nogil};
use super::results::frozen_record;
use super::store::PyStore;
use crate::services::retention::{CommitLogRetention, QueueRetention, RetentionPolicy};

/// What one CommitLog retention step may delete: files whose mtime is at
/// least ``reserved_ms`` before ``now_ms`` (any age with ``immediately``),
/// at most ``max_files``, ``interval_ms`` apart.
#[pyclass(frozen, eq, module = "rocketstore._native", name = "RetentionPolicy")]
#[derive(Debug, Clone, PartialEq)]
pub struct PyRetentionPolicy(pub RetentionPolicy);

#[pymethods]
impl PyRetentionPolicy {
    #[new]
    #[pyo3(signature = (*, now_ms, reserved_ms, max_files, immediately=false, interval_ms=0))]
    fn new(
        now_ms: i64,
        reserved_ms: i64,
        max_files: usize,
        immediately: bool,
        interval_ms: u64,
    ) -> Self {
        Self(RetentionPolicy {
            now_ms,
            reserved_ms,
            interval: Duration::from_millis(interval_ms),
            immediately,
            max_files,
        })
    }

    /// The service's clock, ms since the epoch.
    #[getter]
    fn now_ms(&self) -> i64 {
        self.0.now_ms
    }

    /// Age (by mtime) a file must reach to go, in ms.
    #[getter]
    fn reserved_ms(&self) -> i64 {
        self.0.reserved_ms
    }

    /// Most files the step deletes.
    #[getter]
    fn max_files(&self) -> usize {
        self.0.max_files
    }

    /// Delete whatever the age.
    #[getter]
    fn immediately(&self) -> bool {
        self.0.immediately
    }

    /// Pause between two deletions, in ms.
    #[getter]
    fn interval_ms(&self) -> u64 {
        u64::try_from(self.0.interval.as_millis()).unwrap_or(u64::MAX)
    }

    fn __repr__(&self) -> String {
        let p = &self.0;
        format!(
            "RetentionPolicy(now_ms={}, reserved_ms={}, max_files={}, immediately={}, interval_ms={})",
            p.now_ms,
            p.reserved_ms,
            p.max_files,
            if p.immediately { "True" } else { "False" },
            self.interval_ms()
        )
    }
}

frozen_record! {
    /// What one CommitLog step of the retention service did.
    "CommitLogRetention", PyCommitLogRetention {
        /// CommitLog files deleted.
        deleted: usize,
        /// Start of the first deleted file (-1 when none).
        from_offset: i64,
        /// New CommitLog min offset (-1 when the log holds no file).
        min_offset: i64,
    }
}

impl From<CommitLogRetention> for PyCommitLogRetention {
    fn from(e: CommitLogRetention) -> Self {
        Self {
            deleted: e.deleted,
            from_offset: e.from_offset,
            min_offset: e.min_offset,
        }
    }
}

frozen_record! {
    /// What one queue step of the retention service did.
    "QueueRetention", PyQueueRetention {
        /// ConsumeQueue files deleted.
        consume_queue_files: usize,
        /// Index files deleted.
        index_files: usize,
    }
}

impl From<QueueRetention> for PyQueueRetention {
    fn from(e: QueueRetention) -> Self {
        Self {
            consume_queue_files: e.consume_queue_files,
            index_files: e.index_files,
        }
    }
}

#[pymethods]
impl PyStore {
    /// One CommitLog step of the retention service, with the GIL released:
    /// deletes the oldest files ``policy`` lets go, never the last file and
    /// never one dispatch has not passed.
    fn delete_expired_commit_log(
        &self,
        py: Python<'_>,
        policy: &PyRetentionPolicy,
    ) -> PyResult<PyCommitLogRetention> {
        guarded(|| {
            let store = &self.store;
            let policy = policy.0;
            let r = nogil(py, || store.delete_expired_commit_log(&policy))?;
            Ok(r.into())
        })
    }

    /// The queue step of the retention service, with the GIL released:
    /// deletes ConsumeQueue files wholly below CommitLog offset ``min_phy``
    /// (then corrects every queue's min offset; ``interval_ms`` pause after
    /// each queue that lost files) and index files below it.
    fn delete_expired_queues(
        &self,
        py: Python<'_>,
        min_phy: i64,
        interval_ms: u64,
    ) -> PyResult<PyQueueRetention> {
        guarded(|| {
            let store = &self.store;
            let r = nogil(py, || {
                store.delete_expired_queues(min_phy, Duration::from_millis(interval_ms))
            })?;
            Ok(r.into())
        })
    }
}

/// Registers the classes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRetentionPolicy>()?;
    m.add_class::<PyCommitLogRetention>()?;
    m.add_class::<PyQueueRetention>()?;
    Ok(())
}
