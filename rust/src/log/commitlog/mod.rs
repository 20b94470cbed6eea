//! The CommitLog: every message of every topic, appended to one queue of
//! mapped files (docs/format.md §3).
//!
//! ```text
//!  file k: [record][record]...[record][size|CBD43194 blank ........]
//!  file k+1: [record]...                      (message retried here)
//! ```
//! A record is written only if at least 8 bytes remain after it, so every
//! full file ends with an 8-byte blank header. One put lock serialises
//! appends; it also owns the queue-offset table (`topic-queueId` → next
//! logical offset). The store timestamp is taken under that lock.
//!
//! # Files
//!
//! - `mod.rs`: put results, the configuration, the queue-offset table and
//!   the [`CommitLog`] itself (loading, offsets, the put lock's state).
//! - `append.rs`: validating a message ([`Prepared`]) and single puts.
//! - `batch.rs`: batches of one queue ([`BatchInput`], [`BatchOutcome`]).
//! - `scan.rs`: the recovery scan and replay ([`ScanReport`]).
//! - `damage.rs`: damage in durable data ([`DamagePolicy`], damaged ranges).
//! - `older_log.rs`: whether the intact records after damage belong to an
//!   older log a cut left behind (then the log ends at the damage).
//! - `read.rs`: reads of one record ([`RecordRead`]) and following a writer.
//! - `replica.rs`: a slave's append of bytes copied from its master.
//! - `prop_ranges.rs`: whether the checkpoint's property-CRC ranges still
//!   describe the bytes.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::sync::{Condvar, Mutex, MutexGuard, RwLock};
use rustc_hash::FxHashMap;

use crate::clock::CachedClock;
use crate::error::{Result, StoreError};
use crate::log::mapped_file::{MappedFile, Reserve};
use crate::log::mapped_file_queue::MappedFileQueue;
use crate::ratelog::RateLimited;
use crate::running::{is_transient_resource, RunningFlags};

mod append;
mod batch;
mod damage;
mod older_log;
mod prop_ranges;
mod read;
mod replica;
mod scan;

pub use append::Prepared;
pub use batch::{BatchInput, BatchOutcome, BatchRefusal};
pub use damage::{Damage, DamagePolicy, DurableBound};
pub use prop_ranges::{vouch_prop_crc_ranges, LogBytes};
pub use read::{check_read_record, RecordAt, RecordRead, PROP_CRC_MISMATCH};
pub use scan::{account_record, ScanReport};

crate::rocketmq_enum! {
    /// Result status of a put (RocketMQ's `PutMessageStatus`, same order).
    pub enum PutStatus {
        /// Written (and, under SYNC_FLUSH, on disk).
        PutOk = 0 => "PUT_OK",
        /// Written, but not confirmed on disk within `sync_flush_timeout`.
        FlushDiskTimeout = 1 => "FLUSH_DISK_TIMEOUT",
        /// Written, but no slave reported it within `slave_timeout` (SYNC_MASTER).
        FlushSlaveTimeout = 2 => "FLUSH_SLAVE_TIMEOUT",
        /// Written, but no slave is connected or the best is too far behind (SYNC_MASTER).
        SlaveNotAvailable = 3 => "SLAVE_NOT_AVAILABLE",
        /// The store takes no puts now (read-only, poisoned, disk full).
        ServiceNotAvailable = 4 => "SERVICE_NOT_AVAILABLE",
        /// No CommitLog file could be created or space reserved in one.
        CreateMappedFileFailed = 5 => "CREATE_MAPPED_FILE_FAILED",
        /// The message breaks a rule of the format (the reason says which).
        MessageIllegal = 6 => "MESSAGE_ILLEGAL",
        /// The properties take more than 32767 bytes.
        PropertiesSizeExceeded = 7 => "PROPERTIES_SIZE_EXCEEDED",
        /// The put lock was held longer than `os_page_cache_busy_timeout_mills`.
        OsPageCacheBusy = 8 => "OS_PAGE_CACHE_BUSY",
        /// Any other failure.
        UnknownError = 9 => "UNKNOWN_ERROR",
    }
}

