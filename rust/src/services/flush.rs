//! Flush services (docs/format.md §20): group commit for SYNC_FLUSH, periodic flush for
//! ASYNC_FLUSH, the transient-pool commit, and the consume-queue flush that
//! also persists the checkpoint. Each is a [`ServiceThread`].
//!
//! ```text
//!  producers --append--> CommitLog --wait_flushed(end)--> [group commit] --msync--> disk
//!                                                         one msync per group
//! ```
//! A failed msync/fsync, or a panic in one of the threads, sets the store's
//! FLUSH_FAILED running flag and completes every waiting producer with
//! FLUSH_DISK_TIMEOUT.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::{Condvar, Mutex};

use crate::checkpoint::Checkpoint;
use crate::error::Result;
use crate::index::index_service::IndexStore;
use crate::log::commitlog::{CommitLog, PutStatus};
use crate::queue::cq_table::ConsumeQueueTable;
use crate::running::{Flag, RunningFlags};
use crate::services::service_thread::{ServiceThread, Signal, STOP_TIMEOUT};

/// How a put waits for the disk (RocketMQ's `FlushDiskType`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FlushDiskType {
    /// A put is acknowledged once its record is in the page cache; a flush
    /// thread syncs periodically.
    #[default]
    AsyncFlush,
    /// A put is acknowledged after its record is synced (group commit).
    SyncFlush,
}

impl FlushDiskType {
    /// Both types, in RocketMQ's order.
    pub const ALL: [FlushDiskType; 2] = [FlushDiskType::AsyncFlush, FlushDiskType::SyncFlush];

    /// RocketMQ's name of the type (`ASYNC_FLUSH`, `SYNC_FLUSH`).
    pub fn name(self) -> &'static str {
        match self {
            FlushDiskType::AsyncFlush => "ASYNC_FLUSH",
            FlushDiskType::SyncFlush => "SYNC_FLUSH",
        }
    }

    /// The type named `name` (RocketMQ's spelling).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// Whether the transient store pool is used: the pool needs ASYNC_FLUSH (a
/// synced put must reach the mapped file at once), and a SLAVE never uses it.
/// The one statement of the rule: the store, the flush service and the
/// Python configuration ask here.
pub fn transient_pool_in_use(enabled: bool, flush: FlushDiskType, slave: bool) -> bool {
    enabled && flush == FlushDiskType::AsyncFlush && !slave
}

/// Flush settings (MessageStoreConfig names, in Durations).
#[derive(Debug, Clone)]
pub struct FlushConfig {
    /// SYNC_FLUSH: a put waits until its record is on disk (group commit).
    pub flush_disk_type: FlushDiskType,
    /// The transient store pool is on: appends are committed into the files
    /// before they are flushed (only as [`transient_pool_in_use`] says).
    pub transient: bool,
    /// `flush_interval_commit_log`: how often the CommitLog is flushed (ASYNC_FLUSH).
    pub flush_interval: Duration,
    /// `flush_commit_log_least_pages`: dirty pages a periodic CommitLog flush waits for.
    pub flush_least_pages: usize,
    /// `flush_commit_log_thorough_interval`: a flush of every dirty page at least this often.
    pub flush_thorough_interval: Duration,
    /// `commit_interval_commit_log`: how often the transient buffers are committed.
    pub commit_interval: Duration,
    /// `commit_commit_log_least_pages`: pages a periodic commit waits for.
    pub commit_least_pages: usize,
    /// `commit_commit_log_thorough_interval`: a commit of everything at least this often.
    pub commit_thorough_interval: Duration,
    /// `flush_interval_consume_queue`: how often consume queues and the index are flushed.
    pub cq_interval: Duration,
    /// `flush_consume_queue_least_pages`: dirty pages a periodic queue flush waits for.
    pub cq_least_pages: usize,
    /// `flush_consume_queue_thorough_interval`: a queue flush of every dirty page at least this often.
    pub cq_thorough_interval: Duration,
    /// `sync_flush_timeout`: how long a SYNC_FLUSH put waits for the disk.
    pub sync_timeout: Duration,
}

impl FlushConfig {
    /// True under SYNC_FLUSH.
    pub fn sync_flush(&self) -> bool {
        self.flush_disk_type == FlushDiskType::SyncFlush
    }

