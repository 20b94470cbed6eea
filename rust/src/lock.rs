//! The single-writer lock: an open-file-description lock on byte 0 of `lock`;
//! and [`FileLock`], the same kind of lock on any file (the consumer offsets'
//! `config/consumerOffset.lock` and the consumer groups' locks).
//!
//! `F_OFD_SETLK` conflicts with Java's `FileChannel.tryLock` (a classic POSIX
//! record lock), with other processes, and with a second open of the same file
//! in this process; unlike a classic POSIX lock it is not dropped when some
//! other descriptor of the file is closed. It is released when the last
//! descriptor of the lock's open file description is closed (drop, or
//! process death).
//!
//! Fork: a child created by `fork()` inherits a copy of the descriptor, which
//! refers to the same open file description, so the lock would outlive the
//! parent's release for as long as the child lives. A `pthread_atfork` child
//! handler therefore closes the child's copies of every lock descriptor at
//! fork. The child never *unlocks* (`F_UNLCK` on a shared open file
//! description would drop the parent's lock): closing a copy only releases
//! the lock once no copy is left, and the parent keeps its own.

use std::cell::UnsafeCell;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::{AsRawFd, IntoRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

use crate::error::{Result, StoreError};

/// Descriptors of the locks this process holds, guarded by a spin flag (the
/// fork handlers may not block on anything a vanished thread could hold,
/// and the critical sections are a few instructions long).
struct LockFds {
    busy: AtomicBool,
    fds: UnsafeCell<Vec<RawFd>>,
}

// SAFETY: `fds` is only touched while `busy` is held (see `with`), or by the
// fork handlers between `prepare` (which takes `busy`) and `parent`/`child`.
unsafe impl Sync for LockFds {}

static LOCK_FDS: LockFds = LockFds {
    busy: AtomicBool::new(false),
    fds: UnsafeCell::new(Vec::new()),
};

/// Incremented in every forked child: objects remember the value they were
/// made with, and a different value means "I am a copy in a forked child".
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
static ATFORK: Once = Once::new();

impl LockFds {
    fn acquire(&self) {
        while self
            .busy
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
            std::thread::yield_now();
        }
    }

    fn release(&self) {
        self.busy.store(false, Ordering::Release);
    }

    fn with<R>(&self, f: impl FnOnce(&mut Vec<RawFd>) -> R) -> R {
        self.acquire();
        // SAFETY: `busy` is held, so this is the only access to `fds`.
        let r = f(unsafe { &mut *self.fds.get() });
        self.release();
        r
    }
}

extern "C" fn atfork_prepare() {
    // Holding the flag across fork() means no thread is half-way through
    // registering or closing a descriptor when the child is made.
    LOCK_FDS.acquire();
}

extern "C" fn atfork_parent() {
    LOCK_FDS.release();
}

extern "C" fn atfork_child() {
    // SAFETY: `prepare` took `busy` in the thread that forked, which is the
    // only thread of the child. `close` is async-signal-safe, and `clear`
    // frees nothing.
    let fds = unsafe { &mut *LOCK_FDS.fds.get() };
    for &fd in fds.iter() {
        // SAFETY: closes the child's copy only; never F_UNLCK.
        unsafe { libc::close(fd) };
    }
    fds.clear();
    FORK_GENERATION.fetch_add(1, Ordering::AcqRel);
    LOCK_FDS.release();
}

fn install_fork_handlers() {
    ATFORK.call_once(|| {
        // SAFETY: registering plain `extern "C"` functions that live forever.
        let rc = unsafe {
            libc::pthread_atfork(Some(atfork_prepare), Some(atfork_parent), Some(atfork_child))
        };
        if rc != 0 {
            log::warn!(
                "cannot install fork handlers ({}); a forked child keeps the store lock while it lives",
                std::io::Error::from_raw_os_error(rc)
            );
        }
    });
}

/// The fork generation of this process: it changes in a child after
/// `fork()`, so an object that recorded it can tell it is a forked copy.
pub fn fork_generation() -> u64 {
    FORK_GENERATION.load(Ordering::Acquire)
}

/// A held writer lock; released on drop (in the process that took it; a
/// forked child's copy was already closed at fork and is left alone).
#[derive(Debug)]
pub struct StoreLock {
    held: LockFile,
}

/// A lock file opened (created with its folder if missing) and registered
/// for the fork handlers; closed and deregistered on drop in the process
/// that opened it. A forked child's copy was already closed at fork and is
/// left alone: the number may name another file by then.
#[derive(Debug)]
struct LockFile {
    file: Option<File>,
    generation: u64,
}

