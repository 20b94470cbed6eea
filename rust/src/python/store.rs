//! `NativeStore`: the engine store as a Python class. The public
//! `rocketstore.MessageStore` (Python) opens one, orchestrates it, and
//! attaches it to its native base class (`store_base.rs`), whose
//! per-message methods call the ones here.
//!
//! The class's methods are spread over modules, one `#[pymethods]` block
//! each: this one owns the class, its constructor, the recovery steps and
//! the helpers the others share (results, read checks, visibility waits);
//! `store_put.rs` the puts, `store_read.rs` the reads, `store_admin.rs`
//! the running state, services, flushes and shutdown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::consumer_offsets::{ConsumerOffsetTable, OffsetRow};
use crate::log::commitlog::PutOutcome;
use crate::store::{Store, StoreOptions};

use super::args::{check_queue_id, QueueId, Topic};
use super::config::options_from_config;
use super::gil::{guarded, nogil};
use super::recovery::{
    PyCommitLogScanReport, PyConsumeQueueReport, PyConsumerOffsetReport, PyDamageRule,
    PyFileSizeReport, PyIndexRebuildReport, PyPointerRebuildReport, PyQueueHoleReport,
    PyQueueOffsetTableReport, PyRecoveryMode, PyRecoveryReport, PyRedispatchReport,
    PyTruncateReport,
};
use super::types::PyPutResult;

/// The engine store (private; use `rocketstore.MessageStore`).
#[pyclass(frozen, module = "rocketstore._native", name = "NativeStore")]
pub struct PyStore {
    pub(super) store: Arc<Store>,
}

/// Longest uninterrupted wait before checking for Ctrl-C.
pub(super) const SIGNAL_SLICE: Duration = Duration::from_millis(100);

impl PyStore {
    /// Milliseconds now for born timestamps: the store's cached clock.
    #[inline]
    pub(super) fn now_ms(&self) -> i64 {
        self.store.commitlog().clock_ms()
    }

    /// The `PutResult` object of a put.
    #[inline]
    pub(super) fn result<'py>(
        &self,
        py: Python<'py>,
        outcome: PutOutcome,
    ) -> PyResult<Bound<'py, PyPutResult>> {
        PyPutResult::new_bound(py, outcome, self.store.options().store_host)
    }
}

impl PyStore {
    /// Validates a topic and queue id given to a read.
    pub(super) fn check_read_args(&self, topic: &str, queue_id: i64) -> PyResult<i32> {
        self.store.check_read_topic(topic)?;
        check_queue_id(queue_id)
    }

    /// Checks the topic of a read of one queue (the engine's rule), once
    /// the puts acknowledged so far are visible.
    pub(super) fn readable(&self, py: Python<'_>, topic: &str) -> PyResult<()> {
        self.store.check_read_topic(topic)?;
        self.store.check_open()?;
        self.visible(py)
    }

    /// A read of one queue: takes `topic` and `queue_id`, checks them as
    /// [`NativeStore::readable`] does, and runs `read` on the engine.
    pub(super) fn queue_read<T>(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        queue_id: QueueId<'_>,
        read: impl FnOnce(&Store, &str, i32) -> crate::error::Result<T>,
    ) -> PyResult<T> {
        guarded(|| {
            let (topic, qid) = (topic.get()?, queue_id.get()?);
            self.readable(py, topic)?;
            Ok(read(&self.store, topic, qid)?)
        })
    }

    /// Waits (GIL released) until the puts acknowledged so far are visible;
    /// one atomic comparison when nothing is pending. Waits in slices, so
    /// Ctrl-C works and interpreter exit is not held up.
    #[inline]
    pub(super) fn visible(&self, py: Python<'_>) -> PyResult<()> {
        if self.store.visibility_pending() {
            self.visible_slow(py)?;
        }
        Ok(())
    }

    #[cold]
    fn visible_slow(&self, py: Python<'_>) -> PyResult<()> {
        let store = &self.store;
        let deadline = store.visibility_deadline();
        loop {
            if super::gil::exiting() {
                store.give_up_visibility();
                return Ok(());
            }
            let stop_at = (Instant::now() + SIGNAL_SLICE).min(deadline);
            if nogil(py, || store.await_visible_until(deadline, stop_at))? {
                return Ok(());
            }
            py.check_signals()?;
        }
    }
}

#[pymethods]
impl PyStore {
    /// Takes the writer lock (unless `read_only`) and loads the store's
    /// files. `config` is a `rocketstore.StoreConfig`, read field by field.
    /// `repair`: opened by `rocketstore repair` (index files of the wrong
    /// size are rebuilt by recovery instead of refusing the store).
    /// `wait_for_writer`: a read-only open of a folder that holds no store
    /// yet opens it empty instead of raising `NotAStoreError`. `create`: a
    /// writer makes a store in a folder that is not empty and holds none
    /// (refused with `NotAStoreError` otherwise).
    #[new]
    #[pyo3(signature = (config, read_only=false, repair=false, wait_for_writer=false, create=false, cut_at=None))]
    fn new(
        py: Python<'_>,
        config: &Bound<'_, PyAny>,
        read_only: bool,
        repair: bool,
        wait_for_writer: bool,
        create: bool,
        cut_at: Option<u64>,
    ) -> PyResult<Self> {
        guarded(|| {
            let opts = StoreOptions {
                repair,
                cut_at,
                wait_for_writer,
                create,
                ..options_from_config(config, read_only)?
            };
            let store = nogil(py, || Store::open(opts))?;
            Ok(Self {
                store: Arc::new(store),
            })
        })
    }

