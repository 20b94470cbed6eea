//! `GroupMember`: a consumer group member (`crate::groups`), for
//! `rocketstore.consumers.membership` (docs/format.md §13.2).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::errors::store_closed;
use super::gil::{guarded, nogil};
use crate::groups::{admin, GroupMember, JoinOptions, Strategy};

/// Why a member inherited through `fork()` refuses calls.
const FORKED: &str = "this consumer group member was made before fork(): its locks and \
                      heartbeat thread stayed with the parent; join the group again in the child";

/// One member of a consumer group on one topic: a shared hold on the
/// group, a heartbeat thread, and the queues it owns.
#[pyclass(module = "rocketstore._native", name = "GroupMember", frozen)]
pub struct PyGroupMember {
    inner: GroupMember,
}

fn queue_id(q: i64) -> PyResult<u32> {
    u32::try_from(q)
        .ok()
        .filter(|&q| q <= i32::MAX as u32)
        .ok_or_else(|| PyValueError::new_err(format!("queue id {q} is not in 0..2**31-1")))
}

fn queue_ids(qs: &[i64]) -> PyResult<Vec<u32>> {
    qs.iter().map(|&q| queue_id(q)).collect()
}

fn seconds(name: &str, s: f64) -> PyResult<Duration> {
    if !(s.is_finite() && s > 0.0 && s < 1e9) {
        return Err(PyValueError::new_err(format!(
            "{name} must be a positive number of seconds, got {s}"
        )));
    }
    Ok(Duration::from_secs_f64(s))
}

fn secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

impl PyGroupMember {
    fn member(&self) -> PyResult<&GroupMember> {
        if self.inner.is_forked_copy() {
            return Err(store_closed(FORKED.to_owned()));
        }
        Ok(&self.inner)
    }
}

