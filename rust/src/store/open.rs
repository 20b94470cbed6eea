//! Opening a store: the writer lock first, then the CommitLog, consume
//! queues, checkpoint and index are loaded (mapped) and the background
//! helpers (clock, prefault, allocator) started; nothing on disk changes but
//! the `lock` file.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Instant;

use crate::sync::Mutex;
use rustc_hash::FxHashSet;

use super::{Store, StoreOptions, VisibilityStats, DEFAULT_COMMIT_LOG_FILE_SIZE};
use crate::checkpoint::Checkpoint;
use crate::clock::CachedClock;
use crate::error::{Result, StoreError};
use crate::index::index_service::IndexStore;
use crate::lock::{fork_generation, StoreLock};
use crate::log::allocate::{Allocator, Prefaulter, DEFAULT_WINDOW};
use crate::log::commitlog::{CommitLog, CommitLogConfig};
use crate::log::mapped_file_queue::{detect_file_size, list_segment_files};
use crate::log::transient_pool::TransientStorePool;
use crate::paths;
use crate::queue::cq_table::ConsumeQueueTable;
use crate::queue::reader::{total_physical_memory, TransferLimits};
use crate::recovery::RecoveryState;
use crate::running::{Flag, RunningFlags};
use crate::services::dispatch::Dispatcher;
use crate::services::flush::FlushService;

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
    pub fn open(mut opts: StoreOptions) -> Result<Self> {
        let lock = take_lock(&opts)?;
        adopt_promotion(&mut opts);
        let writable = !opts.read_only;
        // An abort file left behind means the last writer did not stop cleanly.
        let last_exit_ok = !paths::abort_file(&opts.root).exists();
        let file_size = resolve_commit_log_size(&opts)?;
        let cqs = Arc::new(ConsumeQueueTable::load(
            paths::consume_queue_dir(&opts.root),
            opts.consume_queue_file_size,
            writable,
        )?);
        let flags = Arc::new(RunningFlags::new());
        let (commitlog, pooled) = load_commitlog(&opts, writable, file_size, &flags)?;
        let checkpoint_path = paths::checkpoint_file(&opts.root);
        let checkpoint = Arc::new(if writable {
            Checkpoint::open_writable(&checkpoint_path)?
        } else {
            Checkpoint::load_read_only(&checkpoint_path)?
        });
        let (index, index_error) = load_index(&opts, writable, &checkpoint, &flags)?;

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
        let (prefaulter, allocator) = start_helpers(&opts, writable, pooled, &commitlog, &flags)?;
        let flusher = FlushService::new(
            opts.flush.clone(),
            commitlog.clone(),
            cqs.clone(),
            index.clone(),
            checkpoint.clone(),
            flags.clone(),
        );
        if opts.ha.role == crate::ha::HaRole::Slave {
            // Frames do not follow records: a record cut by the end is pending.
            dispatcher.set_partial_tail_pending(true);
        }
        if writable && opts.flush.sync_flush() {
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
        let role = opts.ha.role.code();
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
            gets: Default::default(),
            damage_logged: Mutex::new(FxHashSet::default()),
            last_follow_us: AtomicU64::new(0),
            opened: Instant::now(),
            acks: Arc::new(crate::ha::Acks::new()),
            ha_client: Default::default(),
            ha: Mutex::new(None),
            role: std::sync::atomic::AtomicU8::new(role),
            promoting: Mutex::new(()),
            ha_port: Default::default(),
            ha_offsets: Default::default(),
            ha_offsets_server: Mutex::new(None),
            fork_generation: fork_generation(),
        })
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
}

/// A store promoted from slave (its promotion marker exists,
/// docs/format.md §21.8) opens as an `ASYNC_MASTER` when asked to open as a
/// `SLAVE`: the promotion outlives the configuration that made it a slave.
fn adopt_promotion(opts: &mut StoreOptions) {
    if opts.ha.role == crate::ha::HaRole::Slave && paths::promoted_file(&opts.root).exists() {
        log::warn!(
            "{} was promoted ({} exists): it opens as an ASYNC_MASTER, not as the SLAVE its \
             configuration names (`rocketstore rejoin` or `rocketstore reseed` make it a slave again)",
            opts.root.display(),
            paths::promoted_file(&opts.root).display()
        );
        opts.ha.role = crate::ha::HaRole::AsyncMaster;
    }
}

