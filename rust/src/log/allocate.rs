//! Keeping file creation and page faults off the put path.
//!
//! The [`Allocator`] thread (RocketMQ's `AllocateMappedFileService`) makes
//! the next CommitLog file while the current one fills: created, its first
//! chunk reserved, and with warm-up every page written and the file locked
//! in memory. A roll takes the ready file and requests the one after it, so
//! a put waits for a file only when the allocator is behind.
//!
//! A fresh CommitLog page faults on its first write; on a virtual machine
//! that costs several microseconds, more than the whole put. The
//! [`Prefaulter`] thread stays a window ahead of the write position and
//! prefaults those pages with `MADV_POPULATE_WRITE`, which maps them writable
//! without touching their contents, so it can never race with the writer.
//! (RocketMQ's `warmMappedFile` writes zeros over a whole new file instead,
//! which is only safe before the file is handed to the writer.)

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::sync::{Condvar, Mutex};

use crate::error::{Result, StoreError};
use crate::log::mapped_file::MappedFile;
use crate::log::mapped_file_queue::{FileMaker, MappedFileQueue};
use crate::ratelog::RateLimited;
use crate::running::{is_transient_resource, RunningFlags};
use crate::services::service_thread::{ServiceThread, Signal, STOP_TIMEOUT};

/// How long a roll waits for the allocator (RocketMQ: 5 s).
pub const ALLOCATE_WAIT: Duration = Duration::from_secs(5);

/// Warm-up settings of the allocator.
#[derive(Debug, Clone, Copy)]
pub struct WarmConfig {
    /// `warm_mapped_file_enable`: pre-touch, flush and mlock new files.
    pub enabled: bool,
    /// `flush_least_pages_when_warm_mapped_file` (0: flush once at the end).
    pub flush_every_pages: usize,
    /// Without warm-up: bytes at the head of a new file to prefault
    /// (`MADV_POPULATE_WRITE`) before the writer gets it, so the first
    /// appends after a roll do not fault (the store sets it for
    /// ASYNC_FLUSH; 0: none).
    pub prefault_head: usize,
}

impl Default for WarmConfig {
    /// RocketMQ's defaults: off; when on, a flush every 4096 pages (16 MiB).
    fn default() -> Self {
        Self {
            enabled: false,
            flush_every_pages: 1024 / 4 * 16,
            prefault_head: 0,
        }
    }
}

enum Slot {
    /// Requested, not yet made.
    Pending,
    /// Made and waiting for the writer.
    Ready(Arc<MappedFile>),
    /// Making it failed (the file was removed again).
    Failed(StoreError),
}

#[derive(Default)]
struct AllocState {
    /// File start offset -> its state. Lowest offsets are made first.
    slots: BTreeMap<u64, Slot>,
    /// Files the writer left behind, to unlock from memory.
    unlock: Vec<Arc<MappedFile>>,
    /// The thread is making this offset now.
    making: Option<u64>,
    stop: bool,
    /// After a failure for want of a resource: when the thread tries the
    /// failed file again, and the pause before the attempt after that.
    retry_at: Option<Instant>,
    backoff: Duration,
}

struct AllocShared {
    state: Mutex<AllocState>,
    /// Wakes the thread (new request, stop).
    signal: Arc<Signal>,
    /// Changes (under `state`) whenever the thread has new work; read
    /// without `state` by the thread before it sleeps, so a wake-up given
    /// while `state` is held never waits for the thread's lock.
    work_seq: AtomicU64,
    /// Wakes writers waiting for a file.
    done: Condvar,
    warm: WarmConfig,
    /// Files handed to the writer ready-made / after waiting for the thread.
    hits: AtomicU64,
    waits: AtomicU64,
    /// The store's running state: RESOURCE_WAIT while a file cannot be
    /// made for want of a resource.
    flags: Mutex<Option<Arc<RunningFlags>>>,
}

/// First and longest pause between two background attempts at a file that
/// could not be made for want of a resource (doubling in between).
const RETRY_MIN: Duration = Duration::from_millis(10);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Failed background creations (rate-limited log: a full disk fails each).
static ALLOC_FAILURES: RateLimited = RateLimited::new();

/// The background maker of CommitLog files.
pub struct Allocator {
    shared: Arc<AllocShared>,
    service: Mutex<Option<ServiceThread>>,
}

impl std::fmt::Debug for Allocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocator").finish_non_exhaustive()
    }
}