impl LockFile {
    fn open(path: &Path) -> Result<Self> {
        install_fork_handlers();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::io(format!("create {}", dir.display()), e))?;
        }
        let file = open_regular(path, true)?;
        // Registered before any lock is taken, so a child forked at any
        // moment from here on closes its copy; a later failure drops `Self`,
        // which deregisters it.
        let fd = file.as_raw_fd();
        let generation = LOCK_FDS.with(|fds| {
            fds.push(fd);
            fork_generation()
        });
        Ok(Self {
            file: Some(file),
            generation,
        })
    }

    fn fd(&self) -> RawFd {
        self.file.as_ref().map_or(-1, |f| f.as_raw_fd())
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        let Some(file) = self.file.take() else {
            return;
        };
        LOCK_FDS.with(|fds| {
            if fork_generation() != self.generation {
                // A forked child: close nothing, unlock nothing.
                let _ = file.into_raw_fd();
                return;
            }
            let fd = file.as_raw_fd();
            fds.retain(|&f| f != fd);
            // Closed while the registry is held, so no fork sees the number
            // registered but closed (and a child never closes a reused number).
            drop(file);
        });
    }
}

impl StoreLock {
    /// Takes the lock at `path` (creating the file), or fails with
    /// [`StoreError::Locked`] without waiting.
    pub fn acquire(path: &Path, store_root: &Path) -> Result<Self> {
        let mut lock = Self {
            held: LockFile::open(path)?,
        };
        let fd = lock.held.fd();
        match ofd_lock(fd, libc::F_OFD_SETLK, libc::F_WRLCK) {
            Ok(true) => {}
            Ok(false) => return Err(StoreError::Locked(store_root.to_path_buf())),
            Err(e) => return Err(StoreError::io(format!("lock {}", path.display()), e)),
        }
        // RocketMQ writes "lock" into the file. We do it only for a new file,
        // so that taking the lock of an existing store changes no byte.
        if let Some(file) = lock.held.file.as_mut() {
            if file.metadata().map(|m| m.len() == 0).unwrap_or(false) {
                let _ = file.write_all(b"lock");
            }
        }
        Ok(lock)
    }
}

/// Opens `path` read-write (`create`: created if missing) as a lock file:
/// `O_NONBLOCK`, so a FIFO or device in its place cannot block the open,
/// then refused unless it is a regular file (nothing is read or locked
/// before the check).
fn open_regular(path: &Path, create: bool) -> Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(create)
        .create(create)
        .truncate(false)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
    let meta = file
        .metadata()
        .map_err(|e| StoreError::io(format!("stat {}", path.display()), e))?;
    if !meta.file_type().is_file() {
        return Err(StoreError::io(
            format!(
                "open {}: not a regular file (a lock file must be one; remove it)",
                path.display()
            ),
            std::io::Error::from_raw_os_error(libc::EINVAL),
        ));
    }
    Ok(file)
}

/// Records this process's pid in a lock file it just locked exclusively
/// (`"pid=<pid>\n"`, the shape the group files use too): the kernel reports
/// no pid for an open-file-description lock, so a waiter that gives up can
/// name the holder. Best effort: a lock whose file cannot be written is
/// still held.
fn write_pid(file: &File) {
    let text = format!("pid={}\n", std::process::id());
    if file.write_at(text.as_bytes(), 0).is_ok() {
        let _ = file.set_len(text.len() as u64);
    }
}

/// The pid a lock file names (its `pid=N`, written by its holder, see
/// [`write_pid`]); None when the file is missing, not regular, or names none.
pub fn holder_pid(path: &Path) -> Option<u32> {
    let file = open_regular(path, false).ok()?;
    let mut buf = Vec::with_capacity(24);
    file.take(256).read_to_end(&mut buf).ok()?;
    let text = std::str::from_utf8(&buf).ok()?;
    text.split_whitespace()
        .find_map(|kv| kv.strip_prefix("pid="))
        .and_then(|pid| pid.parse().ok())
}

/// `fcntl(fd, cmd, {l_type: kind, byte 0})`; `Ok(false)` when another open
/// file description holds a conflicting lock (`cmd` = `F_OFD_SETLK`).
fn ofd_lock(fd: RawFd, cmd: libc::c_int, kind: libc::c_int) -> std::io::Result<bool> {
    // SAFETY: zero is a valid `flock` value; the fields are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 1;
    fl.l_pid = 0;
    loop {
        // SAFETY: valid descriptor and a properly initialised `flock`.
        let rc = unsafe { libc::fcntl(fd, cmd, &mut fl) };
        if rc == 0 {
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) | Some(libc::EACCES) => return Ok(false),
            _ => return Err(err),
        }
    }
}

/// An exclusive (or shared) open-file-description lock on byte 0 of a file,
/// held until dropped or until the process ends (`kill -9` included). It
/// conflicts with every other open of the file, in this process too (a
/// shared one only with exclusive ones). Forked children close
/// their copy at fork, as for [`StoreLock`].
#[derive(Debug)]
pub struct FileLock {
    _held: LockFile,
}

