//! The store facade the bindings drive: the writer lock, the CommitLog, the
//! consume queues, the index, the checkpoint, dispatch, and the running state
//! (closed, read-only, poisoned).
//!
//! Python orchestrates the services (recovery order, the dispatch service's
//! start/stop, retention); each call here is one engine step.
//!
//! # Running state
//!
//! Why puts are refused lives in one [`RunningFlags`] word shared with the
//! services (a failed flush sets FLUSH_FAILED, a failed dispatch
//! WRITE_LOGICS_QUEUE_ERROR or WRITE_INDEX_FILE_ERROR, a panicking service
//! or [`Store::poison`] NOT_WRITEABLE, the retention service DISK_FULL); the
//! put path reads it with one atomic load. Every background loop is a
//! [`ServiceThread`].
//!
//! # Lock order
//!
//! A thread holding a lock may take only locks further down this list
//! (never one above it, never the GIL). Locks not listed are
//! leaves: nothing is taken while they are held.
//!
//! 0. `Store::recovery` — held for a whole recovery step
//!    (`crate::recovery`), which may take any lock below; no thread runs
//!    yet that could wait for it.
//! 1. `Store::dispatch_thread`, `Store::prefaulter`, `FlushService::threads`,
//!    `Allocator::service`, `IndexStore::flusher` — the service handles;
//!    each is taken only to start a thread or take its handle out, and is
//!    released before the thread is joined.
//! 2. `Dispatcher::step` — one dispatch step at a time (the thread, a read
//!    dispatching inline, recovery, `drain`); inside it, in order:
//!    `ConsumeQueueTable::queues` → a `ConsumeQueue`'s write state → its
//!    files; then `IndexStore::write_lock` → `IndexStore::files` → an
//!    `IndexFile`'s write lock; the CommitLog's files are read
//!    (`MappedFileQueue::files`, read). The checkpoint is only stored to
//!    (atomics).
//! 3. `CommitLog::put` — the put lock. Inside it a roll takes the
//!    allocator's state (waiting on its condvar, which releases it), then
//!    `MappedFileQueue::files` (write), and `TransientStorePool::free`;
//!    an append takes the `MappedFile` write lock and write buffer.
//!    Producers release it before they wait for the flush (4).
//! 4. `FlushService::group` — the group commit's requests; released before
//!    the CommitLog is forced. Never held with the put lock.
//! 5. `MappedFileQueue::flush_lock` / `commit_lock` → `MappedFileQueue::files`
//!    (read) → a file's write buffer. After the flush, apart:
//!    `FlushService::on_flushed`, held while it wakes dispatch (→ the
//!    dispatch [`Signal`](crate::services::service_thread::Signal)'s lock).
//! 6. The index flush service's `flushing` → its queue → an index file →
//!    the checkpoint's `flush_lock` → its file.
//! 7. `Store::lock` — the writer's file lock, released last, after every
//!    thread stopped and every file was let go.
//!
//! Leaves: `Dispatcher::seq_lock`, a [`ServiceThread`]'s signal and
//! finished locks, `RunningFlags`' disk-full reason, `Store::damage_logged`,
//! `CommitLog::damaged`, the checkpoint's mark, `Store::ha`, the
//! replication [`Acks`](crate::ha::Acks)' locks (its slave list may be
//! taken under the HA master's connection list, which may be taken under
//! its thread list) and a slave's status. A slave's append of its
//! master's bytes takes the put lock (3) as a put does. A promotion holds
//! `Store::promoting` (taken with no other lock held) while it cuts the
//! log (the put lock), dispatches and writes the checkpoint's ranges; it
//! lets it go before it starts the listener (`Store::ha`).
//!
//! # Files
//!
//! - `options.rs`: [`StoreOptions`] and the defaults.
//! - `open.rs`: opening a store (lock, load, background helpers).
//! - `put.rs`: the put path (prepare, single puts, batches, flush waits).
//! - `visibility.rs`: read-your-writes (the visibility horizon).
//! - `read.rs`: reads (pulls, lookups by offset and key, following a writer).
//! - `queue_reads.rs`: one queue's offsets and times (min, max, by time).
//! - `recover_scan.rs`: the recovery steps that find the recovered end (see
//!   [`crate::recovery`]): file sizes, the damage rule, the CommitLog scans,
//!   the consume queues checked against the CommitLog (holes rebuilt); the
//!   step guard.
//! - `recover_rebuild.rs`: the recovery steps that cut at that end and
//!   rebuild from it: truncation, the index rebuild, re-dispatch, consumer
//!   offsets, the queue-offset table; the report, and [`Store::recover`].
//! - `repair.rs`: a repair's rebuild of damaged queue units and index files.
//! - `lifecycle.rs`: threads, flushes, retention steps, shutdown and drop.
//! - `stats.rs`: runtime statistics (counters, lags, queue ends).
//! - `replication.rs`: replication's threads, a slave's refusal of puts,
//!   the SYNC_MASTER wait and `ha_status` (see [`crate::ha`]).
//! - `promote.rs`: failover by hand: a running slave becomes a master.
//! - `ha_offsets.rs`: the offsets sync's listener, publish and fetch
//!   (see [`crate::ha::offsets`]).
//! - `schedule.rs`: delayed delivery, one step (due copies of a delay level
//!   put into their real topic).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::sync::Mutex;
use rustc_hash::FxHashSet;

