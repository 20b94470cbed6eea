//! Dispatch (RocketMQ's `ReputMessageService`): turns CommitLog records into
//! ConsumeQueue units and index entries.
//!
//! ```text
//!  CommitLog  ...[rec][rec][rec]|........        dispatch_from -> max_offset
//!                 |    |    |
//!                 v    v    v
//!  consumequeue/<topic>/<qid>: (phy, size, tagsCode)   index/: topic#key -> phy
//! ```
//! [`Dispatcher::dispatch_once`] is one batch step. The `dispatch`
//! [`ServiceThread`] ([`Dispatcher::start_thread`]) runs it in a loop: a Python thread woken per put would cap puts far below what
//! the engine does and add the interpreter's switch interval to visibility
//! latency. A put wakes the thread only when it is asleep (one atomic load
//! otherwise). Consumers wait on [`Dispatcher::wait_for_seq`].

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::{Condvar, Mutex};

use crate::checkpoint::Checkpoint;
use crate::error::{Result, StoreError};
use crate::index::index_file::split_keys;
use crate::index::index_service::IndexStore;
use crate::log::commitlog::CommitLog;
use crate::log::message::{
    find_property, iter_properties, parse_valid_record, sysflag, tags_code, Parsed, RecordView,
    SCHEDULE_TOPIC,
};
use crate::queue::consume_queue::CqUnit;
use crate::queue::cq_table::ConsumeQueueTable;
use crate::ratelog::RateLimited;
use crate::running::{is_transient_resource, Flag, RunningFlags};
use crate::services::service_thread::{ServiceThread, Signal};

/// Bytes one dispatch step reads at most.
pub const DEFAULT_STEP_BYTES: usize = 4 << 20;

/// What one dispatch step did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchStats {
    /// Records dispatched.
    pub records: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// The dispatch state shared by the thread, the put path and readers.
pub struct Dispatcher {
    commitlog: Arc<CommitLog>,
    cqs: Arc<ConsumeQueueTable>,
    index: Option<Arc<IndexStore>>,
    checkpoint: Option<Arc<Checkpoint>>,
    delay_levels: Vec<i64>,
    dispatch_from: AtomicU64,
    step: Mutex<()>,
    // consumers waiting for new messages
    seq: AtomicU64,
    waiters: AtomicUsize,
    seq_lock: Mutex<()>,
    seq_cv: Condvar,
    /// Wakes the dispatch thread (a put, a flush).
    signal: Arc<Signal>,
    /// The store's running state: a failed step sets
    /// WRITE_LOGICS_QUEUE_ERROR or WRITE_INDEX_FILE_ERROR.
    flags: Arc<RunningFlags>,
    /// The flag the last failed step sets (which structure failed).
    step_error: AtomicU32,
    /// SYNC_FLUSH: dispatch only what the CommitLog flush covers, so no
    /// reader (consumer, queue, index, lookup) sees a record before it is on
    /// disk.
    flushed_only: AtomicBool,
    /// A slave: the log's end may fall inside a record (frames do not
    /// follow records); such a partial record is pending, not damage.
    partial_tail: AtomicBool,
}

/// A few keys without a heap allocation (most messages carry one or two).
mod smallvec_keys {
    pub struct Keys<'a> {
        inline: [&'a str; 4],
        len: usize,
        spill: Vec<&'a str>,
    }

    impl<'a> Keys<'a> {
        pub fn new() -> Self {
            Self {
                inline: [""; 4],
                len: 0,
                spill: Vec::new(),
            }
        }

        pub fn push(&mut self, k: &'a str) {
            if self.spill.is_empty() && self.len < self.inline.len() {
                self.inline[self.len] = k;
                self.len += 1;
            } else {
                if self.spill.is_empty() {
                    self.spill.extend_from_slice(&self.inline[..self.len]);
                }
                self.spill.push(k);
            }
        }

        pub fn as_slice(&self) -> &[&'a str] {
            if self.spill.is_empty() {
                &self.inline[..self.len]
            } else {
                &self.spill
            }
        }
    }
}

