//! Dispatch (RocketMQ's reput service): turns CommitLog records into
//! ConsumeQueue units and index entries.
//!
//! ```text
//!  CommitLog  ...[rec][rec][rec]|........        reput_from -> max_offset
//!                 |    |    |
//!                 v    v    v
//!  consumequeue/<topic>/<qid>: (phy, size, tagsCode)   index/: topic#key -> phy
//! ```
//! [`Dispatcher::dispatch_once`] is one batch step. [`DispatchThread`] runs
//! it in a loop: a Python thread woken per put would cap puts far below what
//! the engine does and add the interpreter's switch interval to visibility
//! latency. A put wakes the thread only when it is asleep (one atomic load
//! otherwise). Consumers wait on [`Dispatcher::wait_for_seq`].

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::checkpoint::Checkpoint;
use crate::commitlog::CommitLog;
use crate::consume_queue::CqUnit;
use crate::cq_table::ConsumeQueueTable;
use crate::error::{Result, StoreError};
use crate::index_file::IndexStore;
use crate::message::{
    find_property, iter_properties, parse_valid_record, sysflag, tags_code, Parsed, RecordView,
    SCHEDULE_TOPIC,
};
use crate::ratelog::RateLimited;

/// Bytes one dispatch step reads at most.
pub const DEFAULT_STEP_BYTES: usize = 4 << 20;

/// What one dispatch step did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchStats {
    pub records: u64,
    pub bytes: u64,
}

