//! What a master knows of its slaves: each connection's last report, the
//! highest report of any slave (RocketMQ's `push2SlaveMaxOffset`), which a
//! SYNC_MASTER put waits on, and the wake-up that tells the connections'
//! writers the log grew.
//!
//! Both waits park the waiting thread itself (no shared condition): a
//! report wakes only the puts whose end it reaches, not every waiting put,
//! and an append wakes a parked writer with one atomic swap (a system call
//! only when the writer sleeps) instead of a condition variable's wake-up.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{Thread, ThreadId};
use std::time::{Duration, Instant};

use crate::sync::Mutex;

use crate::log::commitlog::now_ms;

/// One connected slave, as its master sees it.
#[derive(Debug)]
pub struct SlaveConn {
    /// The slave's address.
    pub addr: SocketAddr,
    /// Its last report (-1: none yet).
    pub acked: AtomicI64,
    /// Where its copy starts (-1: not known yet): a new slave is sent the
    /// master's log from a file's start, and holds nothing below it; a
    /// slave that reported an offset holds the log below it (0).
    pub from: AtomicI64,
    /// When it reported last (ms since the epoch; 0: never).
    pub last_report_ms: AtomicI64,
    /// When it connected (ms since the epoch).
    pub connected_ms: i64,
}

/// The master's view of its slaves (shared by the put path and the HA threads).
#[derive(Debug, Default)]
pub struct Acks {
    best: AtomicU64,
    grew_seq: AtomicU64,
    /// Writers parked in [`Acks::wait_grew`] (the length of `grew_parked`).
    grew_waiters: AtomicUsize,
    grew_parked: Mutex<Vec<Thread>>,
    slaves: Mutex<Vec<Arc<SlaveConn>>>,
    /// Puts waiting in [`Acks::wait_for`] (the length of `parked`).
    waiters: AtomicUsize,
    /// Each waiting put's end and thread.
    parked: Mutex<Vec<(u64, Thread)>>,
}

impl Acks {
    /// Nothing reported, no slave.
    pub fn new() -> Self {
        Self::default()
    }

    /// The highest offset any slave reported since the store opened.
    pub fn best(&self) -> u64 {
        self.best.load(Ordering::Acquire)
    }

    /// Slaves connected now.
    pub fn connections(&self) -> usize {
        self.slaves.lock().len()
    }

    /// The connected slaves.
    pub fn slaves(&self) -> Vec<Arc<SlaveConn>> {
        self.slaves.lock().clone()
    }

    /// Registers a connection.
    pub fn add(&self, addr: SocketAddr) -> Arc<SlaveConn> {
        let c = Arc::new(SlaveConn {
            addr,
            acked: AtomicI64::new(-1),
            from: AtomicI64::new(-1),
            last_report_ms: AtomicI64::new(0),
            connected_ms: now_ms(),
        });
        self.slaves.lock().push(c.clone());
        c
    }

    /// Removes a closed connection.
    pub fn remove(&self, c: &Arc<SlaveConn>) {
        self.slaves.lock().retain(|s| !Arc::ptr_eq(s, c));
    }

