//! The CommitLog: every message of every topic, appended to one queue of
//! mapped files (SPEC §1).
//!
//! ```text
//!  file k: [record][record]...[record][size|CBD43194 blank ........]
//!  file k+1: [record]...                      (message retried here)
//! ```
//! A record is written only if at least 8 bytes remain after it, so every
//! full file ends with an 8-byte blank header. One put lock serialises
//! appends; it also owns the queue-offset table (`topic-queueId` → next
//! logical offset). The store timestamp is taken under that lock.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};
use rustc_hash::FxHashMap;

use crate::clock::CachedClock;
use crate::error::{Result, StoreError};
use crate::log::mapped_file::{MappedFile, Reserve};
use crate::log::mapped_file_queue::MappedFileQueue;
use crate::log::message::{
    self, body_crc, compressed_body_problem, encode_blank, encode_v1, encode_v1_crc_of_copy,
    find_next_valid_record, find_property, is_readable_topic_bytes, parse_record,
    parse_valid_record, props, record_len, sys_flag_problem, sysflag, topic_problem,
    valid_record_size, MessageSpec, Parsed, PropertiesBuilder, RecordView,
    END_FILE_MIN_BLANK_LENGTH, MAX_PROPERTIES_LEN, MAX_TOPIC_LEN_V2, SCHEDULE_TOPIC,
};
use crate::ratelog::RateLimited;

/// Result status of a put (RocketMQ's `PutMessageStatus`, same order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PutStatus {
    PutOk = 0,
    FlushDiskTimeout = 1,
    FlushSlaveTimeout = 2,
    SlaveNotAvailable = 3,
    ServiceNotAvailable = 4,
    CreateMappedFileFailed = 5,
    MessageIllegal = 6,
    PropertiesSizeExceeded = 7,
    OsPageCacheBusy = 8,
    UnknownError = 9,
}

/// What a put did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutOutcome {
    pub status: PutStatus,
    pub wrote_offset: i64,
    pub wrote_bytes: i32,
    pub queue_offset: i64,
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
    pub status: PutStatus,
    pub reason: String,
}

impl Refused {
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

/// Format-relevant CommitLog settings.
#[derive(Debug, Clone)]
pub struct CommitLogConfig {
    pub dir: PathBuf,
    pub file_size: usize,
    pub max_message_size: usize,
    pub store_host: SocketAddr,
    /// Delay per level in ms (index 0 = level 1).
    pub delay_levels: Vec<i64>,
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

    pub fn clear(&mut self) {
        self.map.clear();
    }
}

struct PutState {
    table: QueueOffsetTable,
    /// The file being appended to (saves a queue lookup per put). Only puts
    /// add files, expiry never removes the last one, and truncation resets it.
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

impl From<crate::log::message::PropertyError> for Refused {
    fn from(e: crate::log::message::PropertyError) -> Self {
        let crate::log::message::PropertyError::Illegal(why) = e;
        Self::illegal(why)
    }
}

/// A message ready to append: validated, delay-converted, CRC computed.
pub struct Prepared<'a> {
    pub spec: MessageSpec<'a>,
    sys_flag: i32,
    crc: i32,
    /// Encoded record length.
    pub len: usize,
}

/// Messages for one topic and queue, appended by [`CommitLog::append_batch`].
#[derive(Debug, Clone)]
pub struct BatchInput<'a> {
    pub topic: &'a str,
    pub queue_id: i32,
    pub flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub bodies: &'a [&'a [u8]],
    /// Every message's serialized properties, concatenated: message `i`
    /// has `props[props_ends[i - 1]..props_ends[i]]`. Empty `props_ends`:
    /// no message has properties.
    pub props: &'a [u8],
    pub props_ends: &'a [usize],
}

impl BatchInput<'_> {
    /// Serialized properties of message `i`.
    #[inline]
    pub fn props_of(&self, i: usize) -> &[u8] {
        if self.props_ends.is_empty() {
            return b"";
        }
        let from = if i == 0 { 0 } else { self.props_ends[i - 1] };
        &self.props[from..self.props_ends[i]]
    }

    /// Encoded length of message `i`.
    #[inline]
    pub fn record_len(&self, i: usize, store_host: &SocketAddr) -> usize {
        record_len(
            self.bodies[i].len(),
            self.topic.len(),
            self.props_of(i).len(),
            &self.born_host,
            store_host,
        )
    }
}

/// Why a batch was refused before anything was written (the message's
/// index is in the reason).
pub type BatchRefusal = Refused;

/// What a batch put did: one result for the whole batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOutcome {
    pub status: PutStatus,
    /// CommitLog offset of the first message (-1 when none was written).
    pub first_offset: i64,
    /// Queue offset of the first message; the others follow consecutively.
    pub first_queue_offset: i64,
    /// Messages written.
    pub count: usize,
    /// Record bytes written.
    pub bytes: u64,
    /// Store timestamp of the first message.
    pub store_timestamp: i64,
    /// CommitLog offset just past the last message written.
    pub end_offset: i64,
    /// Why the status is not `PUT_OK`, when the store knows more.
    pub reason: Option<String>,
    /// Every message's CommitLog offset, when asked for.
    pub offsets: Vec<i64>,
}

/// A batch's hold on its queue: on drop (also on unwinding) the queue is
/// released and waiting writers are woken.
struct BatchHold<'a, 'b> {
    st: MutexGuard<'a, PutState>,
    cv: &'a Condvar,
    since: &'a AtomicI64,
    topic: &'b str,
    queue_id: i32,
}

impl Drop for BatchHold<'_, '_> {
    fn drop(&mut self) {
        let (topic, queue_id) = (self.topic, self.queue_id);
        if let Some(i) = self
            .st
            .busy
            .iter()
            .position(|(t, q)| *q == queue_id && t == topic)
        {
            self.st.busy.swap_remove(i);
        }
        self.since.store(0, Ordering::Relaxed);
        self.cv.notify_all();
    }
}

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
}

/// The held put lock; clears the lock time when dropped.
struct LockedPut<'a> {
    g: parking_lot::MutexGuard<'a, PutState>,
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

