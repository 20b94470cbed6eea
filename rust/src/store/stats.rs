//! Runtime statistics, RocketMQ's `getRuntimeInfo`: what was put and
//! pulled, how far dispatch and the flush are behind, the running flags and
//! every queue's ends, sampled in one call ([`Store::runtime_stats`]).
//!
//! The counters cost the hot paths next to nothing: the put counters live
//! in the CommitLog and are added to by the holder of the put lock (a
//! relaxed load and store, see [`CommitLog::put_counts`]); a pull adds to
//! [`GetCounters`] with relaxed `fetch_add`s (pulls run in parallel).
//! Rates are the caller's: two samples and the time between them.
//!
//! A read-only store tells only what the files tell: it has no put counts
//! and no flushed offset (those live in the writer's process), and its
//! dispatch lag is measured on the files (the CommitLog's end against the
//! furthest record a consume queue points past).
//!
//! [`CommitLog::put_counts`]: crate::log::commitlog::CommitLog::put_counts

use std::sync::atomic::{AtomicU64, Ordering};

use super::Store;
use crate::error::Result;

/// Pulls served by [`Store::pull_into`] (`get_message`, `get_arrow`; RocketMQ's
/// `getMessageTimesTotalFound`/`Miss` and `getMessageTransferedMsgCount`).
#[derive(Debug, Default)]
pub(crate) struct GetCounters {
    calls: AtomicU64,
    misses: AtomicU64,
    messages: AtomicU64,
}

impl GetCounters {
    /// Counts one pull that returned `messages` messages.
    #[inline]
    pub(crate) fn record(&self, messages: usize) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if messages == 0 {
            self.misses.fetch_add(1, Ordering::Relaxed);
        } else {
            self.messages.fetch_add(messages as u64, Ordering::Relaxed);
        }
    }
}

/// One queue's ends at the time of a sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEnds {
    /// The topic.
    pub topic: String,
    /// The queue id.
    pub queue_id: i32,
    /// The first logical offset held.
    pub min_offset: i64,
    /// One past the last logical offset.
    pub max_offset: i64,
}

/// One sample of the store's running state (see [`Store::runtime_stats`]).
#[derive(Debug, Clone)]
pub struct RuntimeStats {
    /// Messages appended since the store was opened (None: read-only).
    pub put_messages: Option<u64>,
    /// CommitLog bytes those messages took (None: read-only).
    pub put_bytes: Option<u64>,
    /// Pulls served by this store object since it was opened.
    pub get_calls: u64,
    /// ... of which returned no message.
    pub get_misses: u64,
    /// Messages those pulls returned.
    pub get_messages: u64,
    /// Start of the CommitLog's first file (-1 when it holds none).
    pub min_phy_offset: i64,
    /// End of the CommitLog.
    pub max_phy_offset: u64,
    /// End of what is known to be on disk (None: read-only, the writer's
    /// process alone knows).
    pub flushed_offset: Option<u64>,
    /// CommitLog bytes not yet in the consume queues.
    pub dispatch_behind_bytes: u64,
    /// True while this process's dispatch thread runs.
    pub dispatch_running: bool,
    /// The running flags that are set, by name (see
    /// [`Store::running_flags_shown`]).
    pub running_flags: Vec<String>,
    /// Every consume queue's ends, by topic and queue id.
    pub queues: Vec<QueueEnds>,
}

impl Store {
    /// Counts a pull that returned `messages` messages.
    #[inline]
    pub(crate) fn count_get(&self, messages: usize) {
        self.gets.record(messages);
    }

    /// CommitLog bytes not yet in the consume queues. A writer asks its
    /// dispatcher; a read-only store measures the files: the CommitLog's end
    /// as it knows it, less the furthest end of a record a consume queue
    /// points at (at least the CommitLog's start). Records that are never
    /// dispatched (transaction half messages) at the end of the log count
    /// as behind there until a dispatched record follows them.
    pub fn dispatch_behind_bytes(&self) -> u64 {
        if !self.opts.read_only {
            return self.dispatcher.behind_bytes();
        }
        let end = self.commitlog.max_offset();
        let dispatched = self
            .cqs
            .all()
            .iter()
            .map(|q| q.max_physic_offset())
            .max()
            .unwrap_or(-1)
            .max(self.commitlog.min_offset())
            .max(0) as u64;
        end.saturating_sub(dispatched)
    }

    /// Every consume queue's ends, sorted by topic and queue id.
    pub fn queue_ends(&self) -> Vec<QueueEnds> {
        let mut queues: Vec<QueueEnds> = self
            .cqs
            .all()
            .iter()
            .map(|q| QueueEnds {
                topic: q.topic().to_owned(),
                queue_id: q.queue_id(),
                min_offset: q.min_offset_in_queue(),
                max_offset: q.max_offset_in_queue(),
            })
            .collect();
        queues.sort_by(|a, b| (&a.topic, a.queue_id).cmp(&(&b.topic, b.queue_id)));
        queues
    }

    /// One sample of the running state. A read-only store samples what it
    /// knows of the files: refresh it first to see the writer's latest.
    pub fn runtime_stats(&self) -> Result<RuntimeStats> {
        self.check_open()?;
        let writer = !self.opts.read_only;
        let (put_messages, put_bytes) = self.commitlog.put_counts();
        let g = &self.gets;
        Ok(RuntimeStats {
            put_messages: writer.then_some(put_messages),
            put_bytes: writer.then_some(put_bytes),
            get_calls: g.calls.load(Ordering::Relaxed),
            get_misses: g.misses.load(Ordering::Relaxed),
            get_messages: g.messages.load(Ordering::Relaxed),
            min_phy_offset: self.commitlog.min_offset(),
            max_phy_offset: self.commitlog.max_offset(),
            flushed_offset: writer.then(|| self.commitlog.flushed_offset()),
            dispatch_behind_bytes: self.dispatch_behind_bytes(),
            dispatch_running: self.dispatch_running(),
            running_flags: self.running_flags_shown(),
            queues: self.queue_ends(),
        })
    }
}
