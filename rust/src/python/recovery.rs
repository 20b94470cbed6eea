//! The recovery steps' reports ([`crate::recovery`]) as Python classes.
//!
//! Each report is a frozen Rust class: its fields are written here once and
//! `rocketstore.RecoveryReport` *is* [`PyRecoveryReport`] (no Python copy of
//! the schema). Paths become `str`.

use std::path::PathBuf;

use pyo3::basic::CompareOp;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use crate::checkpoint::CheckpointRepair;
use crate::recovery as r;

fn path_str(p: &std::path::Path) -> String {
    p.to_string_lossy().into_owned()
}

fn paths(v: &[PathBuf]) -> Vec<String> {
    v.iter().map(|p| path_str(p)).collect()
}

/// How the last writer stopped, so how recovery scans the CommitLog.
///
/// ``NORMAL``: it stopped cleanly; ``ABNORMAL``: it crashed (the abort file
/// was left behind). ``str(mode)`` is ``"normal"`` / ``"abnormal"``, and a
/// mode compares equal to that string.
#[pyclass(module = "rocketstore._native", name = "RecoveryMode", frozen)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PyRecoveryMode {
    #[pyo3(name = "NORMAL")]
    Normal,
    #[pyo3(name = "ABNORMAL")]
    Abnormal,
}

impl From<r::RecoveryMode> for PyRecoveryMode {
    fn from(m: r::RecoveryMode) -> Self {
        match m {
            r::RecoveryMode::Normal => PyRecoveryMode::Normal,
            r::RecoveryMode::Abnormal => PyRecoveryMode::Abnormal,
        }
    }
}

impl PyRecoveryMode {
    fn as_str(self) -> &'static str {
        match self {
            PyRecoveryMode::Normal => "normal",
            PyRecoveryMode::Abnormal => "abnormal",
        }
    }
}

#[pymethods]
impl PyRecoveryMode {
    /// ``"normal"`` or ``"abnormal"``.
    #[getter]
    fn value(&self) -> &'static str {
        self.as_str()
    }

    fn __str__(&self) -> &'static str {
        self.as_str()
    }

    fn __repr__(&self) -> String {
        format!("RecoveryMode.{}", self.as_str().to_uppercase())
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        // Equal to its string, so hashed like it.
        PyString::new(py, self.as_str()).hash()
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyObject {
        let py = other.py();
        let same = if let Ok(m) = other.downcast::<PyRecoveryMode>() {
            Some(*m.get() == *self)
        } else if let Ok(s) = other.downcast::<PyString>() {
            s.to_str().ok().map(|s| s == self.as_str())
        } else {
            None
        };
        match (op, same) {
            (CompareOp::Eq, Some(b)) => b
                .into_pyobject(py)
                .map(|b| b.to_owned().into_any().unbind()),
            (CompareOp::Ne, Some(b)) => (!b)
                .into_pyobject(py)
                .map(|b| b.to_owned().into_any().unbind()),
            _ => Ok(py.NotImplemented()),
        }
        .unwrap_or_else(|_| py.NotImplemented())
    }
}

/// What ``check_file_sizes`` repaired (the first recovery step): short
/// newest CommitLog / ConsumeQueue files extended with zeros, a short
/// newest index file removed, the checkpoint created or extended.
#[pyclass(
    module = "rocketstore._native",
    name = "FileSizeReport",
    frozen,
    get_all
)]
pub struct PyFileSizeReport {
    short_files_extended: Vec<String>,
    short_index_file_removed: Option<String>,
    checkpoint_created: bool,
    /// The checkpoint's length before it was extended, if it was.
    checkpoint_extended_from: Option<u64>,
}

impl From<r::FileSizeReport> for PyFileSizeReport {
    fn from(x: r::FileSizeReport) -> Self {
        Self {
            short_files_extended: paths(&x.short_files_extended),
            short_index_file_removed: x.short_index_file_removed.as_deref().map(path_str),
            checkpoint_created: x.checkpoint == Some(CheckpointRepair::Create),
            checkpoint_extended_from: match x.checkpoint {
                Some(CheckpointRepair::Extend(len)) => Some(len),
                _ => None,
            },
        }
    }
}