/// The writer lock (none for a read-only open), once [`check_root`] let
/// the open go on.
fn take_lock(opts: &StoreOptions) -> Result<Option<StoreLock>> {
    check_root(opts)?;
    if opts.read_only {
        Ok(None)
    } else {
        Ok(Some(StoreLock::acquire(
            &paths::lock_file(&opts.root),
            &opts.root,
        )?))
    }
}

/// Where a store may be opened, checked before anything is written (the
/// one check, for readers and writers):
///
/// - a path that is not a directory (a regular file) is refused (`ENOTDIR`);
/// - a folder holding a store (any of [`paths::STORE_ENTRIES`], or a
///   CommitLog file in a CommitLog folder configured elsewhere) opens;
/// - a missing folder is [`StoreError::NotAStore`] for a reader, and a
///   writer creates it;
/// - any other folder is [`StoreError::NotAStore`] for a reader, unless it
///   waits for a writer that has not started yet, and for a writer unless
///   it is empty (`lost+found` aside) or the caller asked for a store there
///   ([`StoreOptions::create`]).
fn check_root(opts: &StoreOptions) -> Result<()> {
    let root = &opts.root;
    match std::fs::metadata(root) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(StoreError::io(
                format!("{} is a file, not a store directory", root.display()),
                std::io::Error::from_raw_os_error(libc::ENOTDIR),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if opts.read_only {
                return Err(StoreError::NotAStore(format!(
                    "no store at {}: the directory does not exist",
                    root.display()
                )));
            }
            return Ok(());
        }
        Err(e) => return Err(StoreError::io(format!("read {}", root.display()), e)),
    }
    if holds_store(opts) || (opts.read_only && opts.wait_for_writer) {
        return Ok(());
    }
    let names = format!(
        "{}/, {}/, {}/, {}/ or {}",
        paths::COMMIT_LOG_DIR,
        paths::CONSUME_QUEUE_DIR,
        paths::INDEX_DIR,
        paths::CONFIG_DIR,
        paths::CHECKPOINT_FILE,
    );
    if opts.read_only {
        return Err(StoreError::NotAStore(format!(
            "{} is not a store: it holds no {names} (open it with wait_for_writer=True to \
             follow a writer that has not started yet)",
            root.display(),
        )));
    }
    if opts.create || is_empty_folder(root)? {
        return Ok(());
    }
    Err(StoreError::NotAStore(format!(
        "{} is not empty and holds no store (no {names}); nothing was written: open it \
         with create=True to make a store there",
        root.display(),
    )))
}

