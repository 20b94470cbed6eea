//! Named fault-injection points, so tests can make a write, flush or file
//! creation fail on demand (a failed fsync must poison the store; a full disk
//! must fail a file creation cleanly).
//!
//! Compiled only with the `failpoints` cargo feature: the test install
//! enables it, release wheels never have it (`scripts/build-dist.sh` checks
//! that the wheel carries none of the point names). Each call site is gated
//! with `#[cfg(feature = "failpoints")]`, so a release build has no check at
//! all. With the feature, a point is checked with one relaxed atomic load
//! when no point is armed.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::sync::Mutex;

static ANY_ARMED: AtomicBool = AtomicBool::new(false);
static ARMED: Mutex<Vec<(String, i32)>> = Mutex::new(Vec::new());
/// Threads held at each pause point now.
static WAITING: Mutex<Vec<(String, usize)>> = Mutex::new(Vec::new());

/// The points the engine checks.
/// `map_new_file` fails the mapping of a file just created (as an
/// address-space limit would), after the file was made. `flush_hold` is a
/// stalled disk: while armed, the flush services flush nothing (the errno
/// is not used).
/// `reserve` fails reserving disk blocks ahead of a writer (a full disk);
/// `mlock` fails warm-up's memory lock (RLIMIT_MEMLOCK).
/// `create_cq_file`, `create_index_file` and `allocate_file` fail making a
/// new ConsumeQueue file (dispatch), index file (dispatch) or CommitLog file
/// (the allocator thread, or without it the put that rolls) with the errno,
/// before anything is created.
/// `index_msync` fails the flush of a full index file (the `index_flush`
/// service's, or the one a store flush waits for) with the errno.
/// `pause_cq_flush`, `pause_commitlog_flush` and `pause_index_flush` hold
/// a flush between picking a file and syncing it, while armed (the errno is
/// not used), so a test can delete the file in that window
/// ([`waiting`] says when a flush is held). `pause_dispatch_step` holds a
/// dispatch step after it read the bytes it will parse, while armed.
/// `panic_<service>` makes the next round of that background service panic
/// (the errno is not used): the service must poison the store, not die
/// silently (see [`crate::services::service_thread`]).
pub const POINTS: &[&str] = &[
    "msync",
    "create_file",
    "map_new_file",
    "cq_put",
    "flush_hold",
    "reserve",
    "mlock",
    "pause_cq_flush",
    "create_cq_file",
    "create_index_file",
    "allocate_file",
    "pause_commitlog_flush",
    "pause_index_flush",
    "pause_dispatch_step",
    "index_msync",
    "panic_flush",
    "panic_group_commit",
    "panic_commit",
    "panic_cq_flush",
    "panic_dispatch",
    "panic_allocate",
    "panic_prefault",
    "panic_index_flush",
    "panic_clock",
];

/// Arms `name` to fail with `errno` (0 disarms it).
pub fn set(name: &str, errno: i32) -> bool {
    if !POINTS.contains(&name) {
        return false;
    }
    let mut a = ARMED.lock();
    a.retain(|(n, _)| n != name);
    if errno != 0 {
        a.push((name.to_owned(), errno));
    }
    ANY_ARMED.store(!a.is_empty(), Ordering::Release);
    true
}

/// Disarms every point.
pub fn clear() {
    ARMED.lock().clear();
    ANY_ARMED.store(false, Ordering::Release);
}

/// `Err(io error)` when `name` is armed.
#[inline]
pub fn check(name: &str) -> std::io::Result<()> {
    if !ANY_ARMED.load(Ordering::Relaxed) {
        return Ok(());
    }
    match ARMED.lock().iter().find(|(n, _)| n == name) {
        Some((_, errno)) => Err(std::io::Error::from_raw_os_error(*errno)),
        None => Ok(()),
    }
}

/// Holds the calling thread while `name` is armed (a pause point); returns
/// at once when it is not.
pub fn pause(name: &str) {
    if check(name).is_ok() {
        return;
    }
    let bump = |d: isize| {
        let mut w = WAITING.lock();
        match w.iter_mut().find(|(n, _)| n == name) {
            Some((_, c)) => *c = c.saturating_add_signed(d),
            None => w.push((name.to_owned(), d.max(0) as usize)),
        }
    };
    bump(1);
    while check(name).is_err() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    bump(-1);
}

/// How many threads `name` (a pause point) holds now.
pub fn waiting(name: &str) -> usize {
    WAITING
        .lock()
        .iter()
        .find(|(n, _)| n == name)
        .map_or(0, |(_, c)| *c)
}