    /// Whether the transient pool's commit runs ([`transient_pool_in_use`]).
    pub fn transient_pool_in_use(&self) -> bool {
        transient_pool_in_use(self.transient, self.flush_disk_type, false)
    }
}

impl Default for FlushConfig {
    fn default() -> Self {
        Self {
            flush_disk_type: FlushDiskType::AsyncFlush,
            transient: false,
            flush_interval: Duration::from_millis(500),
            flush_least_pages: 4,
            flush_thorough_interval: Duration::from_millis(10_000),
            commit_interval: Duration::from_millis(200),
            commit_least_pages: 4,
            commit_thorough_interval: Duration::from_millis(200),
            cq_interval: Duration::from_millis(1000),
            cq_least_pages: 2,
            cq_thorough_interval: Duration::from_millis(60_000),
            sync_timeout: Duration::from_millis(5000),
        }
    }
}

/// A flush that did not reach `end` (a stalled disk): `ETIMEDOUT`.
fn not_flushed(end: u64, how: &str) -> crate::error::StoreError {
    crate::error::StoreError::io(
        format!("flush the CommitLog up to offset {end} {how}"),
        std::io::Error::from_raw_os_error(libc::ETIMEDOUT),
    )
}

struct Group {
    /// Highest CommitLog offset a producer waits for.
    requested: u64,
    /// Producers that asked for a flush since the last one started.
    pending: usize,
    /// Producers the last flush covered (the expected size of the next group).
    last_group: usize,
    /// How long the last flush took.
    last_flush: Duration,
}

/// Group-commit statistics since open (SYNC_FLUSH). Requests per flush
/// above one means producers shared fsyncs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCommitStats {
    /// Group flushes done.
    pub flushes: u64,
    /// Producer requests those flushes covered.
    pub requests: u64,
    /// Nanoseconds spent flushing.
    pub flush_ns: u64,
    /// Nanoseconds spent gathering requests before a flush.
    pub gather_ns: u64,
}

/// The flush threads of one store.
pub struct FlushService {
    cfg: FlushConfig,
    commitlog: Arc<CommitLog>,
    cqs: Arc<ConsumeQueueTable>,
    index: Option<Arc<IndexStore>>,
    checkpoint: Arc<Checkpoint>,
    group: Mutex<Group>,
    work: Condvar,
    done: Condvar,
    /// Set when the threads are asked to stop (producers stop waiting).
    stop: AtomicBool,
    /// The store's running state: FLUSH_FAILED is this service's failure.
    flags: Arc<RunningFlags>,
    /// Group-commit flushes done and producers they covered (statistics).
    groups: std::sync::atomic::AtomicU64,
    grouped: std::sync::atomic::AtomicU64,
    flush_ns: std::sync::atomic::AtomicU64,
    gather_ns: std::sync::atomic::AtomicU64,
    /// Called after every CommitLog flush that succeeded (wakes dispatch,
    /// which under SYNC_FLUSH follows the flushed offset).
    on_flushed: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
    threads: Mutex<Vec<ServiceThread>>,
}

impl FlushService {
    /// A flush service for the store's files (threads start with `start`).
    pub fn new(
        cfg: FlushConfig,
        commitlog: Arc<CommitLog>,
        cqs: Arc<ConsumeQueueTable>,
        index: Option<Arc<IndexStore>>,
        checkpoint: Arc<Checkpoint>,
        flags: Arc<RunningFlags>,
    ) -> Arc<Self> {
        Arc::new(Self {
            cfg,
            commitlog,
            cqs,
            index,
            checkpoint,
            group: Mutex::new(Group {
                requested: 0,
                pending: 0,
                last_group: 1,
                last_flush: Duration::ZERO,
            }),
            work: Condvar::new(),
            done: Condvar::new(),
            stop: AtomicBool::new(false),
            flags,
            groups: std::sync::atomic::AtomicU64::new(0),
            grouped: std::sync::atomic::AtomicU64::new(0),
            flush_ns: std::sync::atomic::AtomicU64::new(0),
            gather_ns: std::sync::atomic::AtomicU64::new(0),
            on_flushed: Mutex::new(None),
            threads: Mutex::new(Vec::new()),
        })
    }

