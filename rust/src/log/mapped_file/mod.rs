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
//! by path. The one exception is a file written with `pwrite`
//! ([`MappedFile::append_copy`], a slave's CommitLog): it keeps one
//! descriptor until it is full. One writer appends (serialised by an internal mutex); readers
//! see only bytes below the write position, published with release/acquire
//! ordering. Every writable mapping of the crate, and the `unsafe` code that
//! makes, writes through and advises it, lives in this folder; the
//! whole-store checks map files read-only in `verify/files.rs`. The crate's
//! other `unsafe` code (system calls, CPU hints, the Python and Arrow FFI,
//! the lock registry) lies where it is used.
//!
//! # Files
//!
//! - `mod.rs`: the [`MappedFile`] (create, open, map, positions, reads,
//!   block reservation, delete, mtime) and directory syncs.
//! - `reserve.rs`: how disk blocks are reserved ([`Reserve`], `fallocate`)
//!   and how a cut range is zeroed.
//! - `write.rs`: appends, overwrites, the transient commit, flush and fsync,
//!   and the search for dirty bytes past a position.
//! - `warm.rs`: warm-up (advice, prefault, pretouch, mlock).
//! - `arrow.rs`: Arrow buffers over a mapping (zero-copy reads), holding
//!   the file mapped until released.
//! - `buffer.rs`: the transient store pool's [`WriteBuffer`].

use std::cell::Cell;
use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::sync::Mutex;
use memmap2::{MmapOptions, MmapRaw};

use crate::error::{Result, StoreError};
#[cfg(feature = "arrow")]
mod arrow;
mod buffer;
mod reserve;
mod warm;
mod write;

pub use buffer::WriteBuffer;
use reserve::reserve_range;
pub use reserve::Reserve;

/// Operating-system page size used for flush accounting (RocketMQ's OS_PAGE_SIZE).
pub const OS_PAGE_SIZE: usize = 4096;

/// Digits of a segment file name (its start offset, zero-padded).
pub const SEGMENT_NAME_DIGITS: usize = 20;

/// Formats a file start offset as its 20-digit file name.
pub fn file_name(offset: u64) -> String {
    format!("{offset:0SEGMENT_NAME_DIGITS$}")
}

thread_local! {
    static SYNCS: Cell<u64> = const { Cell::new(0) };
}

/// fsyncs (files and directories) and msyncs made by the calling thread
/// since it started: lets tests check that a code path does none.
#[cfg(test)]
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
    /// The descriptor [`MappedFile::append_copy`] writes through, open
    /// while the file is written that way and not yet full.
    write_fd: Mutex<Option<File>>,
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

/// fsyncs the directory holding `path`, so a created or removed name is durable.
fn sync_parent(path: &Path) -> Result<()> {
    count_sync();
    crate::paths::sync_parent(path)
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
            write_fd: Mutex::new(None),
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

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Absolute offset of the file's first byte (its name).
    pub fn file_from_offset(&self) -> u64 {
        self.file_from_offset
    }

    /// The file's size (its logical length).
    pub fn file_size(&self) -> usize {
        self.file_size
    }

    /// Bytes appended so far.
    pub fn wrote_position(&self) -> usize {
        self.wrote.load(Ordering::Acquire)
    }

    /// Bytes committed into the mapping (transient pool; else the write position).
    pub fn committed_position(&self) -> usize {
        self.committed.load(Ordering::Acquire)
    }

    /// Bytes known to be on disk.
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

    /// True when nothing more can be appended.
    pub fn is_full(&self) -> bool {
        self.wrote_position() >= self.file_size
    }

    /// False once the file was deleted.
    pub fn is_available(&self) -> bool {
        self.available.load(Ordering::Acquire)
    }

    /// Store time of the last message appended (CommitLog files; 0: none).
    pub fn store_timestamp(&self) -> i64 {
        self.store_timestamp.load(Ordering::Acquire)
    }

    /// Records the store time of the last message appended.
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

    /// Marks the file unavailable and unlinks it. The mapping itself is
    /// released when the last reference (`Arc`) is dropped, so readers that
    /// still hold the file keep valid memory.
    pub fn destroy(&self) -> Result<()> {
        self.available.store(false, Ordering::Release);
        drop(self.write_fd.lock().take());
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::io(format!("delete {}", self.path.display()), e)),
        }
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
    fn append_copy_reserves_first_and_is_read_through_the_mapping() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(file_name(0));
        let policy = Reserve {
            initial: 64 << 10,
            min_step: 64 << 10,
            max_step: 64 << 10,
            sync_on_create: true,
        };
        let size = 1 << 20;
        let mf = MappedFile::create_with(&p, 0, size, policy).unwrap();
        let chunk: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8 + 1).collect();
        let mut at = 0;
        while at + chunk.len() <= size {
            mf.append_copy(&chunk).unwrap();
            at += chunk.len();
            assert_eq!(mf.wrote_position(), at);
            assert!(mf.reserved() >= at, "blocks reserved before the write");
            assert_eq!(mf.read(at - chunk.len(), chunk.len()), Some(&chunk[..]));
            assert!(mf.write_fd.lock().is_some(), "one descriptor while written");
        }
        assert!(mf.append_copy(&chunk).is_err(), "past the end: refused");
        assert_eq!(mf.wrote_position(), at, "a refused write moves nothing");
        mf.append_copy(&chunk[..size - at]).unwrap();
        assert!(mf.is_full());
        assert!(mf.write_fd.lock().is_none(), "closed once full");
        assert_eq!(mf.flush(0).unwrap(), size);
        let on_disk = std::fs::read(&p).unwrap();
        assert_eq!(&on_disk[..chunk.len()], &chunk[..]);
        assert_eq!(&on_disk[..], mf.read(0, size).unwrap());
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
