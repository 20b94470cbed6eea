//! The store facade the bindings drive: the writer lock, the CommitLog, the
//! consume queues, the index, the checkpoint, dispatch, and the running state
//! (closed, read-only, poisoned).
//!
//! Python orchestrates the services (recovery order, the reput service's
//! start/stop, expiry); each call here is one engine step.
//!
//! # Running state
//!
//! Why puts are refused lives in one [`RunningFlags`] word shared with the
//! services (a failed flush sets FLUSH_FAILED, a failed dispatch
//! WRITE_LOGICS_QUEUE_ERROR or WRITE_INDEX_FILE_ERROR, a panicking service
//! or [`Store::poison`] NOT_WRITEABLE, the clean service DISK_FULL); the
//! put path reads it with one atomic load. Every background loop is a
//! [`ServiceThread`].
//!
//! # Lock order
//!
//! A thread holding a lock may take only locks further down this list
//! (never one above it, never the GIL; see STYLE.md). Locks not listed are
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
//!    dispatch [`Signal`](crate::services::service::Signal)'s lock).
//! 6. The index flush service's `flushing` → its queue → an index file →
//!    the checkpoint's `flush_lock` → its file.
//! 7. `Store::lock` — the writer's file lock, released last, after every
//!    thread stopped and every file was let go.
//!
//! Leaves: `Dispatcher::seq_lock`, a [`ServiceThread`]'s signal and
//! finished locks, `RunningFlags`' disk-full reason, `Store::damage_logged`,
//! `CommitLog::damaged`, the checkpoint's mark.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustc_hash::FxHashSet;

use crate::checkpoint::Checkpoint;
use crate::clock::CachedClock;
use crate::error::{Result, StoreError};
use crate::index::index_file::IndexStore;
use crate::lock::{fork_generation, StoreLock};
use crate::log::allocate::{Allocator, Prefaulter, TransientStorePool, WarmConfig, DEFAULT_WINDOW};
use crate::log::commitlog::{
    BatchInput, BatchOutcome, BatchRefusal, CommitLog, CommitLogConfig, Prepared, PutOutcome,
    PutStatus, RecordRead, Refused,
};
use crate::log::mapped_file_queue::{detect_file_size, list_segment_files};
use crate::log::message::{find_property, props, MessageSpec, RecordView};
use crate::paths;
use crate::queue::consume_queue::ConsumeQueue;
use crate::queue::cq_table::ConsumeQueueTable;
use crate::queue::reader::{
    get_message, total_physical_memory, Damage as UnitDamage, GetResult, TagFilter, TransferLimits,
};
use crate::recovery::RecoveryState;
use crate::running::{Flag, RunningFlags};
use crate::services::dispatch::Dispatcher;
use crate::services::flush::{FlushConfig, FlushService};
use crate::services::service::{ServiceThread, STOP_TIMEOUT};

/// Default CommitLog segment size for a new store (1 GiB).
pub const DEFAULT_COMMIT_LOG_FILE_SIZE: usize = 1 << 30;

/// RocketMQ's default `messageDelayLevel` (18 levels).
pub const DEFAULT_MESSAGE_DELAY_LEVEL: &str =
    "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";

/// How a store is opened. The Python `StoreConfig` is read into one of these
/// (`python/config.rs`); engine-only users start from [`StoreOptions::at`]
/// (or `Default`) and change what they need. The defaults are RocketMQ's
/// `MessageStoreConfig` defaults, as in `config.py` (a test pins them equal).
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub root: PathBuf,
    pub commit_log_dir: PathBuf,
    /// `None`: take the size from the files, or the default for a new store.
    pub commit_log_file_size: Option<usize>,
    pub consume_queue_file_size: Option<usize>,
    pub max_message_size: usize,
    pub store_host: SocketAddr,
    pub delay_levels: Vec<i64>,
    pub read_only: bool,
    pub message_index_enable: bool,
    pub max_hash_slot_num: usize,
    pub max_index_num: usize,
    pub max_msgs_num_batch: usize,
    pub max_transfer_bytes_in_memory: usize,
    pub max_transfer_count_in_memory: usize,
    pub max_transfer_bytes_in_disk: usize,
    pub max_transfer_count_in_disk: usize,
    pub access_message_in_memory_max_ratio: u64,
    pub message_index_safe: bool,
    pub transient_store_pool_enable: bool,
    pub transient_store_pool_size: usize,
    /// `os_page_cache_busy_time_out_mills`: a put that finds the put lock
    /// held longer than this is refused with `OS_PAGE_CACHE_BUSY` (ms, ≥ 1).
    pub os_page_cache_busy_timeout_ms: i64,
    pub flush: FlushConfig,
    /// Make the next CommitLog file in the background (RocketMQ's
    /// AllocateMappedFileService); off: a roll creates it on the put path.
    pub preallocate: bool,
    /// Warm-up of new CommitLog files (made by the allocator).
    pub warm: WarmConfig,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            root: PathBuf::new(),
            commit_log_dir: PathBuf::new(),
            commit_log_file_size: None,
            consume_queue_file_size: None,
            max_message_size: 4 << 20,
            store_host: SocketAddr::from(([127, 0, 0, 1], 10911)),
            delay_levels: crate::log::message::parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL)
                .unwrap_or_default(),
            read_only: false,
            message_index_enable: true,
            max_hash_slot_num: 5_000_000,
            max_index_num: 20_000_000,
            max_msgs_num_batch: 64,
            max_transfer_bytes_in_memory: 256 << 10,
            max_transfer_count_in_memory: 32,
            max_transfer_bytes_in_disk: 64 << 10,
            max_transfer_count_in_disk: 8,
            access_message_in_memory_max_ratio: 40,
            message_index_safe: true,
            transient_store_pool_enable: false,
            transient_store_pool_size: 5,
            os_page_cache_busy_timeout_ms:
                crate::log::commitlog::DEFAULT_OS_PAGE_CACHE_BUSY_TIMEOUT_MS,
            flush: FlushConfig::default(),
            // Off by default, as from Python: read-only followers do not yet
            // tell a made-ahead CommitLog file from a written one.
            preallocate: false,
            warm: WarmConfig::default(),
        }
    }
}

