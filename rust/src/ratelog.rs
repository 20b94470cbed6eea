//! Rate-limited logging for errors that repeat once per attempt (a full disk
//! fails every put): the first few occurrences are logged, then at most one
//! line per window, carrying the count of the lines left out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::sync::Mutex;

/// Lines logged in full before the limit applies.
const BURST: u32 = 3;
/// After the burst, at most one line per window.
const WINDOW: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct State {
    /// Occurrences since the last reset.
    total: u64,
    /// Occurrences not logged since the last logged line.
    suppressed: u64,
    last_logged: Option<Instant>,
}

/// Counts occurrences of one kind of error and logs only some of them.
#[derive(Debug)]
pub struct RateLimited {
    state: Mutex<State>,
    /// True while a run of occurrences is open (`total > 0`): lets
    /// [`RateLimited::reset`], called after every success on hot paths,
    /// return after one relaxed load instead of taking the mutex.
    active: AtomicBool,
}

impl Default for RateLimited {
    fn default() -> Self {
        Self::new()
    }
}

impl RateLimited {
    /// A limiter that has logged nothing yet.
    pub const fn new() -> Self {
        Self {
            state: Mutex::new(State {
                total: 0,
                suppressed: 0,
                last_logged: None,
            }),
            active: AtomicBool::new(false),
        }
    }

    /// Records one occurrence; logs `msg()` at `level` if the limit allows,
    /// with the number of occurrences left out since the previous line.
    pub fn log(&self, level: log::Level, msg: impl FnOnce() -> String) {
        let now = Instant::now();
        let mut st = self.state.lock();
        st.total += 1;
        self.active.store(true, Ordering::Relaxed);
        let due = st.total <= BURST as u64
            || match st.last_logged {
                None => true,
                Some(t) => now.duration_since(t) >= WINDOW,
            };
        if !due {
            st.suppressed += 1;
            return;
        }
        let left_out = std::mem::take(&mut st.suppressed);
        let total = st.total;
        st.last_logged = Some(now);
        drop(st);
        let text = msg();
        if total == BURST as u64 {
            log::log!(
                level,
                "{text} (further occurrences are counted and logged at most every {} s)",
                WINDOW.as_secs()
            );
        } else if left_out > 0 {
            log::log!(
                level,
                "{text} ({left_out} more occurrences since the last message, {total} in all)"
            );
        } else {
            log::log!(level, "{text}");
        }
    }

    /// Ends a run of occurrences: returns how many there were, if any.
    #[inline]
    pub fn reset(&self) -> Option<u64> {
        // A success after a failure in another thread may see `false` a
        // moment late; that run is then ended (and counted) by the next one.
        if !self.active.load(Ordering::Relaxed) {
            return None;
        }
        let mut st = self.state.lock();
        self.active.store(false, Ordering::Relaxed);
        if st.total == 0 {
            return None;
        }
        let n = st.total;
        st.total = 0;
        st.suppressed = 0;
        st.last_logged = None;
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_resets() {
        let r = RateLimited::new();
        for _ in 0..1000 {
            r.log(log::Level::Error, || "boom".into());
        }
        {
            let st = r.state.lock();
            assert_eq!(st.total, 1000);
            assert_eq!(st.suppressed, 1000 - BURST as u64);
        }
        assert_eq!(r.reset(), Some(1000));
        assert_eq!(r.reset(), None);
    }
}