/// The rule ``judge_damage`` set for telling a torn tail (cut) from damage
/// inside durable data (refused, or skipped and reported).
#[pyclass(module = "rocketstore._native", name = "DamageRule", frozen, get_all)]
pub struct PyDamageRule {
    /// The checkpoint's durable CommitLog offset, or None (no mark: the
    /// physicMsgTimestamp is used).
    durable_mark: Option<u64>,
    physic_msg_timestamp: i64,
    /// ``(start, end)`` ranges an earlier recovery skipped.
    known_damaged: Vec<(u64, u64)>,
    skip_damaged: bool,
}

impl From<r::DamageRule> for PyDamageRule {
    fn from(x: r::DamageRule) -> Self {
        Self {
            durable_mark: x.durable_mark,
            physic_msg_timestamp: x.physic_msg_timestamp,
            known_damaged: x.known_damaged,
            skip_damaged: x.skip_damaged,
        }
    }
}

type DamageTuple = (u64, u64, String, String);

fn damage_tuples(v: &[crate::log::commitlog::Damage]) -> Vec<DamageTuple> {
    v.iter()
        .map(|d| (d.offset, d.end, path_str(&d.file), d.reason.clone()))
        .collect()
}

/// What the CommitLog scan (normal or abnormal) found; nothing was written.
#[pyclass(
    module = "rocketstore._native",
    name = "CommitLogScanReport",
    frozen,
    get_all
)]
pub struct PyCommitLogScanReport {
    mode: PyRecoveryMode,
    start_offset: u64,
    files_scanned: usize,
    bytes_scanned: u64,
    records_scanned: u64,
    end_offset: u64,
    stop_reason: Option<String>,
    /// ``(offset, resume_offset, file, reason)`` of damaged ranges skipped.
    damaged: Vec<DamageTuple>,
}

impl From<r::CommitLogScan> for PyCommitLogScanReport {
    fn from(x: r::CommitLogScan) -> Self {
        Self {
            mode: x.mode.into(),
            start_offset: x.start_offset,
            files_scanned: x.files_scanned,
            bytes_scanned: x.bytes_scanned,
            records_scanned: x.records_scanned,
            end_offset: x.end_offset,
            stop_reason: x.stop_reason,
            damaged: damage_tuples(&x.damaged),
        }
    }
}

/// What ``recover_consume_queues`` found.
#[pyclass(
    module = "rocketstore._native",
    name = "ConsumeQueueReport",
    frozen,
    get_all
)]
pub struct PyConsumeQueueReport {
    consume_queues: usize,
    /// Largest CommitLog end any queue covers (-1: none).
    max_physic_offset: i64,
    queues_with_holes: usize,
}

impl From<r::ConsumeQueueRecovery> for PyConsumeQueueReport {
    fn from(x: r::ConsumeQueueRecovery) -> Self {
        Self {
            consume_queues: x.consume_queues,
            max_physic_offset: x.max_physic_offset,
            queues_with_holes: x.queues_with_holes,
        }
    }
}

/// What ``rebuild_queue_holes`` rebuilt from the CommitLog.
#[pyclass(
    module = "rocketstore._native",
    name = "QueueHoleReport",
    frozen,
    get_all
)]
pub struct PyQueueHoleReport {
    holes: usize,
    units_missing: u64,
    units_rebuilt: u64,
}

impl From<r::QueueHoleRebuild> for PyQueueHoleReport {
    fn from(x: r::QueueHoleRebuild) -> Self {
        Self {
            holes: x.holes,
            units_missing: x.units_missing,
            units_rebuilt: x.units_rebuilt,
        }
    }
}

/// What ``truncate`` cut (and zeroed) past the recovered end.
#[pyclass(
    module = "rocketstore._native",
    name = "TruncateReport",
    frozen,
    get_all
)]
pub struct PyTruncateReport {
    end_offset: u64,
    bytes_truncated: u64,
    consume_queues_destroyed: bool,
}

