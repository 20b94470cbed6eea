//! Typed results of the engine's service and statistics calls: frozen
//! classes with named fields, so no bare tuple crosses into Python and no
//! caller unpacks fields by position.

use pyo3::prelude::*;

/// A frozen class with read-only fields, a `__repr__` naming them, and
/// equality by value.
macro_rules! frozen_record {
    (
        $(#[$meta:meta])*
        $py_name:literal, $name:ident {
            $( $(#[$fmeta:meta])* $field:ident: $ty:ty ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[pyclass(frozen, eq, module = "rocketstore._native", name = $py_name)]
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name {
            $( $(#[$fmeta])* #[pyo3(get)] pub $field: $ty, )+
        }

        #[pymethods]
        impl $name {
            fn __repr__(&self) -> String {
                let fields: Vec<String> = vec![
                    $( format!("{}={:?}", stringify!($field), self.$field), )+
                ];
                format!("{}({})", $py_name, fields.join(", "))
            }
        }
    };
}

pub(crate) use frozen_record;

frozen_record! {
    /// What one delayed-delivery step did for one level.
    "DeliverStep", PyDeliverStep {
        /// The level's new progress: first queue offset not handled yet.
        next_offset: i64,
        /// Copies put into their real topic.
        delivered: u64,
        /// Units passed over without a copy (the engine logged why).
        dropped: u64,
        /// Deliver time (ms) of the next unit when it is not due yet, else -1.
        due_at: i64,
        /// True when the step stopped at its batch limit.
        more: bool,
        /// Why the step stopped before a due message (retried later).
        blocked: Option<String>,
        /// CommitLog offset past the last copy (0 when none).
        end_offset: u64,
    }
}

impl From<crate::store::schedule::DeliverStep> for PyDeliverStep {
    fn from(s: crate::store::schedule::DeliverStep) -> Self {
        Self {
            next_offset: s.next_offset,
            delivered: s.delivered,
            dropped: s.dropped,
            due_at: s.due_at,
            more: s.more,
            blocked: s.blocked,
            end_offset: s.end_offset,
        }
    }
}

frozen_record! {
    /// Group-commit statistics since open (SYNC_FLUSH). Requests per flush
    /// above one means producers shared fsyncs.
    "GroupCommitStats", PyGroupCommitStats {
        /// Group flushes done.
        flushes: u64,
        /// Producer requests those flushes covered.
        requests: u64,
        /// Nanoseconds spent flushing.
        flush_ns: u64,
        /// Nanoseconds spent gathering requests before a flush.
        gather_ns: u64,
    }
}

impl From<crate::services::flush::GroupCommitStats> for PyGroupCommitStats {
    fn from(s: crate::services::flush::GroupCommitStats) -> Self {
        Self {
            flushes: s.flushes,
            requests: s.requests,
            flush_ns: s.flush_ns,
            gather_ns: s.gather_ns,
        }
    }
}

frozen_record! {
    /// The checkpoint's timestamps (ms): what is durable up to when.
    "CheckpointTimes", PyCheckpointTimes {
        /// Store time of the last CommitLog message flushed.
        physic_msg_timestamp: i64,
        /// Store time of the last message whose queue unit is flushed.
        logics_msg_timestamp: i64,
        /// Store time of the last message in a flushed index file.
        index_msg_timestamp: i64,
    }
}

impl From<&crate::checkpoint::Checkpoint> for PyCheckpointTimes {
    fn from(c: &crate::checkpoint::Checkpoint) -> Self {
        Self {
            physic_msg_timestamp: c.physic_msg_timestamp(),
            logics_msg_timestamp: c.logics_msg_timestamp(),
            index_msg_timestamp: c.index_msg_timestamp(),
        }
    }
}

frozen_record! {
    /// How often reads waited for acknowledged puts to become visible.
    "VisibilityStats", PyVisibilityStats {
        /// Reads that found an acknowledged put not yet visible.
        waits: u64,
        /// ... of which dispatched it themselves.
        inline_dispatches: u64,
        /// ... of which committed the transient write buffer.
        commits: u64,
        /// ... of which gave up after `sync_flush_timeout`.
        timeouts: u64,
        /// ... of which gave up at once because dispatch or flushing failed.
        failed: u64,
    }
}

frozen_record! {
    /// One sample of the engine's running state (``rocketstore.StoreStats``
    /// is built from it; see ``crate::store::RuntimeStats``).
    "RuntimeSample", PyRuntimeSample {
        /// Messages appended since open (None: read-only).
        put_messages: Option<u64>,
        /// CommitLog bytes they took (None: read-only).
        put_bytes: Option<u64>,
        /// Pulls served by this store since open.
        get_calls: u64,
        /// ... of which returned no message.
        get_misses: u64,
        /// Messages the pulls returned.
        get_messages: u64,
        /// Start of the CommitLog's first file (-1 when none).
        min_phy_offset: i64,
        /// End of the CommitLog.
        max_phy_offset: u64,
        /// End of what is on disk (None: read-only).
        flushed_offset: Option<u64>,
        /// CommitLog bytes not yet in the consume queues.
        dispatch_behind_bytes: u64,
        /// True while the dispatch thread runs.
        dispatch_running: bool,
        /// The running flags that are set.
        running_flags: Vec<String>,
        /// ``(topic, queue_id, min_offset, max_offset)`` of every queue, sorted.
        queues: Vec<(String, i32, i64, i64)>,
    }
}

impl From<crate::store::RuntimeStats> for PyRuntimeSample {
    fn from(s: crate::store::RuntimeStats) -> Self {
        Self {
            put_messages: s.put_messages,
            put_bytes: s.put_bytes,
            get_calls: s.get_calls,
            get_misses: s.get_misses,
            get_messages: s.get_messages,
            min_phy_offset: s.min_phy_offset,
            max_phy_offset: s.max_phy_offset,
            flushed_offset: s.flushed_offset,
            dispatch_behind_bytes: s.dispatch_behind_bytes,
            dispatch_running: s.dispatch_running,
            running_flags: s.running_flags,
            queues: s
                .queues
                .into_iter()
                .map(|q| (q.topic, q.queue_id, q.min_offset, q.max_offset))
                .collect(),
        }
    }
}

/// Registers the classes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDeliverStep>()?;
    m.add_class::<PyGroupCommitStats>()?;
    m.add_class::<PyCheckpointTimes>()?;
    m.add_class::<PyVisibilityStats>()?;
    m.add_class::<PyRuntimeSample>()?;
    Ok(())
}
