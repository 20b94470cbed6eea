//! The process's read-only stores, shared: a read-only open (recovery of
//! the store's tail, 0.3–0.5 s on a large store) is done once per store
//! path and read fields, and every planning and task of the executor
//! (one JVM) reads through the same store.
//!
//! - A reuse first follows the writer ([`Store::refresh`]), as a fresh open
//!   would have found the files, then checks the store's identity: the
//!   root and CommitLog folders and every CommitLog file the store maps
//!   must be the same files (device and inode) as when it opened or
//!   adopted them. A store deleted and made again at the same path, or a
//!   segment replaced or deleted other than from the head (what retention
//!   deletes, and what the refresh lets go), is opened afresh.
//! - The cache holds one reference; each handle and reader another. A
//!   store no handle or reader used for the idle time ([`configure`],
//!   60 s by default) is shut down by the cache's thread,
//!   `rocketstore-store-cache`, which runs while the cache holds a store.
//! - An idle time of 0 turns the cache off: every open is a new store, as
//!   before (and the stores not in use are shut down at once).
//!
//! [`stats`] counts opens and reuses, for tests and logs.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use engine::Store;

use crate::fields::read_key;
use crate::Result;

/// What opens of one store share: its path (canonical when it exists) and
/// its read fields, sorted.
type Key = (String, Vec<(String, String)>);

/// A file's identity: device and inode.
type FileId = (u64, u64);

struct Cached {
    store: Arc<Store>,
    /// The root and CommitLog folders.
    dirs: Vec<Option<FileId>>,
    /// Every CommitLog file seen mapped, by path.
    files: HashMap<PathBuf, FileId>,
    last_used: Instant,
}

type Slot = Arc<Mutex<Option<Cached>>>;

/// Default idle time before an unused store is shut down (ms).
pub const DEFAULT_IDLE_MS: u64 = 60_000;