impl StoreOptions {
    /// The default options for the store at `root` (CommitLog in
    /// `root/commitlog`).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        Self {
            commit_log_dir: paths::commit_log_dir(&root),
            root,
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod options_tests {
    use super::*;

    #[test]
    fn default_options_parse_rocketmqs_delay_levels() {
        let o = StoreOptions::at("/x");
        assert_eq!(o.delay_levels.len(), 18);
        assert_eq!(o.delay_levels[0], 1000);
        assert_eq!(o.delay_levels[17], 2 * 3_600_000);
        assert_eq!(o.commit_log_dir, PathBuf::from("/x/commitlog"));
    }
}

pub use crate::recovery::RecoveryReport;

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
    /// DISK_FULL set by the clean service while disk usage is above
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
    /// CommitLog offsets of damaged records already logged (each is logged once).
    damage_logged: Mutex<FxHashSet<i64>>,
    /// Read-only stores: when a pull last looked for new queues (µs since `opened`).
    last_follow_us: AtomicU64,
    opened: Instant,
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
/// Damaged records remembered for "log once"; beyond this many, new ones are
/// still logged but no longer remembered.
const DAMAGE_LOG_MEMORY: usize = 65_536;

/// Read-only stores: least time between two looks for new queue
/// directories made by pulls of an unknown queue.
const FOLLOW_NEW_QUEUES_EVERY: Duration = Duration::from_millis(5);

fn resolve_commit_log_size(opts: &StoreOptions) -> Result<usize> {
    let files = list_segment_files(&opts.commit_log_dir)?;
    let on_disk = detect_file_size(&opts.commit_log_dir)?;
    // Only the newest file may be shorter (a crash while it was created):
    // loading extends it. So a lone file shorter than the configured size is
    // accepted; any other size that differs is refused.
    let lone_empty = files.len() == 1 && on_disk.is_none();
    let lone_short = |cfg: usize, disk: usize| files.len() == 1 && disk < cfg;
    Ok(match (opts.commit_log_file_size, on_disk) {
        (Some(cfg), Some(disk)) if cfg != disk && !lone_short(cfg, disk) => {
            return Err(StoreError::Mismatch(format!(
            "mapped_file_size_commit_log is {cfg} but the CommitLog files in {} are {disk} bytes",
            opts.commit_log_dir.display()
        )))
        }
        (Some(cfg), _) => cfg,
        (None, Some(disk)) => disk,
        (None, None) => {
            if lone_empty {
                log::warn!("the only CommitLog file is empty; assuming the default size");
            }
            DEFAULT_COMMIT_LOG_FILE_SIZE
        }
    })
}

impl Store {
    /// Takes the writer lock (unless read-only) before reading anything, then
    /// loads (maps) the CommitLog, consume queues, checkpoint and index.
    /// Nothing on disk changes but the `lock` file: what must be repaired
    /// (short files, a missing checkpoint, stale index files) is found here
    /// and repaired by the recovery steps ([`crate::recovery`]), which run
    /// next; puts and reads are refused until they have.
    pub fn open(opts: StoreOptions) -> Result<Self> {
        let lock = if opts.read_only {
            if !opts.root.is_dir() {
                // A missing store is FileNotFoundError in Python (ENOENT).
                return Err(StoreError::io(
                    format!("open the store at {} read-only", opts.root.display()),
                    std::io::Error::from_raw_os_error(libc::ENOENT),
                ));
            }
            None
        } else {
            Some(StoreLock::acquire(
                &paths::lock_file(&opts.root),
                &opts.root,
            )?)
        };
        let writable = !opts.read_only;
        // An abort file left behind means the last writer did not stop cleanly.
        let last_exit_ok = !paths::abort_file(&opts.root).exists();
        let file_size = resolve_commit_log_size(&opts)?;
        let cqs = Arc::new(ConsumeQueueTable::load(
            paths::consume_queue_dir(&opts.root),
            opts.consume_queue_file_size,
            writable,
        )?);
        let cfg = CommitLogConfig {
            dir: opts.commit_log_dir.clone(),
            file_size,
            max_message_size: opts.max_message_size,
            store_host: opts.store_host,
            delay_levels: opts.delay_levels.clone(),
        };
        let commitlog = Arc::new(CommitLog::load(cfg, writable)?);
        commitlog.set_busy_timeout_ms(opts.os_page_cache_busy_timeout_ms);
        let flags = Arc::new(RunningFlags::new());
        // A panicking service poisons the store with its message.
        let poison_on_panic = |flags: &Arc<RunningFlags>| {
            let flags = flags.clone();
            move |why: String| {
                flags.fail(Flag::NotWriteable, why);
            }
        };
        if writable {
            // Store timestamps from a cached clock: no clock read per put.
            commitlog.use_clock(Arc::new(
                CachedClock::start_with(poison_on_panic(&flags))
                    .map_err(|e| StoreError::io("start the clock thread", e))?,
            ));
        }
        let pooled = writable && opts.transient_store_pool_enable && !opts.flush.sync_flush;
        if pooled {
            commitlog
                .queue()
                .set_transient_pool(Some(Arc::new(TransientStorePool::new(
                    opts.transient_store_pool_size,
                    file_size,
                ))));
        }
        let checkpoint_path = paths::checkpoint_file(&opts.root);
        let checkpoint = Arc::new(if writable {
            Checkpoint::open_writable(&checkpoint_path)?
        } else {
            Checkpoint::load_read_only(&checkpoint_path)?
        });
        let mut index_error = None;
        let index = if opts.message_index_enable {
            let dir = paths::index_dir(&opts.root);
            let idx = if writable {
                // A writer must index every new message: a geometry mismatch
                // is fatal. Stale files are destroyed by recovery, not here.
                Some(IndexStore::load_for_recovery(
                    &dir,
                    opts.max_hash_slot_num,
                    opts.max_index_num,
                )?)
            } else {
                // A reader opens any store; only key queries need the geometry.
                match IndexStore::load_read_only(&dir, opts.max_hash_slot_num, opts.max_index_num) {
                    Ok(i) => Some(i),
                    Err(StoreError::Mismatch(m)) => {
                        index_error = Some(m);
                        None
                    }
                    Err(e) => return Err(e),
                }
            };
            idx.map(|idx| {
                idx.set_max_msgs_num_batch(opts.max_msgs_num_batch);
                if writable {
                    idx.set_checkpoint(checkpoint.clone());
                    idx.set_running_flags(flags.clone());
                }
                Arc::new(idx)
            })
        } else {
            None
        };

        let dispatcher = Arc::new(
            Dispatcher::new(
                commitlog.clone(),
                cqs.clone(),
                index.clone(),
                Some(checkpoint.clone()),
                opts.delay_levels.clone(),
                0,
            )
            .with_running_flags(flags.clone()),
        );
        // Under SYNC_FLUSH a page fault costs nothing next to the fsync, and
        // pages dirtied ahead of the writer would make every fsync write them
        // (a journal commit flushes the file's ordered data): no prefaulting.
        let prefaulter = if writable && !opts.flush.sync_flush {
            Some(
                Prefaulter::start(
                    commitlog.queue_arc(),
                    DEFAULT_WINDOW,
                    poison_on_panic(&flags),
                )
                .map_err(|e| StoreError::io("start the prefault thread", e))?,
            )
        } else {
            None
        };
        // Not with the transient store pool: a file binds its buffer when it
        // is made, and one made ahead would starve the pool.
        let allocator = if writable && opts.preallocate && !pooled {
            let mut warm = opts.warm;
            // As the prefault thread: not under SYNC_FLUSH (see below).
            warm.prefault_head = if opts.flush.sync_flush {
                0
            } else {
                DEFAULT_WINDOW
            };
            let a = Allocator::start(&commitlog.queue_arc(), warm, poison_on_panic(&flags))
                .map_err(|e| StoreError::io("start the allocator thread", e))?;
            commitlog.queue().set_allocator(Some(a.clone()));
            Some(a)
        } else {
            None
        };
        let flusher = FlushService::new(
            opts.flush.clone(),
            commitlog.clone(),
            cqs.clone(),
            index.clone(),
            checkpoint.clone(),
            flags.clone(),
        );
        if writable && opts.flush.sync_flush {
            // Readers see only what is on disk; a flush wakes dispatch.
            dispatcher.set_flushed_only(true);
            let d = dispatcher.clone();
            flusher.set_on_flushed(Box::new(move || d.wakeup()));
        }
        let limits = TransferLimits {
            max_bytes_in_memory: opts.max_transfer_bytes_in_memory,
            max_count_in_memory: opts.max_transfer_count_in_memory,
            max_bytes_in_disk: opts.max_transfer_bytes_in_disk,
            max_count_in_disk: opts.max_transfer_count_in_disk,
            memory_window: total_physical_memory() / 100 * opts.access_message_in_memory_max_ratio,
        };
        Ok(Self {
            opts,
            lock: Mutex::new(lock),
            commitlog,
            cqs,
            index,
            index_error,
            checkpoint,
            dispatcher,
            dispatch_thread: Mutex::new(None),
            limits,
            flusher,
            last_exit_ok,
            recovery: Mutex::new(RecoveryState::default()),
            closed: AtomicBool::new(false),
            recovered: AtomicBool::new(false),
            flags,
            prefaulter: Mutex::new(prefaulter),
            allocator,
            acked_end: AtomicU64::new(0),
            vis_abandoned: AtomicU64::new(0),
            vis: VisibilityStats::default(),
            damage_logged: Mutex::new(FxHashSet::default()),
            last_follow_us: AtomicU64::new(0),
            opened: Instant::now(),
            fork_generation: fork_generation(),
        })
    }

