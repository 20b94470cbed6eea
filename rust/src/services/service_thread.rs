//! One shape for every background loop of the engine (RocketMQ's
//! `ServiceThread`): flushes, group commit, the transient-pool commit,
//! dispatch, file allocation, prefaulting, the index flush and the clock.
//!
//! ```text
//!  start ──> loop { fail point? ─> round(&signal) }  ──> stop(timeout)
//!                          │ panic                         │ bounded join:
//!                          v                               v a thread that does not
//!                  on_panic("<name> service panicked: …")    finish is logged and left
//! ```
//! A round waits with [`Signal::wait`] (an interval, cut short by
//! [`Signal::wakeup`] or a stop) and does one batch of work. A panic in a
//! round is caught and handed to the owner's `on_panic`, which poisons the
//! store with the panic message: puts are then refused with
//! SERVICE_NOT_AVAILABLE, reads keep working, and a waiting producer is
//! completed instead of timing out on a store that claims to be fine.
//!
//! Stopping a copy inherited by a forked child joins nothing: the thread is
//! the parent's and does not exist in the child.
//!
//! With the `failpoints` feature, arming `panic_<name>` makes the next round
//! of that service panic (see [`crate::failpoint`]).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::sync::{Condvar, Mutex};

use crate::lock::fork_generation;

/// How long [`ServiceThread::stop`] waits for a round to finish by default
/// (RocketMQ waits 90 s; a flush of a large file completes well within this).
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// The wake-up and stop state of one service, shared between its thread and
/// whoever wakes it (a put waking dispatch holds one without the thread).
#[derive(Debug, Default)]
pub struct Signal {
    stop: AtomicBool,
    /// Set while the thread waits: a wake-up costs one load otherwise.
    sleeping: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Signal {
    /// A signal nobody has raised.
    pub fn new() -> Self {
        Self::default()
    }

    /// True once a stop was asked for: the round should return soon.
    #[inline]
    pub fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Cuts the thread's current wait short (one atomic load when it is
    /// not waiting).
    #[inline]
    pub fn wakeup(&self) {
        // SeqCst pairs with the store in `wait_unless`: either the thread
        // sees the caller's work in `ready`, or the caller sees it sleeping.
        if self.sleeping.load(Ordering::SeqCst) && self.sleeping.swap(false, Ordering::AcqRel) {
            let _g = self.lock.lock();
            self.cv.notify_all();
        }
    }

    /// Waits up to `interval`, or until woken or stopped.
    pub fn wait(&self, interval: Duration) {
        self.wait_unless(interval, || false);
    }

    /// As [`Signal::wait`], but returns at once if `ready()` (checked after
    /// the thread announced its sleep, so work published before a
    /// [`Signal::wakeup`] is never slept through).
    pub fn wait_unless(&self, interval: Duration, ready: impl FnOnce() -> bool) {
        let mut g = self.lock.lock();
        if self.is_stopped() {
            return;
        }
        self.sleeping.store(true, Ordering::SeqCst);
        if !ready() {
            self.cv.wait_for(&mut g, interval);
        }
        self.sleeping.store(false, Ordering::Release);
    }

    /// Asks the loop to stop after this round (a round may call it on its
    /// own signal when its work can never be done, e.g. a missing kernel
    /// feature).
    pub fn request_stop(&self) {
        self.set_stop(true);
    }

    fn set_stop(&self, stop: bool) {
        self.stop.store(stop, Ordering::Release);
        if stop {
            let _g = self.lock.lock();
            self.cv.notify_all();
        }
    }
}

/// Set by the thread when its loop has returned (or panicked).
#[derive(Default)]
struct Finished {
    done: Mutex<bool>,
    cv: Condvar,
}

/// A running background loop.
pub struct ServiceThread {
    name: &'static str,
    signal: Arc<Signal>,
    finished: Arc<Finished>,
    handle: Mutex<Option<JoinHandle<()>>>,
    /// Fork generation at start: another value means a forked child's copy.
    generation: u64,
}

impl std::fmt::Debug for ServiceThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceThread")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The text of a panic payload.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

impl ServiceThread {
    /// Starts `name` (thread `rocketstore-<name>`) with its own signal.
    pub fn start(
        name: &'static str,
        on_panic: impl Fn(String) + Send + 'static,
        round: impl FnMut(&Signal) + Send + 'static,
    ) -> std::io::Result<Self> {
        Self::start_with(name, Arc::new(Signal::new()), on_panic, round)
    }