/// The dispatch state shared by the thread, the put path and readers.
pub struct Dispatcher {
    commitlog: Arc<CommitLog>,
    cqs: Arc<ConsumeQueueTable>,
    index: Option<Arc<IndexStore>>,
    checkpoint: Option<Arc<Checkpoint>>,
    delay_levels: Vec<i64>,
    reput_from: AtomicU64,
    step: Mutex<()>,
    // consumers waiting for new messages
    seq: AtomicU64,
    waiters: AtomicUsize,
    seq_lock: Mutex<()>,
    seq_cv: Condvar,
    // the dispatch thread's sleep
    sleeping: AtomicBool,
    wake_lock: Mutex<()>,
    wake_cv: Condvar,
    failure: Mutex<Option<String>>,
    /// SYNC_FLUSH: dispatch only what the CommitLog flush covers, so no
    /// reader (consumer, queue, index, lookup) sees a record before it is on
    /// disk.
    flushed_only: AtomicBool,
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
/// parked in `SCHEDULE_TOPIC_XXXX` its delivery time (SPEC §1.9).
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
    pub fn new(
        commitlog: Arc<CommitLog>,
        cqs: Arc<ConsumeQueueTable>,
        index: Option<Arc<IndexStore>>,
        checkpoint: Option<Arc<Checkpoint>>,
        delay_levels: Vec<i64>,
        reput_from: u64,
    ) -> Self {
        Self {
            commitlog,
            cqs,
            index,
            checkpoint,
            delay_levels,
            reput_from: AtomicU64::new(reput_from),
            step: Mutex::new(()),
            seq: AtomicU64::new(0),
            waiters: AtomicUsize::new(0),
            seq_lock: Mutex::new(()),
            seq_cv: Condvar::new(),
            sleeping: AtomicBool::new(false),
            wake_lock: Mutex::new(()),
            wake_cv: Condvar::new(),
            failure: Mutex::new(None),
            flushed_only: AtomicBool::new(false),
        }
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

    pub fn reput_from(&self) -> u64 {
        self.reput_from.load(Ordering::Acquire)
    }

    /// Sets where dispatch continues (after recovery).
    pub fn set_reput_from(&self, off: u64) {
        let _g = self.step.lock();
        self.reput_from.store(off, Ordering::Release);
    }

    /// CommitLog bytes not yet dispatched.
    pub fn behind_bytes(&self) -> u64 {
        self.commitlog
            .max_offset()
            .saturating_sub(self.reput_from())
    }

    /// Why dispatch stopped, if it failed.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().clone()
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

    /// Records why dispatch failed (the first failure stays).
    pub fn record_failure(&self, e: &StoreError) {
        self.failure.lock().get_or_insert_with(|| e.to_string());
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
                    for k in keys_str.split(' ').filter(|k| !k.is_empty()) {
                        keys.push(k);
                    }
                    index.build_index(
                        topic,
                        keys.as_slice(),
                        uniq,
                        phy as i64,
                        v.store_timestamp,
                        tran,
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Dispatches records from the reput offset, up to `max_bytes` of them.
    pub fn dispatch_once(&self, max_bytes: usize) -> Result<DispatchStats> {
        let _g = self.step.lock();
        let mut stats = DispatchStats::default();
        let mut from = self.reput_from.load(Ordering::Acquire);
        loop {
            let max = self.dispatch_end();
            if from >= max || stats.bytes as usize >= max_bytes {
                break;
            }
            let min = self.commitlog.min_offset();
            if min >= 0 && from < min as u64 {
                // Those files expired before they were dispatched.
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
                            *self.failure.lock() = Some(format!(
                                "invalid record at CommitLog offset {}: {reason}",
                                from + p as u64
                            ));
                            self.reput_from.store(from + p as u64, Ordering::Release);
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
            self.reput_from.store(from, Ordering::Release);
            if !roll && p == 0 {
                break;
            }
        }
        self.reput_from.store(from, Ordering::Release);
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
        if self.sleeping.load(Ordering::Relaxed) && self.sleeping.swap(false, Ordering::AcqRel) {
            let _g = self.wake_lock.lock();
            self.wake_cv.notify_one();
        }
    }

    fn sleep_until_woken(&self, max: Duration) {
        let mut g = self.wake_lock.lock();
        self.sleeping.store(true, Ordering::Release);
        if self.dispatch_end() > self.reput_from() {
            self.sleeping.store(false, Ordering::Release);
            return;
        }
        self.wake_cv.wait_for(&mut g, max);
        self.sleeping.store(false, Ordering::Release);
    }

    /// Dispatches until nothing is left (or a step fails).
    pub fn drain(&self) -> Result<()> {
        while self.dispatch_once(DEFAULT_STEP_BYTES)?.records > 0 {}
        Ok(())
    }
}

/// Dispatch steps that failed for want of disk space (rate-limited log).
static NO_SPACE: RateLimited = RateLimited::new();

/// True for an I/O error meaning "no disk space" (ENOSPC, EDQUOT).
pub fn is_no_space(e: &StoreError) -> bool {
    matches!(e, StoreError::Io { source, .. }
        if matches!(source.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)))
}

/// How long the dispatch thread naps, unwakeable, when it has caught up,
/// before it sleeps until a put wakes it.
const NAP: Duration = Duration::from_micros(200);

/// The dispatch loop thread.
pub struct DispatchThread {
    stop: Arc<AtomicBool>,
    dispatcher: Arc<Dispatcher>,
    handle: Option<JoinHandle<()>>,
}

impl DispatchThread {
    /// Starts dispatching; `on_error` is called once when a step fails.
    pub fn start(
        dispatcher: Arc<Dispatcher>,
        on_error: Box<dyn Fn(&StoreError) + Send>,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (s, d) = (stop.clone(), dispatcher.clone());
        let handle = std::thread::Builder::new()
            .name("rocketstore-reput".into())
            .spawn(move || {
                let mut failed = false;
                let mut napped = false;
                while !s.load(Ordering::Acquire) {
                    match d.dispatch_once(DEFAULT_STEP_BYTES) {
                        Ok(st) => {
                            if let Some(n) = NO_SPACE.reset() {
                                log::warn!(
                                    "dispatch goes on: disk space was found after {n} attempts"
                                );
                            }
                            if st.records > 0 {
                                napped = false;
                            } else if !napped {
                                // Caught up: first a short nap that puts do
                                // not end, so a steady stream of puts pays no
                                // wake-up (a futex call) per put; reads in
                                // this process dispatch for themselves.
                                std::thread::sleep(NAP);
                                napped = true;
                            } else {
                                // Still nothing: sleep until a put wakes us.
                                d.sleep_until_woken(Duration::from_millis(1));
                            }
                        }
                        // A full disk (a queue or index file cannot get its
                        // blocks) stalls dispatch instead of poisoning the
                        // store: the step is retried, re-dispatching nothing
                        // twice, and goes on once space is freed.
                        Err(e) if is_no_space(&e) => {
                            NO_SPACE.log(log::Level::Error, || {
                                format!("dispatch stalled, retrying: {e}")
                            });
                            d.sleep_until_woken(Duration::from_millis(100));
                        }
                        Err(e) => {
                            if !failed {
                                d.failure.lock().get_or_insert_with(|| e.to_string());
                                on_error(&e);
                                failed = true;
                            }
                            d.sleep_until_woken(Duration::from_millis(100));
                        }
                    }
                }
            })?;
        Ok(Self {
            stop,
            dispatcher,
            handle: Some(handle),
        })
    }

    /// Stops the loop and waits for it; the last step completes first.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.dispatcher.sleeping.store(true, Ordering::Release);
        self.dispatcher.wakeup();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for DispatchThread {
    fn drop(&mut self) {
        self.stop();
    }
}
