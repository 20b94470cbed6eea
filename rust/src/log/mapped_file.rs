//! One memory-mapped segment file (CommitLog or ConsumeQueue).
//!
//! ```text
//!  0                      flushed      wrote                      file_size
//!  |=========== on disk ====|~~ dirty ~~|....... zeros .............|
//! ```
//! ```text
//!  0                 wrote          reserved                        file_size
//!  |==== written ====|.. reserved ..|........ hole (no blocks) ........|
//!                                    ^ the next write past here first
//!                                      reserves another chunk (fallocate)
//! ```
//! A file is created at its full logical size (a RocketMQ broker must be
//! able to open it) but disk blocks are reserved ahead of the writer in
//! chunks ([`Reserve`]): nothing is ever written through the mapping
//! outside the reserved range, so a full disk fails the reservation with a
//! status instead of raising SIGBUS on a later write, and a small store
//! stays small. An existing file is mapped only after its length has been
//! checked. No descriptor stays open once a file is mapped (10,000 queues
//! must fit under a 1,024 open-files limit): the rare operations that need
//! one (reserving, zeroing a cut tail with `pwrite`, fsync) open the file
//! by path. One writer appends (serialised by an internal mutex); readers
//! see only bytes below the write position, published with release/acquire
//! ordering. All `unsafe` code of the crate lives here.

use std::cell::Cell;
use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;

use memmap2::{MmapOptions, MmapRaw};
use parking_lot::Mutex;

use crate::error::{Result, StoreError};

/// Operating-system page size used for flush accounting (RocketMQ's OS_PAGE_SIZE).
pub const OS_PAGE_SIZE: usize = 4096;

/// Digits of a segment file name (its start offset, zero-padded).
pub const SEGMENT_NAME_DIGITS: usize = 20;

/// Formats a file start offset as its 20-digit file name.
pub fn file_name(offset: u64) -> String {
    format!("{offset:0SEGMENT_NAME_DIGITS$}")
}

/// How a file's disk blocks are reserved ahead of its writer.
///
/// At creation `initial` bytes are reserved; a write that would end past
/// the reserved range first reserves up to its end plus a step, the step
/// growing with the file's fill (`clamp(end, min_step, max_step)`), so a
/// busy file makes few `fallocate` calls and an idle one stays small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserve {
    pub initial: usize,
    pub min_step: usize,
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

thread_local! {
    static SYNCS: Cell<u64> = const { Cell::new(0) };
}

/// fsyncs (files and directories) and msyncs made by the calling thread
/// since it started: lets tests check that a code path does none.
pub fn syncs_on_this_thread() -> u64 {
    SYNCS.with(|c| c.get())
}

fn count_sync() {
    SYNCS.with(|c| c.set(c.get() + 1));
}

/// A mapped segment file.
pub struct MappedFile {
    path: PathBuf,
    file_from_offset: u64,
    file_size: usize,
    map: MmapRaw,
    /// Bytes `[0, reserved)` have their disk blocks reserved.
    reserved: AtomicUsize,
    reserve: Reserve,
    /// Created without an fsync: the first flush syncs it and its directory.
    needs_sync: AtomicBool,
    /// Locked in memory by warm-up.
    locked: AtomicBool,
    writable: bool,
    wrote: AtomicUsize,
    committed: AtomicUsize,
    flushed: AtomicUsize,
    /// Store timestamp of the last message appended (CommitLog only).
    store_timestamp: AtomicI64,
    available: AtomicBool,
    write_lock: Mutex<()>,
    /// Transient store pool: appends go to this off-heap buffer and a commit
    /// copies them into the mapping; readers see only committed bytes.
    transient: bool,
    write_buffer: Mutex<Option<Arc<WriteBuffer>>>,
}

/// An off-heap write buffer of the transient store pool, locked in memory
/// when the RLIMIT_MEMLOCK allows it.
#[derive(Debug)]
pub struct WriteBuffer {
    ptr: *mut u8,
    len: usize,
    _owner: Box<[u8]>,
    locked: bool,
}

