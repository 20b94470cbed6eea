//! A consumer group's folder, `config/consumerGroups/<name>/`, and the
//! files in it (docs/format.md §13.2):
//!
//! ```text
//! <name>/
//!   state               the group's GroupState (state.rs), replaced by temp + rename
//!   state.tmp           the next state, before its rename
//!   state.lock          held for one read-modify-write of state; "pid=N host=H"
//!   members/<id>.lock   held by member <id> while its process lives;
//!                       "pid=N host=H session_timeout_ms=T"
//! ```
//!
//! The state is not fsynced: membership does not outlive a reboot (a
//! state of another boot is empty). Files are opened only if regular and
//! read up to a bound, so a FIFO or a device in their place is an error,
//! never a hang.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::state::{GroupState, StateError, MAX_STATE_BYTES};
use crate::error::{Result, StoreError};
use crate::lock::FileLock;

/// The state file's name in the group's folder.
pub const STATE_FILE: &str = "state";
/// The state lock's name in the group's folder.
pub const STATE_LOCK_FILE: &str = "state.lock";
/// The members' lock folder in the group's folder.
pub const MEMBERS_DIR: &str = "members";
/// The most bytes read from a lock file's holder text.
const MAX_HOLDER_BYTES: u64 = 4096;

/// What reading the state found.
#[derive(Debug)]
pub enum Found {
    /// No state file: an empty state.
    Missing,
    /// The state (empty if it was written in another boot).
    State(GroupState),
}