impl Allocator {
    /// Starts the thread making files for `queue` (held weakly: the queue
    /// owns the allocator handle). A panic in it stops the allocator (a
    /// writer waiting for a file gets an error at once) and is handed to
    /// `on_panic`.
    pub fn start(
        queue: &Arc<MappedFileQueue>,
        warm: WarmConfig,
        on_panic: impl Fn(String) + Send + 'static,
    ) -> std::io::Result<Arc<Self>> {
        let shared = Arc::new(AllocShared {
            state: Mutex::new(AllocState::default()),
            signal: Arc::new(Signal::new()),
            work_seq: AtomicU64::new(0),
            done: Condvar::new(),
            warm,
            hits: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            flags: Mutex::new(None),
        });
        let s = shared.clone();
        let q = Arc::downgrade(queue);
        let dead = shared.clone();
        let service = ServiceThread::start_with(
            "allocate",
            shared.signal.clone(),
            move |why| {
                dead.state.lock().stop = true;
                dead.done.notify_all();
                on_panic(why);
            },
            move |_| allocate_round(&s, &q),
        )?;
        Ok(Arc::new(Self {
            shared,
            service: Mutex::new(Some(service)),
        }))
    }

    /// Shares the store's running state: a file that cannot be made for
    /// want of a resource sets RESOURCE_WAIT until it is made.
    pub fn set_running_flags(&self, flags: Arc<RunningFlags>) {
        *self.shared.flags.lock() = Some(flags);
    }

    /// Wakes the thread: call with new work recorded in `state`.
    fn notify_work(&self) {
        self.shared.work_seq.fetch_add(1, Ordering::SeqCst);
        self.shared.signal.wakeup();
    }

    /// Asks for the file starting at `offset` to be made in the background.
    pub fn request(&self, offset: u64) {
        let mut st = self.shared.state.lock();
        if st.stop {
            return;
        }
        st.slots.entry(offset).or_insert(Slot::Pending);
        self.notify_work();
    }