    /// Starts `name` on `signal` (which others may hold to wake it). The
    /// thread runs `round` until stopped; a panic in it ends the thread and
    /// calls `on_panic` with `"<name> service panicked: <message>"`.
    pub fn start_with(
        name: &'static str,
        signal: Arc<Signal>,
        on_panic: impl Fn(String) + Send + 'static,
        mut round: impl FnMut(&Signal) + Send + 'static,
    ) -> std::io::Result<Self> {
        signal.set_stop(false);
        let finished = Arc::new(Finished::default());
        let (s, fin) = (signal.clone(), finished.clone());
        let handle = std::thread::Builder::new()
            .name(format!("rocketstore-{}", name.replace('_', "-")))
            .spawn(move || {
                #[cfg(feature = "failpoints")]
                let point = format!("panic_{name}");
                let r = catch_unwind(AssertUnwindSafe(|| {
                    while !s.is_stopped() {
                        #[cfg(feature = "failpoints")]
                        if crate::failpoint::check(&point).is_err() {
                            panic!("fail point {point}");
                        }
                        round(&s);
                    }
                }));
                if let Err(p) = r {
                    let why = format!("{name} service panicked: {}", panic_message(&*p));
                    log::error!("{why}");
                    // The owner's reaction must not take the thread down again.
                    if catch_unwind(AssertUnwindSafe(|| on_panic(why))).is_err() {
                        log::error!("{name} service: the panic handler panicked");
                    }
                }
                *fin.done.lock() = true;
                fin.cv.notify_all();
            })?;
        Ok(Self {
            name,
            signal,
            finished,
            handle: Mutex::new(Some(handle)),
            generation: fork_generation(),
        })
    }

    /// The thread's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The signal the thread waits on.
    pub fn signal(&self) -> &Arc<Signal> {
        &self.signal
    }

    /// Cuts the thread's current wait short.
    pub fn wakeup(&self) {
        self.signal.wakeup();
    }

    /// True while the loop runs (false after a stop or a panic).
    pub fn is_running(&self) -> bool {
        !*self.finished.done.lock()
    }

    /// Asks the loop to stop (without waiting).
    pub fn request_stop(&self) {
        self.signal.set_stop(true);
    }

    /// Stops the loop and waits for it, at most `timeout`. Returns true if
    /// the thread finished; a thread that did not is logged and left
    /// running. In a forked child nothing is stopped or joined.
    pub fn stop(&self, timeout: Duration) -> bool {
        if fork_generation() != self.generation {
            std::mem::forget(self.handle.lock().take());
            return false;
        }
        self.request_stop();
        let Some(h) = self.handle.lock().take() else {
            return true;
        };
        let deadline = Instant::now() + timeout;
        let mut done = self.finished.done.lock();
        while !*done {
            if self.finished.cv.wait_until(&mut done, deadline).timed_out() {
                break;
            }
        }
        if !*done {
            drop(done);
            log::error!(
                "the {} service did not stop within {timeout:?}; leaving its thread behind",
                self.name
            );
            return false;
        }
        drop(done);
        // Finished: the join returns at once. The loop's panic was caught
        // and reported, so an error here is only a panic in the reporting.
        if h.join().is_err() {
            log::error!("the {} service thread ended with a panic", self.name);
        }
        true
    }
}

impl Drop for ServiceThread {
    fn drop(&mut self) {
        self.stop(STOP_TIMEOUT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn wakeup_cuts_the_wait_short_and_stop_joins() {
        let rounds = Arc::new(AtomicU64::new(0));
        let r = rounds.clone();
        let t = ServiceThread::start(
            "test",
            |_| {},
            move |s| {
                s.wait(Duration::from_secs(3600));
                r.fetch_add(1, Ordering::AcqRel);
            },
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while rounds.load(Ordering::Acquire) < 3 && Instant::now() < deadline {
            t.wakeup();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(rounds.load(Ordering::Acquire) >= 3, "wake-ups were lost");
        assert!(t.stop(Duration::from_secs(10)));
        assert!(!t.is_running());
    }

    #[test]
    fn a_panicking_round_is_reported_not_dropped() {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = ServiceThread::start(
            "doomed",
            move |why| tx.send(why).unwrap(),
            |_| panic!("disk on fire"),
        )
        .unwrap();
        let why = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(why, "doomed service panicked: disk on fire");
        assert!(t.stop(Duration::from_secs(10)));
    }

    #[test]
    fn stop_is_bounded() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (in_round, round_started) = std::sync::mpsc::channel::<()>();
        let t = ServiceThread::start(
            "stuck",
            |_| {},
            move |_| {
                let _ = in_round.send(());
                // Stuck until the test lets go (a stalled disk).
                let _ = rx.recv();
            },
        )
        .unwrap();
        round_started.recv().unwrap();
        let t0 = Instant::now();
        assert!(!t.stop(Duration::from_millis(50)));
        assert!(t0.elapsed() >= Duration::from_millis(50));
        drop(tx);
    }
}