    pub fn options(&self) -> &StoreOptions {
        &self.opts
    }

    pub fn commitlog(&self) -> &CommitLog {
        &self.commitlog
    }

    pub fn consume_queues(&self) -> &ConsumeQueueTable {
        &self.cqs
    }

    pub fn index(&self) -> Option<&IndexStore> {
        self.index.as_deref()
    }

    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    pub fn flusher(&self) -> &FlushService {
        &self.flusher
    }

    pub fn dispatcher(&self) -> &Dispatcher {
        &self.dispatcher
    }

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

    /// Opens the store, runs every recovery step (CRC checked, damage
    /// refused) and starts the flush and dispatch threads: a running store
    /// for engine-only callers (Python sequences the steps itself).
    pub fn open_running(opts: StoreOptions) -> Result<Self> {
        let s = Store::open(opts)?;
        s.recover(true, false)?;
        s.start_flush()?;
        s.start_dispatch()?;
        Ok(s)
    }

    /// Starts the flush threads and creates the abort file (writer only).
    pub fn start_flush(&self) -> Result<()> {
        self.check_open()?;
        if self.opts.read_only {
            return Ok(());
        }
        self.flusher
            .start()
            .map_err(|e| StoreError::io("start the flush threads", e))?;
        let abort = paths::abort_file(&self.opts.root);
        std::fs::File::create(&abort)
            .and_then(|f| f.sync_all())
            .map_err(|e| StoreError::io(format!("create {}", abort.display()), e))?;
        sync_dir(&self.opts.root)
    }

    /// Starts the dispatch thread (writer only).
    pub fn start_dispatch(&self) -> Result<()> {
        self.check_open()?;
        if self.opts.read_only {
            return Ok(());
        }
        let mut t = self.dispatch_thread.lock();
        if t.is_none() {
            let thread = self
                .dispatcher
                .start_thread()
                .map_err(|e| StoreError::io("start the dispatch thread", e))?;
            *t = Some(thread);
        }
        Ok(())
    }

    /// Stops the dispatch thread (its current step completes). Nothing to
    /// stop in a forked child (the thread is the parent's).
    pub fn stop_dispatch(&self) {
        self.stop_dispatch_within(STOP_TIMEOUT);
    }