    /// The file starting at `offset`: the ready one, or (requesting it if
    /// needed) the one the thread makes within [`ALLOCATE_WAIT`]. A failed
    /// creation is returned as an error once; the next call tries again.
    pub fn take(&self, offset: u64) -> Result<Arc<MappedFile>> {
        let deadline = Instant::now() + ALLOCATE_WAIT;
        let mut st = self.shared.state.lock();
        let mut waited = false;
        loop {
            if st.stop {
                return Err(StoreError::Closed);
            }
            match st.slots.remove(&offset) {
                Some(Slot::Ready(f)) => {
                    let counter = if waited {
                        &self.shared.waits
                    } else {
                        &self.shared.hits
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    return Ok(f);
                }
                // Made in vain before this call asked (a full disk then):
                // try once more now; a failure after waiting is returned.
                Some(Slot::Failed(e)) if waited => {
                    // The thread goes on trying a file that waits for a
                    // resource: keep it in the slot.
                    if let Some(again) = transient_copy(&e) {
                        st.slots.insert(offset, Slot::Failed(again));
                    }
                    return Err(e);
                }
                Some(Slot::Pending) | Some(Slot::Failed(_)) | None => {
                    st.slots.insert(offset, Slot::Pending);
                    self.notify_work();
                }
            }
            waited = true;
            if self.shared.done.wait_until(&mut st, deadline).timed_out() {
                if let Some(Slot::Ready(_)) = st.slots.get(&offset) {
                    continue;
                }
                return Err(StoreError::io(
                    format!(
                        "the allocator did not make CommitLog file {offset} within {} s",
                        ALLOCATE_WAIT.as_secs()
                    ),
                    std::io::Error::from(std::io::ErrorKind::TimedOut),
                ));
            }
        }
    }

    /// Unlocks `file` from memory on the allocator's thread (munlock of a
    /// large file takes milliseconds: not on the put path).
    pub fn unlock_later(&self, file: Arc<MappedFile>) {
        let mut st = self.shared.state.lock();
        st.unlock.push(file);
        self.notify_work();
    }

    /// `(files ready when the writer asked, files the writer waited for)`.
    pub fn stats(&self) -> (u64, u64) {
        (
            self.shared.hits.load(Ordering::Relaxed),
            self.shared.waits.load(Ordering::Relaxed),
        )
    }

    /// Stops the thread. With `remove_unused`, files made but never handed
    /// to the writer are deleted (a clean shutdown); without it they stay,
    /// as after a crash (recovery drops them).
    pub fn stop(&self, remove_unused: bool) {
        let slots = {
            let mut st = self.shared.state.lock();
            st.stop = true;
            self.shared.done.notify_all();
            std::mem::take(&mut st.slots)
        };
        let service = self.service.lock().take();
        if let Some(t) = service {
            t.stop(STOP_TIMEOUT);
        }
        // The thread may have finished one more file after `take` above.
        let late = std::mem::take(&mut self.shared.state.lock().slots);
        for slot in slots.into_values().chain(late.into_values()) {
            if let Slot::Ready(f) = slot {
                f.munlock();
                if remove_unused {
                    match f.destroy() {
                        Ok(()) => log::debug!("removed unused preallocated {}", f.path().display()),
                        Err(e) => log::warn!("cannot remove unused preallocated file: {e}"),
                    }
                }
            }
        }
        if remove_unused {
            for f in std::mem::take(&mut self.shared.state.lock().unlock) {
                f.munlock();
            }
        }
    }

    /// Drops the thread handle without joining (a forked child's copy).
    pub fn forget_thread(&self) {
        if let Some(t) = self.service.lock().take() {
            std::mem::forget(t);
        }
    }
}

/// A copy of an error that waits for a resource (`None` for any other).
fn transient_copy(e: &StoreError) -> Option<StoreError> {
    match e {
        StoreError::Io { context, source } if is_transient_resource(e) => Some(StoreError::io(
            context.clone(),
            std::io::Error::from_raw_os_error(source.raw_os_error()?),
        )),
        _ => None,
    }
}

/// How long the allocator sleeps without a request (a wake-up ends it).
const ALLOCATOR_IDLE: Duration = Duration::from_secs(1);

/// One round of the allocator: unlocks the files the writer left, and
/// makes the lowest requested file; sleeps when there is nothing to do.
fn allocate_round(shared: &AllocShared, queue: &Weak<MappedFileQueue>) {
    let seen = shared.work_seq.load(Ordering::SeqCst);
    let (offset, unlock) = {
        let mut st = shared.state.lock();
        if st.stop {
            drop(st);
            shared.signal.request_stop();
            return;
        }
        let unlock = std::mem::take(&mut st.unlock);
        let mut next = st
            .slots
            .iter()
            .find(|(_, s)| matches!(s, Slot::Pending))
            .map(|(o, _)| *o);
        // A file that could not be made for want of a resource is tried
        // again in the background, with backoff, until it is made: the
        // writer finds it ready once the resource is back.
        let now = Instant::now();
        if next.is_none() && st.retry_at.is_some_and(|t| t <= now) {
            st.retry_at = None;
            next = st
                .slots
                .iter()
                .find(|(_, s)| matches!(s, Slot::Failed(e) if is_transient_resource(e)))
                .map(|(o, _)| *o);
            if let Some(o) = next {
                st.slots.insert(o, Slot::Pending);
            }
        }
        st.making = next;
        (next, unlock)
    };
    if offset.is_none() && unlock.is_empty() {
        let idle = match shared.state.lock().retry_at {
            Some(t) => t
                .saturating_duration_since(Instant::now())
                .min(ALLOCATOR_IDLE),
            None => ALLOCATOR_IDLE,
        };
        shared
            .signal
            .wait_unless(idle, || shared.work_seq.load(Ordering::SeqCst) != seen);
        return;
    }
    {
        for f in unlock {
            f.munlock();
        }
        let Some(offset) = offset else { return };
        let Some(q) = queue.upgrade() else {
            shared.signal.request_stop();
            return;
        };
        let made = q.make_file(offset).and_then(|f| {
            if shared.warm.enabled {
                if let Err(e) = f.warm(shared.warm.flush_every_pages) {
                    let _ = f.destroy();
                    return Err(e);
                }
            } else if shared.warm.prefault_head > 0 {
                // Not yet the writer's: nothing races with this.
                f.prefault(0, shared.warm.prefault_head);
            }
            Ok(f)
        });
        drop(q);
        let mut st = shared.state.lock();
        st.making = None;
        let slot = slot_of(shared, &mut st, offset, made);
        if st.stop {
            // Stopped while making it: hand it to `stop` for removal.
            st.slots.insert(offset, slot);
            drop(st);
            shared.signal.request_stop();
            return;
        }
        // Only a file someone still wants is kept.
        match st.slots.get(&offset) {
            Some(Slot::Pending) => {
                st.slots.insert(offset, slot);
            }
            _ => {
                if let Slot::Ready(f) = slot {
                    let _ = f.destroy();
                }
            }
        }
        shared.done.notify_all();
    }
}

/// The slot a made (or failed) file goes into; a failure for want of a
/// resource schedules a retry with backoff and sets RESOURCE_WAIT, which a
/// success clears.
fn slot_of(
    shared: &AllocShared,
    st: &mut AllocState,
    offset: u64,
    made: Result<MappedFile>,
) -> Slot {
    let flags = shared.flags.lock().clone();
    match made {
        Ok(f) => {
            if let Some(n) = ALLOC_FAILURES.reset() {
                log::warn!("made CommitLog file {offset} after {n} failed attempts");
            }
            st.retry_at = None;
            st.backoff = RETRY_MIN;
            if let Some(flags) = &flags {
                flags.set_waiting("allocate", None);
            }
            Slot::Ready(Arc::new(f))
        }
        Err(e) if is_transient_resource(&e) => {
            // Puts that need the file fail with a status meanwhile (nothing
            // is acknowledged that is not written); the file is made again
            // after a pause, until it is.
            let why = format!("making CommitLog file {offset} waits, retrying: {e}");
            ALLOC_FAILURES.log(log::Level::Error, || why.clone());
            if let Some(flags) = &flags {
                flags.set_waiting("allocate", Some(why));
            }
            st.backoff = st.backoff.clamp(RETRY_MIN, RETRY_MAX);
            st.retry_at = Some(Instant::now() + st.backoff);
            st.backoff = (st.backoff * 2).min(RETRY_MAX);
            Slot::Failed(e)
        }
        Err(e) => {
            // The writer that takes this file reports the failure (its put
            // fails with a status and a rate-limited log line).
            ALLOC_FAILURES.log(log::Level::Debug, || {
                format!("cannot make CommitLog file {offset} in the background: {e}")
            });
            Slot::Failed(e)
        }
    }
}

/// Bytes kept prefaulted ahead of the write position.
pub const DEFAULT_WINDOW: usize = 32 << 20;

/// Background thread prefaulting the CommitLog ahead of the writer.
pub struct Prefaulter {
    service: ServiceThread,
}

impl Prefaulter {
    /// Starts the thread over `queue`; a panic in it is handed to `on_panic`.
    pub fn start(
        queue: Arc<MappedFileQueue>,
        window: usize,
        on_panic: impl Fn(String) + Send + 'static,
    ) -> std::io::Result<Self> {
        // (file start, prefaulted up to)
        let mut done: Option<(u64, usize)> = None;
        let service = ServiceThread::start("prefault", on_panic, move |s| {
            prefault_round(s, &queue, window, &mut done)
        })?;
        Ok(Self { service })
    }

