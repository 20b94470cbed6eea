//! A cached millisecond wall clock, refreshed by a thread (the role of
//! RocketMQ's `SystemClock`), that never trails the system clock.
//!
//! Store timestamps are in milliseconds, yet reading the wall clock costs a
//! `clock_gettime` per put (35–80 ns on a VM). The clock thread reads the
//! system clock every [`REFRESH`] and publishes the millisecond together
//! with the time-stamp counter value at which that millisecond ends. A
//! reader takes the cached value only while the counter (`rdtsc`, ~20 ns
//! here) is below that end, so the value is the current millisecond, not an
//! older one; past it (the thread was starved, or the millisecond ticked
//! over) the reader reads the system clock itself and republishes. Without
//! a trustworthy counter (not x86-64, or the kernel does not use the TSC as
//! its clocksource) every read is a system clock read. The kernel's coarse
//! clock is no substitute: its resolution is one scheduler tick (4 ms at
//! HZ=250).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::services::service_thread::ServiceThread;

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

/// The system clock as (ms since the epoch, ns left until the next ms).
#[inline]
fn system_now_split() -> (i64, u64) {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => {
            let sub = d.subsec_nanos() as u64 % 1_000_000;
            (d.as_millis() as i64, 1_000_000 - sub)
        }
        Err(_) => (0, 0),
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn counter() -> u64 {
    // SAFETY: RDTSC has no preconditions on x86-64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn counter() -> u64 {
    0
}

/// True when the time-stamp counter can bound the cached value's age: the
/// kernel itself keeps time with it (so it is constant-rate and synchronised
/// across CPUs).
fn counter_trusted() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .map(|s| s.trim() == "tsc")
        .unwrap_or(false)
}

struct Shared {
    /// The cached millisecond.
    now: AtomicI64,
    /// Counter value at which `now` stops being the current millisecond
    /// (0: do not use the cache).
    valid_until: AtomicU64,
    /// Counter ticks per 1024 ns (0 until calibrated).
    ticks_per_1024ns: AtomicU64,
}

impl Shared {
    /// Reads the system clock and publishes it with its validity end.
    #[inline]
    fn refresh(&self) -> i64 {
        let t = counter();
        let (ms, left_ns) = system_now_split();
        let rate = self.ticks_per_1024ns.load(Ordering::Relaxed);
        let prev = self.now.fetch_max(ms, Ordering::AcqRel);
        if rate != 0 && ms >= prev {
            // Published after `now`, so a reader that sees this end also
            // sees a `now` at least as new.
            // A margin of 20 µs covers calibration error.
            let left_ns = left_ns.saturating_sub(20_000);
            let until = t.saturating_add(left_ns.saturating_mul(rate) / 1024);
            self.valid_until.store(until, Ordering::Release);
        }
        ms.max(prev)
    }
}

/// A millisecond clock kept current by its own thread (the `clock`
/// [`ServiceThread`]); the thread stops when the clock is dropped.
pub struct CachedClock {
    shared: Arc<Shared>,
    service: ServiceThread,
}

impl std::fmt::Debug for CachedClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedClock")
            .field("now", &self.now_ms())
            .field("cached", &self.is_cached())
            .finish()
    }
}

impl CachedClock {
    /// Starts the refresh thread (a panic in it is logged).
    pub fn start() -> std::io::Result<Self> {
        Self::start_with(|_| {})
    }

    /// Starts the refresh thread; a panic in it is handed to `on_panic`.
    /// Reads stay correct without the thread (each becomes a system clock
    /// read once the cached millisecond is over).
    pub fn start_with(on_panic: impl Fn(String) + Send + 'static) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            now: AtomicI64::new(system_now_ms()),
            valid_until: AtomicU64::new(0),
            ticks_per_1024ns: AtomicU64::new(0),
        });
        let s = shared.clone();
        let trusted = counter_trusted();
        let (t0, i0) = (counter(), Instant::now());
        let service = ServiceThread::start("clock", on_panic, move |sig| {
            sig.wait(REFRESH);
            if trusted {
                // Calibrate over the whole life of the clock (more
                // precise as it runs); first after 20 ms.
                let ns = i0.elapsed().as_nanos() as u64;
                if ns >= 20_000_000 {
                    let ticks = counter().wrapping_sub(t0) as u128;
                    let rate = (ticks * 1024 / ns as u128) as u64;
                    s.ticks_per_1024ns.store(rate, Ordering::Relaxed);
                }
            }
            s.refresh();
        })?;
        Ok(Self { shared, service })
    }

    /// Stops the refresh thread (a store's close: a closed store leaves no
    /// thread behind). Reads stay correct: each is a system clock read once
    /// the cached millisecond is over.
    pub fn stop(&self) {
        self.service
            .stop(crate::services::service_thread::STOP_TIMEOUT);
    }

    /// Milliseconds since the Unix epoch: the cached value while it is the
    /// current millisecond, else a system clock read.
    #[inline]
    pub fn now_ms(&self) -> i64 {
        let until = self.shared.valid_until.load(Ordering::Acquire);
        let ms = self.shared.now.load(Ordering::Acquire);
        if counter() < until {
            ms
        } else {
            self.shared.refresh()
        }
    }

    /// True once reads are served from the cache (the counter is trusted
    /// and calibrated).
    pub fn is_cached(&self) -> bool {
        self.shared.valid_until.load(Ordering::Acquire) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_behind_the_system_clock() {
        let c = CachedClock::start().unwrap();
        let mut prev = c.now_ms();
        let deadline = Instant::now() + Duration::from_millis(300);
        let mut reads = 0u64;
        while Instant::now() < deadline {
            let before = system_now_ms();
            let cached = c.now_ms();
            let after = system_now_ms();
            assert!(cached >= prev, "went backwards: {prev} -> {cached}");
            // Equal to the system clock's millisecond at some moment of the call.
            assert!(
                before <= cached && cached <= after,
                "{before} <= {cached} <= {after} does not hold"
            );
            prev = cached;
            reads += 1;
        }
        assert!(reads > 1000);
    }

    #[test]
    fn starts_serving_from_the_cache_when_the_counter_is_trusted() {
        let c = CachedClock::start().unwrap();
        if !counter_trusted() {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !c.is_cached() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(c.is_cached(), "the clock never calibrated");
    }
}
