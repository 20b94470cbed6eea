//! The engine's locks: the standard library's, with guards that ignore
//! poisoning (a panic in a service poisons the *store*, see
//! [`crate::services::service_thread`]; the data under a lock stays usable
//! for reads and for the shutdown that follows).
//!
//! Why not `parking_lot`: a thread that blocks on one of its locks or
//! condition variables parks in a table shared by the whole process, and
//! takes a lock of that table to do so. A thread of the parent that holds
//! such a table lock at the moment another thread calls `fork()` leaves it
//! held for ever in the child, and the child's first wait that hashes to the
//! same slot hangs (or trips an assertion): a worker process forked from a
//! process whose store is open, or was open a moment ago, could hang opening
//! its own store. The standard library's locks keep all their state in the
//! lock word itself (a futex on Linux): a lock the parent held at fork stays
//! held only for the child's code that uses that very lock, and a forked
//! child's copy of a store never does (docs/format.md §14, "Fork").

use std::ops::{Deref, DerefMut};
use std::sync::PoisonError;
use std::time::{Duration, Instant};

/// A mutual exclusion lock whose `lock()` returns the guard directly.
#[derive(Debug, Default)]
pub struct Mutex<T: ?Sized>(std::sync::Mutex<T>);

/// The guard of a [`Mutex`]; the lock is released when it is dropped.
#[derive(Debug)]
pub struct MutexGuard<'a, T: ?Sized> {
    // Empty only inside `Condvar::wait*`, which hands it to the standard
    // condition variable and puts the guard it gets back in its place.
    inner: Option<std::sync::MutexGuard<'a, T>>,
}

impl<T> Mutex<T> {
    /// A new unlocked mutex holding `value`.
    pub const fn new(value: T) -> Self {
        Self(std::sync::Mutex::new(value))
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Locks, waiting as long as it takes.
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        MutexGuard {
            inner: Some(self.0.lock().unwrap_or_else(PoisonError::into_inner)),
        }
    }

    /// Locks if nobody holds the lock now.
    #[inline]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(g) => Some(MutexGuard { inner: Some(g) }),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(MutexGuard {
                inner: Some(p.into_inner()),
            }),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// The value, through an exclusive borrow (no locking).
    pub fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<'a, T: ?Sized> MutexGuard<'a, T> {
    fn take(&mut self) -> std::sync::MutexGuard<'a, T> {
        match self.inner.take() {
            Some(g) => g,
            None => unreachable!("a mutex guard is empty only inside a condition variable wait"),
        }
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        match &self.inner {
            Some(g) => g,
            None => unreachable!("a mutex guard is empty only inside a condition variable wait"),
        }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        match &mut self.inner {
            Some(g) => g,
            None => unreachable!("a mutex guard is empty only inside a condition variable wait"),
        }
    }
}

impl<T: ?Sized + std::fmt::Display> std::fmt::Display for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

/// Whether a timed wait ended by its timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitTimeoutResult(bool);

impl WaitTimeoutResult {
    /// True when the wait ended because its time was up.
    pub fn timed_out(self) -> bool {
        self.0
    }
}

/// A condition variable used with [`Mutex`] guards.
#[derive(Debug, Default)]
pub struct Condvar(std::sync::Condvar);

impl Condvar {
    /// A condition variable nobody waits on.
    pub const fn new() -> Self {
        Self(std::sync::Condvar::new())
    }

    /// Wakes one waiter.
    #[inline]
    pub fn notify_one(&self) {
        self.0.notify_one();
    }

    /// Wakes every waiter.
    #[inline]
    pub fn notify_all(&self) {
        self.0.notify_all();
    }

    /// Waits for a notification (spurious wake-ups possible), releasing the
    /// lock meanwhile.
    pub fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
        let g = guard.take();
        guard.inner = Some(self.0.wait(g).unwrap_or_else(PoisonError::into_inner));
    }

    /// Waits at most `timeout` (see [`Condvar::wait`]).
    pub fn wait_for<T>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        timeout: Duration,
    ) -> WaitTimeoutResult {
        let g = guard.take();
        let (g, r) = self
            .0
            .wait_timeout(g, timeout)
            .unwrap_or_else(PoisonError::into_inner);
        guard.inner = Some(g);
        WaitTimeoutResult(r.timed_out())
    }

    /// Waits until `deadline` at the latest (see [`Condvar::wait`]).
    pub fn wait_until<T>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        deadline: Instant,
    ) -> WaitTimeoutResult {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return WaitTimeoutResult(true);
        }
        self.wait_for(guard, left)
    }
}

/// A reader-writer lock whose `read()`/`write()` return the guards directly.
#[derive(Debug, Default)]
pub struct RwLock<T: ?Sized>(std::sync::RwLock<T>);

impl<T> RwLock<T> {
    /// A new unlocked lock holding `value`.
    pub const fn new(value: T) -> Self {
        Self(std::sync::RwLock::new(value))
    }
}

impl<T: ?Sized> RwLock<T> {
    /// Shared access, waiting as long as it takes.
    #[inline]
    pub fn read(&self) -> std::sync::RwLockReadGuard<'_, T> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Exclusive access, waiting as long as it takes.
    #[inline]
    pub fn write(&self) -> std::sync::RwLockWriteGuard<'_, T> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_poisoned_lock_still_serves_its_value() {
        let m = Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock();
            panic!("poison it");
        })
        .join();
        *m.lock() += 1;
        assert_eq!(*m.lock(), 2);
        assert!(m.try_lock().is_some());
    }

    #[test]
    fn waits_give_the_guard_back_and_time_out() {
        let m = Mutex::new(0);
        let cv = Condvar::new();
        let mut g = m.lock();
        assert!(cv.wait_for(&mut g, Duration::from_millis(5)).timed_out());
        assert!(cv
            .wait_until(&mut g, Instant::now() - Duration::from_millis(1))
            .timed_out());
        *g += 1;
        drop(g);
        assert_eq!(*m.lock(), 1);
    }

    #[test]
    fn a_notification_ends_a_wait() {
        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let p2 = pair.clone();
        let t = std::thread::spawn(move || {
            *p2.0.lock() = true;
            p2.1.notify_all();
        });
        let mut g = pair.0.lock();
        while !*g {
            let _ = pair.1.wait_for(&mut g, Duration::from_secs(5));
        }
        t.join().ok();
        assert!(*g);
    }
}