/// What a scan of the CommitLog found.
#[derive(Debug, Clone, Default)]
pub struct ScanReport {
    /// Offset just past the last valid record.
    pub end_offset: u64,
    pub files_scanned: usize,
    pub bytes_scanned: u64,
    pub records: u64,
    /// Why the scan stopped, when it stopped before the end of the last file.
    pub stop_reason: Option<String>,
    /// Damaged ranges inside durable data that the scan skipped (or, with
    /// `end == offset`, that ended the log because nothing intact follows).
    pub damaged: Vec<Damage>,
}

/// Where durable CommitLog data ends, to tell damage from a torn tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurableBound {
    /// The durable mark: every byte below this offset was flushed.
    Mark(u64),
    /// No mark (a store written by RocketMQ or an older rocketstore):
    /// records stored at or before this time (the checkpoint's
    /// physicMsgTimestamp) were flushed.
    Timestamp(i64),
}

/// How a recovery scan treats invalid data that intact durable records follow.
#[derive(Debug, Clone)]
pub struct DamagePolicy {
    pub bound: DurableBound,
    /// Skip (and report) damaged records instead of refusing the open.
    pub skip: bool,
    /// Ranges skipped by an earlier recovery (the durable mark lists them):
    /// always skipped.
    pub known: Vec<(u64, u64)>,
}

impl DamagePolicy {
    /// The durable mark, if the policy judges by one.
    pub fn bound_mark(&self) -> Option<u64> {
        match self.bound {
            DurableBound::Mark(m) => Some(m),
            DurableBound::Timestamp(_) => None,
        }
    }
}

/// A damaged CommitLog range a recovery scan skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// CommitLog offset of the damaged record.
    pub offset: u64,
    /// Where intact data resumes.
    pub end: u64,
    pub file: PathBuf,
    pub reason: String,
}

