//! The replication methods of `NativeStore`: starting and stopping it, the
//! master's port, `ha_status`, a slave's promotion and the wait for what
//! a put wrote (see docs/format.md §21).

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::gil::{guarded, nogil};
use super::store::PyStore;

#[pymethods]
impl PyStore {
    /// Starts replication (a master listens when ``ha_listen_port`` is
    /// set, a slave follows ``ha_master_address``); the port listened on.
    fn start_ha(&self) -> PyResult<Option<u16>> {
        guarded(|| Ok(self.store.start_ha()?))
    }

    /// Stops replication's threads (closing every connection).
    fn stop_ha(&self, py: Python<'_>) -> PyResult<()> {
        let store = &self.store;
        nogil(py, || {
            store.stop_ha();
            Ok(())
        })
    }

    /// The replication role now (``ASYNC_MASTER``, ``SYNC_MASTER``,
    /// ``SLAVE``): a promoted store is an ``ASYNC_MASTER``.
    #[getter]
    fn ha_role(&self) -> &'static str {
        self.store.ha_role().name()
    }

    /// Turns this running slave into an ``ASYNC_MASTER`` (docs/format.md
    /// §21.8): ``{"offset", "tail_file", "tail_bytes", "port"}``.
    fn promote<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let store = &self.store;
        let p = guarded(|| nogil(py, || store.promote()))?;
        let d = PyDict::new(py);
        d.set_item("offset", p.offset)?;
        d.set_item(
            "tail_file",
            p.tail_file.map(|f| f.to_string_lossy().into_owned()),
        )?;
        d.set_item("tail_bytes", p.tail_bytes)?;
        d.set_item("port", p.port)?;
        Ok(d)
    }

    /// Start of the last complete record of the CommitLog (of the newest
    /// file holding one): where a slave's first report asks from.
    fn ha_last_record_start(&self) -> u64 {
        crate::ha::apply::last_record_start(self.store.commitlog())
    }

    /// Start of the record holding CommitLog offset ``offset`` (the walk of
    /// its file's headers; where it stops past the file's whole records).
    fn ha_record_start(&self, offset: u64) -> u64 {
        crate::ha::apply::record_start_at(self.store.commitlog(), offset)
    }

    /// The port a master listens on (None: not listening).
    #[getter]
    fn ha_port(&self) -> Option<u16> {
        self.store.ha_port()
    }

    /// Replication's state: the role; for a master its port and each
    /// slave's address, acked offset and lag; for a slave its master,
    /// whether connected, its applied offset, lag and last error.
    fn ha_status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.store.ha_status();
        let d = PyDict::new(py);
        d.set_item("role", s.role)?;
        let offsets = super::store_ha_offsets::offsets_dict(py, self.store.ha_offsets_view())?;
        d.set_item("offsets", offsets)?;
        if s.role == "SLAVE" {
            d.set_item("master_address", s.master_address)?;
            d.set_item("connected", s.connected)?;
            d.set_item("applied_offset", s.applied_offset)?;
            d.set_item("lag_bytes", s.lag_bytes)?;
            d.set_item("lag_seconds", s.lag_seconds)?;
            d.set_item("error", s.error)?;
            d.set_item("stopped", s.stopped)?;
            d.set_item("verified", s.verified)?;
            d.set_item("diverged", s.diverged)?;
            d.set_item("needs_reseed", s.needs_reseed)?;
        } else {
            d.set_item("port", s.port)?;
            let slaves = PyList::empty(py);
            for v in s.slaves {
                let e = PyDict::new(py);
                e.set_item("address", v.address)?;
                e.set_item("acked_offset", v.acked_offset)?;
                e.set_item("lag_bytes", v.lag_bytes)?;
                e.set_item("lag_seconds", v.lag_seconds)?;
                slaves.append(e)?;
            }
            d.set_item("slaves", slaves)?;
        }
        Ok(d)
    }

    /// Waits for the CommitLog bytes `[start, end)` (`end` at most the
    /// log's end) as a put of them waits: on disk under SYNC_FLUSH, on a
    /// slave on a SYNC_MASTER (docs/format.md §21.5). `None` when they are
    /// confirmed, else `(PutStatus value, reason)`: stored, not confirmed.
    fn wait_stored(&self, py: Python<'_>, start: u64, end: u64) -> PyResult<Option<(u8, String)>> {
        guarded(|| {
            self.store.check_open_writer()?;
            let store = &self.store;
            let end = end.min(store.commitlog().max_offset());
            if start >= end {
                return Ok(None); // nothing written: nothing to wait for
            }
            let (status, why) = nogil(py, || Ok(store.wait_stored(start, end)))?;
            Ok((status != crate::log::commitlog::PutStatus::PutOk)
                .then(|| (status as u8, why.unwrap_or_default())))
        })
    }
}