#[pymethods]
impl PyGroupMember {
    /// Joins the group: takes a shared hold on `lock_path` and a member
    /// lock in `group_dir`, runs one heartbeat and starts the heartbeat
    /// thread. `queues` makes a fixed member (it takes exactly those).
    #[staticmethod]
    #[pyo3(signature = (group_dir, lock_path, group, topic, *, strategy="average",
                        queues=None, heartbeat_interval=3.0, session_timeout=10.0,
                        max_poll_interval=300.0))]
    #[allow(clippy::too_many_arguments)]
    fn join(
        py: Python<'_>,
        group_dir: PathBuf,
        lock_path: PathBuf,
        group: String,
        topic: String,
        strategy: &str,
        queues: Option<Vec<i64>>,
        heartbeat_interval: f64,
        session_timeout: f64,
        max_poll_interval: f64,
    ) -> PyResult<Self> {
        let mut strategy = Strategy::parse(strategy).ok_or_else(|| {
            PyValueError::new_err(format!(
                "strategy must be 'average', 'circle' or 'fixed', got {strategy:?}"
            ))
        })?;
        let fixed = match queues {
            Some(qs) => {
                strategy = Strategy::Fixed;
                let mut ids = queue_ids(&qs)?;
                ids.sort_unstable();
                ids.dedup();
                ids
            }
            None if strategy == Strategy::Fixed => {
                return Err(PyValueError::new_err("strategy 'fixed' needs queues=[...]"))
            }
            None => Vec::new(),
        };
        let opts = JoinOptions {
            group_dir,
            lock_path,
            group,
            topic,
            strategy,
            fixed,
            heartbeat_interval: seconds("heartbeat_interval", heartbeat_interval)?,
            session_timeout: seconds("session_timeout", session_timeout)?,
            max_poll_interval: seconds("max_poll_interval", max_poll_interval)?,
        };
        let inner = nogil(py, move || GroupMember::join(opts))?;
        Ok(Self { inner })
    }

    /// The member's id (`<host>-<pid>-<random>`); a new one after the
    /// member was dropped from the group and came back.
    #[getter]
    fn member_id(&self) -> PyResult<String> {
        guarded(|| Ok(self.member()?.member_id()))
    }

    /// The last heartbeat's error, or None if it succeeded.
    #[getter]
    fn error(&self) -> PyResult<Option<String>> {
        guarded(|| Ok(self.member()?.error()))
    }

    /// True once `leave()` ran.
    #[getter]
    fn left(&self) -> PyResult<bool> {
        guarded(|| Ok(self.member()?.has_left()))
    }

    /// The topic's queue ids this member sees.
    fn set_queues(&self, ids: Vec<i64>) -> PyResult<()> {
        guarded(|| {
            let ids = queue_ids(&ids)?;
            self.member()?.set_queues(&ids);
            Ok(())
        })
    }

    /// A poll happened (`max_poll_interval` counts from here).
    fn polled(&self) -> PyResult<()> {
        guarded(|| {
            self.member()?.polled();
            Ok(())
        })
    }

    /// The queues to read: queue -> (epoch, seconds of lease left).
    fn owned(&self) -> PyResult<BTreeMap<u32, (u64, f64)>> {
        guarded(|| {
            Ok(self
                .member()?
                .owned()
                .into_iter()
                .map(|(q, (e, left))| (q, (e, secs(left))))
                .collect())
        })
    }

    /// (assigned, to_revoke) since the last call.
    fn changes(&self) -> PyResult<(Vec<u32>, Vec<u32>)> {
        guarded(|| Ok(self.member()?.changes()))
    }

    /// Gives up queues reported in `to_revoke` (after `on_revoke` and
    /// their commit); writes the state now.
    fn release(&self, py: Python<'_>, queues: Vec<i64>) -> PyResult<()> {
        let ids = queue_ids(&queues)?;
        let m = self.member()?;
        nogil(py, move || {
            m.release(&ids);
            Ok(())
        })
    }

    /// Seconds left on the lease of `queue` (0.0: not held or ended).
    fn lease_left(&self, queue: i64) -> PyResult<f64> {
        guarded(|| {
            let q = queue_id(queue)?;
            Ok(secs(self.member()?.lease_left_ms(q)))
        })
    }

    /// One heartbeat now, in the caller's thread.
    fn heartbeat_now(&self, py: Python<'_>) -> PyResult<()> {
        let m = self.member()?;
        nogil(py, move || m.heartbeat_now())
    }

    /// Leaves the group (idempotent).
    fn leave(&self, py: Python<'_>) -> PyResult<()> {
        let m = self.member()?;
        nogil(py, move || {
            m.leave();
            Ok(())
        })
    }

    /// Raises FencedError unless `member_id` owns `queue` at `epoch` with
    /// its lease running.
    #[staticmethod]
    fn check_owner(
        py: Python<'_>,
        group_dir: PathBuf,
        queue: i64,
        member_id: String,
        epoch: u64,
    ) -> PyResult<()> {
        let q = queue_id(queue)?;
        nogil(py, move || {
            admin::check_owner(&group_dir, q, &member_id, epoch)
        })
    }

    /// `check_owner` for several queues (queue -> epoch) with one read of
    /// the state.
    #[staticmethod]
    fn check_owners(
        py: Python<'_>,
        group_dir: PathBuf,
        member_id: String,
        epochs: BTreeMap<i64, u64>,
    ) -> PyResult<()> {
        let epochs = epochs
            .into_iter()
            .map(|(q, e)| Ok((queue_id(q)?, e)))
            .collect::<PyResult<Vec<_>>>()?;
        nogil(py, move || {
            admin::check_owners(&group_dir, &member_id, &epochs)
        })
    }

    /// The group's members and queues now.
    #[staticmethod]
    fn describe<'py>(py: Python<'py>, group_dir: PathBuf) -> PyResult<Bound<'py, PyDict>> {
        let d = nogil(py, move || admin::describe(&group_dir))?;
        let out = PyDict::new(py);
        out.set_item("group", &d.group)?;
        out.set_item("topic", &d.topic)?;
        out.set_item("generation", d.generation)?;
        let members = PyList::empty(py);
        let mut pids = BTreeMap::new();
        for info in &d.members {
            let m = &info.member;
            pids.insert(m.id.clone(), m.pid);
            let e = PyDict::new(py);
            e.set_item("id", &m.id)?;
            e.set_item("pid", m.pid)?;
            e.set_item("host", &m.host)?;
            e.set_item("since_ms", m.since_ms)?;
            e.set_item("heartbeat_age_s", secs(info.heartbeat_age_ms))?;
            e.set_item("alive", info.alive)?;
            e.set_item("strategy", m.strategy.name())?;
            e.set_item("fixed", m.fixed.clone())?;
            members.append(e)?;
        }
        out.set_item("members", members)?;
        let queues = PyDict::new(py);
        for (q, (o, left)) in &d.queues {
            let e = PyDict::new(py);
            e.set_item("owner", o.owner.as_deref())?;
            e.set_item("owner_pid", o.owner.as_ref().and_then(|w| pids.get(w)))?;
            e.set_item("epoch", o.epoch)?;
            e.set_item("lease_left_s", secs(*left))?;
            e.set_item("revoking", o.revoking)?;
            queues.set_item(q, e)?;
        }
        out.set_item("queues", queues)?;
        Ok(out)
    }

    /// Removes dead members and rebuilds a state that cannot be read;
    /// returns the ids removed.
    #[staticmethod]
    fn expire(py: Python<'_>, group_dir: PathBuf) -> PyResult<Vec<String>> {
        nogil(py, move || admin::expire(&group_dir))
    }

    fn __repr__(&self) -> String {
        let o = self.inner.options();
        format!(
            "<GroupMember {} of group {:?} on topic {:?}>",
            if self.inner.is_forked_copy() {
                "(forked copy)".to_owned()
            } else {
                self.inner.member_id()
            },
            o.group,
            o.topic
        )
    }
}
