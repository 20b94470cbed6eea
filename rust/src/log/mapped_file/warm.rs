//! Warm-up of a new file: kernel advice, prefaulting pages writable,
//! touching every page, and locking the mapping in memory; and the CPU
//! cache hint a reader gives for bytes it is about to read.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Result, StoreError};

use super::{count_sync, MappedFile, OS_PAGE_SIZE};

/// Logged once per process: warm-up could not lock a file in memory.
static MLOCK_FAILED: AtomicBool = AtomicBool::new(false);

/// Bytes of one CPU cache line.
const CACHE_LINE: usize = 64;

impl MappedFile {
    /// Asks the CPU to start loading every cache line of `[pos, pos +
    /// len)` (within the file) into its caches: a reader that knows where
    /// its next bytes lie before it needs them (a pull's next records, a
    /// key lookup's index entry and record) overlaps their cache misses
    /// with its work. Only a hint: nothing is read; it never faults.
    #[inline]
    pub fn prefetch(&self, pos: usize, len: usize) {
        let end = pos.saturating_add(len).min(self.file_size);
        if pos >= end {
            return;
        }
        let base = self.map.as_ptr() as usize;
        let mut line = (base + pos) & !(CACHE_LINE - 1);
        while line < base + end {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `_mm_prefetch` is a hint that never faults; the
            // address lies inside the mapping (the first line may start
            // before `pos`, never before the page-aligned mapping).
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    line as *const i8,
                );
            }
            line += CACHE_LINE;
        }
    }

    /// Advises the kernel that the file will be needed (`MADV_WILLNEED`).
    pub fn advise_willneed(&self) {
        let _ = self.map.advise(memmap2::Advice::WillNeed);
    }

    /// Prefaults pages of `[from, to)` writable (`MADV_POPULATE_WRITE`)
    /// without changing their contents, so appends there do not fault.
    /// Returns false where the kernel cannot do it.
    pub fn prefault(&self, from: usize, to: usize) -> bool {
        if !self.writable {
            return false;
        }
        // Only reserved pages: populating a hole would allocate blocks the
        // writer has not reserved (and fail on a full disk).
        let to = to.min(self.reserved());
        let from = from - from % OS_PAGE_SIZE;
        if from >= to {
            return true;
        }
        self.map
            .advise_range(memmap2::Advice::PopulateWrite, from, to - from)
            .is_ok()
    }

    /// Touches every page so later appends do not fault (the whole file is
    /// reserved first).
    pub fn pretouch(&self) -> Result<()> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let _g = self.write_lock.lock();
        self.ensure_reserved_locked(self.file_size)?;
        let wrote = self.wrote.load(Ordering::Relaxed);
        let mut p = wrote.next_multiple_of(OS_PAGE_SIZE);
        while p < self.file_size {
            // SAFETY: in bounds, reserved, above the write position, under
            // the write lock; the page already holds zero, so storing zero
            // changes no content.
            unsafe { std::ptr::write_volatile(self.map.as_mut_ptr().add(p), 0) };
            p += OS_PAGE_SIZE;
        }
        Ok(())
    }

    /// Warm-up (RocketMQ's `warmMappedFile` + `mlock`), for a file not yet
    /// handed to a writer: reserves the whole file, writes a zero into every
    /// page above the write position (so the blocks are really written and a
    /// later SYNC_FLUSH never pays for converting extents), msyncs every
    /// `flush_every_pages` pages (0: only at the end), then `mlock`s the
    /// mapping and advises `MADV_WILLNEED`. An mlock failure (RLIMIT_MEMLOCK)
    /// is logged once per process and is not an error.
    pub fn warm(&self, flush_every_pages: usize) -> Result<()> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let _g = self.write_lock.lock();
        self.ensure_reserved_locked(self.file_size)?;
        let wrote = self.wrote.load(Ordering::Relaxed);
        let first = wrote.next_multiple_of(OS_PAGE_SIZE);
        let mut synced = first;
        let mut p = first;
        while p < self.file_size {
            // SAFETY: as in `pretouch`.
            unsafe { std::ptr::write_volatile(self.map.as_mut_ptr().add(p), 0) };
            p += OS_PAGE_SIZE;
            if flush_every_pages > 0 && (p - synced) / OS_PAGE_SIZE >= flush_every_pages {
                count_sync();
                self.map
                    .flush_range(synced, p - synced)
                    .map_err(|e| StoreError::io(format!("msync {}", self.path.display()), e))?;
                synced = p;
            }
        }
        let end = p.min(self.file_size);
        if end > synced {
            count_sync();
            self.map
                .flush_range(synced, end - synced)
                .map_err(|e| StoreError::io(format!("msync {}", self.path.display()), e))?;
        }
        self.lock_in_memory();
        self.advise_willneed();
        Ok(())
    }

    /// `mlock`s the mapping; a failure is logged once per process.
    fn lock_in_memory(&self) {
        #[cfg(feature = "failpoints")]
        let armed = crate::failpoint::check("mlock").err();
        #[cfg(not(feature = "failpoints"))]
        let armed: Option<std::io::Error> = None;
        let err = match armed {
            Some(e) => Some(e),
            None => {
                // SAFETY: locking pages of a mapping we own, in bounds.
                let rc = unsafe {
                    libc::mlock(self.map.as_ptr() as *const libc::c_void, self.file_size)
                };
                (rc != 0).then(std::io::Error::last_os_error)
            }
        };
        match err {
            None => self.locked.store(true, Ordering::Release),
            Some(e) => {
                if !MLOCK_FAILED.swap(true, Ordering::Relaxed) {
                    log::warn!(
                        "cannot lock {} in memory for warm-up ({e}; see RLIMIT_MEMLOCK); \
                         continuing unlocked (logged once)",
                        self.path.display()
                    );
                }
            }
        }
    }

    /// True while warm-up holds the file locked in memory.
    pub fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Acquire)
    }

    /// Releases warm-up's memory lock (the writer left the file behind).
    pub fn munlock(&self) {
        if self.locked.swap(false, Ordering::AcqRel) {
            // SAFETY: unlocking the range `lock_in_memory` locked.
            unsafe { libc::munlock(self.map.as_ptr() as *const libc::c_void, self.file_size) };
        }
    }
}