    /// As [`Store::stop_dispatch`], waiting at most `timeout` for the
    /// thread; false if it did not end (it is then left behind, logged).
    pub fn stop_dispatch_within(&self, timeout: Duration) -> bool {
        if self.is_forked_copy() {
            return true;
        }
        // Taken out first: the lock is not held while the thread is joined.
        let thread = self.dispatch_thread.lock().take();
        match thread {
            Some(t) => t.stop(timeout),
            None => true,
        }
    }

    /// True while the dispatch thread runs (not once it died).
    pub fn dispatch_running(&self) -> bool {
        self.dispatch_thread
            .lock()
            .as_ref()
            .is_some_and(|t| t.is_running())
    }

    /// True in a child forked after the store was opened: the store is
    /// closed there, and closing or dropping it touches nothing.
    pub fn is_forked_copy(&self) -> bool {
        fork_generation() != self.fork_generation
    }

    fn check_writable(&self) -> Result<Option<Refused>> {
        self.check_open()?;
        if self.opts.read_only {
            return Err(StoreError::ReadOnly);
        }
        if !self.flags.is_writeable() {
            return Ok(self
                .flags
                .refusal()
                .map(|why| Refused::new(PutStatus::ServiceNotAvailable, why)));
        }
        Ok(None)
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

    /// One CommitLog step of the clean service (see [`crate::services::expiry`]).
    pub fn delete_expired_commit_log(
        &self,
        now_ms: i64,
        reserved_ms: i64,
        interval: Duration,
        immediately: bool,
        max_files: usize,
    ) -> Result<crate::services::expiry::CommitLogExpiry> {
        self.check_open()?;
        if self.opts.read_only {
            return Err(StoreError::ReadOnly);
        }
        crate::services::expiry::delete_expired_commit_log(
            &self.commitlog,
            now_ms,
            reserved_ms,
            interval,
            immediately,
            max_files,
        )
    }

    /// The queue step of the clean service: ConsumeQueue and index files
    /// wholly below CommitLog offset `min_phy`.
    pub fn delete_expired_queues(
        &self,
        min_phy: i64,
        interval: Duration,
    ) -> Result<crate::services::expiry::QueueExpiry> {
        self.check_open()?;
        if self.opts.read_only {
            return Err(StoreError::ReadOnly);
        }
        Ok(crate::services::expiry::delete_expired_queues(
            &self.cqs,
            self.index.as_deref(),
            min_phy,
            interval,
        ))
    }

    /// Why a flush wait ended with `status` (None for PUT_OK).
    fn flush_wait_reason(&self, status: PutStatus) -> Option<String> {
        (status != PutStatus::PutOk).then(|| match self.flusher.failure() {
            Some(why) => format!("the message was written but the flush failed: {why}"),
            None => format!(
                "the message was written but not confirmed on disk within \
                 sync_flush_timeout ({} ms)",
                self.opts.flush.sync_timeout.as_millis()
            ),
        })
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

    /// Validates a message for this store; `Err(refused)` means rejected.
    #[allow(clippy::type_complexity)]
    pub fn prepare<'a>(
        &self,
        spec: MessageSpec<'a>,
    ) -> Result<std::result::Result<Prepared<'a>, Refused>> {
        if let Some(s) = self.check_writable()? {
            return Ok(Err(s));
        }
        Ok(self.commitlog.prepare(spec))
    }

    /// Appends without blocking, if possible (see [`CommitLog::try_put_prepared`]).
    /// Never used for SYNC_FLUSH, whose put must wait for the disk.
    pub fn try_put_fast(&self, p: &Prepared<'_>) -> Option<Result<PutOutcome>> {
        if self.opts.flush.sync_flush {
            return None;
        }
        let r = self.commitlog.try_put_prepared(p)?;
        self.dispatcher.wakeup();
        if let Ok(o) = &r {
            self.note_acked(o);
        }
        Some(r)
    }

    /// Appends and, under SYNC_FLUSH, waits (group commit) until the record
    /// is on disk.
    pub fn put_prepared(&self, p: &Prepared<'_>) -> Result<PutOutcome> {
        let mut out = self.commitlog.put_prepared(p)?;
        self.dispatcher.wakeup();
        if self.opts.flush.sync_flush && out.status == PutStatus::PutOk && wants_wait(&p.spec) {
            out.status = self
                .flusher
                .wait_flushed((out.wrote_offset + out.wrote_bytes as i64) as u64);
            out.reason = self.flush_wait_reason(out.status);
        }
        self.note_acked(&out);
        Ok(out)
    }

    /// Appends a batch under one lock hold, then one flush wait.
    pub fn put_batch<'a>(
        &self,
        specs: impl IntoIterator<Item = std::result::Result<MessageSpec<'a>, Refused>>,
    ) -> Result<Vec<PutOutcome>> {
        if let Some(r) = self.check_writable()? {
            return Ok(specs
                .into_iter()
                .map(|_| PutOutcome::rejected(r.clone()))
                .collect());
        }
        let mut any_wait = false;
        let specs = specs.into_iter().inspect(|s| {
            if let Ok(s) = s {
                any_wait = any_wait || wants_wait(s);
            }
        });
        let mut out = self.commitlog.put_batch(specs)?;
        self.dispatcher.wakeup();
        let end = out
            .iter()
            .filter(|o| o.status == PutStatus::PutOk)
            .map(|o| (o.wrote_offset + o.wrote_bytes as i64) as u64)
            .max();
        if let (true, true, Some(end)) = (self.opts.flush.sync_flush, any_wait, end) {
            let st = self.flusher.wait_flushed(end);
            let why = self.flush_wait_reason(st);
            for o in out.iter_mut().filter(|o| o.status == PutStatus::PutOk) {
                o.status = st;
                o.reason.clone_from(&why);
            }
        }
        if let Some(last) = out.iter().rev().find(|o| o.status == PutStatus::PutOk) {
            self.note_acked(last);
        }
        Ok(out)
    }

