//! What a master knows of its slaves: each connection's last report, the
//! highest report of any slave (RocketMQ's `push2SlaveMaxOffset`), which a
//! SYNC_MASTER put waits on, and the wake-up that tells the connections'
//! writers the log grew.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::{Condvar, Mutex};

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
    lock: Mutex<()>,
    cv: Condvar,
    grew_seq: AtomicU64,
    grew_waiters: AtomicUsize,
    grew_lock: Mutex<()>,
    grew_cv: Condvar,
    slaves: Mutex<Vec<Arc<SlaveConn>>>,
    /// Puts waiting in [`Acks::wait_for`].
    waiters: AtomicUsize,
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
    /// the puts waiting for it.
    pub fn report(&self, c: &SlaveConn, offset: u64) {
        // SeqCst with `waiters` and `holds`: either this report sees a
        // waiter, or the waiter's check sees this report.
        c.acked.store(offset as i64, Ordering::SeqCst);
        c.last_report_ms.store(now_ms(), Ordering::Release);
        self.best.fetch_max(offset, Ordering::AcqRel);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _g = self.lock.lock();
            self.cv.notify_all();
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
    /// after `timeout`. Every put waiting shares one condition (one report
    /// wakes them all).
    pub fn wait_for(&self, start: u64, end: u64, timeout: Duration) -> bool {
        if self.holds(start, end) {
            return true;
        }
        let deadline = Instant::now() + timeout;
        let mut g = self.lock.lock();
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let held = loop {
            if self.holds(start, end) {
                break true;
            }
            if self.cv.wait_until(&mut g, deadline).timed_out() {
                break self.holds(start, end);
            }
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        held
    }

    /// The log grew: wakes the writers waiting to send (one atomic load
    /// when none waits).
    #[inline]
    pub fn log_grew(&self) {
        self.grew_seq.fetch_add(1, Ordering::SeqCst);
        if self.grew_waiters.load(Ordering::SeqCst) > 0 {
            let _g = self.grew_lock.lock();
            self.grew_cv.notify_all();
        }
    }

    /// The wake-up count now (pass it to [`Acks::wait_grew`]).
    pub fn grew_seq(&self) -> u64 {
        self.grew_seq.load(Ordering::SeqCst)
    }

    /// Waits until the log grew after `seen` was read, at most `max`.
    pub fn wait_grew(&self, seen: u64, max: Duration) {
        let mut g = self.grew_lock.lock();
        self.grew_waiters.fetch_add(1, Ordering::SeqCst);
        if self.grew_seq.load(Ordering::SeqCst) == seen {
            self.grew_cv.wait_for(&mut g, max);
        }
        self.grew_waiters.fetch_sub(1, Ordering::SeqCst);
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
}