    /// Stops and joins the thread (bounded: see [`ServiceThread::stop`]).
    pub fn stop(&mut self) {
        self.service.stop(STOP_TIMEOUT);
    }
}

/// One step of the prefaulter: prefaults the next chunk of the window
/// ahead of the writer, or sleeps 2 ms when the window is prefaulted.
fn prefault_round(
    s: &Signal,
    queue: &MappedFileQueue,
    window: usize,
    done: &mut Option<(u64, usize)>,
) {
    let step = 4 << 20;
    let mut worked = false;
    if let Some(f) = queue.last_file() {
        let from = f.file_from_offset();
        let mut upto = match *done {
            Some((start, upto)) if start == from => upto,
            _ => 0,
        };
        let wrote = f.wrote_position();
        let target = (wrote + window).min(f.file_size());
        upto = upto.max(wrote);
        // Only reserved pages are prefaulted: keep the reservation a
        // window ahead too, so the prefaulting never stops at the end of
        // the writer's chunk (where the writer would reserve the next one
        // itself and then fault on every fresh page). A failure (a full
        // disk) is the writer's to report; this thread retries later.
        // Only once the writer has reserved in this file itself: a file
        // just opened (recovery has not yet set its write position, so
        // it looks full) is left alone, as are its blocks.
        let reserved = f.reserved();
        if reserved > 0 && reserved < target && wrote < f.file_size() {
            let _ = f.reserve_ahead(wrote + 2 * window);
        }
        // Work in large steps only: chasing every few appended bytes would
        // turn this thread into a busy loop of tiny madvise calls.
        if upto < target && (target - upto >= step / 2 || target == f.file_size()) {
            let end = (upto + step).min(target);
            if !f.prefault(upto, end) {
                // Kernel without MADV_POPULATE_WRITE: nothing to do.
                s.request_stop();
                return;
            }
            upto = end;
            worked = true;
        }
        *done = Some((from, upto));
    }
    if !worked {
        s.wait(Duration::from_millis(2));
    }
}

impl FileMaker for Allocator {
    fn take(&self, offset: u64) -> Result<Arc<MappedFile>> {
        Allocator::take(self, offset)
    }

    fn request(&self, offset: u64) {
        Allocator::request(self, offset)
    }

    fn unlock_later(&self, file: Arc<MappedFile>) {
        Allocator::unlock_later(self, file)
    }
}