static IDLE_MS: AtomicU64 = AtomicU64::new(DEFAULT_IDLE_MS);
static REAPER: AtomicBool = AtomicBool::new(false);
static OPENS: AtomicU64 = AtomicU64::new(0);
static REUSES: AtomicU64 = AtomicU64::new(0);
static REOPENS: AtomicU64 = AtomicU64::new(0);
static CLOSED_IDLE: AtomicU64 = AtomicU64::new(0);
/// Wakes the cache's thread when the idle time changes.
static WAKE: (Mutex<u64>, Condvar) = (Mutex::new(0), Condvar::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while a lock was held left whole values behind (each change
    // is one assignment): keep using them.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn slots() -> MutexGuard<'static, HashMap<Key, Slot>> {
    static S: OnceLock<Mutex<HashMap<Key, Slot>>> = OnceLock::new();
    lock(S.get_or_init(|| Mutex::new(HashMap::new())))
}

fn file_id(p: &Path) -> Option<FileId> {
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

impl Cached {
    fn new(store: Arc<Store>) -> Self {
        let mut c = Cached {
            dirs: dirs(&store),
            files: HashMap::new(),
            store,
            last_used: Instant::now(),
        };
        // A file that is gone already is not recorded: the next check,
        // after a refresh, finds whether the store still maps it.
        for f in c.store.commitlog().queue().files() {
            if let Some(id) = file_id(f.path()) {
                c.files.insert(f.path().to_owned(), id);
            }
        }
        c
    }

    /// Follows the writer, then true when the store is still the one at
    /// its path (see the module's text); records newly adopted files.
    fn still_valid(&mut self) -> bool {
        if self.store.check_open().is_err() || self.store.refresh().is_err() {
            return false;
        }
        if dirs(&self.store) != self.dirs {
            return false;
        }
        let mut seen = HashMap::new();
        for f in self.store.commitlog().queue().files() {
            let Some(id) = file_id(f.path()) else {
                return false; // deleted, not from the head
            };
            if self.files.get(f.path()).is_some_and(|old| *old != id) {
                return false; // replaced
            }
            seen.insert(f.path().to_owned(), id);
        }
        self.files = seen;
        true
    }
}

fn dirs(s: &Store) -> Vec<Option<FileId>> {
    let o = s.options();
    vec![file_id(&o.root), file_id(&o.commit_log_dir)]
}

/// Sets the idle time (ms; 0: no cache), and shuts down the stores idle
/// that long now.
pub fn configure(idle_ms: u64) {
    IDLE_MS.store(idle_ms, Ordering::Release);
    sweep(Instant::now());
    *lock(&WAKE.0) += 1;
    WAKE.1.notify_all();
}

/// `[opens, reuses, reopened (identity changed), closed idle, cached]`.
pub fn stats() -> [i64; 5] {
    let cached = slots()
        .values()
        .filter(|s| s.try_lock().map(|g| g.is_some()).unwrap_or(true))
        .count();
    [
        OPENS.load(Ordering::Relaxed) as i64,
        REUSES.load(Ordering::Relaxed) as i64,
        REOPENS.load(Ordering::Relaxed) as i64,
        CLOSED_IDLE.load(Ordering::Relaxed) as i64,
        cached as i64,
    ]
}

/// The read-only store at `path` with `fields`: the cached one when it is
/// still the store at that path, else a new open (`open` opens it).
pub fn acquire(
    path: &str,
    fields: &[(String, String)],
    open: impl FnOnce() -> Result<Store>,
) -> Result<Arc<Store>> {
    if IDLE_MS.load(Ordering::Acquire) == 0 {
        OPENS.fetch_add(1, Ordering::Relaxed);
        return open().map(Arc::new);
    }
    let canonical = std::fs::canonicalize(path)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| path.to_owned());
    let slot = slots()
        .entry((canonical, read_key(fields)))
        .or_default()
        .clone();
    // Opens of other stores go on meanwhile; one of this store waits for it.
    let mut g = lock(&slot);
    if let Some(c) = g.as_mut() {
        if c.still_valid() {
            c.last_used = Instant::now();
            REUSES.fetch_add(1, Ordering::Relaxed);
            return Ok(c.store.clone());
        }
        REOPENS.fetch_add(1, Ordering::Relaxed);
        if let Some(old) = g.take() {
            release(old.store);
        }
    }
    let s = Arc::new(open()?);
    OPENS.fetch_add(1, Ordering::Relaxed);
    *g = Some(Cached::new(s.clone()));
    drop(g);
    ensure_reaper();
    Ok(s)
}

/// Drops the cache's reference; shuts the store down if it was the last
/// (a handle or reader still using it shuts it down when it closes).
fn release(s: Arc<Store>) {
    if let Some(s) = Arc::into_inner(s) {
        if let Err(e) = s.shutdown() {
            log::warn!("rocketstore: closing a cached store: {e}");
        }
    }
}

/// Shuts down every store unused for the idle time; true when the cache
/// holds no store any more.
fn sweep(now: Instant) -> bool {
    let idle = Duration::from_millis(IDLE_MS.load(Ordering::Acquire));
    let all: Vec<Slot> = slots().values().cloned().collect();
    for slot in all {
        let Ok(mut g) = slot.try_lock() else {
            continue; // being opened or checked: in use
        };
        let Some(c) = g.as_mut() else {
            continue;
        };
        if Arc::strong_count(&c.store) > 1 {
            c.last_used = now; // a handle or reader uses it
        } else if now.saturating_duration_since(c.last_used) >= idle {
            if let Some(old) = g.take() {
                CLOSED_IDLE.fetch_add(1, Ordering::Relaxed);
                release(old.store);
            }
        }
    }
    let mut map = slots();
    // A slot nobody else holds (no open under way) and empty goes.
    map.retain(|_, s| Arc::strong_count(s) > 1 || s.try_lock().map_or(true, |g| g.is_some()));
    map.is_empty()
}

fn ensure_reaper() {
    if REAPER.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("rocketstore-store-cache".into())
        .spawn(reap);
    if let Err(e) = spawned {
        REAPER.store(false, Ordering::Release);
        log::warn!("rocketstore: no store cache thread ({e}): idle stores stay open");
    }
}

fn reap() {
    loop {
        let idle = IDLE_MS.load(Ordering::Acquire);
        let period = Duration::from_millis((idle / 2).clamp(10, 1000));
        let g = lock(&WAKE.0);
        let seen = *g;
        // Until the period ends, or the idle time changes.
        drop(WAKE.1.wait_timeout_while(g, period, |n| *n == seen));
        if sweep(Instant::now()) {
            REAPER.store(false, Ordering::Release);
            // An open between the sweep and the store found the flag still
            // set and started no thread: this one goes on for it.
            if slots().is_empty() || REAPER.swap(true, Ordering::AcqRel) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use engine::StoreOptions;

    fn writer(dir: &Path) -> Store {
        let o = StoreOptions {
            commit_log_file_size: Some(64 << 10),
            ..StoreOptions::at(dir)
        };
        Store::open_running(o).expect("open a writer")
    }

    fn put(s: &Store, n: usize) {
        let bodies: Vec<Vec<u8>> = (0..n).map(|i| format!("m{i}").into_bytes()).collect();
        let specs = bodies
            .iter()
            .map(|b| Ok(engine::MessageSpec::new("T", 0, b.as_slice())));
        let out = s.put_batch(specs).expect("put");
        assert!(out.iter().all(|o| o.status == engine::PutStatus::PutOk));
        s.flush().expect("flush");
    }

    fn reader(path: &Path) -> impl FnOnce() -> Result<Store> + '_ {
        move || {
            let o = StoreOptions {
                read_only: true,
                ..StoreOptions::at(path)
            };
            let s = Store::open(o)?;
            s.recover(true, false)?;
            Ok(s)
        }
    }

    // One test: the cache is the process's, and tests run in threads.
    #[test]
    fn opens_are_shared_followed_reopened_and_closed_when_idle() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("s");
        let w = writer(&p);
        put(&w, 3);
        let ps = p.to_string_lossy().into_owned();
        let f = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        let before = stats();
        let a = acquire(&ps, &[], reader(&p)).expect("open");
        let b = acquire(
            &format!("{ps}/"),
            &f("flush_disk_type", "SYNC_FLUSH"),
            reader(&p),
        )
        .expect("reuse");
        assert!(
            Arc::ptr_eq(&a, &b),
            "one store for one path and read fields"
        );
        let c = acquire(&ps, &f("check_crc_on_recover", "false"), reader(&p)).expect("other");
        assert!(!Arc::ptr_eq(&a, &c), "other read fields: another store");
        let now = stats();
        assert_eq!((now[0] - before[0], now[1] - before[1]), (2, 1));
        // A reuse follows the writer.
        put(&w, 2);
        let d = acquire(&ps, &[], reader(&p)).expect("reuse");
        assert!(Arc::ptr_eq(&a, &d));
        assert_eq!(d.max_offset_in_queue("T", 0).expect("end"), 5);
        drop((a, b, c, d));
        // The store made again at the same path is another store.
        w.shutdown().expect("shutdown");
        std::fs::remove_dir_all(&p).expect("remove");
        let w = writer(&p);
        put(&w, 1);
        let e = acquire(&ps, &[], reader(&p)).expect("reopen");
        assert_eq!(e.max_offset_in_queue("T", 0).expect("end"), 1);
        assert_eq!(stats()[2] - before[2], 1);
        // Idle stores are shut down; one in use is not.
        configure(50);
        std::thread::sleep(Duration::from_millis(400));
        assert!(e.check_open().is_ok(), "in use: still open");
        assert!(stats()[3] > before[3], "the unused store was shut down");
        let weak = Arc::downgrade(&e);
        drop(e);
        std::thread::sleep(Duration::from_millis(400));
        assert!(weak.upgrade().is_none(), "the idle store was let go");
        configure(0);
        let g = acquire(&ps, &[], reader(&p)).expect("uncached");
        let h = acquire(&ps, &[], reader(&p)).expect("uncached");
        assert!(!Arc::ptr_eq(&g, &h), "no cache: every open is a store");
        configure(DEFAULT_IDLE_MS);
        w.shutdown().expect("shutdown");
    }
}