impl From<r::Truncation> for PyTruncateReport {
    fn from(x: r::Truncation) -> Self {
        Self {
            end_offset: x.end_offset,
            bytes_truncated: x.bytes_truncated,
            consume_queues_destroyed: x.consume_queues_destroyed,
        }
    }
}

/// What ``rebuild_index`` destroyed and re-indexed.
#[pyclass(
    module = "rocketstore._native",
    name = "IndexRebuildReport",
    frozen,
    get_all
)]
pub struct PyIndexRebuildReport {
    files_destroyed: Vec<String>,
    redispatch_from: Option<i64>,
    records: u64,
}

impl From<r::IndexRebuild> for PyIndexRebuildReport {
    fn from(x: r::IndexRebuild) -> Self {
        Self {
            files_destroyed: paths(&x.files_destroyed),
            redispatch_from: x.redispatch_from,
            records: x.records,
        }
    }
}

/// What ``redispatch`` dispatched to the queues and the index.
#[pyclass(
    module = "rocketstore._native",
    name = "RedispatchReport",
    frozen,
    get_all
)]
pub struct PyRedispatchReport {
    records: u64,
    already_in_queues: u64,
    caught_up_records: u64,
}

impl From<r::Redispatch> for PyRedispatchReport {
    fn from(x: r::Redispatch) -> Self {
        Self {
            records: x.records,
            already_in_queues: x.already_in_queues,
            caught_up_records: x.caught_up_records,
        }
    }
}

/// The consumer offsets ``clamp_consumer_offsets`` found above their
/// queue's recovered end: ``(topic, group, queue_id, old, new)``.
#[pyclass(
    module = "rocketstore._native",
    name = "ConsumerOffsetReport",
    frozen,
    get_all
)]
pub struct PyConsumerOffsetReport {
    lowered: Vec<(String, String, i32, i64, i64)>,
}

impl From<r::ConsumerOffsetClamp> for PyConsumerOffsetReport {
    fn from(x: r::ConsumerOffsetClamp) -> Self {
        let lowered = x.lowered.into_iter();
        Self {
            lowered: lowered
                .map(|(k, q, old, new)| (k.topic().to_owned(), k.group().to_owned(), q, old, new))
                .collect(),
        }
    }
}

/// What ``rebuild_queue_offset_table`` set (the last step).
#[pyclass(
    module = "rocketstore._native",
    name = "QueueOffsetTableReport",
    frozen,
    get_all
)]
pub struct PyQueueOffsetTableReport {
    queues: usize,
    durable_mark: Option<u64>,
}

impl From<r::QueueOffsetTable> for PyQueueOffsetTableReport {
    fn from(x: r::QueueOffsetTable) -> Self {
        Self {
            queues: x.queues,
            durable_mark: x.durable_mark,
        }
    }
}