use crate::checkpoint::Checkpoint;
use crate::error::{Result, StoreError};
use crate::index::index_service::IndexStore;
use crate::lock::{fork_generation, StoreLock};
use crate::log::allocate::{Allocator, Prefaulter};
use crate::log::commitlog::CommitLog;
use crate::queue::cq_table::ConsumeQueueTable;
use crate::queue::reader::TransferLimits;
use crate::recovery::RecoveryState;
use crate::running::{Flag, RunningFlags};
use crate::services::dispatch::Dispatcher;
use crate::services::flush::FlushService;
use crate::services::service_thread::ServiceThread;

mod lifecycle;
mod open;
mod options;
mod put;
mod queue_reads;
mod read;
pub use read::KeyHits;
pub mod ha_offsets;
pub mod promote;
mod recover_rebuild;
mod recover_scan;
mod repair;
mod replication;

pub use replication::HaRunning;
pub mod schedule;
mod stats;
mod visibility;

pub use options::{StoreOptions, DEFAULT_COMMIT_LOG_FILE_SIZE, DEFAULT_MESSAGE_DELAY_LEVEL};

pub use crate::recovery::RecoveryReport;
pub use repair::PointerRebuild;
pub use stats::{QueueEnds, RuntimeStats};

/// An open store.
pub struct Store {
    opts: StoreOptions,
    lock: Mutex<Option<StoreLock>>,
    commitlog: Arc<CommitLog>,
    cqs: Arc<ConsumeQueueTable>,
    index: Option<Arc<IndexStore>>,
    /// Why key queries are refused (index geometry mismatch, read-only).
    index_error: Option<String>,
    checkpoint: Arc<Checkpoint>,
    dispatcher: Arc<Dispatcher>,
    dispatch_thread: Mutex<Option<ServiceThread>>,
    limits: TransferLimits,
    flusher: Arc<FlushService>,
    last_exit_ok: bool,
    /// Which recovery step ran last (`crate::recovery` enforces the order).
    recovery: Mutex<RecoveryState>,
    closed: AtomicBool,
    /// Set when a writer's recovery completed: until then shutdown writes
    /// nothing (a refused open changes no byte).
    recovered: AtomicBool,
    /// Why puts are refused (RocketMQ's running flags: failures, and
    /// DISK_FULL set by the retention service while disk usage is above
    /// `disk_space_warning_level_ratio`), shared with the services. One
    /// load per put.
    flags: Arc<RunningFlags>,
    prefaulter: Mutex<Option<Prefaulter>>,
    allocator: Option<Arc<Allocator>>,
    /// End of the furthest put acknowledged with PUT_OK: the horizon every
    /// read in this process waits for (read-your-writes).
    acked_end: AtomicU64,
    /// A horizon reads gave up on because dispatch or flushing failed (the
    /// store is poisoned for good) or the interpreter is exiting: later
    /// reads do not wait for it again.
    vis_abandoned: AtomicU64,
    vis: VisibilityStats,
    /// Pulls served (see `stats.rs`).
    gets: stats::GetCounters,
    /// CommitLog offsets of damaged records already logged (each is logged once).
    damage_logged: Mutex<FxHashSet<i64>>,
    /// Read-only stores: when a pull last looked for new queues (µs since `opened`).
    last_follow_us: AtomicU64,
    opened: Instant,
    /// Replication: the master's view of its slaves (the SYNC_MASTER wait).
    acks: Arc<crate::ha::Acks>,
    /// Replication: a slave's view of its master.
    ha_client: Arc<crate::ha::slave::ClientStatus>,
    /// Replication's threads while they run.
    ha: Mutex<Option<HaRunning>>,
    /// The replication role now ([`crate::ha::HaRole::code`]): a promotion
    /// turns a slave into a master while the store runs.
    role: std::sync::atomic::AtomicU8,
    /// Held while a promotion runs.
    promoting: Mutex<()>,
    /// The port a master listens on (0: none).
    ha_port: std::sync::atomic::AtomicU32,
    /// The offsets sync: its state, and a master's listener while it runs.
    ha_offsets: Arc<crate::ha::offsets::OffsetsState>,
    ha_offsets_server: Mutex<Option<crate::ha::offsets::OffsetsServer>>,
    /// The process's fork generation at open: a different value means this
    /// is a copy inherited by a forked child, whose threads do not exist and
    /// whose files belong to the parent.
    fork_generation: u64,
}