/// The CQ tag code of a record: the TAGS hash, or for a delayed message
/// parked in `SCHEDULE_TOPIC_XXXX` its delivery time (docs/format.md §8).
fn tags_code_of(
    topic: &str,
    tags: Option<&[u8]>,
    delay: Option<&[u8]>,
    store_ts: i64,
    delay_levels: &[i64],
) -> i64 {
    if topic == SCHEDULE_TOPIC {
        if let Some(level) = delay
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.trim().parse::<i64>().ok())
        {
            let level = level.min(delay_levels.len() as i64);
            if level > 0 {
                let d = delay_levels
                    .get(level as usize - 1)
                    .copied()
                    .unwrap_or(1000);
                return store_ts + d;
            }
        }
    }
    tags_code(tags.and_then(|t| std::str::from_utf8(t).ok()))
}

impl Dispatcher {
    /// A dispatcher of `commitlog` into `cqs` and `index` from CommitLog offset `from`, recording progress in `checkpoint`.
    pub fn new(
        commitlog: Arc<CommitLog>,
        cqs: Arc<ConsumeQueueTable>,
        index: Option<Arc<IndexStore>>,
        checkpoint: Option<Arc<Checkpoint>>,
        delay_levels: Vec<i64>,
        dispatch_from: u64,
    ) -> Self {
        Self {
            commitlog,
            cqs,
            index,
            checkpoint,
            delay_levels,
            dispatch_from: AtomicU64::new(dispatch_from),
            step: Mutex::new(()),
            seq: AtomicU64::new(0),
            waiters: AtomicUsize::new(0),
            seq_lock: Mutex::new(()),
            seq_cv: Condvar::new(),
            signal: Arc::new(Signal::new()),
            flags: Arc::new(RunningFlags::new()),
            step_error: AtomicU32::new(Flag::WriteLogicsQueueError as u32),
            flushed_only: AtomicBool::new(false),
            partial_tail: AtomicBool::new(false),
        }
    }

    /// Shares the store's running state (a dispatcher made alone has its own).
    pub fn with_running_flags(mut self, flags: Arc<RunningFlags>) -> Self {
        self.flags = flags;
        self
    }

    /// Dispatches only records the CommitLog flush covers (SYNC_FLUSH).
    pub fn set_flushed_only(&self, on: bool) {
        self.flushed_only.store(on, Ordering::Release);
    }

    /// End of what dispatch may read: the CommitLog end, or under
    /// SYNC_FLUSH its flushed offset.
    #[inline]
    fn dispatch_end(&self) -> u64 {
        let max = self.commitlog.max_offset();
        if self.flushed_only.load(Ordering::Relaxed) {
            max.min(self.commitlog.flushed_offset())
        } else {
            max
        }
    }

    /// Treats a record cut by the log's end as pending (a slave's log).
    pub fn set_partial_tail_pending(&self, on: bool) {
        self.partial_tail.store(on, Ordering::Release);
    }

    /// Runs `cut` (the log's end moves back over a partial record) with no
    /// dispatch step in flight, then stops treating a record cut by the
    /// log's end as pending. A step that had read the partial record before
    /// the cut would otherwise judge it after the flag went off, and fail
    /// the store on bytes that are no longer in the log.
    pub fn end_partial_tail<T>(&self, cut: impl FnOnce() -> Result<T>) -> Result<T> {
        let _g = self.step.lock();
        let r = cut()?;
        self.partial_tail.store(false, Ordering::Release);
        Ok(r)
    }

    /// A slave's log ends inside the record at `buf` (the rest of it has
    /// not come yet): its first 8 bytes are not all there, or its header's
    /// size reaches past the end.
    fn is_partial_tail(&self, buf: &[u8], at_log_end: bool) -> bool {
        if !at_log_end || !self.partial_tail.load(Ordering::Acquire) {
            return false;
        }
        if buf.len() < 8 {
            return true;
        }
        let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let magic = i32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
        (magic == crate::log::message::MAGIC_V1 || magic == crate::log::message::MAGIC_V2)
            && size > 0
            && size as usize > buf.len()
    }

    /// The CommitLog offset dispatch has reached.
    pub fn dispatch_from(&self) -> u64 {
        self.dispatch_from.load(Ordering::Acquire)
    }

