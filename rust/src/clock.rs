//! A cached millisecond wall clock, refreshed by a thread (the role of
//! RocketMQ's `SystemClock`).
//!
//! Store timestamps are in milliseconds, yet reading the wall clock costs a
//! `clock_gettime` per put (35–80 ns on a VM, where the vDSO reads a
//! para-virtualised clock). A store's writer instead reads one atomic that a
//! thread rewrites every [`REFRESH`]; the value trails the real clock by at
//! most one refresh period plus the millisecond truncation while the thread
//! gets CPU time (a thread starved by a saturated machine can fall further
//! behind, as RocketMQ's can). The kernel's coarse clock is no substitute:
//! its resolution is one scheduler tick (4 ms at HZ=250).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often the clock thread refreshes the cached value.
pub const REFRESH: Duration = Duration::from_micros(500);

/// Milliseconds since the Unix epoch, read from the system clock.
#[inline]
pub fn system_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

struct Shared {
    now: AtomicI64,
    stop: AtomicBool,
}

/// A millisecond clock kept current by its own thread; the thread stops
/// when the clock is dropped.
pub struct CachedClock {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for CachedClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedClock")
            .field("now", &self.now_ms())
            .finish()
    }
}

impl CachedClock {
    /// Starts the refresh thread.
    pub fn start() -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            now: AtomicI64::new(system_now_ms()),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("rocketstore-clock".into())
            .spawn(move || {
                while !s.stop.load(Ordering::Acquire) {
                    std::thread::sleep(REFRESH);
                    // Never move backwards from what readers already saw: a
                    // wall-clock step back holds the value until time catches up.
                    s.now.fetch_max(system_now_ms(), Ordering::Release);
                }
            })?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// The cached milliseconds since the Unix epoch.
    #[inline]
    pub fn now_ms(&self) -> i64 {
        self.shared.now.load(Ordering::Acquire)
    }
}

impl Drop for CachedClock {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_system_clock_closely() {
        let c = CachedClock::start().unwrap();
        let mut prev = c.now_ms();
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(2));
            let before = system_now_ms();
            let cached = c.now_ms();
            assert!(cached >= prev, "cached clock went backwards");
            assert!(
                cached <= system_now_ms(),
                "cached clock ahead of the system clock"
            );
            prev = cached;
            // Lag is bounded only while the thread gets CPU: just check it
            // moves with the real clock, not a fixed latency.
            assert!(
                before - cached < 1000,
                "cached clock stopped ({before} vs {cached})"
            );
        }
    }
}
