//! Bindings of the whole-store checks in [`crate::verify`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;

use super::gil::nogil;
use crate::verify;

/// CommitLog bytes a running verification has scanned (read from another
/// thread to draw a progress bar).
#[pyclass(module = "rocketstore._native", name = "VerifyProgress", frozen)]
#[derive(Default)]
pub struct PyVerifyProgress {
    done: Arc<AtomicU64>,
}

#[pymethods]
impl PyVerifyProgress {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// Bytes of CommitLog scanned so far.
    #[getter]
    fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }
}

/// What [`verify_store`] found.
#[pyclass(module = "rocketstore._native", name = "VerifyReport", frozen, get_all)]
pub struct PyVerifyReport {
    /// CommitLog records scanned.
    records: u64,
    /// Their bytes.
    bytes: u64,
    /// ConsumeQueue units checked against the CommitLog.
    cq_units: u64,
    /// Index entries checked against the CommitLog.
    index_entries: u64,
    /// Units and entries pointing outside the checked range.
    not_checked: u64,
    /// `(commit_log_offset or None, problem)` pairs.
    problems: Vec<(Option<u64>, String)>,
}

/// Checks every CommitLog record in `[start, end)` (record rules and body
/// CRC), then every ConsumeQueue unit and index entry against the
/// CommitLog. Reads files only; runs without the GIL.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // one per Python keyword argument
#[pyo3(signature = (store_path, commit_log_file_size, start, end, max_hash_slot_num,
                    max_index_num, progress=None, complete=false, topics=Vec::new()))]
pub fn verify_store(
    py: Python<'_>,
    store_path: PathBuf,
    commit_log_file_size: u64,
    start: u64,
    end: u64,
    max_hash_slot_num: usize,
    max_index_num: usize,
    progress: Option<&PyVerifyProgress>,
    complete: bool,
    topics: Vec<String>,
) -> PyResult<PyVerifyReport> {
    let counter = progress.map(|p| p.done.clone()).unwrap_or_default();
    let r = nogil(py, move || {
        verify::verify_store(
            &store_path,
            commit_log_file_size,
            verify::Scope {
                start,
                end,
                complete,
            },
            (max_hash_slot_num, max_index_num),
            &topics,
            &counter,
        )
    })?;
    Ok(PyVerifyReport {
        records: r.records,
        bytes: r.bytes,
        cq_units: r.cq_units,
        index_entries: r.index_entries,
        not_checked: r.not_checked,
        problems: r.problems,
    })
}

/// `(max_hash_slot_num, max_index_num)` to open the store at `store_path`
/// with so that its index files are used: given values win, a missing one
/// follows from the index files' size and content (None: cannot be told).
#[pyfunction]
#[pyo3(signature = (store_path, max_hash_slot_num=None, max_index_num=None))]
pub fn index_geometry(
    py: Python<'_>,
    store_path: PathBuf,
    max_hash_slot_num: Option<usize>,
    max_index_num: Option<usize>,
) -> PyResult<(Option<usize>, Option<usize>)> {
    nogil(py, move || {
        verify::detect_index_geometry(&store_path, max_hash_slot_num, max_index_num)
    })
}

/// Whether a writer holds the lock of the store at `store_path` (None if
/// that cannot be told). Takes no lock.
#[pyfunction]
pub fn writer_running(py: Python<'_>, store_path: PathBuf) -> Option<bool> {
    super::gil::release_gil(py, move || verify::writer_running(&store_path))
}