impl FileLock {
    /// Takes the lock on `path`, creating the file (empty) and its folder
    /// if missing. With `wait`, blocks until it is free; without, returns
    /// `Ok(None)` at once when another open file description holds it.
    pub fn acquire(path: &Path, wait: bool) -> Result<Option<Self>> {
        Self::acquire_kind(path, wait, libc::F_WRLCK)
    }

    /// As [`FileLock::acquire`], but a shared (read) lock: any number of
    /// shared holders coexist, and they and an exclusive holder refuse each
    /// other (the consumer group members' hold on the group, §13.2 of
    /// docs/format.md).
    pub fn acquire_shared(path: &Path, wait: bool) -> Result<Option<Self>> {
        Self::acquire_kind(path, wait, libc::F_RDLCK)
    }

    fn acquire_kind(path: &Path, wait: bool, kind: libc::c_int) -> Result<Option<Self>> {
        let held = LockFile::open(path)?;
        let fd = held.fd();
        // From here a failure drops `lock`, which deregisters the descriptor.
        let lock = Self { _held: held };
        let cmd = if wait {
            libc::F_OFD_SETLKW
        } else {
            libc::F_OFD_SETLK
        };
        match ofd_lock(fd, cmd, kind) {
            Ok(true) => {
                if kind == libc::F_WRLCK {
                    lock.mark_holder(); // an exclusive holder names itself
                }
                Ok(Some(lock))
            }
            Ok(false) => Ok(None),
            Err(e) => Err(StoreError::io(format!("lock {}", path.display()), e)),
        }
    }

    /// Takes the lock on `path` as [`acquire`](Self::acquire) with `wait`,
    /// waiting at most `timeout`. Past it, an `ETIMEDOUT` I/O error (Python's
    /// `TimeoutError`) names the file and the holder's pid.
    pub fn acquire_within(path: &Path, timeout: Duration) -> Result<Self> {
        let held = LockFile::open(path)?;
        let fd = held.fd();
        let lock = Self { _held: held };
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_micros(100);
        loop {
            match ofd_lock(fd, libc::F_OFD_SETLK, libc::F_WRLCK) {
                Ok(true) => {
                    lock.mark_holder();
                    return Ok(lock);
                }
                Ok(false) => {}
                Err(e) => return Err(StoreError::io(format!("lock {}", path.display()), e)),
            }
            let now = Instant::now();
            if now >= deadline {
                let holder = match holder_pid(path) {
                    Some(pid) => format!("held by pid {pid}"),
                    None => "held by another process (no pid in the file)".to_string(),
                };
                return Err(StoreError::io(
                    format!(
                        "lock {}: {holder} for more than {:.1} s (a stopped or hung process?)",
                        path.display(),
                        timeout.as_secs_f64()
                    ),
                    std::io::Error::from_raw_os_error(libc::ETIMEDOUT),
                ));
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    fn mark_holder(&self) {
        if let Some(file) = self._held.file.as_ref() {
            write_pid(file);
        }
    }

    /// Whether another open file description holds the lock on `path`
    /// (`F_OFD_GETLK`: takes nothing, so it never disturbs a holder or one
    /// about to take it). A missing file is not held; nothing is created.
    pub fn is_held(path: &Path) -> Result<bool> {
        let file = match open_regular(path, false) {
            Ok(f) => f,
            Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(false)
            }
            Err(e) => return Err(e),
        };
        // SAFETY: zero is a valid `flock` value; the fields are set below.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = 0;
        fl.l_len = 1;
        // SAFETY: valid descriptor and a properly initialised `flock`.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            return Err(StoreError::io(format!("test lock {}", path.display()), err));
        }
        Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_in_same_process_fails() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lock");
        let a = StoreLock::acquire(&p, dir.path()).unwrap();
        let e = StoreLock::acquire(&p, dir.path()).unwrap_err();
        assert!(matches!(e, StoreError::Locked(_)));
        drop(a);
        StoreLock::acquire(&p, dir.path()).unwrap();
    }

    #[test]
    fn file_lock_conflicts_in_process_and_is_seen_without_taking_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub").join("g.lock");
        assert!(!FileLock::is_held(&p).unwrap());
        assert!(!p.exists(), "is_held created the file");
        let a = FileLock::acquire(&p, false).unwrap().expect("free");
        assert!(FileLock::is_held(&p).unwrap());
        assert!(FileLock::acquire(&p, false).unwrap().is_none());
        drop(a);
        assert!(!FileLock::is_held(&p).unwrap());
        let b = FileLock::acquire(&p, true)
            .unwrap()
            .expect("waits, then holds");
        assert!(FileLock::is_held(&p).unwrap());
        drop(b);
    }

