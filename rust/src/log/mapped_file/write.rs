//! Writing a mapped file: appends at the write position (reserving blocks
//! first), overwrites below it (recovery), zeroing, the transient buffer's
//! commit into the mapping, flush (msync) and fsync, and the search for
//! non-zero bytes past a position.

use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::{Result, StoreError};

use super::reserve::zero_data_regions;
use super::{count_sync, sync_parent, MappedFile, WriteBuffer, OS_PAGE_SIZE};

impl MappedFile {
    /// Appends at the write position: `f` gets the writable tail of the file
    /// (`file_size - wrote` bytes) and returns how many bytes it wrote, which
    /// then become visible to readers. Returns `f`'s result. Reserves the
    /// whole rest of the file first; see [`MappedFile::append_reserved`].
    pub fn append<R>(&self, f: impl FnOnce(&mut [u8], usize) -> (usize, R)) -> Result<R> {
        self.append_reserved(usize::MAX, f)
    }

    /// Like [`MappedFile::append`] for a closure that writes at most `need`
    /// bytes: only those are reserved first (a failed reservation is an
    /// error and writes nothing). Writing more than `need` is a bug.
    pub fn append_reserved<R>(
        &self,
        need: usize,
        f: impl FnOnce(&mut [u8], usize) -> (usize, R),
    ) -> Result<R> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let _g = self.write_lock.lock();
        let wrote = self.wrote.load(Ordering::Relaxed);
        let tail_len = self.file_size - wrote;
        let need = need.min(tail_len);
        let base = if self.transient {
            match self.write_buffer.lock().as_ref() {
                Some(b) => b.ptr,
                None => {
                    return Err(StoreError::internal(format!(
                        "{} was committed in full; it takes no more appends",
                        self.path.display()
                    )))
                }
            }
        } else {
            self.ensure_reserved_locked(wrote + need)?;
            self.map.as_mut_ptr()
        };
        // SAFETY: `base` is the mapping (or the file's transient buffer), at
        // least `file_size` bytes long and writable. Bytes at or above `wrote`
        // are never handed to readers or the committer, and `write_lock` makes
        // this the only writer, so no other reference to this range exists. A
        // transient buffer stays attached until the file is full and
        // committed, after which no append reaches here. The closure writes
        // at most `need` bytes, whose blocks were reserved above.
        let tail = unsafe { std::slice::from_raw_parts_mut(base.add(wrote), tail_len) };
        let (n, r) = f(tail, wrote);
        assert!(
            n <= need,
            "append wrote {n} bytes, more than the {need} reserved"
        );
        self.wrote.store(wrote + n, Ordering::Release);
        Ok(r)
    }

    /// Appends `data` at the write position with `pwrite`, not through the
    /// mapping: a page the write fills whole is neither read in nor zeroed
    /// first, as the first store through the mapping into a fresh page is
    /// (a slave's catch-up writes whole files, docs/format.md "Our
    /// choices"). The blocks are reserved first, as for every append (a
    /// full disk fails here, writing nothing); readers see the bytes
    /// through the mapping (the same page cache) once the position moves.
    /// The file keeps the descriptor until it is full or destroyed. A
    /// transient file appends to its buffer instead. On a failed write the
    /// position stays (the bytes above it are written again next time).
    pub fn append_copy(&self, data: &[u8]) -> Result<()> {
        let n = data.len();
        if self.transient {
            return self.append_reserved(n, |tail, _| {
                tail[..n].copy_from_slice(data);
                (n, ())
            });
        }
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let _g = self.write_lock.lock();
        let wrote = self.wrote.load(Ordering::Relaxed);
        if n > self.file_size - wrote {
            return Err(StoreError::internal(format!(
                "{n} bytes at {wrote} do not fit in {} ({} bytes)",
                self.path.display(),
                self.file_size
            )));
        }
        self.ensure_reserved_locked(wrote + n)?;
        let mut fd = self.write_fd.lock();
        let file = match fd.take() {
            Some(f) => f,
            None => self.reopen()?,
        };
        file.write_all_at(data, wrote as u64)
            .map_err(|e| StoreError::io(format!("write {}", self.path.display()), e))?;
        if wrote + n < self.file_size {
            *fd = Some(file);
        }
        self.wrote.store(wrote + n, Ordering::Release);
        Ok(())
    }

    /// Writes `data` at `pos` (no position change); used to zero a truncated
    /// tail and to fill pre-blank units. `pos` must be ≥ the write position.
    pub fn write_at(&self, pos: usize, data: &[u8]) -> Result<()> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let _g = self.write_lock.lock();
        if pos < self.wrote.load(Ordering::Relaxed) || pos + data.len() > self.file_size {
            return Err(StoreError::internal(format!(
                "write of {} bytes at {pos} outside the writable tail of {}",
                data.len(),
                self.path.display()
            )));
        }
        self.ensure_reserved_locked(pos + data.len())?;
        // SAFETY: in bounds (checked), reserved (above) and above the write
        // position, so no reader sees these bytes; `write_lock` excludes
        // other writers.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.map.as_mut_ptr().add(pos), data.len())
        };
        Ok(())
    }

    /// Overwrites `data` at `pos`, below the write position too. Recovery
    /// only, before any reader exists: rebuilds damaged consume-queue units
    /// in the middle of written data. The caller syncs the file afterwards.
    pub fn overwrite_in_recovery(&self, pos: usize, data: &[u8]) -> Result<()> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let _g = self.write_lock.lock();
        if pos + data.len() > self.file_size {
            return Err(StoreError::internal(format!(
                "write of {} bytes at {pos} past the end of {}",
                data.len(),
                self.path.display()
            )));
        }
        self.ensure_reserved_locked(pos + data.len())?;
        // SAFETY: in bounds (checked), reserved (above); recovery runs before
        // readers exist and `write_lock` excludes other writers.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.map.as_mut_ptr().add(pos), data.len())
        };
        Ok(())
    }

    /// Fills `[from, to)` with zeros; both must be ≥ the write position.
    /// Uses `pwrite` over the data regions only, never the mapping: a cut
    /// tail may lie beyond the reserved range, where a store through the
    /// mapping could fault on a full disk.
    pub fn zero_range(&self, from: usize, to: usize) -> Result<()> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let _g = self.write_lock.lock();
        let to = to.min(self.file_size);
        if from < self.wrote.load(Ordering::Relaxed) || from > to {
            return Err(StoreError::internal(format!(
                "cannot zero {from}..{to} of {}",
                self.path.display()
            )));
        }
        if from == to {
            return Ok(());
        }
        zero_data_regions(&self.reopen()?, from, to, &self.path)
    }
    /// Copies appended bytes from the transient buffer into the mapping when
    /// at least `least_pages` pages are pending (0: any), or the file is full.
    /// Returns the committed position and, once a full file is committed in
    /// full, its buffer (for the pool). Callers serialise commits of a file.
    pub fn commit(&self, least_pages: usize) -> (usize, Option<Arc<WriteBuffer>>) {
        if !self.transient {
            return (self.wrote_position(), None);
        }
        let wrote = self.wrote_position();
        let committed = self.committed_position();
        let full = wrote >= self.file_size;
        let able = if full {
            committed < wrote
        } else if least_pages > 0 {
            wrote / OS_PAGE_SIZE - committed / OS_PAGE_SIZE >= least_pages
        } else {
            wrote > committed
        };
        let buf = self.write_buffer.lock().clone();
        if able {
            if let Some(b) = &buf {
                // SAFETY: `[committed, wrote)` lies inside both the buffer and the
                // mapping; the writer finished those bytes (published by the
                // release store of `wrote`) and never writes them again, and only
                // this commit writes the mapping above `committed`.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        b.ptr.add(committed),
                        self.map.as_mut_ptr().add(committed),
                        wrote - committed,
                    )
                };
                self.committed.store(wrote, Ordering::Release);
            }
        }
        let committed = self.committed_position();
        let released = if committed >= self.file_size {
            self.write_buffer.lock().take()
        } else {
            None
        };
        (committed, released)
    }

    /// The write buffer of a transient file that was never written (made
    /// ahead, then not used), for the pool; `None` for other files.
    pub fn take_unused_buffer(&self) -> Option<Arc<WriteBuffer>> {
        if !self.transient || self.wrote_position() > 0 {
            return None;
        }
        self.write_buffer.lock().take()
    }

    /// Flushes dirty pages if at least `least_pages` are dirty (0: any), or the
    /// file is full. Returns the flushed position.
    pub fn flush(&self, least_pages: usize) -> Result<usize> {
        let read = self.read_position();
        let flushed = self.flushed_position();
        let able = if self.is_full() {
            flushed < read
        } else if least_pages > 0 {
            read / OS_PAGE_SIZE - flushed / OS_PAGE_SIZE >= least_pages
        } else {
            read > flushed
        };
        // A file the store deleted (retention) needs no flush.
        if able && self.writable && self.is_available() {
            #[cfg(feature = "failpoints")]
            crate::failpoint::check("msync")
                .map_err(|e| StoreError::io(format!("msync {}", self.path.display()), e))?;
            count_sync();
            let start = flushed - flushed % OS_PAGE_SIZE;
            self.map
                .flush_range(start, read - start)
                .map_err(|e| StoreError::io(format!("msync {}", self.path.display()), e))?;
            self.flushed.fetch_max(read, Ordering::AcqRel);
            if read >= self.file_size {
                // The last write into this file: writes through the mapping
                // (a transient-pool commit) may have moved mtime since the fill.
                self.stamp_mtime_when_full();
            }
        }
        Ok(self.flushed_position())
    }

    /// Forces the whole file (data and metadata) to disk.
    pub fn sync_all(&self) -> Result<()> {
        if !self.writable {
            return Ok(());
        }
        #[cfg(feature = "failpoints")]
        crate::failpoint::check("msync")
            .map_err(|e| StoreError::io(format!("msync {}", self.path.display()), e))?;
        count_sync();
        self.map
            .flush()
            .map_err(|e| StoreError::io(format!("msync {}", self.path.display()), e))?;
        let Some(file) = self.reopen_unless_deleted()? else {
            return Ok(());
        };
        file.sync_all()
            .map_err(|e| StoreError::io(format!("fsync {}", self.path.display()), e))?;
        self.sync_created()
    }

    /// Makes a file created without an fsync durable (its size and its
    /// directory entry); a no-op otherwise. Called by the first flush.
    pub fn sync_created(&self) -> Result<()> {
        if !self.writable || !self.needs_sync.load(Ordering::Acquire) {
            return Ok(());
        }
        count_sync();
        let Some(file) = self.reopen_unless_deleted()? else {
            return Ok(());
        };
        file.sync_all()
            .map_err(|e| StoreError::io(format!("fsync {}", self.path.display()), e))?;
        sync_parent(&self.path)?;
        self.needs_sync.store(false, Ordering::Release);
        Ok(())
    }

    /// Records that the file's creation was made durable by other means
    /// (a `syncfs` of its file system after it was created).
    pub fn mark_created_synced(&self) {
        self.needs_sync.store(false, Ordering::Release);
    }

    /// True while the file's creation is not yet durable.
    pub fn needs_sync(&self) -> bool {
        self.needs_sync.load(Ordering::Acquire)
    }

    /// End of the non-zero bytes at or after `pos` (page granular), or `pos`
    /// when everything after it is zero. Only the file's data regions are
    /// read (`SEEK_DATA`/`SEEK_HOLE`): reserved but never written space reads
    /// as a hole and costs nothing, and no zero run stops the search, so
    /// stale records behind a gap of lost pages are found too.
    pub fn dirty_extent(&self, pos: usize) -> usize {
        let data = self.raw();
        let len = self.file_size;
        let Ok(file) = self.reopen() else {
            return scan_nonzero(data, pos, len).max(pos);
        };
        let fd = file.as_raw_fd();
        let mut end = pos;
        let mut off = pos;
        while off < len {
            // SAFETY: plain syscalls on a descriptor we own.
            let start = unsafe { libc::lseek(fd, off as libc::off_t, libc::SEEK_DATA) };
            if start < 0 {
                let err = std::io::Error::last_os_error();
                if err.raw_os_error() == Some(libc::ENXIO) {
                    break; // no data after `off`
                }
                // SEEK_DATA unsupported: scan everything.
                return scan_nonzero(data, pos, len).max(pos);
            }
            let start = (start as usize).max(off);
            // SAFETY: as above.
            let hole = unsafe { libc::lseek(fd, start as libc::off_t, libc::SEEK_HOLE) };
            let stop = if hole < 0 {
                len
            } else {
                (hole as usize).min(len)
            };
            if start >= stop {
                break;
            }
            // A data region of zeros (reserved, or prefaulted) is not dirty.
            let e = scan_nonzero(data, start, stop);
            if e > start {
                end = end.max(e);
            }
            off = stop;
        }
        end
    }
}

/// End (page granular) of the last non-zero byte in `data[from..to]`, or
/// `from` when all of it is zero.
fn scan_nonzero(data: &[u8], from: usize, to: usize) -> usize {
    let to = to.min(data.len());
    let mut end = from;
    let mut p = from;
    while p < to {
        let next = (p - p % OS_PAGE_SIZE + OS_PAGE_SIZE).min(to);
        if data[p..next].iter().any(|&b| b != 0) {
            end = next;
        }
        p = next;
    }
    end
}