    /// Sets where dispatch continues (after recovery).
    pub fn set_dispatch_from(&self, off: u64) {
        let _g = self.step.lock();
        self.dispatch_from.store(off, Ordering::Release);
    }

    /// CommitLog bytes not yet dispatched.
    pub fn behind_bytes(&self) -> u64 {
        self.commitlog
            .max_offset()
            .saturating_sub(self.dispatch_from())
    }

    /// Why dispatch stopped, if it failed (the store's first failure).
    pub fn failure(&self) -> Option<String> {
        self.flags
            .reason_if(Flag::WriteLogicsQueueError)
            .or_else(|| self.flags.reason_if(Flag::WriteIndexFileError))
    }

    /// The consume-queue unit a record gets (`None` for transaction types
    /// that are not dispatched, or a topic that is not UTF-8).
    pub fn cq_unit_of(&self, phy: u64, v: &RecordView, rec: &[u8]) -> Option<CqUnit> {
        let tran = v.sys_flag & sysflag::TRANSACTION_TYPE_MASK;
        if tran != sysflag::TRANSACTION_NOT && tran != sysflag::TRANSACTION_COMMIT {
            return None;
        }
        let topic = std::str::from_utf8(&rec[v.topic.clone()]).ok()?;
        let props = &rec[v.properties.clone()];
        let tags = find_property(props, "TAGS");
        let delay = find_property(props, "DELAY");
        Some(CqUnit {
            phy_offset: phy as i64,
            size: v.total_size as i32,
            tags_code: tags_code_of(topic, tags, delay, v.store_timestamp, &self.delay_levels),
        })
    }

    /// Records that a dispatch step failed with `e`: sets the flag of the
    /// structure that failed (the first reason stays). Returns true for the
    /// store's first failure.
    pub fn record_failure(&self, e: &StoreError) -> bool {
        let flag = if self.step_error.load(Ordering::Acquire) == Flag::WriteIndexFileError as u32 {
            Flag::WriteIndexFileError
        } else {
            Flag::WriteLogicsQueueError
        };
        self.flags.fail(flag, format!("dispatch failed: {e}"))
    }

    /// Dispatches one record (also used by abnormal recovery).
    pub fn dispatch_record(
        &self,
        phy: u64,
        v: &RecordView,
        rec: &[u8],
        build_cq: bool,
        build_index: bool,
    ) -> Result<()> {
        let tran = v.sys_flag & sysflag::TRANSACTION_TYPE_MASK;
        let topic = std::str::from_utf8(&rec[v.topic.clone()]).map_err(|_| {
            StoreError::corrupted(self.commitlog.queue().dir(), phy, "topic is not UTF-8")
        })?;
        // One pass over the properties for everything dispatch needs.
        let mut tags = None;
        let mut keys_raw: &[u8] = b"";
        let mut uniq = None;
        let mut delay = None;
        for (k, val) in iter_properties(&rec[v.properties.clone()]) {
            match k {
                b"TAGS" => tags = tags.or(Some(val)),
                b"KEYS" if keys_raw.is_empty() => keys_raw = val,
                b"UNIQ_KEY" => uniq = uniq.or(Some(val)),
                b"DELAY" => delay = delay.or(Some(val)),
                _ => {}
            }
        }
        if build_cq && (tran == sysflag::TRANSACTION_NOT || tran == sysflag::TRANSACTION_COMMIT) {
            let code = tags_code_of(topic, tags, delay, v.store_timestamp, &self.delay_levels);
            let cq = self.cqs.get_or_create(topic, v.queue_id)?;
            cq.put(phy as i64, v.total_size as i32, code, v.queue_offset)?;
            if let Some(c) = &self.checkpoint {
                c.set_logics_msg_timestamp(v.store_timestamp);
            }
        }
        if build_index {
            if let Some(index) = &self.index {
                let uniq = uniq.and_then(|k| std::str::from_utf8(k).ok());
                let keys_str = std::str::from_utf8(keys_raw).unwrap_or("");
                if uniq.is_some() || !keys_str.is_empty() {
                    let mut keys: smallvec_keys::Keys<'_> = smallvec_keys::Keys::new();
                    for k in split_keys(keys_str) {
                        keys.push(k);
                    }
                    index
                        .build_index(
                            topic,
                            keys.as_slice(),
                            uniq,
                            phy as i64,
                            v.store_timestamp,
                            tran,
                        )
                        .inspect_err(|_| {
                            self.step_error
                                .store(Flag::WriteIndexFileError as u32, Ordering::Release)
                        })?;
                }
            }
        }
        Ok(())
    }