/// What opening the store found and recovery repaired.
///
/// Attributes:
///     mode: a :class:`RecoveryMode`: ``NORMAL`` (the last writer stopped
///         cleanly) or ``ABNORMAL`` (it crashed: the abort file was left
///         behind); equal to ``"normal"`` / ``"abnormal"``.
///     files_scanned: CommitLog files read. After a clean stop recovery
///         reads only the last three files, after a crash from the file the
///         checkpoint points at: not the whole store.
///     bytes_scanned: bytes of valid records read.
///     records_scanned: valid records read by that scan: the records of the
///         files scanned, not the number of records (or messages) in the
///         store. ``records`` is the older name of this field.
///     end_offset: CommitLog offset just past the last valid record.
///     bytes_truncated: non-zero bytes cut (and zeroed) after the valid end.
///     stop_reason: why the scan stopped before the end of written data, if it did.
///     consume_queues: consume queues loaded.
///     redispatched_records: records dispatched to queues and index during recovery.
///     queue_units_rebuilt: consume-queue units rebuilt from the CommitLog
///         in holes between good units.
///     index_redispatch_from: CommitLog offset the index was rebuilt from, if any.
///     index_redispatched_records: records re-indexed from there.
///     damaged: damaged CommitLog ranges inside durable data that were
///         skipped, as ``(offset, resume_offset, file, reason)``; a range
///         with ``resume_offset == offset`` ended the log (nothing intact
///         followed it).
///     durable_mark: the durable CommitLog offset recovery judged damage by,
///         or ``None`` when the checkpoint had no mark (its
///         physicMsgTimestamp was used).
///     known_damaged: damaged ranges ``(start, end)`` an earlier recovery
///         (or ``rocketstore repair``) skipped, kept in the durable mark.
///     consumer_offsets_clamped: stored consumer offsets that pointed past
///         their queue's recovered end and were lowered to it.
///     short_files_extended: short newest CommitLog / ConsumeQueue files (a
///         crash while they were created) that opening found and recovery
///         extended with zeros.
///     index_files_destroyed: index files removed (short), or destroyed
///         (newer than the index checkpoint after a crash, or holding entries
///         past the recovered end); the index is rebuilt from
///         ``index_redispatch_from``.
///     checkpoint_created: the checkpoint file was missing and was created.
#[pyclass(module = "rocketstore._native", name = "RecoveryReport", frozen)]
pub struct PyRecoveryReport {
    r: r::RecoveryReport,
}

impl From<r::RecoveryReport> for PyRecoveryReport {
    fn from(r: r::RecoveryReport) -> Self {
        Self { r }
    }
}

#[pymethods]
impl PyRecoveryReport {
    #[getter]
    fn mode(&self) -> PyRecoveryMode {
        self.r.mode.into()
    }
    #[getter]
    fn files_scanned(&self) -> usize {
        self.r.files_scanned
    }
    #[getter]
    fn bytes_scanned(&self) -> u64 {
        self.r.bytes_scanned
    }
    #[getter]
    fn records_scanned(&self) -> u64 {
        self.r.records
    }
    /// Older name of :attr:`records_scanned` (records read by the scan).
    #[getter]
    fn records(&self) -> u64 {
        self.r.records
    }
    #[getter]
    fn end_offset(&self) -> u64 {
        self.r.end_offset
    }
    #[getter]
    fn bytes_truncated(&self) -> u64 {
        self.r.bytes_truncated
    }
    #[getter]
    fn stop_reason(&self) -> Option<String> {
        self.r.stop_reason.clone()
    }
    #[getter]
    fn consume_queues(&self) -> usize {
        self.r.consume_queues
    }
    #[getter]
    fn redispatched_records(&self) -> u64 {
        self.r.redispatched_records
    }
    #[getter]
    fn queue_units_rebuilt(&self) -> u64 {
        self.r.queue_units_rebuilt
    }
    #[getter]
    fn index_redispatch_from(&self) -> Option<i64> {
        self.r.index_redispatch_from
    }
    #[getter]
    fn index_redispatched_records(&self) -> u64 {
        self.r.index_redispatched_records
    }
    #[getter]
    fn damaged<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, damage_tuples(&self.r.damaged))
    }
    #[getter]
    fn durable_mark(&self) -> Option<u64> {
        self.r.durable_mark
    }
    #[getter]
    fn known_damaged<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.r.known_damaged.iter().copied())
    }
    #[getter]
    fn consumer_offsets_clamped(&self) -> usize {
        self.r.consumer_offsets_clamped
    }
    #[getter]
    fn short_files_extended<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, paths(&self.r.short_files_extended))
    }
    #[getter]
    fn index_files_destroyed<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, paths(&self.r.index_files_destroyed))
    }
    #[getter]
    fn checkpoint_created(&self) -> bool {
        self.r.checkpoint_created
    }

    /// Every field as a plain ``dict`` (``mode`` as its string), for JSON.
    fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.fields(py)? {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let mut parts = Vec::new();
        for (k, v) in self.fields(py)? {
            let v = if k == "mode" {
                self.mode().__repr__()
            } else {
                v.repr()?.to_string()
            };
            parts.push(format!("{k}={v}"));
        }
        Ok(format!("RecoveryReport({})", parts.join(", ")))
    }
}