/// How often reads had to wait for the visibility horizon.
#[derive(Debug, Default)]
pub struct VisibilityStats {
    /// Reads that found an acknowledged put not yet visible.
    pub waits: AtomicU64,
    /// ... of which dispatched it themselves.
    pub inline_dispatches: AtomicU64,
    /// ... of which committed the transient write buffer.
    pub commits: AtomicU64,
    /// ... of which gave up after `sync_flush_timeout`.
    pub timeouts: AtomicU64,
    /// ... of which gave up at once because dispatch or flushing failed.
    pub failed: AtomicU64,
}

impl Store {
    /// The options the store was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.opts
    }

    /// The CommitLog.
    pub fn commitlog(&self) -> &CommitLog {
        &self.commitlog
    }

    /// The consume queues.
    pub fn consume_queues(&self) -> &ConsumeQueueTable {
        &self.cqs
    }

    /// The index (`None` when disabled, or for a reader whose index geometry does not match).
    pub fn index(&self) -> Option<&IndexStore> {
        self.index.as_deref()
    }

    /// The checkpoint.
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// The flush service.
    pub fn flusher(&self) -> &FlushService {
        &self.flusher
    }

    /// The dispatcher (CommitLog to consume queues and index).
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.dispatcher
    }

    /// True for a read-only open (another process may write).
    pub fn is_read_only(&self) -> bool {
        self.opts.read_only
    }

    /// True when the previous writer stopped cleanly (no abort file).
    pub fn last_exit_ok(&self) -> bool {
        self.last_exit_ok
    }

    /// The background file maker, when preallocation is on.
    pub fn allocator(&self) -> Option<&Allocator> {
        self.allocator.as_deref()
    }
    /// The recovery state (see [`crate::recovery`]).
    pub(crate) fn recovery_state(&self) -> &Mutex<RecoveryState> {
        &self.recovery
    }

    /// The last recovery step ran: puts and reads are allowed.
    pub(crate) fn set_recovered(&self) {
        self.recovered.store(true, Ordering::Release);
    }

    /// True once recovery finished.
    pub fn is_recovered(&self) -> bool {
        self.recovered.load(Ordering::Acquire)
    }

    /// Read-only stores: sets every file's positions to the recovered end.
    pub(crate) fn set_read_only_end(&self, end: u64) {
        for f in self.commitlog.queue().files() {
            let from = f.file_from_offset();
            let pos = end.saturating_sub(from).min(f.file_size() as u64);
            f.set_positions(pos as usize);
        }
    }

    /// True in a child forked after the store was opened: the store is
    /// closed there, and closing or dropping it touches nothing.
    pub fn is_forked_copy(&self) -> bool {
        fork_generation() != self.fork_generation
    }

    /// Sets or clears the DISK_FULL flag (`reason` says why, for the put
    /// result and `running_flags`). Returns the previous state.
    pub fn set_disk_full(&self, full: bool, reason: &str) -> bool {
        self.flags.set_disk_full(full, reason)
    }

    /// Why puts are refused for lack of disk, if they are.
    pub fn disk_full_reason(&self) -> Option<String> {
        self.flags.disk_full_reason()
    }

    /// The running state: why puts are refused, flag by flag.
    pub fn running_flags(&self) -> &RunningFlags {
        &self.flags
    }

    /// The running flags that are set, by name (the first failure's with
    /// its reason, `"NAME: reason"`, see [`RunningFlags::describe`]).
    /// DISK_FULL and RESOURCE_WAIT, which are about taking more puts, are
    /// not listed once the store is closed.
    pub fn running_flags_shown(&self) -> Vec<String> {
        let mut flags = self.flags.describe();
        if self.is_closed() {
            flags.retain(|f| !f.starts_with("DISK_FULL") && !f.starts_with("RESOURCE_WAIT"));
        }
        flags
    }

    /// Checks the store state for a read or a put: open, and recovered.
    pub fn check_open(&self) -> Result<()> {
        self.check_not_closed()?;
        if !self.recovered.load(Ordering::Acquire) {
            return Err(crate::recovery::not_recovered(self.recovery.lock().done()));
        }
        Ok(())
    }

    /// Checks only that the store is open (recovery steps run before it is
    /// recovered).
    pub fn check_not_closed(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) || self.is_forked_copy() {
            Err(StoreError::Closed)
        } else {
            Ok(())
        }
    }

    /// Marks the store unwriteable for good (NOT_WRITEABLE) after a failed
    /// write or flush, or a failed service; the first reason is kept.
    pub fn poison(&self, why: String) {
        log::error!("store poisoned: {why}");
        self.flags.fail(Flag::NotWriteable, why);
    }

    /// Why puts are refused for good, if they are (the first failure).
    pub fn poison_reason(&self) -> Option<String> {
        self.flags.poison_reason()
    }

    /// True once the store was shut down or abandoned (and in a forked child).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.is_forked_copy()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::log::commitlog::{PutOutcome, PutStatus};
    use crate::log::message::MessageSpec;
    use crate::services::flush::FlushConfig;

    fn options(dir: &Path, sync_flush: bool) -> StoreOptions {
        StoreOptions {
            commit_log_file_size: Some(8 << 10),
            consume_queue_file_size: Some(20 * 50),
            max_message_size: 4 << 10,
            store_host: "127.0.0.1:10911".parse().unwrap(),
            delay_levels: vec![1000],
            read_only: false,
            message_index_enable: true,
            max_hash_slot_num: 10,
            max_index_num: 40,
            transient_store_pool_size: 1,
            flush: FlushConfig {
                flush_disk_type: if sync_flush {
                    crate::services::flush::FlushDiskType::SyncFlush
                } else {
                    crate::services::flush::FlushDiskType::AsyncFlush
                },
                ..FlushConfig::default()
            },
            preallocate: true,
            ..StoreOptions::at(dir)
        }
    }

    fn started(dir: &Path, sync_flush: bool) -> Store {
        Store::open_running(options(dir, sync_flush)).unwrap()
    }

    fn put(store: &Store, i: usize) -> PutOutcome {
        let body = format!("message {i}");
        let props = format!("KEYS\u{1}key{i}");
        let spec = MessageSpec::new("T", (i % 3) as i32, body.into_bytes())
            .with_properties(props.into_bytes())
            .born_at(1_700_000_000_000);
        let p = store.prepare(spec).unwrap().unwrap();
        let out = store.put_prepared(&p).unwrap();
        assert_eq!(out.status, PutStatus::PutOk);
        out
    }

    /// (descriptors, mapped regions) of this process on files under `dir`.
    fn held(dir: &Path) -> (usize, usize) {
        let dir = dir.canonicalize().unwrap();
        let fds = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|p| p.starts_with(&dir))
            .count();
        let needle = format!("{}/", dir.display());
        let maps = std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .filter(|l| l.contains(&needle))
            .count();
        (fds, maps)
    }

    #[test]
    fn shutdown_releases_every_descriptor_and_mapping() {
        let dir = tempfile::tempdir().unwrap();
        let store = started(dir.path(), false);
        for i in 0..300 {
            put(&store, i);
        }
        store.flush().unwrap();
        let (fds, maps) = held(dir.path());
        // A mapped file keeps no descriptor: only the lock and the
        // checkpoint do.
        assert!(fds <= 2 && maps > 10, "{fds} descriptors, {maps} mappings");
        store.shutdown().unwrap();
        assert_eq!(
            held(dir.path()),
            (0, 0),
            "the store is still alive, its files are not"
        );
        assert!(store.commitlog().queue().create_file(1 << 20).is_err());
        drop(store);
        let again = started(dir.path(), false);
        assert!(again.commitlog().max_offset() > 0);
    }

    /// The flags shown name the failure with its reason; DISK_FULL is shown
    /// while the store is open, not once it is closed (the first failure
    /// stays).
    #[test]
    fn running_flags_shown_leave_out_disk_full_once_closed() {
        let dir = tempfile::tempdir().unwrap();
        let store = started(dir.path(), false);
        assert!(store.running_flags_shown().is_empty());
        store.set_disk_full(true, "disk 95% full");
        store.poison("a service failed".into());
        let shown = store.running_flags_shown();
        assert!(
            shown.iter().any(|f| f.starts_with("DISK_FULL")),
            "{shown:?}"
        );
        assert!(
            shown.iter().any(|f| f.contains("a service failed")),
            "{shown:?}"
        );
        store.shutdown().unwrap();
        let shown = store.running_flags_shown();
        assert!(
            !shown.iter().any(|f| f.starts_with("DISK_FULL")),
            "{shown:?}"
        );
        assert!(
            shown.iter().any(|f| f.contains("a service failed")),
            "{shown:?}"
        );
    }

    /// Dispatch creates each new queue's file without an fsync (the queue
    /// flush makes it durable), and the file holds one small chunk of blocks.
    #[test]
    fn dispatch_creates_queue_files_without_fsync() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let mut o = options(dir.path(), false);
        o.consume_queue_file_size = Some(crate::queue::consume_queue::DEFAULT_CQ_FILE_SIZE);
        let store = Store::open(o).unwrap();
        store.recover(true, false).unwrap();
        let n = 300;
        for q in 0..n {
            let spec = MessageSpec::new("T", q, b"m").born_at(1_700_000_000_000);
            let p = store.prepare(spec).unwrap().unwrap();
            assert_eq!(store.put_prepared(&p).unwrap().status, PutStatus::PutOk);
        }
        // No dispatch thread: dispatch runs here, where its syncs are counted.
        let before = crate::log::mapped_file::syncs_on_this_thread();
        store.dispatcher().drain().unwrap();
        assert_eq!(crate::log::mapped_file::syncs_on_this_thread(), before);
        let queues = store.consume_queues().all();
        assert_eq!(queues.len(), n as usize);
        for q in &queues {
            assert_eq!(q.max_offset_in_queue(), 1);
            let f = q.queue().last_file().unwrap();
            assert!(f.needs_sync());
            let md = std::fs::metadata(f.path()).unwrap();
            assert_eq!(
                md.len() as usize,
                crate::queue::consume_queue::DEFAULT_CQ_FILE_SIZE
            );
            assert!(
                md.blocks() * 512 <= 68 << 10,
                "{} bytes of blocks",
                md.blocks() * 512
            );
        }
        store.flusher().final_flush().unwrap();
        assert!(crate::log::mapped_file::syncs_on_this_thread() > before);
        for q in &queues {
            assert!(!q.queue().last_file().unwrap().needs_sync());
        }
        store.shutdown().unwrap();
    }

    /// A forked child that drops its copy of an open store joins no thread
    /// (the child would hang) and touches no file: the parent's abort file
    /// and lock stay, and its writes go on.
    #[test]
    fn dropping_a_forked_copy_touches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = started(dir.path(), true);
        for i in 0..50 {
            put(&store, i);
        }
        // SAFETY: the child only drops the store and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let closed = store.is_closed() && store.shutdown().is_ok();
            drop(store);
            // SAFETY: ends the child without running the test harness.
            unsafe { libc::_exit(if closed { 0 } else { 2 }) };
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut status = 0;
        // SAFETY: polls the child made above.
        while unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == 0 {
            if std::time::Instant::now() > deadline {
                // SAFETY: as above.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                panic!("the forked child hung dropping its copy of the store");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert!(dir.path().join("abort").exists());
        let e = StoreLock::acquire(&dir.path().join("lock"), dir.path()).unwrap_err();
        assert!(matches!(e, StoreError::Locked(_)));
        for i in 50..100 {
            put(&store, i);
        }
        store.shutdown().unwrap();
        assert!(!dir.path().join("abort").exists());
        drop(store);
        let again = started(dir.path(), true);
        let q = again.consume_queues().get("T", 0).unwrap();
        assert_eq!(q.max_offset_in_queue(), 34);
    }
}