    /// Dispatches records from the dispatch offset, up to `max_bytes` of them.
    pub fn dispatch_once(&self, max_bytes: usize) -> Result<DispatchStats> {
        let _g = self.step.lock();
        self.step_error
            .store(Flag::WriteLogicsQueueError as u32, Ordering::Relaxed);
        let mut stats = DispatchStats::default();
        let mut from = self.dispatch_from.load(Ordering::Acquire);
        loop {
            let max = self.dispatch_end();
            if from >= max || stats.bytes as usize >= max_bytes {
                break;
            }
            let min = self.commitlog.min_offset();
            if min >= 0 && from < min as u64 {
                // Those files expired before they were dispatched.
                log::warn!(
                    "dispatch: CommitLog {from}..{min} was deleted before it was dispatched"
                );
                from = min as u64;
                continue;
            }
            let Some(file) = self.commitlog.file_for(from) else {
                break;
            };
            let pos = (from - file.file_from_offset()) as usize;
            let Some(data) = file.readable_from(pos) else {
                break;
            };
            // Never past the dispatch end (the flushed offset under SYNC_FLUSH).
            let data = &data[..data.len().min((max - from) as usize)];
            #[cfg(feature = "failpoints")]
            crate::failpoint::pause("pause_dispatch_step");
            let mut p = 0usize;
            let mut roll = false;
            while p < data.len() && (stats.bytes as usize) < max_bytes {
                let at = from + p as u64;
                if let Some(end) = self.commitlog.damaged_range_end(at) {
                    // Recovery skipped this damaged range: nothing to dispatch.
                    let skip = (end - at) as usize;
                    if p + skip > data.len() {
                        p = data.len();
                        break;
                    }
                    p += skip;
                    continue;
                }
                match parse_valid_record(&data[p..], at, false) {
                    Parsed::Record(v) => {
                        let rec = &data[p..p + v.total_size];
                        self.dispatch_record(from + p as u64, &v, rec, true, true)?;
                        p += v.total_size;
                        stats.records += 1;
                        stats.bytes += v.total_size as u64;
                    }
                    Parsed::Blank => {
                        roll = true;
                        break;
                    }
                    Parsed::End { .. }
                        if self.is_partial_tail(&data[p..], from + data.len() as u64 >= max) =>
                    {
                        // The rest of the record has not come yet.
                        break;
                    }
                    Parsed::End { reason } => {
                        let left = data.len() - p;
                        let size = if left >= 8 {
                            i32::from_be_bytes([data[p], data[p + 1], data[p + 2], data[p + 3]])
                        } else {
                            0
                        };
                        let skippable = size > 0 && (size as usize) <= left;
                        log::error!(
                            "dispatch: invalid record at {} ({reason}){}",
                            from + p as u64,
                            if skippable { "; skipping it" } else { "" }
                        );
                        if skippable {
                            p += size as usize;
                        } else {
                            self.flags.fail(
                                Flag::WriteLogicsQueueError,
                                format!(
                                    "dispatch failed: invalid record at CommitLog offset {}: {reason}",
                                    from + p as u64
                                ),
                            );
                            self.dispatch_from.store(from + p as u64, Ordering::Release);
                            return Err(StoreError::corrupted(
                                file.path(),
                                (pos + p) as u64,
                                reason,
                            ));
                        }
                    }
                }
            }
            from = if roll {
                self.commitlog.roll_next_file(from)
            } else {
                from + p as u64
            };
            self.dispatch_from.store(from, Ordering::Release);
            if !roll && p == 0 {
                break;
            }
        }
        self.dispatch_from.store(from, Ordering::Release);
        if stats.records > 0 {
            self.bump_seq();
        }
        Ok(stats)
    }