/// The milliseconds of CLOCK_MONOTONIC: one clock for every process of the
/// host (it does not count a suspend, and stays until the next boot).
pub fn monotonic_ms() -> u64 {
    // SAFETY: zero is a valid `timespec`; clock_gettime only writes it.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a live `timespec`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1000)
        .saturating_add(ts.tv_nsec as u64 / 1_000_000)
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`), or "" where the
/// system has none.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// This host's name, or "localhost" if it cannot be read.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is a live buffer of the length passed.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match (rc, std::str::from_utf8(buf.get(..end).unwrap_or_default())) {
        (0, Ok(s)) if !s.is_empty() => s.to_owned(),
        _ => "localhost".to_owned(),
    }
}

/// `path`'s bytes if it is a regular file (opened without blocking, so a
/// FIFO in its place cannot hang), at most `limit` bytes; `Ok(None)` when
/// it does not exist.
pub fn read_regular(path: &Path, limit: u64) -> Result<Option<Vec<u8>>> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StoreError::io(format!("open {}", path.display()), e)),
    };
    let meta = file
        .metadata()
        .map_err(|e| StoreError::io(format!("stat {}", path.display()), e))?;
    if !meta.is_file() {
        return Err(StoreError::corrupted(path, 0, "not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| StoreError::io(format!("read {}", path.display()), e))?;
    if bytes.len() as u64 > limit {
        return Err(StoreError::corrupted(
            path,
            limit,
            format!("longer than {limit} bytes"),
        ));
    }
    Ok(Some(bytes))
}

/// The `pid=N` of a lock file's holder text, if any.
pub fn holder_pid(path: &Path) -> Option<u32> {
    let bytes = read_regular(path, MAX_HOLDER_BYTES).ok()??;
    let text = String::from_utf8(bytes).ok()?;
    field(&text, "pid")?.parse().ok()
}

/// The value of `name=value` in a holder text.
pub fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.split_whitespace()
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

/// One group's folder.
#[derive(Debug, Clone)]
pub struct GroupDir {
    dir: PathBuf,
}

impl GroupDir {
    /// The folder `dir` (made when a member joins).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The state file.
    pub fn state_path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    /// The lock file of member `id`.
    pub fn member_lock_path(&self, id: &str) -> PathBuf {
        self.dir.join(MEMBERS_DIR).join(format!("{id}.lock"))
    }

    /// Takes `state.lock`, waiting at most `patience` (it is held for one
    /// read-modify-write, microseconds); records this process as holder.
    /// Past the deadline: [`StoreError::GroupBusy`] naming the holder's pid.
    pub fn lock_state(&self, patience: Duration) -> Result<FileLock> {
        let path = self.dir.join(STATE_LOCK_FILE);
        let deadline = Instant::now() + patience;
        let mut pause = Duration::from_micros(200);
        loop {
            if let Some(lock) = FileLock::acquire(&path, false)? {
                write_holder(&path, "");
                return Ok(lock);
            }
            if Instant::now() >= deadline {
                let who = holder_pid(&path).map_or_else(
                    || "another process".to_owned(),
                    |pid| format!("process {pid}"),
                );
                return Err(StoreError::GroupBusy(format!(
                    "{} has been held by {who} for more than {:.1} s (a frozen or stopped \
                     process holds it: resume or end it)",
                    path.display(),
                    patience.as_secs_f64()
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(10));
        }
    }

    /// Reads the state (under the state lock for a read-modify-write; a
    /// plain read is whole too, the file being replaced by rename). A state
    /// that breaks the format is a [`StoreError::Corrupted`] whose message
    /// says how to rebuild it.
    pub fn read_state(&self, boot: &str, group: &str, topic: &str) -> Result<Found> {
        let path = self.state_path();
        let bytes = match read_regular(&path, MAX_STATE_BYTES) {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(Found::Missing),
            Err(StoreError::Corrupted { reason, .. }) => return Err(garbage_error(&path, &reason)),
            Err(e) => return Err(unreadable_error(&path, e)),
        };
        match GroupState::decode(&bytes, boot, group, topic) {
            Ok(st) => Ok(Found::State(st)),
            Err(e @ StateError::Garbage { .. }) => Err(garbage_error(&path, &e.to_string())),
        }
    }

    /// Replaces the state: `state.tmp` written, then renamed (no fsync).
    pub fn write_state(&self, st: &GroupState) -> Result<()> {
        let path = self.state_path();
        let tmp = self.dir.join(format!("{STATE_FILE}.tmp"));
        let write = || -> std::io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(&st.encode())?;
            drop(f);
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| StoreError::io(format!("write {}", path.display()), e))
    }

    /// Takes the lock of a new member `id` (its file is new: ids are
    /// unique) and writes its holder text.
    pub fn lock_member(&self, id: &str, session_timeout_ms: u64) -> Result<FileLock> {
        let path = self.member_lock_path(id);
        match FileLock::acquire(&path, false)? {
            Some(lock) => {
                write_holder(&path, &format!(" session_timeout_ms={session_timeout_ms}"));
                Ok(lock)
            }
            None => Err(StoreError::internal(format!(
                "the new member lock {} is held already",
                path.display()
            ))),
        }
    }

    /// Whether member `id`'s process lives: its lock file is held. A
    /// missing file, or one that is not a regular file, is not held; an
    /// error asking counts as alive (a member is never freed by doubt).
    pub fn member_alive(&self, id: &str) -> bool {
        let path = self.member_lock_path(id);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() => FileLock::is_held(&path).unwrap_or(true),
            Ok(_) => false,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(_) => true,
        }
    }

    /// The member lock files in `members/` (their ids), with whether each
    /// is held and the session timeout its holder wrote.
    pub fn member_files(&self) -> Vec<(String, bool, Option<u64>)> {
        let Ok(entries) = std::fs::read_dir(self.dir.join(MEMBERS_DIR)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".lock")) else {
                continue;
            };
            let held = self.member_alive(id);
            let timeout = read_regular(&e.path(), MAX_HOLDER_BYTES)
                .ok()
                .flatten()
                .and_then(|b| String::from_utf8(b).ok())
                .and_then(|t| field(&t, "session_timeout_ms").and_then(|v| v.parse().ok()));
            out.push((id.to_owned(), held, timeout));
        }
        out.sort();
        out
    }

    /// Removes the lock files of members that are not in `st` and whose
    /// process ended (called under the state lock, so no member is
    /// between making its file and registering). Returns their ids.
    pub fn sweep(&self, st: &GroupState) -> Vec<String> {
        let mut gone = Vec::new();
        for (id, held, _) in self.member_files() {
            if !held && st.member(&id).is_none() {
                let _ = std::fs::remove_file(self.member_lock_path(&id));
                gone.push(id);
            }
        }
        gone
    }
}

/// Writes "pid=N host=H<extra>" into a lock file the caller holds (for
/// errors that name the holder; best effort).
fn write_holder(path: &Path, extra: &str) {
    let text = format!(
        "pid={} host={}{extra}\n",
        std::process::id(),
        super::state::escape(&host_name())
    );
    let _ = OpenOptions::new()
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()));
}

fn garbage_error(path: &Path, reason: &str) -> StoreError {
    StoreError::corrupted(
        path,
        0,
        format!(
            "{reason}; the consumer group state cannot be read, so members hold no queue \
             (committed offsets are untouched): rebuild it with `rocketstore groups STORE \
             --expire`"
        ),
    )
}

fn unreadable_error(path: &Path, e: StoreError) -> StoreError {
    match e {
        StoreError::Io { context, source } => StoreError::Io {
            context: format!(
                "{context} (the consumer group state {}; members hold no queue until it can \
                 be read: fix its permissions or rebuild it with `rocketstore groups STORE \
                 --expire`)",
                path.display()
            ),
            source,
        },
        other => other,
    }
}