/// Where the next valid record after the invalid data at `pos` of file
/// `index` starts: later in that file, or in a later file.
fn find_resume_point(
    files: &[Arc<MappedFile>],
    index: usize,
    pos: usize,
    check_crc: bool,
) -> Option<(usize, usize)> {
    let f = &files[index];
    if let Some(p) = find_next_valid_record(f.raw(), pos + 1, f.file_from_offset(), check_crc) {
        return Some((index, p));
    }
    files.iter().enumerate().skip(index + 1).find_map(|(i, g)| {
        find_next_valid_record(g.raw(), 0, g.file_from_offset(), check_crc).map(|p| (i, p))
    })
}

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
        })
    }

    pub fn config(&self) -> &CommitLogConfig {
        &self.cfg
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

    pub fn queue(&self) -> &MappedFileQueue {
        &self.mfq
    }

    /// Drops every file (the store shut down): mappings and descriptors are
    /// released as soon as no reader holds them; no file is created again.
    pub fn release(&self) {
        self.put.lock().current = None;
        self.mfq.release();
    }

    /// A shared handle on the file queue (for background threads).
    pub fn queue_arc(&self) -> Arc<MappedFileQueue> {
        self.mfq.clone()
    }

    pub fn file_size(&self) -> usize {
        self.cfg.file_size
    }

    /// End of readable data.
    pub fn max_offset(&self) -> u64 {
        self.mfq.max_offset()
    }

    /// Start of the first file, or -1 when the log holds no file.
    pub fn min_offset(&self) -> i64 {
        self.mfq.min_offset().map(|o| o as i64).unwrap_or(-1)
    }

    pub fn flushed_offset(&self) -> u64 {
        self.mfq.flushed_where()
    }

    /// Start of the file after the one holding `offset`.
    pub fn roll_next_file(&self, offset: u64) -> u64 {
        let s = self.cfg.file_size as u64;
        offset + s - offset % s
    }

    /// Validates `spec` and converts delayed messages (SPEC §1.9, §1.10).
    ///
    /// A refusal carries a sentence naming the field and the rule; the checks
    /// cost nothing more than before on the success path (the sentence is
    /// built only when a check fails).
    pub fn prepare<'a>(&self, spec: MessageSpec<'a>) -> std::result::Result<Prepared<'a>, Refused> {
        self.prepare_as(spec, false)
    }

    /// [`CommitLog::prepare`] for a put from a producer (`redelivery` false),
    /// or for the delivered copy of a delayed message (`redelivery` true):
    /// the copy of a record already stored skips the producer's sys_flag and
    /// compressed-body rules (the stored flags and body are kept as they are;
    /// the IPv6 host bits are derived again) and the delay conversion, which
    /// would park it in `SCHEDULE_TOPIC_XXXX` once more (SPEC §1.9).
    fn prepare_as<'a>(
        &self,
        spec: MessageSpec<'a>,
        redelivery: bool,
    ) -> std::result::Result<Prepared<'a>, Refused> {
        let mut spec = spec;
        if let Some(why) = topic_problem(&spec.topic) {
            return Err(Refused::illegal(why));
        }
        if spec.queue_id < 0 {
            return Err(Refused::illegal(format!(
                "queue_id must be >= 0, got {}",
                spec.queue_id
            )));
        }
        if spec.body.len() > self.cfg.max_message_size {
            return Err(Refused::illegal(format!(
                "body is {} bytes, over max_message_size ({} bytes)",
                spec.body.len(),
                self.cfg.max_message_size
            )));
        }
        if spec.sys_flag != 0 && !redelivery {
            if let Some(why) = sys_flag_problem(spec.sys_flag) {
                return Err(Refused::illegal(why));
            }
            if spec.sys_flag & sysflag::COMPRESSED != 0 {
                if let Some(why) = compressed_body_problem(&spec.body) {
                    return Err(Refused::illegal(why));
                }
            }
        }
        let tran = spec.transaction_type();
        if !redelivery && (tran == sysflag::TRANSACTION_NOT || tran == sysflag::TRANSACTION_COMMIT)
        {
            if let Some(level) = find_property(&spec.properties, props::DELAY) {
                let level: i64 = std::str::from_utf8(level)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .ok_or_else(|| {
                        Refused::illegal(format!(
                            "property DELAY must be a whole number (a delay level), not {:?}",
                            String::from_utf8_lossy(level)
                        ))
                    })?;
                if level > 0 && !self.cfg.delay_levels.is_empty() {
                    // Like RocketMQ's property map: the clamped level replaces DELAY,
                    // and REAL_TOPIC/REAL_QID replace any earlier values (a message
                    // delayed twice keeps only its latest origin).
                    let level = level.min(self.cfg.delay_levels.len() as i64);
                    let mut b = PropertiesBuilder::with_capacity(spec.properties.len() + 48);
                    for (k, v) in message::iter_properties(&spec.properties) {
                        if k == props::REAL_TOPIC.as_bytes() || k == props::REAL_QID.as_bytes() {
                            continue;
                        }
                        if k == props::DELAY.as_bytes() {
                            b.push(props::DELAY, &level.to_string())
                                .map_err(Refused::from)?;
                        } else {
                            b.push_pair_raw(k, v);
                        }
                    }
                    let qid = spec.queue_id.to_string();
                    b.push(props::REAL_TOPIC, &spec.topic)
                        .map_err(Refused::from)?;
                    b.push(props::REAL_QID, &qid).map_err(Refused::from)?;
                    spec.properties = Cow::Owned(b.finish());
                    spec.topic = Cow::Borrowed(SCHEDULE_TOPIC);
                    spec.queue_id = (level - 1) as i32;
                }
            }
        }
        let props_len = spec.properties.len();
        if props_len > MAX_PROPERTIES_LEN {
            // RocketMQ checks the Java char count first (MESSAGE_ILLEGAL), then bytes.
            let chars = String::from_utf8_lossy(&spec.properties)
                .encode_utf16()
                .count();
            let why = format!(
                "properties (tags, keys and properties together) take {props_len} bytes \
                 ({chars} characters); at most {MAX_PROPERTIES_LEN} are allowed"
            );
            return Err(if chars > MAX_PROPERTIES_LEN {
                Refused::illegal(why)
            } else {
                Refused::new(PutStatus::PropertiesSizeExceeded, why)
            });
        }
        let mut sys_flag = spec.sys_flag & !(sysflag::BORNHOST_V6 | sysflag::STOREHOST_V6);
        if spec.born_host.is_ipv6() {
            sys_flag |= sysflag::BORNHOST_V6;
        }
        if self.cfg.store_host.is_ipv6() {
            sys_flag |= sysflag::STOREHOST_V6;
        }
        let len = record_len(
            spec.body.len(),
            spec.topic.len(),
            props_len,
            &spec.born_host,
            &self.cfg.store_host,
        );
        if len > self.cfg.max_message_size + 64 * 1024 {
            return Err(Refused::illegal(format!(
                "the record would take {len} bytes, over max_message_size + 64 KiB \
                 ({} bytes)",
                self.cfg.max_message_size + 64 * 1024
            )));
        }
        if len + END_FILE_MIN_BLANK_LENGTH > self.cfg.file_size {
            return Err(Refused::illegal(format!(
                "the record would take {len} bytes, but a CommitLog segment of {} bytes holds \
                 at most {} (mapped_file_size_commit_log)",
                self.cfg.file_size,
                self.cfg.file_size - END_FILE_MIN_BLANK_LENGTH
            )));
        }
        let crc = body_crc(&spec.body);
        Ok(Prepared {
            spec,
            sys_flag,
            crc,
            len,
        })
    }

    /// Appends one message.
    pub fn put(&self, spec: MessageSpec<'_>) -> Result<PutOutcome> {
        match self.prepare(spec) {
            Ok(p) => self.put_prepared(&p),
            Err(s) => Ok(PutOutcome::rejected(s)),
        }
    }

    /// Sets `os_page_cache_busy_time_out_mills` (ms, ≥ 1).
    pub fn set_busy_timeout_ms(&self, ms: i64) {
        self.busy_timeout_ms.store(ms.max(1), Ordering::Relaxed);
    }

    /// RocketMQ's `isOSPageCacheBusy`: a put finding the put lock held for
    /// longer than `os_page_cache_busy_time_out_mills` is refused with
    /// `OS_PAGE_CACHE_BUSY` instead of queueing behind it (the holder is
    /// stuck on page cache or disk). Free lock: one relaxed load.
    #[inline]
    fn page_cache_busy(&self) -> Option<Refused> {
        let since = self.lock_since.load(Ordering::Relaxed);
        if since == 0 {
            return None;
        }
        let held = now_ms() - since;
        let limit = self.busy_timeout_ms.load(Ordering::Relaxed);
        // RocketMQ ignores absurd differences (a clock step) the same way.
        (held > limit && held < 10_000_000).then(|| {
            Refused::new(
                PutStatus::OsPageCacheBusy,
                format!(
                    "the CommitLog put lock has been held for {held} ms, over \
                     os_page_cache_busy_time_out_mills ({limit} ms)"
                ),
            )
        })
    }

    /// Takes the put lock, noting when (for [`CommitLog::page_cache_busy`]).
    #[inline]
    fn lock_put(&self) -> LockedPut<'_> {
        let mut g = self.put.lock();
        let ts = self.stamp(&mut g);
        self.lock_since.store(ts, Ordering::Relaxed);
        LockedPut {
            g,
            since: &self.lock_since,
            ts,
        }
    }

    /// Appends a prepared message, waiting for the put lock.
    pub fn put_prepared(&self, p: &Prepared<'_>) -> Result<PutOutcome> {
        if let Some(busy) = self.page_cache_busy() {
            return Ok(PutOutcome::rejected(busy));
        }
        let mut st = self.lock_put();
        let ts = if self.wait_queue_free(&mut st.g, &p.spec.topic, p.spec.queue_id) {
            self.stamp(&mut st.g)
        } else {
            st.ts
        };
        self.append_locked(&mut st.g, p, ts)
    }

    /// Holds the put lock for `d` (tests of the busy check).
    #[doc(hidden)]
    pub fn hold_put_lock_for(&self, d: std::time::Duration) {
        let _st = self.lock_put();
        std::thread::sleep(d);
    }

    /// Appends a prepared message only if that cannot block: the put lock is
    /// free and the current file has room (no file must be created). `None`
    /// means "call [`CommitLog::put_prepared`] with the GIL released".
    pub fn try_put_prepared(&self, p: &Prepared<'_>) -> Option<Result<PutOutcome>> {
        let mut st = self.put.try_lock()?;
        let last = st.current.as_ref()?;
        if last.wrote_position() + p.len + END_FILE_MIN_BLANK_LENGTH > last.file_size()
            || st.is_busy(&p.spec.topic, p.spec.queue_id)
        {
            return None;
        }
        // Held only for one copy into a mapped page: not tracked for the
        // busy check, which needs a holder stuck for a second.
        let ts = self.stamp(&mut st);
        Some(self.append_locked(&mut st, p, ts))
    }

    /// Appends messages in order under one lock hold; a message that fails
    /// validation gets its status and is skipped.
    pub fn put_batch<'a>(
        &self,
        specs: impl IntoIterator<Item = std::result::Result<MessageSpec<'a>, Refused>>,
    ) -> Result<Vec<PutOutcome>> {
        // Each message is validated and encoded as it is appended (no
        // intermediate batch-sized buffers: those cost more than the work).
        let specs = specs.into_iter();
        let mut out = Vec::with_capacity(specs.size_hint().0);
        if let Some(busy) = self.page_cache_busy() {
            out.extend(specs.map(|_| PutOutcome::rejected(busy.clone())));
            return Ok(out);
        }
        let mut st = self.lock_put();
        let mut ts = st.ts;
        for s in specs {
            match s.and_then(|s| self.prepare(s)) {
                Ok(p) => {
                    if self.wait_queue_free(&mut st.g, &p.spec.topic, p.spec.queue_id) {
                        // Others wrote while this waited: take a fresh time.
                        ts = self.stamp(&mut st.g);
                    }
                    out.push(self.append_locked(&mut st.g, &p, ts)?)
                }
                Err(refused) => out.push(PutOutcome::rejected(refused)),
            }
        }
        Ok(out)
    }

    /// Appends the delivered copies of delayed messages in order under one
    /// lock hold, without the delay conversion (see [`CommitLog::prepare_as`]).
    ///
    /// A copy refused for good (`MESSAGE_ILLEGAL`, `PROPERTIES_SIZE_EXCEEDED`)
    /// gets its outcome and the next one is tried; the first put that fails
    /// for a reason that may pass (no CommitLog file could be created) ends
    /// the batch, so the result may be shorter than `specs` and nothing after
    /// a failed copy is ever written before it.
    pub fn put_redeliveries<'a>(
        &self,
        specs: impl IntoIterator<Item = MessageSpec<'a>>,
    ) -> Result<Vec<PutOutcome>> {
        let specs = specs.into_iter();
        let mut out = Vec::with_capacity(specs.size_hint().0);
        let mut st = self.put.lock();
        let ts = now_ms();
        for s in specs {
            let o = match self.prepare_as(s, true) {
                Ok(p) => self.append_locked(&mut st, &p, ts)?,
                Err(refused) => PutOutcome::rejected(refused),
            };
            let stop = !matches!(
                o.status,
                PutStatus::PutOk | PutStatus::MessageIllegal | PutStatus::PropertiesSizeExceeded
            );
            out.push(o);
            if stop {
                break;
            }
        }
        Ok(out)
    }

    /// Checks every message of a batch; nothing is written. `Err` names
    /// the first refused message (its index and why) and the status it gets.
    pub fn validate_batch(&self, b: &BatchInput<'_>) -> std::result::Result<(), BatchRefusal> {
        let refuse = |index: Option<usize>, status, why: String| BatchRefusal {
            status,
            reason: match index {
                Some(i) => format!("message {i}: {why}"),
                None => why,
            },
        };
        if let Some(why) = topic_problem(b.topic) {
            return Err(refuse(None, PutStatus::MessageIllegal, why));
        }
        if b.queue_id < 0 {
            return Err(refuse(
                None,
                PutStatus::MessageIllegal,
                format!("queue_id {} is negative", b.queue_id),
            ));
        }
        let n = b.bodies.len();
        if !b.props_ends.is_empty() && b.props_ends.len() != n {
            return Err(refuse(
                None,
                PutStatus::MessageIllegal,
                format!("{} property sets for {n} bodies", b.props_ends.len()),
            ));
        }
        for i in 0..n {
            let body = b.bodies[i].len();
            if body > self.cfg.max_message_size {
                return Err(refuse(
                    Some(i),
                    PutStatus::MessageIllegal,
                    format!(
                        "body of {body} bytes exceeds max_message_size {}",
                        self.cfg.max_message_size
                    ),
                ));
            }
            let p = b.props_of(i);
            if !p.is_empty() {
                if p.len() > MAX_PROPERTIES_LEN {
                    let chars = String::from_utf8_lossy(p).encode_utf16().count();
                    let status = if chars > MAX_PROPERTIES_LEN {
                        PutStatus::MessageIllegal
                    } else {
                        PutStatus::PropertiesSizeExceeded
                    };
                    return Err(refuse(
                        Some(i),
                        status,
                        format!(
                            "properties of {} bytes exceed {MAX_PROPERTIES_LEN}",
                            p.len()
                        ),
                    ));
                }
                // Like RocketMQ's batches: no delayed messages (they would
                // leave the queue for SCHEDULE_TOPIC_XXXX).
                if let Some(level) = find_property(p, props::DELAY) {
                    let delayed = std::str::from_utf8(level)
                        .ok()
                        .and_then(|s| s.trim().parse::<i64>().ok())
                        .map_or(true, |l| l > 0);
                    if delayed {
                        return Err(refuse(
                            Some(i),
                            PutStatus::MessageIllegal,
                            "delayed messages cannot be put in a batch".into(),
                        ));
                    }
                }
            }
            let len = b.record_len(i, &self.cfg.store_host);
            if len > self.cfg.max_message_size + 64 * 1024
                || len + END_FILE_MIN_BLANK_LENGTH > self.cfg.file_size
            {
                return Err(refuse(
                    Some(i),
                    PutStatus::MessageIllegal,
                    format!(
                        "a record of {len} bytes does not fit a CommitLog file of {} bytes",
                        self.cfg.file_size
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Appends a validated batch (see [`CommitLog::validate_batch`]) to one
    /// queue: consecutive queue offsets, CommitLog order. The put lock is
    /// held for one CommitLog file's worth at a time; between files other
    /// writers get in (writers to this queue wait for the batch to finish).
    /// `on_file` runs after each file's worth is published.
    ///
    /// A failure to create a CommitLog file mid-batch stops it: the
    /// outcome then carries that status and counts the messages written.
    pub fn append_batch(
        &self,
        b: &BatchInput<'_>,
        want_offsets: bool,
        mut on_file: impl FnMut(),
    ) -> Result<BatchOutcome> {
        let n = b.bodies.len();
        let mut out = BatchOutcome {
            status: PutStatus::PutOk,
            first_offset: -1,
            first_queue_offset: -1,
            count: 0,
            bytes: 0,
            store_timestamp: 0,
            end_offset: -1,
            reason: None,
            offsets: if want_offsets {
                Vec::with_capacity(n)
            } else {
                Vec::new()
            },
        };
        if n == 0 {
            return Ok(out);
        }
        if let Some(busy) = self.page_cache_busy() {
            out.status = busy.status;
            out.reason = Some(busy.reason);
            return Ok(out);
        }
        let mut st = self.put.lock();
        self.wait_queue_free(&mut st, b.topic, b.queue_id);
        st.busy.push((b.topic.to_owned(), b.queue_id));
        let mut hold = BatchHold {
            st,
            cv: &self.batch_done,
            since: &self.lock_since,
            topic: b.topic,
            queue_id: b.queue_id,
        };
        let mut sys_flag = sysflag::TRANSACTION_NOT;
        if b.born_host.is_ipv6() {
            sys_flag |= sysflag::BORNHOST_V6;
        }
        if self.cfg.store_host.is_ipv6() {
            sys_flag |= sysflag::STOREHOST_V6;
        }
        let store_host = self.cfg.store_host;
        let mut i = 0usize;
        let mut qo = *hold.st.table.slot(b.topic, b.queue_id);
        out.first_queue_offset = qo;
        while i < n {
            if i > 0 {
                // A file's worth is done: let waiting writers in.
                self.lock_since.store(0, Ordering::Relaxed);
                MutexGuard::bump(&mut hold.st);
            }
            let ts = self.stamp(&mut hold.st);
            // The busy check sees how long this file's worth holds the lock.
            self.lock_since.store(ts, Ordering::Relaxed);
            if i == 0 {
                out.store_timestamp = ts;
            }
            let file = match &hold.st.current {
                Some(f) if !f.is_full() => f.clone(),
                _ => match self.mfq.last_file_or_create(0) {
                    Ok(f) => {
                        hold.st.current = Some(f.clone());
                        f
                    }
                    Err(e) => {
                        log::error!("cannot create CommitLog file: {e}");
                        out.status = PutStatus::CreateMappedFileFailed;
                        break;
                    }
                },
            };
            let from = file.file_from_offset() as i64;
            let start = i;
            let offsets = &mut out.offsets;
            let mut bytes = 0u64;
            let mut end = -1i64;
            // Reserve blocks for what this file will take: the records that
            // fit and a blank's 8 bytes (at most the rest of the file).
            let room = file.file_size() - file.wrote_position();
            let mut need = END_FILE_MIN_BLANK_LENGTH;
            for j in i..n {
                need += b.record_len(j, &store_host);
                if need >= room {
                    break;
                }
            }
            let appended = file.append_reserved(need, |tail, at| {
                let mut pos = 0usize;
                let mut first = None;
                while i < n {
                    let len = b.record_len(i, &store_host);
                    if pos + len + END_FILE_MIN_BLANK_LENGTH > tail.len() {
                        // END_OF_FILE: the blank fills the file; go on in the next.
                        let rest = tail.len() - pos;
                        encode_blank(&mut tail[pos..], rest);
                        return (tail.len(), first);
                    }
                    let phy = from + (at + pos) as i64;
                    first.get_or_insert(phy);
                    let spec = MessageSpec {
                        topic: Cow::Borrowed(b.topic),
                        queue_id: b.queue_id,
                        flag: b.flag,
                        sys_flag,
                        born_timestamp: b.born_timestamp,
                        born_host: b.born_host,
                        reconsume_times: 0,
                        prepared_transaction_offset: 0,
                        body: Cow::Borrowed(b.bodies[i]),
                        properties: Cow::Borrowed(b.props_of(i)),
                    };
                    let w = encode_v1_crc_of_copy(
                        &mut tail[pos..],
                        &spec,
                        sys_flag,
                        &store_host,
                        qo,
                        phy,
                        ts,
                    );
                    debug_assert_eq!(w, len);
                    if want_offsets {
                        offsets.push(phy);
                    }
                    pos += len;
                    bytes += len as u64;
                    end = phy + len as i64;
                    qo += 1;
                    i += 1;
                }
                (pos, first)
            });
            let first_phy = match appended {
                Ok(f) => f,
                Err(e @ StoreError::Io { .. }) => {
                    RESERVE_FAILURES.log(log::Level::Error, || {
                        format!("cannot reserve CommitLog space: {e}")
                    });
                    out.status = PutStatus::CreateMappedFileFailed;
                    out.reason = Some(format!("cannot reserve space in the CommitLog file: {e}"));
                    break;
                }
                Err(e) => return Err(e),
            };
            if i > start {
                file.set_store_timestamp(ts);
                *hold.st.table.slot(b.topic, b.queue_id) = qo;
                if out.first_offset < 0 {
                    out.first_offset = first_phy.unwrap_or(-1);
                }
                out.count += i - start;
                out.bytes += bytes;
                out.end_offset = end;
                on_file();
            }
        }
        drop(hold);
        Ok(out)
    }

    fn append_locked(&self, st: &mut PutState, p: &Prepared<'_>, ts: i64) -> Result<PutOutcome> {
        let spec = &p.spec;
        let tran = spec.transaction_type();
        let counted = tran == sysflag::TRANSACTION_NOT || tran == sysflag::TRANSACTION_COMMIT;
        let mut slot = if counted {
            Some(st.table.slot(&spec.topic, spec.queue_id))
        } else {
            None
        };
        let queue_offset = slot.as_deref().copied().unwrap_or(0);
        for _attempt in 0..2 {
            // The current file is borrowed, not cloned: no reference count
            // traffic (two atomic read-modify-writes) per put.
            let file = match &st.current {
                Some(f) if !f.is_full() => f,
                _ => {
                    match self.mfq.last_file_or_create(0) {
                        Ok(f) => {
                            if let Some(n) = CREATE_FAILURES.reset() {
                                log::warn!("CommitLog files can be created again after {n} failed attempts");
                            }
                            &*st.current.insert(f)
                        }
                        Err(e) => {
                            // A full disk fails every put: log a few lines and a count,
                            // not one line per attempt.
                            CREATE_FAILURES.log(log::Level::Error, || {
                                format!("cannot create CommitLog file: {e}")
                            });
                            return Ok(PutOutcome::rejected(Refused::new(
                                PutStatus::CreateMappedFileFailed,
                                format!("cannot create a CommitLog file: {e}"),
                            )));
                        }
                    }
                }
            };
            let from = file.file_from_offset() as i64;
            // At most the record and the 8 bytes a blank needs are written;
            // their blocks are reserved first (a chunk at a time). A full
            // disk fails the put with a status, never a fault.
            let appended = file.append_reserved(p.len + END_FILE_MIN_BLANK_LENGTH, |tail, at| {
                if p.len + END_FILE_MIN_BLANK_LENGTH > tail.len() {
                    encode_blank(tail, tail.len());
                    return (tail.len(), None);
                }
                let phy = from + at as i64;
                let n = encode_v1(
                    tail,
                    spec,
                    p.sys_flag,
                    p.crc,
                    &self.cfg.store_host,
                    queue_offset,
                    phy,
                    ts,
                );
                (n, Some(phy))
            });
            let appended = match appended {
                Ok(a) => {
                    if let Some(n) = RESERVE_FAILURES.reset() {
                        log::warn!(
                            "CommitLog space can be reserved again after {n} failed attempts"
                        );
                    }
                    a
                }
                Err(e @ StoreError::Io { .. }) => {
                    RESERVE_FAILURES.log(log::Level::Error, || {
                        format!("cannot reserve CommitLog space: {e}")
                    });
                    return Ok(PutOutcome::rejected(Refused::new(
                        PutStatus::CreateMappedFileFailed,
                        format!("cannot reserve space in the CommitLog file: {e}"),
                    )));
                }
                Err(e) => return Err(e),
            };
            if appended.is_none() {
                // The blank filled the file: its age is now fixed.
                file.stamp_mtime_when_full();
            }
            if let Some(phy) = appended {
                file.set_store_timestamp(ts);
                if let Some(slot) = slot.as_deref_mut() {
                    *slot = queue_offset + 1;
                }
                return Ok(PutOutcome {
                    status: PutStatus::PutOk,
                    wrote_offset: phy,
                    wrote_bytes: p.len as i32,
                    queue_offset,
                    store_timestamp: ts,
                    reason: None,
                });
            }
            // END_OF_FILE: the blank filled the file; retry in the next one.
        }
        Err(StoreError::internal(
            "message did not fit in a fresh CommitLog file",
        ))
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

    /// Scans records from the start of file `start_index`, calling `visit`
    /// for each valid record ([`parse_valid_record`]), and stops at the first
    /// invalid one or at the end of the last file.
    pub fn scan(
        &self,
        start_index: usize,
        check_crc: bool,
        mut visit: impl FnMut(u64, &RecordView, &[u8]),
    ) -> ScanReport {
        // Without a damage policy the scan has nothing to refuse: no error.
        self.scan_inner(start_index, check_crc, None, Some(&mut visit))
            .unwrap_or_default()
    }

    /// The recovery scan: like [`CommitLog::scan`], but invalid data that
    /// valid, durable records follow is damage, not a torn tail (see
    /// [`DamagePolicy`]): it is refused (`CorruptedError` naming file and
    /// offset; nothing has been written) or skipped and reported.
    pub fn scan_for_recovery(
        &self,
        start_index: usize,
        check_crc: bool,
        policy: &DamagePolicy,
    ) -> Result<ScanReport> {
        self.scan_inner::<fn(u64, &RecordView, &[u8])>(start_index, check_crc, Some(policy), None)
    }

    /// The scan. Without a visitor each valid record is only measured
    /// ([`valid_record_size`]: the same rules, no field decoded for nobody).
    fn scan_inner<F: FnMut(u64, &RecordView, &[u8])>(
        &self,
        start_index: usize,
        check_crc: bool,
        policy: Option<&DamagePolicy>,
        mut visit: Option<&mut F>,
    ) -> Result<ScanReport> {
        let files = self.mfq.files();
        let mut rep = ScanReport::default();
        let Some(first) = files.get(start_index) else {
            rep.end_offset = files.first().map(|f| f.file_from_offset()).unwrap_or(0);
            return Ok(rep);
        };
        rep.end_offset = first.file_from_offset();
        let mut i = start_index;
        let mut pos = 0usize;
        while let Some(f) = files.get(i) {
            if pos == 0 {
                rep.files_scanned += 1;
            }
            let data = f.raw();
            let from = f.file_from_offset();
            let began = pos;
            let mut reached_blank = false;
            let mut resume = None;
            loop {
                let parsed = match visit.as_mut() {
                    Some(_) => parse_valid_record(&data[pos..], from + pos as u64, check_crc),
                    None => match valid_record_size(&data[pos..], from + pos as u64, check_crc) {
                        Ok(n) => {
                            pos += n;
                            rep.records += 1;
                            continue;
                        }
                        Err(n) => n.into(),
                    },
                };
                match parsed {
                    Parsed::Record(v) => {
                        let rec = &data[pos..pos + v.total_size];
                        if let Some(visit) = visit.as_mut() {
                            visit(from + pos as u64, &v, rec);
                        }
                        pos += v.total_size;
                        rep.records += 1;
                    }
                    Parsed::Blank => {
                        reached_blank = true;
                        break;
                    }
                    Parsed::End { reason } => {
                        if let Some(p) = policy {
                            resume =
                                self.judge_invalid(&files, i, pos, reason, check_crc, p, &mut rep)?;
                        }
                        if resume.is_none() && data[pos..].iter().take(8).any(|&b| b != 0) {
                            rep.stop_reason =
                                Some(format!("{reason} at offset {}", from + pos as u64));
                        }
                        break;
                    }
                }
            }
            rep.bytes_scanned += (pos - began) as u64;
            if let Some((ni, npos)) = resume {
                i = ni;
                pos = npos;
                continue;
            }
            if reached_blank {
                rep.end_offset = from + f.file_size() as u64;
                if i + 1 == files.len() {
                    // The log ends with a full file: the next put creates a new one.
                    break;
                }
                i += 1;
                pos = 0;
                continue;
            }
            rep.end_offset = from + pos as u64;
            break;
        }
        Ok(rep)
    }

    /// Invalid data at `pos` of file `index`: a torn tail (`Ok(None)`: the
    /// scan ends here) or damage in durable data, which is refused or
    /// skipped (`Ok(Some((file, pos)))`: where the next valid record is).
    #[allow(clippy::too_many_arguments)]
    fn judge_invalid(
        &self,
        files: &[Arc<MappedFile>],
        index: usize,
        pos: usize,
        reason: &'static str,
        check_crc: bool,
        policy: &DamagePolicy,
        rep: &mut ScanReport,
    ) -> Result<Option<(usize, usize)>> {
        let f = &files[index];
        let at = f.file_from_offset() + pos as u64;
        let known = policy.known.iter().any(|&(s, e)| s <= at && at < e);
        if let DurableBound::Mark(m) = policy.bound {
            if at >= m && !known {
                // Past the durable mark: a torn tail, whatever follows.
                return Ok(None);
            }
        }
        let next = find_resume_point(files, index, pos, check_crc);
        let next_offset = next.map(|(i, p)| files[i].file_from_offset() + p as u64);
        let durable = known
            || match policy.bound {
                DurableBound::Mark(m) => at < m,
                DurableBound::Timestamp(ts) => {
                    ts > 0
                        && next.is_some_and(|(i, p)| {
                            matches!(parse_record(&files[i].raw()[p..], false),
                                Parsed::Record(v) if v.store_timestamp <= ts)
                        })
                }
            };
        if !durable {
            return Ok(None);
        }
        let Some(end) = next_offset else {
            // Nothing intact follows: cutting here zeroes no intact record
            // (SPEC: only damage that valid records follow is refused), but
            // the report says that durable data ended the log.
            log::warn!(
                "invalid data at CommitLog offset {at} in {} lies inside durable data ({reason}) \
                 and no intact record follows: the log ends there",
                f.path().display()
            );
            rep.damaged.push(Damage {
                offset: at,
                end: at,
                file: f.path().to_path_buf(),
                reason: format!("{reason}; no intact record follows"),
            });
            return Ok(None);
        };
        if !known && !policy.skip {
            return Err(StoreError::corrupted(
                f.path(),
                pos as u64,
                format!(
                    "damaged record at CommitLog offset {at} ({reason}) inside durable data, \
                     intact records resume at {end}; open with on_corruption=\"skip\" or run \
                     `rocketstore repair` to skip it"
                ),
            ));
        }
        log::warn!(
            "skipping damaged CommitLog bytes [{at}, {end}) in {} ({reason})",
            f.path().display()
        );
        rep.damaged.push(Damage {
            offset: at,
            end,
            file: f.path().to_path_buf(),
            reason: reason.to_string(),
        });
        Ok(next)
    }

    /// Replays the records of `[from, until)`, jumping over the `damaged`
    /// ranges a recovery scan found (the records were validated by it);
    /// `visit_damaged` gets each damaged range's start and length and, when
    /// its header still reads as a record of that length, the record.
    pub fn replay(
        &self,
        from: u64,
        until: u64,
        damaged: &[(u64, u64)],
        mut visit: impl FnMut(u64, &RecordView, &[u8]) -> Result<()>,
        mut visit_damaged: impl FnMut(u64, Option<(&RecordView, &[u8])>) -> Result<()>,
    ) -> Result<()> {
        let mut at = from;
        while at < until {
            let Some(f) = self.mfq.find_by_offset(at, false) else {
                break;
            };
            let base = f.file_from_offset();
            let data = f.raw();
            let pos = (at - base) as usize;
            if let Some(&(_, e)) = damaged.iter().find(|&&(s, e)| s == at && e > s) {
                let len = (e - at) as usize;
                let view = match data.get(pos..).map(|d| parse_record(d, false)) {
                    Some(Parsed::Record(v))
                        if v.total_size == len
                            && v.physical_offset == at as i64
                            && is_readable_topic_bytes(
                                &data[pos..][v.topic.clone()],
                                MAX_TOPIC_LEN_V2,
                            )
                            && v.queue_id >= 0
                            && v.queue_offset >= 0 =>
                    {
                        Some(v)
                    }
                    _ => None,
                };
                visit_damaged(at, view.as_ref().map(|v| (v, &data[pos..pos + len])))?;
                at = e;
                continue;
            }
            match parse_valid_record(&data[pos..], at, false) {
                Parsed::Record(v) => {
                    visit(at, &v, &data[pos..pos + v.total_size])?;
                    at += v.total_size as u64;
                }
                Parsed::Blank => at = self.roll_next_file(at),
                Parsed::End { .. } => break,
            }
        }
        Ok(())
    }

    /// Remembers the damaged ranges recovery skipped (pulls skip and count
    /// the units pointing into them).
    pub fn set_damaged(&self, ranges: Vec<(u64, u64)>) {
        let mut d = self.damaged.write();
        self.has_damage
            .store(!ranges.is_empty(), std::sync::atomic::Ordering::Release);
        *d = ranges;
    }

    /// End of the damaged range holding `phy`, if one does.
    #[inline]
    pub fn damaged_range_end(&self, phy: u64) -> Option<u64> {
        if !self.has_damage.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        self.damaged
            .read()
            .iter()
            .find(|&&(s, e)| s <= phy && phy < e)
            .map(|&(_, e)| e)
    }

    /// The damaged ranges recovery skipped.
    pub fn damaged(&self) -> Vec<(u64, u64)> {
        self.damaged.read().clone()
    }

    /// True when `phy` lies in a damaged range recovery skipped.
    #[inline]
    pub fn is_damaged(&self, phy: i64) -> bool {
        u64::try_from(phy).is_ok_and(|p| self.damaged_range_end(p).is_some())
    }

    /// Magic and store timestamp of the first record of file `index`.
    pub fn first_record_of_file(&self, index: usize) -> Option<(i32, i64)> {
        let f = self.mfq.files().get(index)?.clone();
        match parse_record(f.raw(), false) {
            Parsed::Record(v) => Some((v.magic, v.store_timestamp)),
            _ => None,
        }
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

    /// Bytes of `f` from `pos` that a reader may parse: below the write
    /// position for the writer; for a read-only store (another process
    /// writes) the whole mapped file, whose records are validated as parsed.
    pub fn readable<'f>(&self, f: &'f MappedFile, pos: usize) -> Option<&'f [u8]> {
        if self.mfq.is_writable() {
            f.readable_from(pos)
        } else {
            f.raw().get(pos..)
        }
    }

    /// The store timestamp of the record at `phy`, if one is there.
    pub fn store_timestamp_at(&self, phy: i64) -> Option<i64> {
        let phy = u64::try_from(phy).ok()?;
        let f = self.mfq.find_by_offset(phy, false)?;
        let pos = (phy - f.file_from_offset()) as usize;
        match parse_record(self.readable(&f, pos)?, false) {
            Parsed::Record(v) => Some(v.store_timestamp),
            _ => None,
        }
    }

    /// Read-only stores: adopts CommitLog files another process created and
    /// forgets files it deleted. True when the readable end moved.
    pub fn refresh(&self) -> Result<bool> {
        if self.mfq.is_writable() {
            return Ok(false);
        }
        let before = self.mfq.max_offset();
        let gone = self
            .mfq
            .files()
            .iter()
            .take_while(|f| !f.path().exists())
            .count();
        if gone > 0 {
            self.mfq.remove_head(gone);
        }
        self.mfq.adopt_new_files()?;
        // Advance the end over records that became valid since.
        let files = self.mfq.files();
        let start = files
            .iter()
            .position(|f| !f.is_full())
            .unwrap_or(files.len());
        for f in files.iter().skip(start) {
            let data = f.raw();
            let mut pos = f.wrote_position();
            let full = loop {
                match parse_record(&data[pos..], false) {
                    Parsed::Record(v) => pos += v.total_size,
                    Parsed::Blank => break true,
                    Parsed::End { .. } => break false,
                }
            };
            f.set_positions(if full { f.file_size() } else { pos });
            if !full {
                break;
            }
        }
        Ok(self.mfq.max_offset() != before)
    }

    /// The valid record at `phy` (body CRC checked), with its bytes copied
    /// out; `None` for anything else (see [`CommitLog::read_checked`] for why).
    pub fn read_record(&self, phy: u64) -> Option<(RecordView, Vec<u8>)> {
        match self.read_checked(phy) {
            RecordRead::Found(v, raw) => Some((v, raw)),
            _ => None,
        }
    }

    /// What a read finds at `phy`: a valid record (its bytes copied out),
    /// or why there is none. A record whose bytes start with a record magic
    /// but fail [`check_read_record`] (size fields, body CRC), or whose size
    /// runs past the end of its file, is [`RecordRead::Damaged`]; it is never
    /// returned as a message.
    pub fn read_checked(&self, phy: u64) -> RecordRead {
        let Some(f) = self.mfq.find_by_offset(phy, false) else {
            return RecordRead::NoFile;
        };
        let pos = (phy - f.file_from_offset()) as usize;
        let in_file = f.file_size() - pos;
        let Some(data) = self.readable(&f, pos) else {
            return RecordRead::NotYet;
        };
        if data.len() < 8 {
            return if in_file < 8 {
                RecordRead::NoRecord
            } else {
                RecordRead::NotYet
            };
        }
        let total = i32::from_be_bytes([data[0], data[1], data[2], data[3]]);
        let magic = i32::from_be_bytes([data[4], data[5], data[6], data[7]]);
        if magic != message::MAGIC_V1 && magic != message::MAGIC_V2 {
            return RecordRead::NoRecord;
        }
        let damaged = |reason| RecordRead::Damaged {
            path: f.path().to_path_buf(),
            reason,
        };
        if total <= 0 || total as usize > in_file {
            return damaged("record size outside its file");
        }
        let total = total as usize;
        if total > data.len() {
            // Not all of it is readable yet (a writer's pending bytes).
            return RecordRead::NotYet;
        }
        let rec = &data[..total];
        match check_read_record(rec) {
            Ok(v) => RecordRead::Found(v, rec.to_vec()),
            Err(reason) => damaged(reason),
        }
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

/// What [`CommitLog::read_checked`] found at an offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordRead {
    /// A valid record and its bytes.
    Found(RecordView, Vec<u8>),
    /// No file holds the offset: below the first file (expired) or past the
    /// last one (for a read-only store: maybe not adopted yet).
    NoFile,
    /// The offset (or part of the record there) lies past what readers may
    /// see yet: bytes the writer has not made readable.
    NotYet,
    /// No record starts here: zeros, an end-of-file blank, no record magic.
    NoRecord,
    /// A record starts here but is not valid.
    Damaged {
        /// The CommitLog file holding it.
        path: PathBuf,
        reason: &'static str,
    },
}

/// The read path's record check: `rec` holds exactly one record (its
/// TOTALSIZE bytes). Valid when its fields add up to its size and its body
/// CRC matches (SPEC "A record is valid"; reads always check the CRC).
/// Every read that serves a message goes through here.
pub fn check_read_record(rec: &[u8]) -> std::result::Result<RecordView, &'static str> {
    match parse_record(rec, true) {
        Parsed::Record(v) if v.total_size == rec.len() => Ok(v),
        Parsed::Record(_) => Err("record size differs from the sum of its fields"),
        Parsed::Blank => Err("end-of-file blank where a record was expected"),
        Parsed::End { reason } => Err(reason),
    }
}

/// Rebuilds the queue-offset table from a record as a scan visits it.
pub fn account_record(table: &mut QueueOffsetTable, v: &RecordView, rec: &[u8]) {
    let tran = v.sys_flag & sysflag::TRANSACTION_TYPE_MASK;
    if tran == sysflag::TRANSACTION_NOT || tran == sysflag::TRANSACTION_COMMIT {
        let topic = String::from_utf8_lossy(&rec[v.topic.clone()]);
        table.raise(&topic, v.queue_id, v.queue_offset + 1);
    }
}