    /// Sets the hook called after each successful CommitLog flush.
    pub fn set_on_flushed(&self, f: Box<dyn Fn() + Send + Sync>) {
        *self.on_flushed.lock() = Some(f);
    }

    /// The flush settings.
    pub fn config(&self) -> &FlushConfig {
        &self.cfg
    }

    /// Starts the threads.
    pub fn start(self: &Arc<Self>) -> std::io::Result<()> {
        let mut threads = self.threads.lock();
        if !threads.is_empty() {
            return Ok(());
        }
        // A panicking thread fails the service as a failed flush does
        // (the service thread logged the panic).
        let on_panic = |me: &Arc<Self>| {
            let me = me.clone();
            move |why: String| me.record_failure(why)
        };
        if self.cfg.sync_flush() {
            let me = self.clone();
            threads.push(ServiceThread::start(
                "group_commit",
                on_panic(self),
                move |s| me.group_commit_round(s),
            )?);
        } else {
            let me = self.clone();
            let mut last_thorough = Instant::now();
            threads.push(ServiceThread::start("flush", on_panic(self), move |s| {
                me.async_flush_round(s, &mut last_thorough)
            })?);
        }
        if self.cfg.transient_pool_in_use() {
            let me = self.clone();
            let mut last_thorough = Instant::now();
            threads.push(ServiceThread::start("commit", on_panic(self), move |s| {
                me.commit_round(s, &mut last_thorough)
            })?);
        }
        let me = self.clone();
        let mut last_thorough = Instant::now();
        threads.push(ServiceThread::start(
            "cq_flush",
            on_panic(self),
            move |s| me.cq_flush_round(s, &mut last_thorough),
        )?);
        Ok(())
    }

    /// Flushing failed (or a flush thread panicked): sets FLUSH_FAILED
    /// (the first reason is kept) and completes every waiting producer.
    fn fail(&self, what: String) {
        log::error!("{what}");
        self.record_failure(what);
    }

    fn record_failure(&self, what: String) {
        self.flags.fail(Flag::FlushFailed, what);
        let _g = self.group.lock();
        self.done.notify_all();
    }

    /// True once flushing failed.
    #[inline]
    fn failed(&self) -> bool {
        self.flags.is_set(Flag::FlushFailed)
    }

    /// Group-commit statistics so far.
    pub fn group_stats(&self) -> GroupCommitStats {
        GroupCommitStats {
            flushes: self.groups.load(Ordering::Relaxed),
            requests: self.grouped.load(Ordering::Relaxed),
            flush_ns: self.flush_ns.load(Ordering::Relaxed),
            gather_ns: self.gather_ns.load(Ordering::Relaxed),
        }
    }

    /// Why flushing failed, if it did (the store's first failure).
    pub fn failure(&self) -> Option<String> {
        self.flags.reason_if(Flag::FlushFailed)
    }

    /// Waits until the CommitLog is flushed up to `end` (group commit).
    /// PUT_OK, or FLUSH_DISK_TIMEOUT after `sync_flush_timeout` or a failure.
    pub fn wait_flushed(&self, end: u64) -> PutStatus {
        let deadline = Instant::now() + self.cfg.sync_timeout;
        let mut g = self.group.lock();
        if end > g.requested {
            g.requested = end;
        }
        g.pending += 1;
        self.work.notify_one();
        self.wait_locked(&mut g, end, deadline)
    }

    fn wait_locked(
        &self,
        g: &mut crate::sync::MutexGuard<'_, Group>,
        end: u64,
        deadline: Instant,
    ) -> PutStatus {
        loop {
            if self.commitlog.flushed_offset() >= end {
                return PutStatus::PutOk;
            }
            if self.failed() || self.stop.load(Ordering::Acquire) {
                return PutStatus::FlushDiskTimeout;
            }
            if self.done.wait_until(g, deadline).timed_out()
                && self.commitlog.flushed_offset() < end
            {
                return PutStatus::FlushDiskTimeout;
            }
        }
    }

    /// Asks the group-commit thread to flush up to `end` without waiting
    /// (a reader waiting for a record to be flushed).
    pub fn request_flush(&self, end: u64) {
        if !self.cfg.sync_flush() {
            return;
        }
        let mut g = self.group.lock();
        if end > g.requested {
            g.requested = end;
        }
        self.work.notify_one();
    }

