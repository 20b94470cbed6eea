//! The single-writer lock: an open-file-description lock on byte 0 of `lock`.
//!
//! `F_OFD_SETLK` conflicts with Java's `FileChannel.tryLock` (a classic POSIX
//! record lock), with other processes, and with a second open of the same file
//! in this process; unlike a classic POSIX lock it is not dropped when some
//! other descriptor of the file is closed. It is released when the lock's own
//! descriptor is closed (drop, or process death).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::{Result, StoreError};

/// A held writer lock; released on drop.
#[derive(Debug)]
pub struct StoreLock {
    _file: File,
    path: PathBuf,
}

impl StoreLock {
    /// Takes the lock at `path` (creating the file), or fails with
    /// [`StoreError::Locked`] without waiting.
    pub fn acquire(path: &Path, store_root: &Path) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::io(format!("create {}", dir.display()), e))?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
        // SAFETY: zero is a valid `flock` value; the fields are set below.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = 0;
        fl.l_len = 1;
        fl.l_pid = 0;
        // SAFETY: valid descriptor and a properly initialised `flock`.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EACCES) => {
                    Err(StoreError::Locked(store_root.to_path_buf()))
                }
                _ => Err(StoreError::io(format!("lock {}", path.display()), err)),
            };
        }
        // RocketMQ writes "lock" into the file. We do it only for a new file,
        // so that taking the lock of an existing store changes no byte.
        if file.metadata().map(|m| m.len() == 0).unwrap_or(false) {
            let _ = file.write_all(b"lock");
        }
        Ok(Self {
            _file: file,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
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
}