/// What a put did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutOutcome {
    /// What happened.
    pub status: PutStatus,
    /// CommitLog offset of the record (-1: nothing written).
    pub wrote_offset: i64,
    /// Record bytes written.
    pub wrote_bytes: i32,
    /// The message's offset in its queue (-1: nothing written).
    pub queue_offset: i64,
    /// Store time given to the message (ms since the epoch).
    pub store_timestamp: i64,
    /// Why the put was not `PUT_OK` (a short sentence naming the field and
    /// the rule); `None` when it was. Built only on the refusal path.
    pub reason: Option<String>,
}

impl PutOutcome {
    /// A rejected put: nothing written.
    pub fn rejected(refused: Refused) -> Self {
        Self {
            status: refused.status,
            wrote_offset: -1,
            wrote_bytes: 0,
            queue_offset: -1,
            store_timestamp: 0,
            reason: Some(refused.reason),
        }
    }
}

/// A put refused before anything was written: the status and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The status the put gets.
    pub status: PutStatus,
    /// Why, in a sentence naming the field and the rule.
    pub reason: String,
}

impl Refused {
    /// A refusal with `status` because of `reason`.
    pub fn new(status: PutStatus, reason: impl Into<String>) -> Self {
        Self {
            status,
            reason: reason.into(),
        }
    }

    /// `MESSAGE_ILLEGAL` because of `reason`.
    pub fn illegal(reason: impl Into<String>) -> Self {
        Self::new(PutStatus::MessageIllegal, reason)
    }
}

impl From<crate::log::message::RuleBroken> for Refused {
    /// The refusal of a broken put rule, with the status RocketMQ gives it.
    fn from(broken: crate::log::message::RuleBroken) -> Self {
        use crate::log::message::RuleBroken;
        match broken {
            RuleBroken::Illegal(why) => Self::illegal(why),
            RuleBroken::PropertiesSizeExceeded(why) => {
                Self::new(PutStatus::PropertiesSizeExceeded, why)
            }
        }
    }
}

/// Format-relevant CommitLog settings.
#[derive(Debug, Clone)]
pub struct CommitLogConfig {
    /// The `commitlog` directory.
    pub dir: PathBuf,
    /// Size of every CommitLog file (`mapped_file_size_commit_log`).
    pub file_size: usize,
    /// Largest body accepted (`max_message_size`).
    pub max_message_size: usize,
    /// The store host written into every record.
    pub store_host: SocketAddr,
    /// Delay per level in ms (index 0 = level 1).
    pub delay_levels: Vec<i64>,
    /// Append the property CRC `__CRC32#` to every record written
    /// (`enabled_append_prop_crc`; docs/format.md §6.1).
    pub prop_crc: bool,
}

/// Milliseconds since the Unix epoch (the system clock).
#[inline]
pub fn now_ms() -> i64 {
    crate::clock::system_now_ms()
}

/// `topic -> queue id -> next queue offset`.
#[derive(Debug, Default, Clone)]
pub struct QueueOffsetTable {
    map: FxHashMap<String, FxHashMap<i32, i64>>,
}

impl QueueOffsetTable {
    #[inline]
    /// Next queue offset of `topic-queue_id` (0 when unknown).
    pub fn get(&self, topic: &str, queue_id: i32) -> i64 {
        self.map
            .get(topic)
            .and_then(|q| q.get(&queue_id))
            .copied()
            .unwrap_or(0)
    }

    /// The entry of `topic-queue_id`, created at 0.
    #[inline]
    pub fn slot(&mut self, topic: &str, queue_id: i32) -> &mut i64 {
        if !self.map.contains_key(topic) {
            self.map.insert(topic.to_owned(), FxHashMap::default());
        }
        self.map
            .get_mut(topic)
            .expect("inserted above")
            .entry(queue_id)
            .or_insert(0)
    }

    #[inline]
    /// Sets the next queue offset of `topic-queue_id`.
    pub fn set(&mut self, topic: &str, queue_id: i32, next: i64) {
        *self.slot(topic, queue_id) = next;
    }