    /// Makes the CommitLog durable up to `end` (committed offsets are
    /// persisted only above durable data). Under SYNC_FLUSH this joins the
    /// group commit; otherwise it commits transient buffers and flushes in
    /// the caller's thread. A failure poisons the store.
    pub fn flush_to(&self, end: u64) -> Result<()> {
        if self.commitlog.flushed_offset() >= end {
            return Ok(());
        }
        if let Some(f) = self.failure() {
            return Err(crate::error::StoreError::Poisoned(f));
        }
        if self.cfg.sync_flush()
            && !self.stop.load(Ordering::Acquire)
            && !self.threads.lock().is_empty()
        {
            return match self.wait_flushed(end) {
                PutStatus::PutOk => Ok(()),
                _ => Err(self.failure().map_or_else(
                    || not_flushed(end, "within sync_flush_timeout"),
                    crate::error::StoreError::Poisoned,
                )),
            };
        }
        self.commitlog.queue().commit(0);
        if let Err(e) = self.flush_commitlog() {
            let why = format!("CommitLog flush failed: {e}");
            self.fail(why.clone());
            return Err(crate::error::StoreError::Poisoned(why));
        }
        if self.commitlog.flushed_offset() < end {
            return Err(not_flushed(end, "(the disk did not take it)"));
        }
        Ok(())
    }

    fn flush_commitlog(&self) -> Result<()> {
        // A stalled disk (fault injection): nothing reaches it.
        #[cfg(feature = "failpoints")]
        if crate::failpoint::check("flush_hold").is_err() {
            return Ok(());
        }
        // Messages stored up to this timestamp are on disk once the flush returns.
        let ts = self
            .commitlog
            .queue()
            .last_file()
            .map(|f| f.store_timestamp())
            .unwrap_or(0);
        let target = self.commitlog.max_offset();
        self.commitlog.flush_all()?;
        let flushed = self.commitlog.flushed_offset();
        if ts > 0 && flushed >= target {
            self.checkpoint.set_physic_msg_timestamp(ts);
        }
        // The durable mark: everything below `flushed` is on disk now; the
        // next checkpoint flush writes it (after this flush, never before).
        self.checkpoint.set_durable_offset(flushed);
        if let Some(f) = self.on_flushed.lock().as_ref() {
            f();
        }
        Ok(())
    }

    /// One group commit: waits (10 ms at most) for a producer's request,
    /// gathers the group, forces the CommitLog once for all of it.
    fn group_commit_round(&self, s: &Signal) {
        {
            let mut g = self.group.lock();
            if g.requested <= self.commitlog.flushed_offset() && !s.is_stopped() {
                self.work.wait_for(&mut g, Duration::from_millis(10));
            }
        }
        if s.is_stopped() {
            return;
        }
        if self.failed() {
            s.wait(Duration::from_millis(100));
            return;
        }
        self.gather_group();
        let t = Instant::now();
        match self.flush_commitlog() {
            Ok(()) => {
                let mut g = self.group.lock();
                g.last_flush = t.elapsed();
                self.flush_ns
                    .fetch_add(g.last_flush.as_nanos() as u64, Ordering::Relaxed);
                self.done.notify_all();
            }
            Err(e) => self.fail(format!("CommitLog flush failed: {e}")),
        }
    }

    /// Lets the producers of the last group join this one before forcing:
    /// each producer has one message in flight, and after a flush they come
    /// back one by one (from Python each needs the GIL to return and put
    /// again). Waits until as many producers asked as the last flush covered,
    /// but never longer than half the last flush took (so a producer that
    /// went away costs little), and at most 1 ms. Producers that ask while
    /// this flush runs count toward the next group.
    fn gather_group(&self) {
        let t0 = Instant::now();
        let mut g = self.group.lock();
        let want = g.last_group.max(1);
        let max_wait = (g.last_flush / 2).min(Duration::from_millis(1));
        let deadline = Instant::now() + max_wait;
        while g.pending < want && !self.stop.load(Ordering::Acquire) {
            if self.work.wait_until(&mut g, deadline).timed_out() {
                break;
            }
        }
        g.last_group = g.pending.max(1);
        self.groups.fetch_add(1, Ordering::Relaxed);
        self.grouped.fetch_add(g.pending as u64, Ordering::Relaxed);
        self.gather_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        g.pending = 0;
    }