    #[test]
    fn waiting_file_lock_gets_it_once_released() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.lock");
        let held = FileLock::acquire(&p, false).unwrap().unwrap();
        let q = p.clone();
        let waiter = std::thread::spawn(move || FileLock::acquire(&q, true).unwrap().is_some());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !waiter.is_finished(),
            "the wait returned while the lock was held"
        );
        drop(held);
        assert!(waiter.join().unwrap());
    }

    #[test]
    fn a_timed_wait_ends_naming_the_holder_pid() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("o.lock");
        let held = FileLock::acquire(&p, false).unwrap().unwrap();
        assert_eq!(holder_pid(&p), Some(std::process::id()));
        let t0 = Instant::now();
        let e = FileLock::acquire_within(&p, Duration::from_millis(100)).unwrap_err();
        assert!(t0.elapsed() >= Duration::from_millis(100));
        assert!(t0.elapsed() < Duration::from_secs(2));
        let text = e.to_string();
        assert!(
            text.contains(&format!("held by pid {}", std::process::id())),
            "{text}"
        );
        assert!(matches!(e, StoreError::Io { ref source, .. }
            if source.raw_os_error() == Some(libc::ETIMEDOUT)));
        drop(held);
        FileLock::acquire_within(&p, Duration::from_millis(100)).unwrap();
    }

    #[test]
    fn a_fifo_in_place_of_a_lock_file_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.lock");
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        for e in [
            FileLock::acquire(&p, true).unwrap_err(),
            FileLock::is_held(&p).unwrap_err(),
            FileLock::acquire_within(&p, Duration::from_millis(10)).unwrap_err(),
        ] {
            assert!(e.to_string().contains("not a regular file"), "{e}");
        }
        assert_eq!(holder_pid(&p), None);
    }

    #[test]
    fn shared_locks_coexist_and_refuse_an_exclusive_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("g.lock");
        let a = FileLock::acquire_shared(&p, false).unwrap().expect("free");
        let b = FileLock::acquire_shared(&p, false)
            .unwrap()
            .expect("shared");
        assert!(FileLock::is_held(&p).unwrap());
        assert!(FileLock::acquire(&p, false).unwrap().is_none());
        drop(a);
        assert!(FileLock::acquire(&p, false).unwrap().is_none());
        drop(b);
        let x = FileLock::acquire(&p, false).unwrap().expect("free again");
        assert!(FileLock::acquire_shared(&p, false).unwrap().is_none());
        drop(x);
    }

    fn pipe() -> [libc::c_int; 2] {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        fds
    }

    fn write_byte(fd: libc::c_int) {
        // SAFETY: writes one byte from a live buffer to a pipe.
        assert_eq!(unsafe { libc::write(fd, b"x".as_ptr().cast(), 1) }, 1);
    }

    fn read_byte(fd: libc::c_int) {
        let mut b = [0u8; 1];
        // SAFETY: reads one byte into a live buffer from a pipe.
        assert_eq!(unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) }, 1);
    }

    /// A forked child closes its copy of the lock descriptor at fork and
    /// never unlocks: the parent's lock holds after a child dropped its
    /// copy, and once the parent releases it the lock is free again while
    /// another child, which never touched its copy, still lives.
    #[test]
    fn forked_child_neither_keeps_nor_drops_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lock");
        let held = StoreLock::acquire(&p, dir.path()).unwrap();
        let (a_go, a_ready, b_go, b_ready) = (pipe(), pipe(), pipe(), pipe());
        // SAFETY: the children only drop the lock, use the pipes and exit.
        let a = unsafe { libc::fork() };
        assert!(a >= 0);
        if a == 0 {
            drop(held);
            write_byte(a_ready[1]);
            read_byte(a_go[0]);
            // SAFETY: ends the child without running the test harness.
            unsafe { libc::_exit(0) };
        }
        // SAFETY: as above.
        let b = unsafe { libc::fork() };
        assert!(b >= 0);
        if b == 0 {
            write_byte(b_ready[1]);
            read_byte(b_go[0]);
            // SAFETY: as above.
            unsafe { libc::_exit(0) };
        }
        read_byte(a_ready[0]);
        read_byte(b_ready[0]);
        let e = StoreLock::acquire(&p, dir.path()).unwrap_err();
        assert!(matches!(e, StoreError::Locked(_)), "a child unlocked: {e}");
        drop(held);
        let again = StoreLock::acquire(&p, dir.path());
        write_byte(a_go[1]);
        write_byte(b_go[1]);
        for pid in [a, b] {
            let mut status = 0;
            // SAFETY: reaps a child of this test.
            unsafe { libc::waitpid(pid, &mut status, 0) };
        }
        again.expect("the lock is free once the parent released it, though a child lives");
    }
}