    /// Raises the entry to at least `next`.
    pub fn raise(&mut self, topic: &str, queue_id: i32, next: i64) {
        if self.get(topic, queue_id) < next {
            self.set(topic, queue_id, next);
        }
    }

    /// Every `(topic, queue_id, next_offset)`.
    pub fn entries(&self) -> Vec<(String, i32, i64)> {
        let mut v: Vec<_> = self
            .map
            .iter()
            .flat_map(|(t, q)| q.iter().map(move |(id, n)| (t.clone(), *id, *n)))
            .collect();
        v.sort();
        v
    }

    /// Forgets every queue.
    pub fn clear(&mut self) {
        self.map.clear();
    }
}

struct PutState {
    table: QueueOffsetTable,
    /// The file being appended to (saves a queue lookup per put). Only puts
    /// add files, retention never removes the last one, and truncation resets it.
    current: Option<Arc<MappedFile>>,
    /// Last store timestamp given out: timestamps never decrease along the
    /// log (by-time lookups binary-search them).
    last_ts: i64,
    /// Queues a batch is appending to while it lets other writers in
    /// between CommitLog files: their other writers wait, so queue offsets
    /// stay in CommitLog order.
    busy: Vec<(String, i32)>,
}

impl PutState {
    #[inline]
    fn is_busy(&self, topic: &str, queue_id: i32) -> bool {
        !self.busy.is_empty()
            && self
                .busy
                .iter()
                .any(|(t, q)| *q == queue_id && t.as_str() == topic)
    }
}

/// Failed CommitLog file creations (rate-limited log).
static CREATE_FAILURES: RateLimited = RateLimited::new();
/// Failed reservations of the next chunk of a CommitLog file (rate-limited).
static RESERVE_FAILURES: RateLimited = RateLimited::new();

/// The CommitLog.
pub struct CommitLog {
    cfg: CommitLogConfig,
    mfq: Arc<MappedFileQueue>,
    put: Mutex<PutState>,
    /// Signalled when a batch releases its queue.
    batch_done: Condvar,
    /// Where store timestamps come from: the cached clock once a writer
    /// installs one, else the system clock.
    clock: OnceLock<Arc<CachedClock>>,
    /// When the put lock was taken (ms), 0 while it is free (RocketMQ's
    /// `beginTimeInLock`).
    lock_since: AtomicI64,
    /// `os_page_cache_busy_time_out_mills`.
    busy_timeout_ms: AtomicI64,
    /// Damaged ranges `[start, end)` recovery skipped.
    damaged: RwLock<Vec<(u64, u64)>>,
    has_damage: std::sync::atomic::AtomicBool,
    /// The store's running state: RESOURCE_WAIT while a new file cannot be
    /// made for want of a resource.
    flags: OnceLock<Arc<RunningFlags>>,
    /// CommitLog ranges `[start, end)` written with the property CRC (the
    /// checkpoint's mark lists them; a writer adds `[its start, u64::MAX)`):
    /// a record there whose property CRC is missing or wrong is damaged.
    prop_crc_ranges: RwLock<Vec<(u64, u64)>>,
    /// Messages and bytes appended since the log was loaded (see
    /// [`CommitLog::put_counts`]).
    puts: PutCounters,
}

/// Messages and bytes appended (RocketMQ's `putMessageTimesTotal` and
/// `putMessageSizeTotal`).
///
/// Only the holder of the put lock adds to them, so an addition is a
/// relaxed load and a relaxed store (no read-modify-write, no fence on the
/// put path); readers load them relaxed, without the lock, and may see a
/// batch's messages before its bytes.
#[derive(Debug, Default)]
struct PutCounters {
    messages: AtomicU64,
    bytes: AtomicU64,
}

impl PutCounters {
    /// Adds `messages` and `bytes`; call only with the put lock held.
    #[inline]
    fn add_locked(&self, messages: u64, bytes: u64) {
        let m = self.messages.load(Ordering::Relaxed);
        self.messages
            .store(m.wrapping_add(messages), Ordering::Relaxed);
        let b = self.bytes.load(Ordering::Relaxed);
        self.bytes.store(b.wrapping_add(bytes), Ordering::Relaxed);
    }
}