/// True if the folder `opts.root` holds a store: one of
/// [`paths::STORE_ENTRIES`], or a file in the CommitLog folder.
fn holds_store(opts: &StoreOptions) -> bool {
    let root = &opts.root;
    let has_entry = paths::STORE_ENTRIES
        .iter()
        .any(|e| root.join(e).symlink_metadata().is_ok());
    has_entry
        || std::fs::read_dir(&opts.commit_log_dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(false)
}

/// True if `dir` holds nothing but (maybe) `lost+found`, which a file
/// system's root has from the start.
fn is_empty_folder(dir: &std::path::Path) -> Result<bool> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| StoreError::io(format!("read {}", dir.display()), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io(format!("read {}", dir.display()), e))?;
        if entry.file_name() != paths::LOST_AND_FOUND {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A closure that poisons the store with a panicking service's message.
fn poison_on_panic(flags: &Arc<RunningFlags>) -> impl Fn(String) + Send + 'static {
    let flags = flags.clone();
    move |why: String| {
        flags.fail(Flag::NotWriteable, why);
    }
}

/// Loads the CommitLog; a writer's gets the cached clock and, when enabled,
/// the transient store pool (returned: whether it is pooled).
fn load_commitlog(
    opts: &StoreOptions,
    writable: bool,
    file_size: usize,
    flags: &Arc<RunningFlags>,
) -> Result<(Arc<CommitLog>, bool)> {
    let cfg = CommitLogConfig {
        dir: opts.commit_log_dir.clone(),
        file_size,
        max_message_size: opts.max_message_size,
        store_host: opts.store_host,
        delay_levels: opts.delay_levels.clone(),
        prop_crc: opts.enabled_append_prop_crc,
    };
    let commitlog = Arc::new(CommitLog::load(cfg, writable)?);
    commitlog.set_busy_timeout_ms(opts.os_page_cache_busy_timeout_ms);
    commitlog.set_running_flags(flags.clone());
    if writable {
        // Store timestamps from a cached clock: no clock read per put.
        commitlog.use_clock(Arc::new(
            CachedClock::start_with(poison_on_panic(flags))
                .map_err(|e| StoreError::io("start the clock thread", e))?,
        ));
    }
    let pooled = writable
        && crate::services::flush::transient_pool_in_use(
            opts.transient_store_pool_enable,
            opts.flush.flush_disk_type,
            false,
        );
    if pooled {
        commitlog
            .queue()
            .set_transient_pool(Some(Arc::new(TransientStorePool::new(
                opts.transient_store_pool_size,
                file_size,
            ))));
    }
    Ok((commitlog, pooled))
}

/// Loads the index, when enabled; a reader whose index geometry does not
/// match gets none, and the reason why key queries are refused.
fn load_index(
    opts: &StoreOptions,
    writable: bool,
    checkpoint: &Arc<Checkpoint>,
    flags: &Arc<RunningFlags>,
) -> Result<(Option<Arc<IndexStore>>, Option<String>)> {
    let mut index_error = None;
    let index = if opts.message_index_enable {
        let dir = paths::index_dir(&opts.root);
        let idx = if writable {
            // A writer must index every new message: a geometry mismatch
            // is fatal. Stale files are destroyed by recovery, not here.
            let load = if opts.repair {
                IndexStore::load_for_repair
            } else {
                IndexStore::load_for_recovery
            };
            Some(load(&dir, opts.max_hash_slot_num, opts.max_index_num)?)
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
    Ok((index, index_error))
}

/// Starts a writer's prefault thread (as configured). Under SYNC_FLUSH a
/// page fault costs nothing next to the fsync, and pages dirtied ahead of
/// the writer would make every fsync write them (a journal commit flushes
/// the file's ordered data): no prefaulting. A slave starts none either
/// (its promotion does): it writes with `pwrite` (`MappedFile::append_copy`),
/// and populating its pages ahead would zero every page it then overwrites.
pub(super) fn start_prefaulter(
    opts: &StoreOptions,
    commitlog: &Arc<CommitLog>,
    flags: &Arc<RunningFlags>,
) -> Result<Option<Prefaulter>> {
    if opts.flush.sync_flush() {
        return Ok(None);
    }
    Prefaulter::start(
        commitlog.queue_arc(),
        DEFAULT_WINDOW,
        poison_on_panic(flags),
    )
    .map(Some)
    .map_err(|e| StoreError::io("start the prefault thread", e))
}

/// Starts a writer's prefault and allocator threads (as configured).
fn start_helpers(
    opts: &StoreOptions,
    writable: bool,
    pooled: bool,
    commitlog: &Arc<CommitLog>,
    flags: &Arc<RunningFlags>,
) -> Result<(Option<Prefaulter>, Option<Arc<Allocator>>)> {
    let slave = opts.ha.role == crate::ha::HaRole::Slave;
    let prefaulter = if writable && !slave {
        start_prefaulter(opts, commitlog, flags)?
    } else {
        None
    };
    // Not with the transient store pool: a file binds its buffer when it
    // is made, and one made ahead would starve the pool.
    let allocator = if writable && opts.preallocate && !pooled {
        let mut warm = opts.warm;
        // As the prefault thread: not under SYNC_FLUSH, nor for a slave
        // (see `start_prefaulter`).
        warm.prefault_head = if opts.flush.sync_flush() || slave {
            0
        } else {
            DEFAULT_WINDOW
        };
        let a = Allocator::start(&commitlog.queue_arc(), warm, poison_on_panic(flags))
            .map_err(|e| StoreError::io("start the allocator thread", e))?;
        a.set_running_flags(flags.clone());
        commitlog.queue().set_allocator(Some(a.clone()));
        Some(a)
    } else {
        None
    };
    Ok((prefaulter, allocator))
}