    /// Appends the delivered copies of delayed messages (see
    /// [`CommitLog::put_redeliveries`]); under SYNC_FLUSH waits once for the
    /// batch to be on disk (a FLUSH_DISK_TIMEOUT copy is written all the
    /// same). `Err(refused)` when the store takes no puts now (poisoned).
    #[allow(clippy::type_complexity)]
    pub fn put_redeliveries<'a>(
        &self,
        specs: impl IntoIterator<Item = MessageSpec<'a>>,
    ) -> Result<std::result::Result<Vec<PutOutcome>, Refused>> {
        if let Some(r) = self.check_writable()? {
            return Ok(Err(r));
        }
        let out = self.commitlog.put_redeliveries(specs)?;
        self.dispatcher.wakeup();
        let end = out
            .iter()
            .filter(|o| o.status == PutStatus::PutOk)
            .map(|o| (o.wrote_offset + o.wrote_bytes as i64) as u64)
            .max();
        if let (true, Some(end)) = (self.opts.flush.sync_flush, end) {
            self.flusher.wait_flushed(end);
        }
        Ok(Ok(out))
    }

    /// Appends a batch of messages to one queue: every message is checked
    /// first and one refused message refuses the batch (nothing written);
    /// then one append per CommitLog file's worth and, under SYNC_FLUSH,
    /// one flush wait for the whole batch.
    pub fn put_bodies(
        &self,
        b: &BatchInput<'_>,
        want_offsets: bool,
    ) -> Result<std::result::Result<BatchOutcome, BatchRefusal>> {
        if let Some(r) = self.check_writable()? {
            return Ok(Err(r));
        }
        if let Err(r) = self.commitlog.validate_batch(b) {
            return Ok(Err(r));
        }
        let dispatcher = &self.dispatcher;
        let mut out = self
            .commitlog
            .append_batch(b, want_offsets, || dispatcher.wakeup())?;
        let wait = self.opts.flush.sync_flush
            && out.status == PutStatus::PutOk
            && out.count > 0
            && (0..b.bodies.len()).any(|i| wants_wait_props(b.props_of(i)));
        if wait {
            out.status = self.flusher.wait_flushed(out.end_offset as u64);
            out.reason = self.flush_wait_reason(out.status);
        }
        if out.status == PutStatus::PutOk && out.count > 0 {
            // Reads in this process wait until the whole batch is visible.
            self.acked_end
                .fetch_max(out.end_offset as u64, Ordering::AcqRel);
        }
        Ok(Ok(out))
    }

    /// Forces the CommitLog (not the queues) to disk and returns the flushed
    /// offset: what the schedule service does before it records progress,
    /// so saved progress never runs ahead of durable copies. Refused once the
    /// store is poisoned: after a failed flush a later fsync may succeed
    /// without the lost pages.
    pub fn flush_commit_log(&self) -> Result<u64> {
        self.check_open()?;
        if self.opts.read_only {
            return Ok(self.commitlog.flushed_offset());
        }
        if let Some(why) = self.flags.first_failure() {
            return Err(StoreError::Poisoned(why));
        }
        self.commitlog.queue().commit(0);
        self.commitlog
            .flush_all()
            .inspect_err(|e| self.poison(format!("CommitLog flush failed: {e}")))
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

    // -- visibility ----------------------------------------------------------

    /// Raises the visibility horizon to the end of an acknowledged put.
    #[inline]
    fn note_acked(&self, o: &PutOutcome) {
        if o.status == PutStatus::PutOk {
            let end = (o.wrote_offset + o.wrote_bytes as i64) as u64;
            self.acked_end.fetch_max(end, Ordering::AcqRel);
        }
    }

    /// True when a put acknowledged in this process is not yet visible to
    /// reads (the hot read path's only cost: two loads and a compare).
    #[inline]
    pub fn visibility_pending(&self) -> bool {
        self.acked_end.load(Ordering::Acquire) > self.dispatcher.reput_from()
    }

    /// End of what lookups by offset or id in this process may see: under
    /// SYNC_FLUSH `min(dispatched, flushed)`, the horizon of every read
    /// (dispatch follows the flushed offset, so queues and the index stop
    /// there too); otherwise everything written.
    #[inline]
    pub fn visible_end(&self) -> u64 {
        if !self.opts.read_only && self.opts.flush.sync_flush {
            self.dispatcher
                .reput_from()
                .min(self.commitlog.flushed_offset())
        } else {
            u64::MAX
        }
    }

    /// Waits until every put acknowledged before this call is visible to
    /// reads: dispatched, and under SYNC_FLUSH flushed (read-your-writes).
    /// The reader dispatches what is pending itself, commits a transient
    /// write buffer holding the data, asks the group commit for a flush;
    /// then waits, at most `sync_flush_timeout`. If dispatch or flushing
    /// failed it returns at once (and later reads do not retry): reads then
    /// serve what is visible.
    #[inline]
    pub fn await_visible(&self) -> Result<()> {
        if self.visibility_pending() {
            let deadline = self.visibility_deadline();
            self.await_visible_until(deadline, deadline).map(|_| ())
        } else {
            Ok(())
        }
    }

    /// Stops every read from waiting for puts acknowledged so far (the
    /// interpreter is exiting: no thread may stay in the engine).
    pub fn give_up_visibility(&self) {
        let acked = self.acked_end.load(Ordering::Acquire);
        self.vis_abandoned.fetch_max(acked, Ordering::AcqRel);
    }

    /// When a read starting now stops waiting for the horizon.
    pub fn visibility_deadline(&self) -> Instant {
        Instant::now() + self.opts.flush.sync_timeout
    }

    /// One slice of [`Store::await_visible`], for callers that must check
    /// for signals or interpreter exit between slices: waits until the
    /// horizon is visible or given up on (`Ok(true)`), or `stop_at` passes
    /// first (`Ok(false)`; call again with the same `deadline`).
    #[cold]
    #[inline(never)]
    pub fn await_visible_until(&self, deadline: Instant, stop_at: Instant) -> Result<bool> {
        let target = self.acked_end.load(Ordering::Acquire);
        if target <= self.dispatcher.reput_from()
            || target <= self.vis_abandoned.load(Ordering::Acquire)
        {
            return Ok(true);
        }
        self.vis.waits.fetch_add(1, Ordering::Relaxed);
        let mut committed = false;
        let mut dispatched = false;
        loop {
            let seen = self.dispatcher.seq();
            let from = self.dispatcher.reput_from();
            if from >= target {
                return Ok(true);
            }
            self.check_open()?;
            if self.dispatcher.failure().is_some() {
                self.vis.failed.fetch_add(1, Ordering::Relaxed);
                self.vis_abandoned.fetch_max(target, Ordering::AcqRel);
                return Ok(true);
            }
            // Transient pool: the data may still be in the write buffer.
            if self.opts.flush.transient
                && self.commitlog.queue().committed_where() < target
                && self.commitlog.queue().commit(0)
                && !committed
            {
                committed = true;
                self.vis.commits.fetch_add(1, Ordering::Relaxed);
            }
            if self.opts.flush.sync_flush && self.commitlog.flushed_offset() < target {
                self.flusher.request_flush(target);
            }
            // Dispatch what is readable now instead of waiting for the thread.
            match self.dispatcher.dispatch_once((target - from) as usize) {
                Ok(st) if st.records > 0 && !dispatched => {
                    dispatched = true;
                    self.vis.inline_dispatches.fetch_add(1, Ordering::Relaxed);
                }
                Ok(_) => {}
                Err(e) => {
                    // As when the dispatch thread fails: the store is
                    // poisoned; this read serves what is visible.
                    log::error!("dispatch failed: {e}");
                    self.dispatcher.record_failure(&e);
                    self.vis.failed.fetch_add(1, Ordering::Relaxed);
                    self.vis_abandoned.fetch_max(target, Ordering::AcqRel);
                    return Ok(true);
                }
            }
            if self.dispatcher.reput_from() >= target {
                return Ok(true);
            }
            if self.dispatcher.failure().is_some() || self.flusher.failure().is_some() {
                self.vis.failed.fetch_add(1, Ordering::Relaxed);
                self.vis_abandoned.fetch_max(target, Ordering::AcqRel);
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                self.vis.timeouts.fetch_add(1, Ordering::Relaxed);
                log::warn!(
                    "a read waited {:?} for acknowledged messages to become visible \
                     (visible up to {}, acknowledged up to {target}); serving what is visible",
                    self.opts.flush.sync_timeout,
                    self.dispatcher.reput_from()
                );
                return Ok(true);
            }
            if now >= stop_at {
                return Ok(false);
            }
            self.dispatcher
                .wait_for_seq(seen, (stop_at - now).min(Duration::from_millis(10)));
        }
    }

    /// Visibility statistics: `(waits, inline dispatches, transient
    /// commits, timeouts, failed)`.
    pub fn visibility_stats(&self) -> (u64, u64, u64, u64, u64) {
        let v = &self.vis;
        (
            v.waits.load(Ordering::Relaxed),
            v.inline_dispatches.load(Ordering::Relaxed),
            v.commits.load(Ordering::Relaxed),
            v.timeouts.load(Ordering::Relaxed),
            v.failed.load(Ordering::Relaxed),
        )
    }

    /// CommitLog offset just past the messages below committed offsets
    /// `(topic, queue id, next offset)`: what must be durable before those
    /// offsets are persisted. An offset above its queue's end counts as the
    /// end; unknown queues and expired messages count for nothing.
    pub fn committed_end(&self, entries: &[(String, i32, i64)]) -> u64 {
        let mut end = 0u64;
        for (topic, qid, off) in entries {
            let Some(cq) = self.cqs.get(topic, *qid) else {
                continue;
            };
            let last = (*off).min(cq.max_offset_in_queue()) - 1;
            if last < cq.min_offset_in_queue().max(0) {
                continue;
            }
            if let Some(u) = cq.unit_at(last).filter(|u| !u.is_pre_blank()) {
                end = end.max((u.phy_offset + u.size.max(0) as i64).max(0) as u64);
            }
        }
        end
    }

    /// Makes the CommitLog durable up to the messages below the committed
    /// offsets `entries`, before they are persisted (so no persisted
    /// offset ever points past durable data, in any flush mode).
    pub fn flush_for_offsets(&self, entries: &[(String, i32, i64)]) -> Result<()> {
        self.check_open()?;
        if self.opts.read_only {
            return Ok(());
        }
        let end = self.committed_end(entries);
        self.flusher.flush_to(end)
    }

    // -- reads ---------------------------------------------------------------

    /// Pulls messages of a queue (SPEC §2.5).
    pub fn get_message(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msgs: usize,
        tags: Option<&[String]>,
    ) -> Result<GetResult> {
        self.check_open()?;
        self.await_visible()?;
        let filter = tags.and_then(TagFilter::new);
        let mut cq = self.cqs.get(topic, queue_id);
        let follow = self.opts.read_only;
        if follow
            && cq
                .as_ref()
                .map_or(true, |q| offset >= q.max_offset_in_queue())
        {
            cq = self.follow_queue(topic, queue_id, cq)?;
        }
        let r = get_message(
            &self.commitlog,
            cq.as_ref(),
            offset,
            max_msgs,
            filter.as_ref(),
            &self.limits,
            follow,
        );
        if !r.damaged.is_empty() {
            self.log_damage(topic, queue_id, &r.damaged);
        }
        Ok(r)
    }

    /// Read-only stores: a pull that reached the end of what this process
    /// knows of a queue first picks up what the writer appended to it (a
    /// queue unknown here: new queue directories, at most every 5 ms).
    fn follow_queue(
        &self,
        topic: &str,
        queue_id: i32,
        cq: Option<Arc<ConsumeQueue>>,
    ) -> Result<Option<Arc<ConsumeQueue>>> {
        if let Some(q) = cq {
            if q.may_have_grown() {
                let before = q.max_offset_in_queue();
                if q.refresh()? != before {
                    self.dispatcher.bump_seq();
                }
            }
            return Ok(Some(q));
        }
        let now = self.opened.elapsed().as_micros() as u64;
        let last = self.last_follow_us.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= FOLLOW_NEW_QUEUES_EVERY.as_micros() as u64
            && self
                .last_follow_us
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.refresh()?;
        }
        Ok(self.cqs.get(topic, queue_id))
    }

    /// Logs each damaged record a pull skipped, once per record.
    fn log_damage(&self, topic: &str, queue_id: i32, damaged: &[UnitDamage]) {
        let mut seen = self.damage_logged.lock();
        for d in damaged {
            if seen.contains(&d.phy_offset) {
                continue;
            }
            if seen.len() < DAMAGE_LOG_MEMORY {
                seen.insert(d.phy_offset);
            }
            let file = d.path.as_ref().map_or_else(
                || "no CommitLog file".to_owned(),
                |p| p.display().to_string(),
            );
            log::warn!(
                "skipped a damaged message of {topic}/{queue_id} at queue offset {}: \
                 {} ({file}, CommitLog offset {})",
                d.queue_offset,
                d.reason,
                d.phy_offset
            );
        }
    }

    /// The message whose record starts at CommitLog offset `phy`, as a read
    /// sees it: after acknowledged puts became visible, and only below the
    /// visibility horizon; `None` when no record starts there. A damaged
    /// record (body CRC, size fields) is an error naming its file and
    /// offset, never a message.
    pub fn look_message_by_offset(&self, phy: u64) -> Result<Option<(RecordView, Vec<u8>)>> {
        self.check_open()?;
        self.await_visible()?;
        self.read_visible_record(phy, self.visible_end())
    }

    /// Messages carrying `key` in `[begin, end]`, ascending by offset, hash
    /// collisions filtered out (SPEC §3.3: up to three rounds).
    pub fn query_message(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin: i64,
        end: i64,
    ) -> Result<Vec<(RecordView, Vec<u8>)>> {
        self.check_open()?;
        if let Some(e) = &self.index_error {
            return Err(StoreError::Mismatch(format!(
                "key queries are refused: {e}"
            )));
        }
        let Some(index) = &self.index else {
            return Ok(Vec::new());
        };
        self.await_visible()?;
        let visible = self.visible_end();
        let mut out: Vec<(RecordView, Vec<u8>)> = Vec::new();
        let mut end = end;
        for _round in 0..3 {
            let r = index.query(topic, key, max_num, begin, end);
            let mut offsets = r.phy_offsets.clone();
            offsets.sort_unstable();
            offsets.dedup();
            for off in offsets {
                let Ok(off) = u64::try_from(off) else {
                    continue;
                };
                if out.iter().any(|(v, _)| v.physical_offset == off as i64) {
                    continue;
                }
                if let Some((v, raw)) = self.read_visible_record(off, visible)? {
                    if carries_key(&v, &raw, topic, key) {
                        out.push((v, raw));
                    }
                }
            }
            if !out.is_empty() || r.phy_offsets.is_empty() {
                break;
            }
            // Everything found was a hash collision: look further back.
            let Some(first_ts) = r
                .phy_offsets
                .iter()
                .filter_map(|o| self.commitlog.store_timestamp_at(*o))
                .min()
            else {
                break;
            };
            if first_ts <= begin || first_ts >= end {
                break;
            }
            end = first_ts - 1;
        }
        out.sort_by_key(|(v, _)| v.physical_offset);
        out.truncate(max_num);
        Ok(out)
    }

    /// The record at `offset`, if it lies wholly below the visibility
    /// horizon `visible` (see [`Store::visible_end`]); a damaged record is an
    /// error naming its file and offset.
    pub fn read_visible_record(
        &self,
        offset: u64,
        visible: u64,
    ) -> Result<Option<(RecordView, Vec<u8>)>> {
        match self.commitlog.read_checked(offset) {
            RecordRead::Found(v, raw) => {
                Ok(Some((v, raw)).filter(|(v, _)| offset + v.total_size as u64 <= visible))
            }
            RecordRead::Damaged { path, reason } => {
                Err(StoreError::corrupted(path, offset, reason))
            }
            RecordRead::NoFile | RecordRead::NotYet | RecordRead::NoRecord => Ok(None),
        }
    }

    /// Read-only stores: follows the writer (new files, new records, new
    /// queue units). Returns true when new messages became visible.
    pub fn refresh(&self) -> Result<bool> {
        self.check_open()?;
        if !self.opts.read_only {
            return Ok(false);
        }
        let log_moved = self.commitlog.refresh()?;
        if let Some(i) = &self.index {
            i.refresh()?;
        }
        let changed = self.cqs.refresh()?;
        // The CommitLog moving alone also wakes waiters: a pull that stopped
        // before a unit whose CommitLog file was not adopted yet retries.
        if changed || log_moved {
            self.dispatcher.bump_seq();
        }
        Ok(changed)
    }

    /// Waits (up to `timeout`) for the dispatch sequence to move past `seen`.
    /// Read-only stores poll the files every few milliseconds instead.
    pub fn wait_for_dispatch(&self, seen: u64, timeout: Duration) -> Result<u64> {
        self.check_open()?;
        if !self.opts.read_only {
            return Ok(self.dispatcher.wait_for_seq(seen, timeout));
        }
        let deadline = std::time::Instant::now() + timeout;
        loop {
            self.refresh()?;
            let s = self.dispatcher.seq();
            if s != seen || std::time::Instant::now() >= deadline {
                return Ok(s);
            }
            std::thread::sleep(Duration::from_millis(5).min(deadline - std::time::Instant::now()));
        }
    }

    /// Forces everything written to disk (after dispatching what is
    /// pending, so queues and index are flushed too); returns the flushed
    /// CommitLog offset.
    pub fn flush(&self) -> Result<u64> {
        self.check_open()?;
        if self.opts.read_only {
            return Ok(self.commitlog.flushed_offset());
        }
        if let Some(why) = self.flags.first_failure() {
            return Err(StoreError::Poisoned(why));
        }
        let r = self
            .drain_dispatch()
            .and_then(|_| self.flusher.final_flush())
            .map(|_| self.commitlog.flushed_offset());
        r.inspect_err(|e| self.poison(format!("flush failed: {e}")))
    }

    /// Stops dispatch (after dispatching what is left) and the flush threads,
    /// flushes everything, removes the abort file when the stop is clean
    /// (writeable, nothing left to dispatch), and releases the lock and every
    /// file (descriptors and mappings are gone when this returns, unless a
    /// concurrent reader still holds a file). Later calls fail with
    /// [`StoreError::Closed`]. In a forked child it only marks the store
    /// closed: the files, the abort file and the threads are the parent's.
    pub fn shutdown(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) || self.is_forked_copy() {
            return Ok(());
        }
        let prefaulter = self.prefaulter.lock().take();
        if let Some(mut p) = prefaulter {
            p.stop();
        }
        let mut result = Ok(());
        if !self.opts.read_only && !self.recovered.load(Ordering::Acquire) {
            // Recovery did not complete (refused or failed): write nothing.
            self.stop_dispatch();
            self.flusher.abandon();
        } else if !self.opts.read_only {
            self.stop_dispatch();
            if !self.flags.is_poisoned() {
                result = self.drain_all();
            }
            let flushed = self.flusher.shutdown();
            if result.is_ok() {
                result = flushed;
            }
            let clean =
                result.is_ok() && !self.flags.is_poisoned() && self.dispatcher.behind_bytes() == 0;
            if clean {
                let abort = paths::abort_file(&self.opts.root);
                match std::fs::remove_file(&abort) {
                    Ok(()) => result = sync_dir(&self.opts.root),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        result = Err(StoreError::io(format!("remove {}", abort.display()), e))
                    }
                }
            }
        }
        // Files made ahead and never used go: a clean store holds none.
        if let Some(a) = &self.allocator {
            a.stop(true);
        }
        // Release the files and the writer lock even when the final flush failed.
        self.release_files();
        result
    }

    /// Lets go of every file: mappings, descriptors, the checkpoint and,
    /// last, the writer lock. Background threads are stopped by then.
    fn release_files(&self) {
        self.commitlog.queue().set_allocator(None);
        self.commitlog.release();
        self.cqs.release();
        if let Some(index) = &self.index {
            index.release();
        }
        self.checkpoint.close();
        self.lock.lock().take();
    }

    /// Commits transient-pool buffers and dispatches everything written, so
    /// the queues and index are complete (before a clean stop, or before
    /// the config files that list topics are written).
    pub fn drain_dispatch(&self) -> Result<()> {
        self.check_open()?;
        self.drain_all()
    }

    fn drain_all(&self) -> Result<()> {
        self.commitlog.queue().commit(0);
        if self.opts.flush.sync_flush {
            // Dispatch follows the flushed offset: flush what is written first.
            self.flusher.flush_to(self.commitlog.max_offset())?;
        }
        self.dispatcher.drain()
    }

    /// Stops like a killed process would (for tests): threads stop, nothing
    /// more is dispatched or flushed, the abort file stays, the lock is
    /// released. What was written stays in the page cache, as after kill -9.
    pub fn abandon(&self) {
        if self.closed.swap(true, Ordering::AcqRel) || self.is_forked_copy() {
            return;
        }
        let prefaulter = self.prefaulter.lock().take();
        if let Some(mut p) = prefaulter {
            p.stop();
        }
        self.stop_dispatch();
        self.flusher.abandon();
        if let Some(a) = &self.allocator {
            a.stop(false);
        }
        self.release_files();
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.is_forked_copy()
    }
}