/// The held put lock; clears the lock time when dropped.
struct LockedPut<'a> {
    g: crate::sync::MutexGuard<'a, PutState>,
    since: &'a AtomicI64,
    ts: i64,
}

impl Drop for LockedPut<'_> {
    fn drop(&mut self) {
        self.since.store(0, Ordering::Relaxed);
    }
}

/// Default `os_page_cache_busy_time_out_mills`.
pub const DEFAULT_OS_PAGE_CACHE_BUSY_TIMEOUT_MS: i64 = 1000;

impl CommitLog {
    /// Loads the CommitLog directory (files marked full; recovery sets the
    /// positions). Changes nothing on disk.
    pub fn load(cfg: CommitLogConfig, writable: bool) -> Result<Self> {
        // A short newest file stays unmapped: a writer's recovery extends it.
        let (mfq, _) = MappedFileQueue::load_with(
            cfg.dir.clone(),
            cfg.file_size,
            writable,
            Reserve::COMMIT_LOG,
        )?;
        mfq.set_flush_pause_point("pause_commitlog_flush");
        mfq.set_create_fail_point("allocate_file");
        // A reader opened before the writer made its first file learns the
        // segment size from that file (docs/format.md "Segment sizes on open").
        mfq.adopt_size_from_files(1);
        Ok(Self {
            cfg,
            mfq: Arc::new(mfq),
            put: Mutex::new(PutState {
                table: QueueOffsetTable::default(),
                current: None,
                last_ts: 0,
                busy: Vec::new(),
            }),
            batch_done: Condvar::new(),
            clock: OnceLock::new(),
            lock_since: AtomicI64::new(0),
            busy_timeout_ms: AtomicI64::new(DEFAULT_OS_PAGE_CACHE_BUSY_TIMEOUT_MS),
            damaged: RwLock::new(Vec::new()),
            has_damage: std::sync::atomic::AtomicBool::new(false),
            flags: OnceLock::new(),
            prop_crc_ranges: RwLock::new(Vec::new()),
            puts: PutCounters::default(),
        })
    }

    /// `(messages, bytes)` appended since the log was loaded: every record
    /// a put, a batch or a delayed message's delivery stored (refused
    /// messages and blanks are not counted). Relaxed reads: a sample taken
    /// while a batch is appended may hold part of it.
    pub fn put_counts(&self) -> (u64, u64) {
        (
            self.puts.messages.load(Ordering::Relaxed),
            self.puts.bytes.load(Ordering::Relaxed),
        )
    }

    /// The CommitLog's settings.
    pub fn config(&self) -> &CommitLogConfig {
        &self.cfg
    }

    /// Shares the store's running state (see [`CommitLog::create_failed`]).
    pub fn set_running_flags(&self, flags: Arc<RunningFlags>) {
        let _ = self.flags.set(flags);
    }

    /// A new file was made: ends a run of failed creations.
    #[inline]
    pub(super) fn created_file(&self) {
        if let Some(n) = CREATE_FAILURES.reset() {
            log::warn!("CommitLog files can be created again after {n} failed attempts");
            if let Some(f) = self.flags.get() {
                f.set_waiting("commitlog", None);
            }
        }
    }

    /// Making a new file failed: the put that needs it is refused with a
    /// status (a rate-limited log); for want of a resource
    /// ([`is_transient_resource`]) RESOURCE_WAIT says so until a file is
    /// made again (each put that needs it tries again).
    pub(super) fn create_failed(&self, e: &StoreError) {
        // A full disk fails every put: log a few lines and a count, not one
        // line per attempt.
        CREATE_FAILURES.log(log::Level::Error, || {
            format!("cannot create CommitLog file: {e}")
        });
        if is_transient_resource(e) {
            if let Some(f) = self.flags.get() {
                f.set_waiting(
                    "commitlog",
                    Some(format!(
                        "a new CommitLog file waits (puts that need it are refused and \
                         try again): {e}"
                    )),
                );
            }
        }
    }