    /// One periodic CommitLog flush (ASYNC_FLUSH).
    fn async_flush_round(&self, s: &Signal, last_thorough: &mut Instant) {
        s.wait(self.cfg.flush_interval);
        if s.is_stopped() || self.failed() {
            return;
        }
        #[cfg(feature = "failpoints")]
        if crate::failpoint::check("flush_hold").is_err() {
            return;
        }
        let thorough = last_thorough.elapsed() >= self.cfg.flush_thorough_interval;
        let r = if thorough {
            *last_thorough = Instant::now();
            self.flush_commitlog()
        } else {
            // One file per call, as RocketMQ does; the next round continues.
            self.commitlog
                .queue()
                .flush(self.cfg.flush_least_pages)
                .map(|_| ())
        };
        if let Err(e) = r {
            self.fail(format!("CommitLog flush failed: {e}"));
        }
    }

    /// One commit of the transient write buffer into the file.
    fn commit_round(&self, s: &Signal, last_thorough: &mut Instant) {
        s.wait(self.cfg.commit_interval);
        if s.is_stopped() {
            return;
        }
        let thorough = last_thorough.elapsed() >= self.cfg.commit_thorough_interval;
        let least = if thorough {
            *last_thorough = Instant::now();
            0
        } else {
            self.cfg.commit_least_pages
        };
        self.commitlog.queue().commit(least);
    }

    fn flush_queues(&self, least_pages: usize) -> Result<()> {
        let logics = self.checkpoint.logics_msg_timestamp();
        self.cqs.flush_all(least_pages)?;
        if least_pages == 0 {
            if let Some(i) = &self.index {
                i.flush()?;
            }
            // Claim no queue data newer than what was flushed.
            if logics > 0 {
                self.checkpoint.set_logics_msg_timestamp(logics);
            }
            self.checkpoint.flush()?;
        }
        Ok(())
    }

    /// One periodic flush of the consume queues (and, when thorough, the
    /// index and the checkpoint).
    fn cq_flush_round(&self, s: &Signal, last_thorough: &mut Instant) {
        s.wait(self.cfg.cq_interval);
        if s.is_stopped() || self.failed() {
            return;
        }
        let thorough = last_thorough.elapsed() >= self.cfg.cq_thorough_interval;
        let least = if thorough {
            *last_thorough = Instant::now();
            0
        } else {
            self.cfg.cq_least_pages
        };
        if let Err(e) = self.flush_queues(least) {
            self.fail(format!("ConsumeQueue flush failed: {e}"));
        }
    }

    /// Stops the threads without a final flush (a simulated crash).
    pub fn abandon(&self) {
        self.stop_threads();
    }

    fn stop_threads(&self) {
        self.stop.store(true, Ordering::Release);
        let threads: Vec<ServiceThread> = std::mem::take(&mut *self.threads.lock());
        for t in &threads {
            t.request_stop();
        }
        {
            let _g = self.group.lock();
            self.work.notify_all();
            self.done.notify_all();
        }
        for t in &threads {
            t.stop(STOP_TIMEOUT);
        }
    }

    /// Stops the threads, then commits and flushes everything once more.
    pub fn shutdown(&self) -> Result<()> {
        self.stop_threads();
        if let Some(f) = self.failure() {
            return Err(crate::error::StoreError::Poisoned(f));
        }
        self.final_flush()
    }

    /// Commits transient buffers and flushes the CommitLog, queues, index and
    /// checkpoint.
    pub fn final_flush(&self) -> Result<()> {
        self.commitlog.queue().commit(0);
        self.flush_commitlog()?;
        self.flush_queues(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_disk_types_have_rocketmqs_names() {
        for t in FlushDiskType::ALL {
            assert_eq!(FlushDiskType::from_name(t.name()), Some(t));
        }
        assert_eq!(FlushDiskType::from_name("SYNC"), None);
    }

    #[test]
    fn the_transient_pool_needs_async_flush_and_no_slave() {
        use FlushDiskType::*;
        assert!(transient_pool_in_use(true, AsyncFlush, false));
        assert!(!transient_pool_in_use(true, SyncFlush, false));
        assert!(!transient_pool_in_use(true, AsyncFlush, true));
        assert!(!transient_pool_in_use(false, AsyncFlush, false));
    }
}