impl PyRecoveryReport {
    /// `(name, value)` of every field, in declaration order.
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Vec<(&'static str, Bound<'py, PyAny>)>> {
        let r = &self.r;
        Ok(vec![
            ("mode", self.mode().as_str().into_pyobject(py)?.into_any()),
            (
                "files_scanned",
                r.files_scanned.into_pyobject(py)?.into_any(),
            ),
            (
                "bytes_scanned",
                r.bytes_scanned.into_pyobject(py)?.into_any(),
            ),
            ("records_scanned", r.records.into_pyobject(py)?.into_any()),
            ("end_offset", r.end_offset.into_pyobject(py)?.into_any()),
            (
                "bytes_truncated",
                r.bytes_truncated.into_pyobject(py)?.into_any(),
            ),
            (
                "stop_reason",
                r.stop_reason.clone().into_pyobject(py)?.into_any(),
            ),
            (
                "consume_queues",
                r.consume_queues.into_pyobject(py)?.into_any(),
            ),
            (
                "redispatched_records",
                r.redispatched_records.into_pyobject(py)?.into_any(),
            ),
            (
                "queue_units_rebuilt",
                r.queue_units_rebuilt.into_pyobject(py)?.into_any(),
            ),
            (
                "index_redispatch_from",
                r.index_redispatch_from.into_pyobject(py)?.into_any(),
            ),
            (
                "index_redispatched_records",
                r.index_redispatched_records.into_pyobject(py)?.into_any(),
            ),
            ("damaged", self.damaged(py)?.into_any()),
            ("durable_mark", r.durable_mark.into_pyobject(py)?.into_any()),
            ("known_damaged", self.known_damaged(py)?.into_any()),
            (
                "consumer_offsets_clamped",
                r.consumer_offsets_clamped.into_pyobject(py)?.into_any(),
            ),
            (
                "short_files_extended",
                self.short_files_extended(py)?.into_any(),
            ),
            (
                "index_files_destroyed",
                self.index_files_destroyed(py)?.into_any(),
            ),
            (
                "checkpoint_created",
                r.checkpoint_created
                    .into_pyobject(py)?
                    .to_owned()
                    .into_any(),
            ),
        ])
    }
}

/// What ``rebuild_damaged_pointers`` found and rebuilt (``rocketstore
/// repair``): queue units damaged and written again, and the index rebuild.
#[pyclass(
    module = "rocketstore._native",
    name = "PointerRebuildReport",
    frozen,
    get_all
)]
pub struct PyPointerRebuildReport {
    units_damaged: u64,
    units_rebuilt: u64,
    queues: Vec<(String, i32)>,
    index_from: Option<u64>,
    index_files_destroyed: Vec<String>,
    index_records: u64,
}

impl From<crate::store::PointerRebuild> for PyPointerRebuildReport {
    fn from(x: crate::store::PointerRebuild) -> Self {
        Self {
            units_damaged: x.units_damaged,
            units_rebuilt: x.units_rebuilt,
            queues: x.queues,
            index_from: x.index_from,
            index_files_destroyed: paths(&x.index_files_destroyed),
            index_records: x.index_records,
        }
    }
}

/// Registers the recovery classes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRecoveryMode>()?;
    m.add_class::<PyFileSizeReport>()?;
    m.add_class::<PyDamageRule>()?;
    m.add_class::<PyCommitLogScanReport>()?;
    m.add_class::<PyConsumeQueueReport>()?;
    m.add_class::<PyQueueHoleReport>()?;
    m.add_class::<PyTruncateReport>()?;
    m.add_class::<PyIndexRebuildReport>()?;
    m.add_class::<PyRedispatchReport>()?;
    m.add_class::<PyConsumerOffsetReport>()?;
    m.add_class::<PyQueueOffsetTableReport>()?;
    m.add_class::<PyRecoveryReport>()?;
    m.add_class::<PyPointerRebuildReport>()?;
    Ok(())
}