    /// Takes store timestamps from `clock` from now on (once; later calls
    /// are ignored).
    pub fn use_clock(&self, clock: Arc<CachedClock>) {
        let _ = self.clock.set(clock);
    }

    /// Milliseconds now, from the cached clock when one is installed.
    #[inline]
    pub fn clock_ms(&self) -> i64 {
        match self.clock.get() {
            Some(c) => c.now_ms(),
            None => now_ms(),
        }
    }

    /// The store timestamp of the next append (under the put lock).
    #[inline]
    fn stamp(&self, st: &mut PutState) -> i64 {
        let ts = self.clock_ms().max(st.last_ts);
        st.last_ts = ts;
        ts
    }

    /// Waits while a batch holds `topic-queue_id`; true if it waited. The
    /// put lock is free while waiting, so it does not count as held for the
    /// busy check.
    #[inline]
    fn wait_queue_free(
        &self,
        st: &mut MutexGuard<'_, PutState>,
        topic: &str,
        queue_id: i32,
    ) -> bool {
        let mut waited = false;
        while st.is_busy(topic, queue_id) {
            let since = self.lock_since.swap(0, Ordering::Relaxed);
            self.batch_done.wait(st);
            self.lock_since
                .store(since.max(now_ms()), Ordering::Relaxed);
            waited = true;
        }
        waited
    }

    /// The file queue holding the CommitLog files.
    pub fn queue(&self) -> &MappedFileQueue {
        &self.mfq
    }

    /// Drops every file (the store shut down): mappings and descriptors are
    /// released as soon as no reader holds them; no file is created again.
    /// The clock thread stops (timestamps come from the system clock after).
    pub fn release(&self) {
        self.put.lock().current = None;
        self.mfq.release();
        if let Some(clock) = self.clock.get() {
            clock.stop();
        }
    }

    /// A shared handle on the file queue (for background threads).
    pub fn queue_arc(&self) -> Arc<MappedFileQueue> {
        self.mfq.clone()
    }

    /// Size of every CommitLog file.
    pub fn file_size(&self) -> usize {
        self.mfq.file_size()
    }

    /// End of readable data.
    pub fn max_offset(&self) -> u64 {
        self.mfq.max_offset()
    }

    /// Start of the first file, or -1 when the log holds no file.
    pub fn min_offset(&self) -> i64 {
        self.mfq.min_offset().map(|o| o as i64).unwrap_or(-1)
    }

    /// End of what is known to be on disk.
    pub fn flushed_offset(&self) -> u64 {
        self.mfq.flushed_where()
    }

    /// Start of the file after the one holding `offset`.
    pub fn roll_next_file(&self, offset: u64) -> u64 {
        let s = self.mfq.file_size() as u64;
        offset + s - offset % s
    }

    /// Snapshot of the queue-offset table.
    pub fn queue_offsets(&self) -> QueueOffsetTable {
        self.put.lock().table.clone()
    }

    /// Replaces the queue-offset table (after recovery).
    pub fn set_queue_offsets(&self, table: QueueOffsetTable) {
        self.put.lock().table = table;
    }

    /// Next queue offset of `topic-queue_id`.
    pub fn next_queue_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.put.lock().table.get(topic, queue_id)
    }

    /// Cuts everything after `offset` (zeroing the cut bytes) and sets the
    /// flushed offset to it. Returns bytes discarded.
    pub fn truncate_to(&self, offset: u64) -> Result<u64> {
        let mut st = self.put.lock();
        st.current = None;
        let n = self.mfq.truncate_dirty(offset)?;
        self.mfq.set_flushed_where(offset);
        Ok(n)
    }

    /// The file that holds `phy`.
    pub fn file_for(&self, phy: u64) -> Option<Arc<MappedFile>> {
        self.mfq.find_by_offset(phy, false)
    }

    /// Flushes everything written.
    pub fn flush_all(&self) -> Result<u64> {
        self.mfq.flush_all()
    }
}