impl Drop for Store {
    /// A store dropped without `shutdown` (a forgotten handle) is shut down
    /// here: background threads stop, everything is flushed and the lock is
    /// released. Failures are logged; the abort file then stays and the next
    /// open recovers as after a crash.
    ///
    /// A copy in a forked child is leaked instead: its threads do not exist
    /// in the child (joining them would hang), and flushing, writing the
    /// checkpoint or removing the abort file would change the parent's
    /// store under it. The lock's descriptor was closed at fork.
    fn drop(&mut self) {
        if self.is_forked_copy() {
            // `get_mut`: no lock is taken (a vanished thread may hold one).
            std::mem::forget(self.prefaulter.get_mut().take());
            std::mem::forget(self.dispatch_thread.get_mut().take());
            if let Some(a) = &self.allocator {
                a.forget_thread();
                std::mem::forget(Arc::clone(a));
            }
            std::mem::forget(Arc::clone(&self.flusher));
            std::mem::forget(Arc::clone(&self.dispatcher));
            std::mem::forget(self.index.clone());
            std::mem::forget(Arc::clone(&self.cqs));
            std::mem::forget(Arc::clone(&self.commitlog));
            std::mem::forget(Arc::clone(&self.checkpoint));
            return;
        }
        if !self.closed.load(Ordering::Acquire) {
            if let Err(e) = self.shutdown() {
                log::error!("shutting down a dropped store failed: {e}");
            }
        }
    }
}

/// fsyncs a directory so a created or removed entry survives a crash.
fn sync_dir(dir: &std::path::Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io(format!("fsync {}", dir.display()), e))
}

/// True when the record is of `topic` and carries `key` (UNIQ_KEY or a KEYS token).
fn carries_key(v: &RecordView, raw: &[u8], topic: &str, key: &str) -> bool {
    if &raw[v.topic.clone()] != topic.as_bytes() {
        return false;
    }
    let p = &raw[v.properties.clone()];
    if find_property(p, props::UNIQ_KEY) == Some(key.as_bytes()) {
        return true;
    }
    find_property(p, props::KEYS)
        .map(|k| k.split(|&b| b == b' ').any(|t| t == key.as_bytes()))
        .unwrap_or(false)
}

/// A message waits for the disk when its `WAIT` property is absent or
/// "true" (Java's `Boolean.parseBoolean`: any other value means false).
fn wants_wait(spec: &MessageSpec<'_>) -> bool {
    wants_wait_props(&spec.properties)
}

fn wants_wait_props(properties: &[u8]) -> bool {
    match find_property(properties, props::WAIT) {
        None => true,
        Some(v) => v.eq_ignore_ascii_case(b"true"),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

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
                sync_flush,
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
