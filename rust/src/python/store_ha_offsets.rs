//! The offsets-sync methods of `NativeStore` (docs/format.md §21.7): a
//! master's listener and publish, a slave's fetch and its record of what
//! it applied.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use pyo3::IntoPyObjectExt;

use super::gil::{guarded, nogil};
use super::store::PyStore;
use crate::store::ha_offsets::{Fetched, OffsetsView};

#[pymethods]
impl PyStore {
    /// Starts a master's offsets listener (``ha_offsets_port``); its port.
    fn start_ha_offsets(&self) -> PyResult<Option<u16>> {
        guarded(|| Ok(self.store.start_ha_offsets()?))
    }

    /// The port a master serves offsets on (None: not serving).
    #[getter]
    fn ha_offsets_port(&self) -> Option<u16> {
        self.store.ha_offsets_port()
    }

    /// Master: serves these two json documents from now on; False when no
    /// offsets listener runs.
    fn ha_offsets_publish(
        &self,
        py: Python<'_>,
        consumer: Vec<u8>,
        delay: Vec<u8>,
    ) -> PyResult<bool> {
        let store = &self.store;
        nogil(py, || store.ha_offsets_publish(consumer, delay))
    }

    /// Slave: fetches the master's snapshot and waits up to ``wait`` s for
    /// this store's CommitLog to reach it. None (no offsets address),
    /// ``("error", why)``, ``("ahead", commitlog_end)`` or ``("ready",
    /// commitlog_end, taken_ms, consumer_json, delay_json)``.
    fn ha_offsets_fetch<'py>(
        &self,
        py: Python<'py>,
        timeout: f64,
        wait: f64,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let secs = |s: f64| std::time::Duration::from_secs_f64(s.clamp(0.0, 3600.0));
        let (timeout, wait) = (secs(timeout), secs(wait));
        let store = &self.store;
        let got = nogil(py, || store.ha_offsets_fetch(timeout, wait))?;
        let items: Vec<PyObject> = match got {
            None => return Ok(None),
            Some(Err(why)) => vec!["error".into_py_any(py)?, why.into_py_any(py)?],
            Some(Ok(Fetched::Ahead(end))) => vec!["ahead".into_py_any(py)?, end.into_py_any(py)?],
            Some(Ok(Fetched::Ready(s))) => vec![
                "ready".into_py_any(py)?,
                s.commitlog_end.into_py_any(py)?,
                s.taken_ms.into_py_any(py)?,
                PyBytes::new(py, &s.consumer).into_py_any(py)?,
                PyBytes::new(py, &s.delay).into_py_any(py)?,
            ],
        };
        Ok(Some(PyTuple::new(py, items)?))
    }

    /// Slave: records that the snapshot stamped ``commitlog_end`` and
    /// ``taken_ms`` was applied.
    fn ha_offsets_applied(&self, commitlog_end: u64, taken_ms: i64) {
        self.store.ha_offsets_applied(commitlog_end, taken_ms)
    }
}

/// The offsets sync's part of `ha_status` (times in seconds since the epoch).
pub fn offsets_dict<'py>(py: Python<'py>, v: OffsetsView) -> PyResult<Bound<'py, PyDict>> {
    let secs = |ms: i64| (ms > 0).then(|| ms as f64 / 1000.0);
    let d = PyDict::new(py);
    d.set_item("port", v.port)?;
    d.set_item("address", v.address)?;
    d.set_item("served", v.served)?;
    d.set_item("last_sync", secs(v.last_sync_ms))?;
    d.set_item("last_fetch", secs(v.last_fetch_ms))?;
    d.set_item("taken", secs(v.applied_taken_ms))?;
    d.set_item("error", v.error)?;
    Ok(d)
}