    // -- recovery steps (crate::recovery; the order is enforced there) ----

    /// How recovery scans the CommitLog: ``RecoveryMode.ABNORMAL`` when the
    /// abort file says the last writer crashed (never for read-only opens).
    #[getter]
    fn recovery_mode(&self) -> PyRecoveryMode {
        self.store.recovery_mode().into()
    }

    /// Step 1: extends short newest files, creates or extends the
    /// checkpoint, removes a short newest index file.
    fn check_file_sizes(&self, py: Python<'_>) -> PyResult<PyFileSizeReport> {
        guarded(|| Ok(nogil(py, || self.store.check_file_sizes())?.into()))
    }

    /// Step 2: the rule telling a torn tail from damage (the durable mark).
    #[pyo3(signature = (skip_damaged=false))]
    fn judge_damage(&self, py: Python<'_>, skip_damaged: bool) -> PyResult<PyDamageRule> {
        guarded(|| Ok(nogil(py, || self.store.judge_damage(skip_damaged))?.into()))
    }

    /// Step 3 after a clean stop: scans the CommitLog's last three files.
    fn scan_commit_log_normally(
        &self,
        py: Python<'_>,
        check_crc: bool,
    ) -> PyResult<PyCommitLogScanReport> {
        guarded(|| Ok(nogil(py, || self.store.scan_commit_log_normally(check_crc))?.into()))
    }

    /// Step 3 for a repair: scans from the first file, in either mode.
    fn scan_whole_commit_log(
        &self,
        py: Python<'_>,
        check_crc: bool,
    ) -> PyResult<PyCommitLogScanReport> {
        guarded(|| Ok(nogil(py, || self.store.scan_whole_commit_log(check_crc))?.into()))
    }

    /// Step 3 after a crash: scans from the file the checkpoint points at.
    fn scan_commit_log_abnormally(
        &self,
        py: Python<'_>,
        check_crc: bool,
    ) -> PyResult<PyCommitLogScanReport> {
        guarded(|| Ok(nogil(py, || self.store.scan_commit_log_abnormally(check_crc))?.into()))
    }

    /// Step 4: every consume queue keeps its good units, cut past the last.
    fn recover_consume_queues(&self, py: Python<'_>) -> PyResult<PyConsumeQueueReport> {
        guarded(|| Ok(nogil(py, || self.store.recover_consume_queues())?.into()))
    }

    /// Step 5: rebuilds the queue units between good ones from the CommitLog.
    fn rebuild_queue_holes(&self, py: Python<'_>) -> PyResult<PyQueueHoleReport> {
        guarded(|| Ok(nogil(py, || self.store.rebuild_queue_holes())?.into()))
    }

    /// Step 6: cuts and zeroes the CommitLog and the queues past the end.
    fn truncate(&self, py: Python<'_>) -> PyResult<PyTruncateReport> {
        guarded(|| Ok(nogil(py, || self.store.truncate())?.into()))
    }

    /// Step 7: destroys stale index files and re-indexes from the oldest.
    fn rebuild_index(&self, py: Python<'_>) -> PyResult<PyIndexRebuildReport> {
        guarded(|| Ok(nogil(py, || self.store.rebuild_index())?.into()))
    }

    /// After recovery, for ``rocketstore repair``: rebuilds from the
    /// CommitLog the queue units and index files a complete verification
    /// finds damaged. ``topics``: the topics the topic config lists.
    #[pyo3(signature = (topics=Vec::new()))]
    fn rebuild_damaged_pointers(
        &self,
        py: Python<'_>,
        topics: Vec<String>,
    ) -> PyResult<PyPointerRebuildReport> {
        guarded(|| Ok(nogil(py, || self.store.rebuild_damaged_pointers(&topics))?.into()))
    }

    /// Step 8: re-dispatches the scanned records (after a crash) and what
    /// the queues miss.
    fn redispatch(&self, py: Python<'_>) -> PyResult<PyRedispatchReport> {
        guarded(|| Ok(nogil(py, || self.store.redispatch())?.into()))
    }

    /// Step 9: the stored consumer offsets (the table's rows ``(topic,
    /// group, queue_id, offset)``) above their queue's recovered end, with
    /// that end.
    fn clamp_consumer_offsets(
        &self,
        py: Python<'_>,
        offsets: Vec<OffsetRow>,
    ) -> PyResult<PyConsumerOffsetReport> {
        guarded(|| {
            let table = ConsumerOffsetTable::from_rows(offsets)?;
            Ok(nogil(py, || self.store.clamp_consumer_offsets(&table))?.into())
        })
    }

    /// Step 10: the queue-offset table and the durable mark; the store is
    /// recovered.
    fn rebuild_queue_offset_table(&self, py: Python<'_>) -> PyResult<PyQueueOffsetTableReport> {
        guarded(|| Ok(nogil(py, || self.store.rebuild_queue_offset_table())?.into()))
    }

    /// What the recovery found and did (after its last step).
    fn recovery_report(&self) -> PyResult<PyRecoveryReport> {
        guarded(|| Ok(self.store.recovery_report()?.into()))
    }
}