    /// Announces that new messages are visible.
    pub fn bump_seq(&self) {
        self.seq.fetch_add(1, Ordering::AcqRel);
        if self.waiters.load(Ordering::Acquire) > 0 {
            let _g = self.seq_lock.lock();
            self.seq_cv.notify_all();
        }
    }

    /// Sequence number that changes whenever new messages become visible.
    pub fn seq(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    /// Waits until the sequence differs from `seen` or `timeout` passes.
    pub fn wait_for_seq(&self, seen: u64, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        self.waiters.fetch_add(1, Ordering::AcqRel);
        let mut g = self.seq_lock.lock();
        while self.seq() == seen {
            if self.seq_cv.wait_until(&mut g, deadline).timed_out() {
                break;
            }
        }
        drop(g);
        self.waiters.fetch_sub(1, Ordering::AcqRel);
        self.seq()
    }

    /// Called after a put: wakes the dispatch thread if it sleeps.
    #[inline]
    pub fn wakeup(&self) {
        self.signal.wakeup();
    }

    fn sleep_until_woken(&self, max: Duration) {
        self.signal
            .wait_unless(max, || self.dispatch_end() > self.dispatch_from());
    }

    /// The structure the last failed step was writing, by name.
    fn failing_structure(&self) -> &'static str {
        if self.step_error.load(Ordering::Acquire) == Flag::WriteIndexFileError as u32 {
            "index"
        } else {
            "consume queues"
        }
    }

    /// Sleeps `pause` (a put's wake-up does not end it; a stop does).
    fn backoff(&self, pause: Duration) {
        let until = Instant::now() + pause;
        loop {
            let now = Instant::now();
            if now >= until || self.signal.is_stopped() {
                return;
            }
            self.signal.wait(until - now);
        }
    }

    /// Dispatches until nothing is left (or a step fails).
    pub fn drain(&self) -> Result<()> {
        while self.dispatch_once(DEFAULT_STEP_BYTES)?.records > 0 {}
        Ok(())
    }
}

/// Dispatch steps that waited for a resource (rate-limited log).
static RESOURCE_WAITS: RateLimited = RateLimited::new();

/// First and longest pause between two attempts of a step that waits for a
/// resource (the pause doubles after each failed attempt).
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How long the dispatch thread naps, unwakeable, when it has caught up,
/// before it sleeps until a put wakes it.
const NAP: Duration = Duration::from_micros(200);