    /// A slave on `c` reported `offset`: raises the best report and wakes
    /// the puts waiting for an end at or below it (the others sleep on).
    pub fn report(&self, c: &SlaveConn, offset: u64) {
        // SeqCst with `waiters` and `holds`: either this report sees a
        // waiter, or the waiter's check sees this report.
        c.acked.store(offset as i64, Ordering::SeqCst);
        c.last_report_ms.store(now_ms(), Ordering::Release);
        self.best.fetch_max(offset, Ordering::AcqRel);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            // Unparked after the lock is released: a woken put that takes
            // itself off the list does not wait for this thread.
            let wake: Vec<Thread> = self
                .parked
                .lock()
                .iter()
                .filter(|(end, _)| *end <= offset)
                .map(|(_, t)| t.clone())
                .collect();
            for t in wake {
                t.unpark();
            }
        }
    }

    /// True if a connected slave holds the bytes `[start, end)`: its copy
    /// starts at or below `start` and it reported `end` or more.
    pub fn holds(&self, start: u64, end: u64) -> bool {
        self.slaves.lock().iter().any(|s| {
            let from = s.from.load(Ordering::SeqCst);
            from >= 0 && from as u64 <= start && s.acked.load(Ordering::SeqCst) >= end as i64
        })
    }

    /// RocketMQ's `isSlaveOK`: a slave is connected and the best report is
    /// less than `fallbehind_max` bytes behind `end`.
    pub fn slave_ok(&self, end: u64, fallbehind_max: u64) -> bool {
        self.connections() > 0 && end.saturating_sub(self.best()) < fallbehind_max
    }

    /// Waits until a slave holds `[start, end)` ([`Acks::holds`]); false
    /// after `timeout`. The thread parks until a report reaches `end` (or
    /// the time is up).
    pub fn wait_for(&self, start: u64, end: u64, timeout: Duration) -> bool {
        if self.holds(start, end) {
            return true;
        }
        let deadline = Instant::now() + timeout;
        let me = std::thread::current();
        {
            let mut p = self.parked.lock();
            p.push((end, me.clone()));
            self.waiters.store(p.len(), Ordering::SeqCst);
        }
        let held = loop {
            if self.holds(start, end) {
                break true;
            }
            let now = Instant::now();
            if now >= deadline {
                break false;
            }
            // A report that came between the check and here left the
            // thread's token set: the park returns at once.
            std::thread::park_timeout(deadline - now);
        };
        let mut p = self.parked.lock();
        if let Some(i) = p.iter().position(|(_, t)| t.id() == me.id()) {
            p.swap_remove(i);
        }
        self.waiters.store(p.len(), Ordering::SeqCst);
        held
    }

    /// The log grew: wakes the writers parked to send (one atomic load
    /// when none is).
    #[inline]
    pub fn log_grew(&self) {
        self.grew_seq.fetch_add(1, Ordering::SeqCst);
        if self.grew_waiters.load(Ordering::SeqCst) > 0 {
            // Taken off the list before they wake (a woken writer finds
            // nothing to do there) and unparked after the lock is released.
            let wake = {
                let mut p = self.grew_parked.lock();
                self.grew_waiters.store(0, Ordering::SeqCst);
                std::mem::take(&mut *p)
            };
            for t in wake {
                t.unpark();
            }
        }
    }

    /// The wake-up count now (pass it to [`Acks::wait_grew`]).
    pub fn grew_seq(&self) -> u64 {
        self.grew_seq.load(Ordering::SeqCst)
    }

    /// Waits until the log grew after `seen` was read, at most `max`.
    pub fn wait_grew(&self, seen: u64, max: Duration) {
        if self.grew_seq.load(Ordering::SeqCst) != seen {
            return;
        }
        let me = std::thread::current();
        {
            let mut p = self.grew_parked.lock();
            p.push(me.clone());
            self.grew_waiters.store(p.len(), Ordering::SeqCst);
        }
        // SeqCst with `log_grew`: either it sees this thread parked, or
        // this load sees its count.
        if self.grew_seq.load(Ordering::SeqCst) == seen {
            std::thread::park_timeout(max);
        }
        self.forget_grew_waiter(me.id());
    }

    /// Takes a writer off the parked list (a wake-up took it off already).
    fn forget_grew_waiter(&self, id: ThreadId) {
        if self.grew_waiters.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut p = self.grew_parked.lock();
        p.retain(|t| t.id() != id);
        self.grew_waiters.store(p.len(), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_wakes_every_waiting_put() {
        let acks = Arc::new(Acks::new());
        let c = acks.add("127.0.0.1:1".parse().expect("addr"));
        c.from.store(50, Ordering::Release);
        assert!(acks.slave_ok(100, 256));
        assert!(!acks.slave_ok(300, 256));
        let waiters: Vec<_> = (0..4)
            .map(|i| {
                let a = acks.clone();
                std::thread::spawn(move || a.wait_for(60, 100 + i, Duration::from_secs(5)))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        acks.report(&c, 200);
        for w in waiters {
            assert!(w.join().expect("joined"));
        }
        assert!(!acks.wait_for(60, 201, Duration::from_millis(10)));
        // A record below where the slave's copy starts is not held by it.
        assert!(!acks.wait_for(40, 100, Duration::from_millis(10)));
        acks.remove(&c);
        assert!(!acks.slave_ok(200, 256));
    }

    #[test]
    fn a_report_wakes_the_puts_it_reaches_and_no_other() {
        let acks = Arc::new(Acks::new());
        let c = acks.add("127.0.0.1:1".parse().expect("addr"));
        c.from.store(0, Ordering::Release);
        let wait = |end: u64| {
            let a = acks.clone();
            std::thread::spawn(move || {
                let t = Instant::now();
                (a.wait_for(0, end, Duration::from_secs(20)), t.elapsed())
            })
        };
        let (near, far) = (wait(100), wait(300));
        while acks.waiters.load(Ordering::SeqCst) < 2 {
            std::thread::sleep(Duration::from_millis(1));
        }
        acks.report(&c, 200);
        let (held, took) = near.join().expect("joined");
        assert!(held && took < Duration::from_secs(10), "{took:?}");
        std::thread::sleep(Duration::from_millis(20));
        assert!(!far.is_finished());
        assert_eq!(acks.parked.lock().len(), 1);
        acks.report(&c, 300);
        let (held, took) = far.join().expect("joined");
        assert!(held && took < Duration::from_secs(10), "{took:?}");
        assert_eq!(acks.waiters.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn an_append_wakes_a_parked_writer() {
        let acks = Arc::new(Acks::new());
        let a = acks.clone();
        let seen = acks.grew_seq();
        let w = std::thread::spawn(move || {
            let t = Instant::now();
            a.wait_grew(seen, Duration::from_secs(20));
            t.elapsed()
        });
        while acks.grew_waiters.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        acks.log_grew();
        let took = w.join().expect("joined");
        assert!(took < Duration::from_secs(10), "{took:?}");
        assert_eq!(acks.grew_parked.lock().len(), 0);
        // Grown since `seen`: no wait at all.
        let t = Instant::now();
        acks.wait_grew(seen, Duration::from_secs(20));
        assert!(t.elapsed() < Duration::from_secs(10));
    }
}
