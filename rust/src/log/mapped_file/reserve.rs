//! Reserving a file's disk blocks ahead of its writer (`fallocate`,
//! [`Reserve`]) and zeroing a cut range without touching its holes
//! (`SEEK_DATA`/`SEEK_HOLE`, `pwrite`):
//!
//! ```text
//!  0                 wrote          reserved                        file_size
//!  |==== written ====|.. reserved ..|........ hole (no blocks) ........|
//! ```

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Result, StoreError};

/// How a file's disk blocks are reserved ahead of its writer.
///
/// At creation `initial` bytes are reserved; a write that would end past
/// the reserved range first reserves up to its end plus a step, the step
/// growing with the file's fill (`clamp(end, min_step, max_step)`), so a
/// busy file makes few `fallocate` calls and an idle one stays small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserve {
    /// Bytes reserved when the file is created.
    pub initial: usize,
    /// Smallest step of a later reservation.
    pub min_step: usize,
    /// Largest step of a later reservation.
    pub max_step: usize,
    /// fsync the new file and its directory at creation; otherwise the
    /// first flush does it ([`MappedFile::sync_created`]).
    pub sync_on_create: bool,
}

impl Reserve {
    /// The whole file at creation, synced at creation.
    pub const WHOLE: Reserve = Reserve {
        initial: usize::MAX,
        min_step: usize::MAX,
        max_step: usize::MAX,
        sync_on_create: true,
    };
    /// CommitLog segments: 64 MiB chunks ahead of the writer.
    pub const COMMIT_LOG: Reserve = Reserve {
        initial: 64 << 20,
        min_step: 64 << 20,
        max_step: 64 << 20,
        sync_on_create: true,
    };
    /// ConsumeQueue files: one 64 KiB chunk (3,276 units) for a new file,
    /// steps growing to 1 MiB; the queue flush makes a new file durable
    /// (queues can be rebuilt from the CommitLog), not dispatch.
    pub const CONSUME_QUEUE: Reserve = Reserve {
        initial: 64 << 10,
        min_step: 64 << 10,
        max_step: 1 << 20,
        sync_on_create: false,
    };

    /// Index files: the header and slot table (written anywhere) plus a
    /// 1 MiB window of entries, which grows in steps of up to 16 MiB.
    pub fn index(slot_table_end: usize) -> Reserve {
        Reserve {
            initial: slot_table_end.saturating_add(1 << 20),
            min_step: 1 << 20,
            max_step: 16 << 20,
            sync_on_create: true,
        }
    }
}

/// Logged once per process: the file system cannot reserve space.
static NO_FALLOCATE: AtomicBool = AtomicBool::new(false);

/// Reserves the blocks of `[from, to)` of `file` (`fallocate`, size kept).
/// Where the file system cannot reserve space, logs it once and goes on
/// (the file stays sparse there, as before reservation existed).
pub(super) fn reserve_range(file: &File, from: usize, to: usize, path: &Path) -> Result<()> {
    if to <= from {
        return Ok(());
    }
    #[cfg(feature = "failpoints")]
    crate::failpoint::check("reserve").map_err(|e| {
        StoreError::io(
            format!("reserve bytes {from}..{to} of {}", path.display()),
            e,
        )
    })?;
    loop {
        // SAFETY: plain syscall on a valid descriptor we own.
        let rc = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                0,
                from as libc::off_t,
                (to - from) as libc::off_t,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => {
                if !NO_FALLOCATE.swap(true, Ordering::Relaxed) {
                    log::warn!(
                        "{}: the file system cannot reserve space (fallocate); files stay \
                         sparse and a full disk may fault a write",
                        path.display()
                    );
                }
                return Ok(());
            }
            _ => {
                return Err(StoreError::io(
                    format!("reserve bytes {from}..{to} of {}", path.display()),
                    err,
                ))
            }
        }
    }
}

/// Writes zeros over the data regions of `[from, to)` with `pwrite` (holes
/// already read as zeros and are left alone, so zeroing needs no new blocks).
pub(super) fn zero_data_regions(file: &File, from: usize, to: usize, path: &Path) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let fd = file.as_raw_fd();
    let zeros = vec![0u8; (to - from).min(1 << 20)];
    let mut off = from;
    while off < to {
        // SAFETY: plain syscalls on a descriptor we own.
        let start = unsafe { libc::lseek(fd, off as libc::off_t, libc::SEEK_DATA) };
        let (start, stop) = if start < 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ENXIO) {
                break; // nothing but holes after `off`
            }
            (off, to) // SEEK_DATA unsupported: zero everything
        } else {
            let start = (start as usize).max(off);
            // SAFETY: as above.
            let hole = unsafe { libc::lseek(fd, start as libc::off_t, libc::SEEK_HOLE) };
            let stop = if hole < 0 {
                to
            } else {
                (hole as usize).min(to)
            };
            (start, stop)
        };
        if start >= to {
            break;
        }
        let mut p = start;
        while p < stop {
            let n = (stop - p).min(zeros.len());
            file.write_all_at(&zeros[..n], p as u64)
                .map_err(|e| StoreError::io(format!("zero {}", path.display()), e))?;
            p += n;
        }
        off = stop.max(start + 1);
    }
    Ok(())
}