impl Dispatcher {
    /// Starts the dispatch loop (the `dispatch` service). A failed step sets
    /// the failed structure's running flag once (the loop goes on trying,
    /// so a full disk that is freed lets it continue); a panic sets
    /// WRITE_LOGICS_QUEUE_ERROR with the panic message.
    pub fn start_thread(self: &Arc<Self>) -> std::io::Result<ServiceThread> {
        let d = self.clone();
        let on_panic = {
            let d = self.clone();
            move |why: String| {
                d.flags.fail(Flag::WriteLogicsQueueError, why);
                d.bump_seq();
            }
        };
        let mut failed = false;
        let mut napped = false;
        let mut backoff = BACKOFF_MIN;
        ServiceThread::start_with("dispatch", self.signal.clone(), on_panic, move |_| {
            match d.dispatch_once(DEFAULT_STEP_BYTES) {
                Ok(st) => {
                    if let Some(n) = RESOURCE_WAITS.reset() {
                        log::warn!(
                            "dispatch goes on after {n} attempts that waited for a resource"
                        );
                    }
                    if backoff > BACKOFF_MIN {
                        // The resource is back.
                        backoff = BACKOFF_MIN;
                        d.flags.set_waiting("dispatch", None);
                    }
                    if st.records > 0 {
                        napped = false;
                    } else if !napped {
                        // Caught up: first a short nap that puts do not
                        // end, so a steady stream of puts pays no wake-up
                        // (a futex call) per put; reads in this process
                        // dispatch for themselves.
                        std::thread::sleep(NAP);
                        napped = true;
                    } else {
                        // Still nothing: sleep until a put wakes us.
                        d.sleep_until_woken(Duration::from_millis(1));
                    }
                }
                // A queue or index file that cannot be created or mapped
                // for want of memory, descriptors or disk space stalls
                // dispatch instead of poisoning the store: the step is
                // retried with backoff, re-dispatching nothing twice, and
                // goes on by itself once the resource is back. Puts go on
                // meanwhile; what they wrote becomes visible then.
                Err(e) if is_transient_resource(&e) => {
                    let what = d.failing_structure();
                    let why = format!("dispatch to the {what} waits, retrying: {e}");
                    RESOURCE_WAITS.log(log::Level::Error, || why.clone());
                    d.flags.set_waiting("dispatch", Some(why));
                    d.backoff(backoff);
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
                Err(e) => {
                    backoff = BACKOFF_MIN;
                    d.flags.set_waiting("dispatch", None);
                    if !failed {
                        log::error!("dispatch failed: {e}");
                        d.record_failure(&e);
                        failed = true;
                    }
                    d.sleep_until_woken(Duration::from_millis(100));
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::path::Path;

    use super::*;
    use crate::log::commitlog::{CommitLogConfig, PutStatus};
    use crate::log::message::{tags_code, MessageSpec};

    fn commitlog(dir: &Path) -> Arc<CommitLog> {
        let cfg = CommitLogConfig {
            dir: crate::paths::commit_log_dir(dir),
            file_size: 4 << 10,
            max_message_size: 1 << 10,
            store_host: SocketAddr::from(([127, 0, 0, 1], 10911)),
            delay_levels: vec![1000],
            prop_crc: true,
        };
        Arc::new(CommitLog::load(cfg, true).unwrap())
    }

    fn dispatcher(dir: &Path, log: &Arc<CommitLog>, dispatch_from: u64) -> Dispatcher {
        let cqs = Arc::new(
            ConsumeQueueTable::load(crate::paths::consume_queue_dir(dir), Some(20 * 64), true)
                .unwrap(),
        );
        let (index, _) = IndexStore::load(&crate::paths::index_dir(dir), 16, 64, true, 0).unwrap();
        Dispatcher::new(
            log.clone(),
            cqs,
            Some(Arc::new(index)),
            None,
            vec![1000],
            dispatch_from,
        )
    }

    /// Puts message `i` (queue `i % 2`, tag `tag{i % 3}`, key `key{i}`).
    fn put(log: &CommitLog, i: usize) -> (i64, i32) {
        let props = format!("TAGS\u{1}tag{}\u{2}KEYS\u{1}key{i}", i % 3);
        let out = log
            .put(
                MessageSpec::new("T", (i % 2) as i32, format!("body {i}").into_bytes())
                    .with_properties(props.into_bytes())
                    .born_at(1_700_000_000_000),
            )
            .unwrap();
        assert_eq!(out.status, PutStatus::PutOk);
        (out.wrote_offset, out.wrote_bytes as i32)
    }

    /// Every unit of queue `qid`, in order.
    fn units(d: &Dispatcher, qid: i32) -> Vec<CqUnit> {
        let cq = d.cqs.get("T", qid).unwrap();
        (0..cq.max_offset_in_queue())
            .map(|i| cq.unit_at(i).unwrap())
            .collect()
    }

    #[test]
    fn dispatches_every_record_to_its_queue_and_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let log = commitlog(dir.path());
        let d = dispatcher(dir.path(), &log, 0);
        // Enough records to roll the 4 KiB CommitLog file (a blank end).
        let put: Vec<_> = (0..60).map(|i| put(&log, i)).collect();
        assert!(log.queue().len() > 1, "the test must cross a file end");
        let seq = d.seq();
        d.drain().unwrap();
        assert_eq!(d.dispatch_from(), log.max_offset());
        assert_eq!(d.behind_bytes(), 0);
        assert!(d.seq() > seq, "consumers were not told");
        for qid in 0..2 {
            let want: Vec<CqUnit> = put
                .iter()
                .enumerate()
                .filter(|(i, _)| i % 2 == qid as usize)
                .map(|(i, &(phy, size))| CqUnit {
                    phy_offset: phy,
                    size,
                    tags_code: tags_code(Some(&format!("tag{}", i % 3))),
                })
                .collect();
            assert_eq!(units(&d, qid), want, "queue {qid}");
        }
        let index = d.index.as_ref().unwrap();
        for (i, &(phy, _)) in put.iter().enumerate() {
            let found = index.query("T", &format!("key{i}"), 10, 0, i64::MAX);
            assert!(found.phy_offsets.contains(&phy), "key{i}: {found:?}");
        }
        // Nothing more to do: a second pass dispatches nothing twice.
        assert_eq!(d.dispatch_once(DEFAULT_STEP_BYTES).unwrap().records, 0);
        assert_eq!(units(&d, 0).len() + units(&d, 1).len(), put.len());
    }

    #[test]
    fn a_restart_continues_from_the_dispatch_offset() {
        let dir = tempfile::tempdir().unwrap();
        let log = commitlog(dir.path());
        let first: Vec<_> = (0..10).map(|i| put(&log, i)).collect();
        let end = {
            let d = dispatcher(dir.path(), &log, 0);
            d.drain().unwrap();
            d.cqs.flush_all(0).unwrap();
            d.index.as_ref().unwrap().flush().unwrap();
            d.dispatch_from()
        };
        let more: Vec<_> = (10..20).map(|i| put(&log, i)).collect();
        // Reopened queues and index, dispatching from where the last run stopped.
        let d = dispatcher(dir.path(), &log, end);
        d.cqs.recover_all().unwrap();
        let st = d.dispatch_once(DEFAULT_STEP_BYTES).unwrap();
        assert_eq!(st.records, 10, "only the new records are dispatched");
        let all: Vec<i64> = first.iter().chain(&more).map(|&(p, _)| p).collect();
        let mut got: Vec<i64> = (0..2)
            .flat_map(|q| units(&d, q))
            .map(|u| u.phy_offset)
            .collect();
        got.sort_unstable();
        assert_eq!(got, all, "every record once, none twice");
        let index = d.index.as_ref().unwrap();
        assert_eq!(
            index.query("T", "key15", 10, 0, i64::MAX).phy_offsets,
            [more[5].0]
        );
        assert_eq!(
            index.query("T", "key3", 10, 0, i64::MAX).phy_offsets,
            [first[3].0]
        );
    }

    #[test]
    fn the_thread_dispatches_on_wakeup_and_stops() {
        let dir = tempfile::tempdir().unwrap();
        let log = commitlog(dir.path());
        let d = Arc::new(dispatcher(dir.path(), &log, 0));
        let t = d.start_thread().unwrap();
        for i in 0..5 {
            put(&log, i);
            d.wakeup();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while d.behind_bytes() > 0 && Instant::now() < deadline {
            d.wait_for_seq(d.seq(), Duration::from_millis(10));
        }
        assert_eq!(d.behind_bytes(), 0);
        assert_eq!(units(&d, 0).len() + units(&d, 1).len(), 5);
        assert!(t.stop(Duration::from_secs(10)));
        assert!(d.failure().is_none());
    }

    #[test]
    fn an_invalid_record_sets_the_logics_queue_flag() {
        let dir = tempfile::tempdir().unwrap();
        let log = commitlog(dir.path());
        let flags = Arc::new(RunningFlags::new());
        let d = dispatcher(dir.path(), &log, 0).with_running_flags(flags.clone());
        put(&log, 0);
        let (phy, _) = put(&log, 1);
        // Break the second record's size (bytes 0..4: past the data, so it
        // cannot be skipped) through the file: the shared mapping sees it.
        let f = log.queue().last_file().unwrap();
        use std::os::unix::fs::FileExt;
        std::fs::OpenOptions::new()
            .write(true)
            .open(f.path())
            .unwrap()
            .write_at(&[0x7f, 0xff, 0xff, 0xff], phy as u64)
            .unwrap();
        assert!(d.drain().is_err());
        assert_eq!(
            d.dispatch_from(),
            phy as u64,
            "dispatch stops at the bad record"
        );
        assert!(!flags.is_writeable());
        let why = d.failure().unwrap();
        assert!(why.contains(&format!("offset {phy}")), "{why}");
        assert!(
            flags.describe()[0].starts_with("WRITE_LOGICS_QUEUE_ERROR: "),
            "{:?}",
            flags.describe()
        );
    }
}