// SAFETY: the buffer is plain memory; the owning MappedFile's write lock
// orders writes, and the committer reads only bytes below the published
// write position, which the writer never touches again.
unsafe impl Send for WriteBuffer {}
// SAFETY: see above.
unsafe impl Sync for WriteBuffer {}

impl WriteBuffer {
    /// Allocates `len` zeroed bytes and tries to `mlock` them (a failure is
    /// logged, not fatal). `None` when the memory cannot be had (an
    /// address-space limit): the caller writes the file directly instead of
    /// aborting the process.
    pub fn new(len: usize) -> Option<Self> {
        let mut v: Vec<u8> = Vec::new();
        if let Err(e) = v.try_reserve_exact(len) {
            log::warn!("cannot allocate a {len}-byte transient store buffer: {e}");
            return None;
        }
        v.resize(len, 0);
        let mut owner = v.into_boxed_slice();
        let ptr = owner.as_mut_ptr();
        // SAFETY: `ptr` points at `len` bytes we own.
        let locked = unsafe { libc::mlock(ptr as *const libc::c_void, len) } == 0;
        if !locked {
            log::warn!(
                "cannot lock a {len}-byte transient store buffer in memory ({}); continuing unlocked",
                std::io::Error::last_os_error()
            );
        }
        Some(Self {
            ptr,
            len,
            _owner: owner,
            locked,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_locked(&self) -> bool {
        self.locked
    }

    /// Zeroes the buffer before it is reused for another file.
    pub fn clear(&self) {
        // SAFETY: called only when no file holds the buffer (the pool owns it).
        unsafe { std::ptr::write_bytes(self.ptr, 0, self.len) };
    }
}

impl Drop for WriteBuffer {
    fn drop(&mut self) {
        if self.locked {
            // SAFETY: unlocking the range we locked.
            unsafe { libc::munlock(self.ptr as *const libc::c_void, self.len) };
        }
    }
}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedFile")
            .field("path", &self.path)
            .field("from", &self.file_from_offset)
            .field("size", &self.file_size)
            .field("wrote", &self.wrote_position())
            .finish()
    }
}

/// Logged once per process: the file system cannot reserve space.
static NO_FALLOCATE: AtomicBool = AtomicBool::new(false);
/// Logged once per process: warm-up could not lock a file in memory.
static MLOCK_FAILED: AtomicBool = AtomicBool::new(false);

/// Reserves the blocks of `[from, to)` of `file` (`fallocate`, size kept).
/// Where the file system cannot reserve space, logs it once and goes on
/// (the file stays sparse there, as before reservation existed).
fn reserve_range(file: &File, from: usize, to: usize, path: &Path) -> Result<()> {
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
fn zero_data_regions(file: &File, from: usize, to: usize, path: &Path) -> Result<()> {
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

/// fsyncs the directory holding `path`, so a created or removed name is durable.
fn sync_parent(path: &Path) -> Result<()> {
    count_sync();
    match path.parent() {
        Some(dir) => File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| StoreError::io(format!("fsync {}", dir.display()), e)),
        None => Ok(()),
    }
}

/// `syncfs` of the file system holding `dir`: every file created there so
/// far, and its directory entry, is durable when it returns.
pub fn sync_file_system(dir: &Path) -> Result<()> {
    count_sync();
    let d = File::open(dir).map_err(|e| StoreError::io(format!("open {}", dir.display()), e))?;
    // SAFETY: plain syscall on a descriptor we own.
    if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
        return Err(StoreError::io(
            format!("syncfs {}", dir.display()),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Removes a file whose creation failed after it was made (its descriptor
/// and any mapping are already gone), so the name is free for a retry.
pub(crate) fn remove_failed_creation(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {
            if let Err(e) = sync_parent(path) {
                log::warn!(
                    "removed {} after a failed creation, but {e}",
                    path.display()
                );
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => log::error!(
            "cannot remove {} after its creation failed ({e}); creating it again will fail",
            path.display()
        ),
    }
}

impl MappedFile {
    /// Creates `path` at full size, wholly reserved and zero-filled, and
    /// maps it (see [`MappedFile::create_with`]).
    pub fn create(path: &Path, file_from_offset: u64, file_size: usize) -> Result<Self> {
        Self::create_with(path, file_from_offset, file_size, Reserve::WHOLE)
    }

    /// Creates `path` at full logical size (zero-filled, sparse), reserves
    /// its first `reserve.initial` bytes and maps it. Fails if the file
    /// already exists. A creation that fails after the file was made (no
    /// space to reserve, no address space to map it) removes the file
    /// again, so a later attempt can succeed.
    pub fn create_with(
        path: &Path,
        file_from_offset: u64,
        file_size: usize,
        reserve: Reserve,
    ) -> Result<Self> {
        #[cfg(feature = "failpoints")]
        crate::failpoint::check("create_file")
            .map_err(|e| StoreError::io(format!("create {}", path.display()), e))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| StoreError::io(format!("create {}", path.display()), e))?;
        let initial = reserve.initial.min(file_size);
        // Size the file, reserve its first chunk, and (unless deferred to the
        // first flush) make its size and name durable before anything is
        // written into it.
        let made = file
            .set_len(file_size as u64)
            .map_err(|e| StoreError::io(format!("set length of {}", path.display()), e))
            .and_then(|()| reserve_range(&file, 0, initial, path))
            .and_then(|()| {
                if !reserve.sync_on_create {
                    return Ok(());
                }
                count_sync();
                file.sync_all()
                    .map_err(|e| StoreError::io(format!("fsync {}", path.display()), e))?;
                sync_parent(path)
            });
        let mapped = made.and_then(|()| {
            #[cfg(feature = "failpoints")]
            crate::failpoint::check("map_new_file")
                .map_err(|e| StoreError::io(format!("mmap {}", path.display()), e))?;
            Self::map(path, file, file_from_offset, file_size, true)
        });
        let mf = mapped.inspect_err(|_| remove_failed_creation(path))?;
        mf.reserved.store(initial, Ordering::Release);
        mf.needs_sync
            .store(!reserve.sync_on_create, Ordering::Release);
        Ok(mf.with_reserve(reserve))
    }

    /// Opens an existing file; its length must equal `file_size` exactly.
    /// Nothing is known to be reserved: the first write reserves from the
    /// start of the file up to past its end (cheap where blocks exist).
    pub fn open(
        path: &Path,
        file_from_offset: u64,
        file_size: usize,
        writable: bool,
    ) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
        let len = file
            .metadata()
            .map_err(|e| StoreError::io(format!("stat {}", path.display()), e))?
            .len();
        if len != file_size as u64 {
            return Err(StoreError::corrupted(
                path,
                len.min(file_size as u64),
                format!(
                    "wrong-length segment: {len} bytes, expected {file_size}; refusing to map it"
                ),
            ));
        }
        Self::map(path, file, file_from_offset, file_size, writable)
    }

    /// Sets how writes past the reserved range reserve more.
    pub fn with_reserve(mut self, reserve: Reserve) -> Self {
        self.reserve = reserve;
        self
    }

    /// Extends a short file (a crash while it was being created) to full size
    /// with zeros. Blocks are reserved as the file is written.
    pub fn extend_short_file(path: &Path, file_size: usize) -> Result<()> {
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
        file.set_len(file_size as u64)
            .map_err(|e| StoreError::io(format!("extend {}", path.display()), e))?;
        count_sync();
        file.sync_all()
            .map_err(|e| StoreError::io(format!("fsync {}", path.display()), e))
    }

    /// Maps `file` and closes it: a mapping needs no open descriptor.
    fn map(path: &Path, file: File, from: u64, size: usize, writable: bool) -> Result<Self> {
        let map = if writable {
            MmapOptions::new().len(size).map_raw(&file)
        } else {
            MmapOptions::new().len(size).map_raw_read_only(&file)
        }
        .map_err(|e| StoreError::io(format!("mmap {}", path.display()), e))?;
        drop(file);
        Ok(Self {
            path: path.to_path_buf(),
            file_from_offset: from,
            file_size: size,
            map,
            reserved: AtomicUsize::new(0),
            reserve: Reserve::WHOLE,
            needs_sync: AtomicBool::new(false),
            locked: AtomicBool::new(false),
            writable,
            wrote: AtomicUsize::new(0),
            committed: AtomicUsize::new(0),
            flushed: AtomicUsize::new(0),
            store_timestamp: AtomicI64::new(0),
            available: AtomicBool::new(true),
            write_lock: Mutex::new(()),
            transient: false,
            write_buffer: Mutex::new(None),
        })
    }

    /// Opens the file again by path (for reserving, zeroing, fsync).
    fn reopen(&self) -> Result<File> {
        OpenOptions::new()
            .read(true)
            .write(self.writable)
            .open(&self.path)
            .map_err(|e| StoreError::io(format!("open {}", self.path.display()), e))
    }

    /// [`MappedFile::reopen`] for a sync: `None` when the file is gone
    /// because the store deleted it ([`MappedFile::destroy`], retention),
    /// even if that happened after the caller picked the file: nothing of a
    /// deleted file needs to reach the disk. A file missing while still
    /// available was removed behind the store's back: an error.
    fn reopen_unless_deleted(&self) -> Result<Option<File>> {
        match self.reopen() {
            Ok(f) => Ok(Some(f)),
            // `destroy` clears `available` before it unlinks: a file not
            // found and no longer available is one the store deleted.
            Err(StoreError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound && !self.is_available() =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Bytes `[0, n)` have their disk blocks reserved.
    pub fn reserved(&self) -> usize {
        self.reserved.load(Ordering::Acquire)
    }

    /// Reserves blocks so that `[0, end)` may be written; a no-op when they
    /// already are. Takes the write lock.
    pub fn ensure_reserved(&self, end: usize) -> Result<()> {
        let _g = self.write_lock.lock();
        self.ensure_reserved_locked(end)
    }

    /// [`MappedFile::ensure_reserved`] with the write lock held.
    fn ensure_reserved_locked(&self, end: usize) -> Result<()> {
        let end = end.min(self.file_size);
        let have = self.reserved.load(Ordering::Acquire);
        if end <= have {
            return Ok(());
        }
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let step = end.clamp(self.reserve.min_step, self.reserve.max_step);
        let target = end
            .next_multiple_of(OS_PAGE_SIZE)
            .saturating_add(step)
            .min(self.file_size);
        let file = self.reopen()?;
        reserve_range(&file, have, target, &self.path)?;
        // fetch_max: the prefault thread may have reserved further meanwhile.
        self.reserved.fetch_max(target, Ordering::AcqRel);
        Ok(())
    }

    /// Reserves blocks so that `[0, end)` may be written, from a background
    /// thread (the prefaulter, keeping ahead of the writer so that the
    /// writer neither reserves nor waits for it). Takes no write lock: a
    /// reservation of a range already reserved changes nothing, and the
    /// reserved mark only grows. On failure nothing is marked; the writer
    /// reserves for itself and refuses its put with a status if that fails.
    pub fn reserve_ahead(&self, end: usize) -> Result<()> {
        let end = end.next_multiple_of(OS_PAGE_SIZE).min(self.file_size);
        let have = self.reserved.load(Ordering::Acquire);
        if end <= have || !self.writable || self.transient {
            return Ok(());
        }
        let file = self.reopen()?;
        reserve_range(&file, have, end, &self.path)?;
        self.reserved.fetch_max(end, Ordering::AcqRel);
        Ok(())
    }

    /// Creates `path` like [`MappedFile::create_with`], with appends going
    /// to `buffer` until committed. The whole file is reserved: commits copy
    /// into the mapping from a background thread that cannot fail a put.
    pub fn create_transient(
        path: &Path,
        file_from_offset: u64,
        file_size: usize,
        buffer: Arc<WriteBuffer>,
    ) -> Result<Self> {
        if buffer.len() < file_size {
            return Err(StoreError::internal(format!(
                "transient buffer of {} bytes for a {file_size}-byte file",
                buffer.len()
            )));
        }
        let mut f = Self::create(path, file_from_offset, file_size)?;
        f.transient = true;
        *f.write_buffer.get_mut() = Some(buffer);
        Ok(f)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Absolute offset of the file's first byte (its name).
    pub fn file_from_offset(&self) -> u64 {
        self.file_from_offset
    }

    pub fn file_size(&self) -> usize {
        self.file_size
    }

    pub fn wrote_position(&self) -> usize {
        self.wrote.load(Ordering::Acquire)
    }

    pub fn committed_position(&self) -> usize {
        self.committed.load(Ordering::Acquire)
    }

    pub fn flushed_position(&self) -> usize {
        self.flushed.load(Ordering::Acquire)
    }

    /// Bytes readers may see: the write position, or with a transient
    /// buffer the committed position.
    pub fn read_position(&self) -> usize {
        if self.transient {
            self.committed_position()
        } else {
            self.wrote_position()
        }
    }

    /// True when appends go through a transient-pool buffer.
    pub fn is_transient(&self) -> bool {
        self.transient
    }

    pub fn is_full(&self) -> bool {
        self.wrote_position() >= self.file_size
    }

    pub fn is_available(&self) -> bool {
        self.available.load(Ordering::Acquire)
    }

    pub fn store_timestamp(&self) -> i64 {
        self.store_timestamp.load(Ordering::Acquire)
    }

    pub fn set_store_timestamp(&self, ts: i64) {
        self.store_timestamp.store(ts, Ordering::Release);
    }

    /// Sets every position (after recovery or when loading a full file).
    pub fn set_positions(&self, pos: usize) {
        let pos = pos.min(self.file_size);
        self.wrote.store(pos, Ordering::Release);
        self.committed.store(pos, Ordering::Release);
        self.flushed.store(pos, Ordering::Release);
    }

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

    /// The whole mapped file, ignoring positions. For recovery scans and
    /// read-only stores, which validate every record they read.
    pub fn raw(&self) -> &[u8] {
        // SAFETY: the mapping lives as long as `self`; bytes above the write
        // position may change under a concurrent writer, and every reader of
        // `raw` validates what it reads (magic, sizes, CRC) instead of trusting it.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr(), self.file_size) }
    }

    /// Readable bytes `[pos, read_position)`.
    pub fn readable_from(&self, pos: usize) -> Option<&[u8]> {
        let end = self.read_position();
        if pos > end {
            return None;
        }
        Some(&self.raw()[pos..end])
    }

    /// Readable bytes `[pos, pos+len)`, if all of them are below the read position.
    pub fn read(&self, pos: usize, len: usize) -> Option<&[u8]> {
        let end = pos.checked_add(len)?;
        if end > self.read_position() {
            return None;
        }
        Some(&self.raw()[pos..end])
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

    /// Marks the file unavailable and unlinks it. The mapping itself is
    /// released when the last reference (`Arc`) is dropped, so readers that
    /// still hold the file keep valid memory.
    pub fn destroy(&self) -> Result<()> {
        self.available.store(false, Ordering::Release);
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::io(format!("delete {}", self.path.display()), e)),
        }
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

    /// Sets the file's modification time to `ms` (since the epoch). A full
    /// CommitLog file gets the store time of its last message this way, so
    /// its age does not depend on when the kernel noticed writes through
    /// the mapping (which do not reliably move mtime).
    /// A file the store deleted meanwhile has no age to keep: `Ok`.
    pub fn set_modified_ms(&self, ms: i64) -> Result<()> {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
        let Some(file) = self.reopen_unless_deleted()? else {
            return Ok(());
        };
        file.set_modified(t)
            .map_err(|e| StoreError::io(format!("set mtime of {}", self.path.display()), e))
    }

    /// Gives a full file the store time of its last message as mtime (when
    /// this process wrote one), logging a failure: the file's age then
    /// falls back to whatever mtime the kernel set.
    pub fn stamp_mtime_when_full(&self) {
        let ts = self.store_timestamp();
        if self.writable && ts > 0 && self.is_full() {
            if let Err(e) = self.set_modified_ms(ts) {
                log::warn!("{e}");
            }
        }
    }

    /// The file's modification time in ms since the epoch.
    pub fn last_modified_ms(&self) -> i64 {
        std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_append_read_flush() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(file_name(0));
        let mf = MappedFile::create(&p, 0, 4096).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 4096);
        let at = mf
            .append(|tail, at| {
                tail[..5].copy_from_slice(b"hello");
                (5, at)
            })
            .unwrap();
        assert_eq!(at, 0);
        assert_eq!(mf.read(0, 5), Some(&b"hello"[..]));
        assert_eq!(mf.read(0, 6), None);
        assert_eq!(mf.flush(1).unwrap(), 0, "less than one page dirty");
        assert_eq!(mf.flush(0).unwrap(), 5);
        assert!(MappedFile::create(&p, 0, 4096).is_err(), "create_new");
    }

    fn blocks(p: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).unwrap().blocks() * 512
    }

    #[test]
    fn blocks_are_reserved_ahead_of_the_writer_in_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(file_name(0));
        let policy = Reserve {
            initial: 64 << 10,
            min_step: 64 << 10,
            max_step: 64 << 10,
            sync_on_create: true,
        };
        let mf = MappedFile::create_with(&p, 0, 16 << 20, policy).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().len(),
            16 << 20,
            "full logical size"
        );
        assert_eq!(mf.reserved(), 64 << 10);
        assert!(blocks(&p) <= 68 << 10, "{}", blocks(&p));
        let mut written = 0;
        while written < 200 << 10 {
            mf.append_reserved(1000, |tail, _| {
                tail[..1000].fill(7);
                (1000, ())
            })
            .unwrap();
            written += 1000;
            assert!(mf.reserved() >= mf.wrote_position());
        }
        assert!(mf.reserved() < 400 << 10, "{}", mf.reserved());
        assert!(blocks(&p) >= written as u64);
        assert!(blocks(&p) <= 400 << 10);
        // Zeroing a cut tail writes nothing into holes.
        let before = blocks(&p);
        mf.zero_range(mf.wrote_position(), 16 << 20).unwrap();
        assert_eq!(blocks(&p), before);
        assert!(mf.raw()[mf.wrote_position()..].iter().all(|&b| b == 0));
    }

    #[test]
    fn zero_range_clears_written_bytes_past_the_position() {
        let dir = tempfile::tempdir().unwrap();
        let mf = MappedFile::create(&dir.path().join("f"), 0, 64 << 10).unwrap();
        mf.write_at(5000, b"stale record").unwrap();
        mf.zero_range(0, 64 << 10).unwrap();
        assert!(mf.raw().iter().all(|&b| b == 0));
    }

    #[test]
    fn open_refuses_wrong_size() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(file_name(0));
        std::fs::write(&p, vec![0u8; 100]).unwrap();
        let e = MappedFile::open(&p, 0, 4096, true).unwrap_err();
        assert!(e.to_string().contains("expected 4096"), "{e}");
    }

    #[test]
    fn dirty_extent_finds_data_behind_a_long_zero_run() {
        let dir = tempfile::tempdir().unwrap();
        let mf = MappedFile::create(&dir.path().join("f"), 0, 4 << 20).unwrap();
        assert_eq!(mf.dirty_extent(0), 0, "a fresh file is all zero");
        mf.write_at(100, b"abc").unwrap();
        mf.write_at(3 << 20, b"stale").unwrap();
        mf.sync_all().unwrap();
        let end = mf.dirty_extent(4096);
        assert!(
            end > 3 << 20,
            "found the bytes behind a 3 MiB zero run: {end}"
        );
        assert_eq!(mf.dirty_extent(end), end);
    }

    #[test]
    fn write_below_position_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mf = MappedFile::create(&dir.path().join("f"), 0, 128).unwrap();
        mf.append(|t, _| {
            t[0] = 1;
            (1, ())
        })
        .unwrap();
        assert!(mf.write_at(0, b"x").is_err());
        assert!(mf.write_at(127, b"xy").is_err());
        mf.write_at(1, b"x").unwrap();
    }
}
