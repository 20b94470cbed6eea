//! An ordered run of equally sized mapped files named by their start offset.
//!
//! ```text
//!  dir/00000000000000000000  dir/00000000000001048576  dir/00000000000002097152
//!      [0, size)                 [size, 2*size)            [2*size, 3*size)  <- last (written)
//! ```
//! The first file may start at any multiple of the file size (older files
//! expired). Names are 20-digit zero-padded decimal offsets, and consecutive
//! files must be exactly one file size apart.
//!
//! # Files
//!
//! This file holds the [`MappedFileQueue`] (loading, rolling, lookups by
//! offset, flush and commit, truncation, dropping the oldest files); beside
//! it, in the folder of the same name:
//!
//! - `adopt.rs`: a read-only queue adopting the files a writer in another
//!   process makes.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::sync::{Mutex, RwLock};

use crate::error::{Result, StoreError};
use crate::log::mapped_file::{file_name, MappedFile, Reserve};
use crate::log::transient_pool::TransientStorePool;

pub use crate::log::segment_files::{
    detect_file_size, detect_file_size_tolerating_short, list_segment_files,
};

mod adopt;

/// What loading a directory found.
#[derive(Debug, Clone, Default)]
pub struct LoadInfo {
    /// A newest file shorter than the file size, left as it is and not
    /// mapped: a writer's recovery extends it
    /// ([`MappedFileQueue::repair_short_newest`]), a read-only open ignores
    /// it until it is full size.
    pub short_file: Option<PathBuf>,
}

/// Makes a queue's next files ahead of its writer (the allocator thread of
/// [`crate::log::allocate`]): the queue takes a file from it on a roll and
/// asks for the one after, without knowing how files are made.
pub trait FileMaker: Send + Sync + std::fmt::Debug {
    /// The file starting at `offset`, waiting for it if it is not made yet.
    fn take(&self, offset: u64) -> Result<Arc<MappedFile>>;
    /// Asks for the file starting at `offset` to be made next.
    fn request(&self, offset: u64);
    /// Unlocks `file` from memory off the put path (the writer left it).
    fn unlock_later(&self, file: Arc<MappedFile>);
}

/// A queue of mapped files.
#[derive(Debug)]
pub struct MappedFileQueue {
    dir: PathBuf,
    /// The segment size; a read-only queue with no file yet takes it from
    /// the first file it adopts ([`MappedFileQueue::adopt_new_files`]).
    file_size: AtomicUsize,
    writable: bool,
    files: RwLock<Vec<Arc<MappedFile>>>,
    flushed_where: AtomicU64,
    committed_where: AtomicU64,
    flush_lock: Mutex<()>,
    commit_lock: Mutex<()>,
    pool: RwLock<Option<Arc<TransientStorePool>>>,
    /// Set by [`MappedFileQueue::release`]: no file is created any more.
    released: AtomicBool,
    /// How new and loaded files reserve disk blocks.
    reserve: Reserve,
    /// Creates the next file in the background (CommitLog only).
    allocator: RwLock<Option<Arc<dyn FileMaker>>>,
    /// A writable queue's short newest file found by loading, until
    /// recovery extends and maps it.
    short_newest: Mutex<Option<PathBuf>>,
    /// Missing or short files between files (offset, path), for
    /// [`MappedFileQueue::repair_gaps`].
    gaps: Mutex<Vec<(u64, PathBuf)>>,
    /// The fail point that holds a flush of this queue between picking a
    /// file and syncing it (tests of flush against deletion).
    pause_point: std::sync::OnceLock<&'static str>,
    /// The fail point that fails making a file of this queue.
    create_point: std::sync::OnceLock<&'static str>,
    /// What every segment length is a multiple of ([`MappedFileQueue::adopt_size_from_files`]).
    size_unit: AtomicUsize,
    /// The last file adopting refused (path, length), logged once.
    last_refused: Mutex<Option<(PathBuf, u64)>>,
}

impl MappedFileQueue {
    /// An empty queue over `dir` (created lazily by the first file).
    pub fn new(dir: PathBuf, file_size: usize, writable: bool) -> Self {
        Self::new_with(dir, file_size, writable, Reserve::WHOLE)
    }

    /// An empty queue whose files reserve their blocks as `reserve` says.
    pub fn new_with(dir: PathBuf, file_size: usize, writable: bool, reserve: Reserve) -> Self {
        Self {
            dir,
            file_size: AtomicUsize::new(file_size),
            writable,
            files: RwLock::new(Vec::new()),
            flushed_where: AtomicU64::new(0),
            committed_where: AtomicU64::new(0),
            flush_lock: Mutex::new(()),
            commit_lock: Mutex::new(()),
            pool: RwLock::new(None),
            released: AtomicBool::new(false),
            reserve,
            allocator: RwLock::new(None),
            short_newest: Mutex::new(None),
            gaps: Mutex::new(Vec::new()),
            pause_point: std::sync::OnceLock::new(),
            create_point: std::sync::OnceLock::new(),
            size_unit: AtomicUsize::new(0),
            last_refused: Mutex::new(None),
        }
    }

    /// Names the fail point a flush of this queue stops at (see
    /// [`crate::failpoint`]); without the `failpoints` feature it is unused.
    pub fn set_flush_pause_point(&self, name: &'static str) {
        let _ = self.pause_point.set(name);
    }

    /// Names the fail point that fails making a file of this queue (see
    /// [`crate::failpoint`]); without the `failpoints` feature it is unused.
    pub fn set_create_fail_point(&self, name: &'static str) {
        let _ = self.create_point.set(name);
    }

    /// Holds a flush at this queue's pause point while it is armed.
    #[inline]
    fn flush_paused_here(&self) {
        #[cfg(feature = "failpoints")]
        if let Some(p) = self.pause_point.get() {
            crate::failpoint::pause(p);
        }
    }

    /// Loads every segment of `dir`. Every file must be `file_size` bytes,
    /// except that the newest file may be shorter (a crash while it was
    /// created): it is left as it is and not mapped; a writer's recovery
    /// extends it with [`MappedFileQueue::repair_short_newest`]. Loading
    /// changes nothing on disk. Loaded files are marked fully written;
    /// recovery sets the real positions.
    pub fn load(dir: PathBuf, file_size: usize, writable: bool) -> Result<(Self, LoadInfo)> {
        Self::load_with(dir, file_size, writable, Reserve::WHOLE)
    }

    /// [`MappedFileQueue::load`] for files reserving blocks as `reserve` says.
    pub fn load_with(
        dir: PathBuf,
        file_size: usize,
        writable: bool,
        reserve: Reserve,
    ) -> Result<(Self, LoadInfo)> {
        Self::load_inner(dir, file_size, writable, reserve, false)
    }

    /// [`MappedFileQueue::load_with`] for a queue whose lost files can be
    /// rebuilt from elsewhere (a ConsumeQueue, from the CommitLog): a missing
    /// file between two files, or a file between files that is shorter than
    /// the file size, is not refused. A writable queue remembers it for
    /// [`MappedFileQueue::repair_gaps`] (which makes it a full-size file of
    /// zeros, for recovery to rebuild); a read-only queue keeps only the
    /// files before it. Loading changes nothing on disk.
    pub fn load_tolerating_gaps(
        dir: PathBuf,
        file_size: usize,
        writable: bool,
        reserve: Reserve,
    ) -> Result<(Self, LoadInfo)> {
        Self::load_inner(dir, file_size, writable, reserve, true)
    }

    fn load_inner(
        dir: PathBuf,
        file_size: usize,
        writable: bool,
        reserve: Reserve,
        gaps_ok: bool,
    ) -> Result<(Self, LoadInfo)> {
        let q = Self::new_with(dir, file_size, writable, reserve);
        let mut info = LoadInfo::default();
        let names = list_segment_files(&q.dir)?;
        let mut files = Vec::with_capacity(names.len());
        let mut gaps: Vec<(u64, PathBuf)> = Vec::new();
        let n = names.len();
        for (i, (off, path)) in names.into_iter().enumerate() {
            if off % file_size as u64 != 0 {
                return Err(StoreError::corrupted(
                    &path,
                    0,
                    format!(
                        "misaligned segment: its name (offset {off}) is not a multiple \
                         of the file size {file_size}"
                    ),
                ));
            }
            let expected = files
                .last()
                .map(|p: &Arc<MappedFile>| p.file_from_offset())
                .max(gaps.last().map(|&(o, _)| o))
                .map(|o| o + file_size as u64);
            if let Some(mut next) = expected.filter(|&e| e < off && gaps_ok) {
                if !writable {
                    log::warn!(
                        "{}: segment {next} is missing; the files from it on are ignored \
                         until a writer rebuilds it",
                        q.dir.display()
                    );
                    break;
                }
                while next < off {
                    gaps.push((next, q.dir.join(file_name(next))));
                    next += file_size as u64;
                }
            }
            if let Some(prev) = files.last() {
                let prev: &Arc<MappedFile> = prev;
                if prev.file_from_offset() + file_size as u64 != off && !gaps_ok {
                    return Err(StoreError::corrupted(
                        &path,
                        0,
                        format!(
                            "gap between segments in {}: this file does not follow {} \
                             (expected offset {})",
                            q.dir.display(),
                            prev.path().display(),
                            prev.file_from_offset() + file_size as u64
                        ),
                    ));
                }
            }
            let len = std::fs::metadata(&path)
                .map_err(|e| StoreError::io(format!("stat {}", path.display()), e))?
                .len() as usize;
            if len < file_size && i + 1 == n {
                if writable {
                    *q.short_newest.lock() = Some(path.clone());
                }
                info.short_file = Some(path);
                continue;
            } else if len < file_size && gaps_ok {
                if !writable {
                    log::warn!(
                        "{}: file {} is short ({len} bytes); it and the files after it \
                         are ignored until a writer rebuilds it",
                        q.dir.display(),
                        path.display()
                    );
                    break;
                }
                gaps.push((off, path));
                continue;
            } else if len != file_size {
                return Err(StoreError::corrupted(
                    &path,
                    0,
                    format!("file is {len} bytes, the configured size is {file_size}"),
                ));
            }
            let mf = MappedFile::open(&path, off, file_size, writable)?.with_reserve(reserve);
            mf.set_positions(file_size);
            files.push(Arc::new(mf));
        }
        *q.files.write() = files;
        *q.gaps.lock() = gaps;
        Ok((q, info))
    }

    /// The files between files that loading found missing or short
    /// (writable queues loaded with [`MappedFileQueue::load_tolerating_gaps`]).
    pub fn gaps(&self) -> Vec<PathBuf> {
        self.gaps.lock().iter().map(|(_, p)| p.clone()).collect()
    }

    /// Makes every missing or short file loading found between files a
    /// full-size file (a missing one is created, a short one extended, with
    /// zeros; synced, with the directory), maps it in its place, marked
    /// fully written like every loaded file. Returns their paths.
    pub fn repair_gaps(&self) -> Result<Vec<PathBuf>> {
        let mut pending = self.gaps.lock();
        if pending.is_empty() {
            return Ok(Vec::new());
        }
        let mut done = Vec::with_capacity(pending.len());
        for (off, path) in pending.iter() {
            self.insert_zero_file(*off, path)?;
            done.push(path.clone());
        }
        crate::paths::sync_dir(&self.dir)?;
        pending.clear();
        Ok(done)
    }

    /// Creates full-size files of zeros (synced, with the directory) for
    /// every offset from `from` (a multiple of the file size) up to the
    /// first file, and maps them in front of it, marked fully written like
    /// every loaded file. Returns their paths (none when `from` is not
    /// below the first file, or the queue is empty or read-only).
    pub fn prepend_zero_files(&self, from: u64) -> Result<Vec<PathBuf>> {
        let Some(first) = self.first_file().map(|f| f.file_from_offset()) else {
            return Ok(Vec::new());
        };
        if !self.writable || from % self.file_size() as u64 != 0 {
            return Ok(Vec::new());
        }
        let mut done = Vec::new();
        let mut off = from;
        while off < first {
            let path = self.dir.join(file_name(off));
            self.insert_zero_file(off, &path)?;
            done.push(path);
            off += self.file_size() as u64;
        }
        if !done.is_empty() {
            crate::paths::sync_dir(&self.dir)?;
        }
        Ok(done)
    }

    /// Makes `path` a full-size file of zeros (created, or a short one
    /// extended; synced) and maps it in its place in the queue.
    fn insert_zero_file(&self, off: u64, path: &Path) -> Result<()> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
        drop(file);
        MappedFile::extend_short_file(path, self.file_size())?;
        let mf = MappedFile::open(path, off, self.file_size(), self.writable)?
            .with_reserve(self.reserve);
        mf.set_positions(self.file_size());
        let mut files = self.files.write();
        let at = files.partition_point(|f| f.file_from_offset() < off);
        files.insert(at, Arc::new(mf));
        Ok(())
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The short newest file loading left unmapped (writable queues), until
    /// [`MappedFileQueue::repair_short_newest`] extends it.
    pub fn short_newest(&self) -> Option<PathBuf> {
        self.short_newest.lock().clone()
    }

    /// Extends the short newest file loading found to full size with zeros
    /// (synced), maps it and appends it to the queue, marked fully written
    /// like every loaded file. Returns its path; `None` when there was none.
    pub fn repair_short_newest(&self) -> Result<Option<PathBuf>> {
        let mut pending = self.short_newest.lock();
        let Some(path) = pending.clone() else {
            return Ok(None);
        };
        let off = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| StoreError::internal(format!("segment name of {}", path.display())))?;
        MappedFile::extend_short_file(&path, self.file_size())?;
        let mf = MappedFile::open(&path, off, self.file_size(), self.writable)?
            .with_reserve(self.reserve);
        mf.set_positions(self.file_size());
        self.files.write().push(Arc::new(mf));
        *pending = None;
        Ok(Some(path))
    }

    /// Size of every file.
    pub fn file_size(&self) -> usize {
        self.file_size.load(Ordering::Acquire)
    }

    /// False for a read-only queue (another process writes).
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// A snapshot of the files.
    pub fn files(&self) -> Vec<Arc<MappedFile>> {
        self.files.read().clone()
    }

    /// Number of files.
    pub fn len(&self) -> usize {
        self.files.read().len()
    }

    /// True when the queue holds no file.
    pub fn is_empty(&self) -> bool {
        self.files.read().is_empty()
    }

    /// The oldest file.
    pub fn first_file(&self) -> Option<Arc<MappedFile>> {
        self.files.read().first().cloned()
    }

    /// The newest file.
    pub fn last_file(&self) -> Option<Arc<MappedFile>> {
        self.files.read().last().cloned()
    }

    /// Creates the file starting at `offset` (a multiple of the file size) and
    /// appends it to the queue. With an allocator, the file is taken from it
    /// (made in the background, waiting only if it is behind) and the file
    /// after it is requested; the file left behind is unlocked from memory.
    pub fn create_file(&self, offset: u64) -> Result<Arc<MappedFile>> {
        let mf = self.prepare_file(offset)?;
        self.push_prepared(&mf, true)?;
        Ok(mf)
    }

    /// Makes the file starting at `offset` (a multiple of the file size) as
    /// [`MappedFileQueue::create_file`] does, without adding it to the
    /// queue: [`MappedFileQueue::push_prepared`] adds it once the file
    /// before it is full, [`MappedFileQueue::discard_prepared`] removes it.
    /// A writer that needs several files makes them all before it writes
    /// (so none can fail half-way).
    pub fn prepare_file(&self, offset: u64) -> Result<Arc<MappedFile>> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        if self.released.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        debug_assert_eq!(offset % self.file_size() as u64, 0);
        match &self.allocator_unless_pooled() {
            Some(a) => a.take(offset),
            None => Ok(Arc::new(self.make_file(offset)?)),
        }
    }

    /// With a transient store pool a file binds its buffer when it is
    /// made: a file made ahead would hold a second buffer while the
    /// previous file's is not yet committed back, and the pool would run
    /// dry. Such files are made on the put path, as before.
    fn allocator_unless_pooled(&self) -> Option<Arc<dyn FileMaker>> {
        if self.pool.read().is_some() {
            None
        } else {
            self.allocator.read().clone()
        }
    }

    /// Appends a file made by [`MappedFileQueue::prepare_file`] to the
    /// queue; it must follow the last file. With an allocator and
    /// `request_next`, the file after it is requested (not when the writer
    /// made that one already); the file left behind is unlocked from memory.
    /// A file that does not follow is destroyed (an error).
    pub fn push_prepared(&self, mf: &Arc<MappedFile>, request_next: bool) -> Result<()> {
        let offset = mf.file_from_offset();
        let allocator = self.allocator_unless_pooled();
        let mut files = self.files.write();
        if let Some(last) = files.last() {
            if last.file_from_offset() + self.file_size() as u64 != offset {
                drop(files);
                self.discard_prepared(mf);
                return Err(StoreError::internal(format!(
                    "new file at {offset} does not follow the last file"
                )));
            }
        }
        let left_behind = files.last().cloned();
        files.push(mf.clone());
        drop(files);
        if let Some(a) = &allocator {
            if request_next {
                a.request(offset + self.file_size() as u64);
            }
            if let Some(prev) = left_behind.filter(|f| f.is_locked()) {
                a.unlock_later(prev);
            }
        }
        Ok(())
    }

    /// Removes a file made by [`MappedFileQueue::prepare_file`] and never
    /// added to the queue (nor written): deleted from disk, its write buffer
    /// back in the pool. A file that cannot be deleted stays as an empty
    /// file past the end of the queue, as a file made ahead does (recovery
    /// removes those); that is logged.
    pub fn discard_prepared(&self, mf: &Arc<MappedFile>) {
        if let (Some(b), Some(p)) = (mf.take_unused_buffer(), self.pool.read().as_ref()) {
            p.give_back(b);
        }
        if let Err(e) = mf.destroy() {
            log::warn!("cannot remove unused CommitLog file: {e}");
        }
    }

    /// Makes the file starting at `offset` without adding it to the queue
    /// (the allocator's work, or [`MappedFileQueue::create_file`]'s).
    pub fn make_file(&self, offset: u64) -> Result<MappedFile> {
        if self.released.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        let path = self.dir.join(file_name(offset));
        #[cfg(feature = "failpoints")]
        if let Some(p) = self.create_point.get() {
            crate::failpoint::check(p)
                .map_err(|e| StoreError::io(format!("create {}", path.display()), e))?;
        }
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| StoreError::io(format!("create {}", self.dir.display()), e))?;
        let pool = self.pool.read().clone();
        let buffer = pool.as_ref().and_then(|p| {
            let b = p.borrow();
            if b.is_none() {
                log::warn!(
                    "transient store pool exhausted; {} is written directly",
                    path.display()
                );
            }
            b
        });
        // A failed creation removes the file it made (MappedFile::create) and
        // returns the buffer to the pool, so the next attempt starts afresh.
        Ok(match (buffer, &pool) {
            (Some(b), Some(p)) => {
                MappedFile::create_transient(&path, offset, self.file_size(), b.clone())
                    .inspect_err(|_| p.give_back(b))?
            }
            _ => MappedFile::create_with(&path, offset, self.file_size(), self.reserve)?,
        })
    }

    /// Creates new files through `allocator` from now on.
    pub fn set_allocator(&self, allocator: Option<Arc<dyn FileMaker>>) {
        *self.allocator.write() = allocator;
    }

    /// The last file if it has room; else a new file following it (or, for an
    /// empty queue, the file containing `start_offset`).
    pub fn last_file_or_create(&self, start_offset: u64) -> Result<Arc<MappedFile>> {
        let next = match self.last_file() {
            Some(f) if !f.is_full() => return Ok(f),
            Some(f) => f.file_from_offset() + self.file_size() as u64,
            None => start_offset - start_offset % self.file_size() as u64,
        };
        self.create_file(next)
    }

    /// The file holding `offset`, or the first file if none does and
    /// `return_first` is set.
    pub fn find_by_offset(&self, offset: u64, return_first: bool) -> Option<Arc<MappedFile>> {
        let files = self.files.read();
        let first = files.first()?;
        let last = files.last()?;
        if offset >= first.file_from_offset()
            && offset < last.file_from_offset() + self.file_size() as u64
        {
            let idx = ((offset - first.file_from_offset()) / self.file_size() as u64) as usize;
            if let Some(f) = files.get(idx) {
                if offset >= f.file_from_offset()
                    && offset < f.file_from_offset() + self.file_size() as u64
                {
                    return Some(f.clone());
                }
            }
            if let Some(f) = files.iter().find(|f| {
                offset >= f.file_from_offset()
                    && offset < f.file_from_offset() + self.file_size() as u64
            }) {
                return Some(f.clone());
            }
        }
        if return_first {
            Some(first.clone())
        } else {
            None
        }
    }

    /// Offset of the first byte held (first file's start), `None` if empty.
    pub fn min_offset(&self) -> Option<u64> {
        self.first_file().map(|f| f.file_from_offset())
    }

    /// End of readable data: last file's start + read position (0 if empty).
    pub fn max_offset(&self) -> u64 {
        self.last_file()
            .map(|f| f.file_from_offset() + f.read_position() as u64)
            .unwrap_or(0)
    }

    /// Offset up to which the files are on disk.
    pub fn flushed_where(&self) -> u64 {
        self.flushed_where.load(Ordering::Acquire)
    }

    /// Offset up to which the transient buffers were committed into the files.
    pub fn committed_where(&self) -> u64 {
        self.committed_where.load(Ordering::Acquire)
    }

    /// Sets flushed/committed offsets (recovery).
    pub fn set_flushed_where(&self, off: u64) {
        self.flushed_where.store(off, Ordering::Release);
        self.committed_where.store(off, Ordering::Release);
    }

    /// Flushes the file holding the flushed offset (one file per call, as
    /// RocketMQ does). Returns true when nothing new was flushed.
    pub fn flush(&self, least_pages: usize) -> Result<bool> {
        let _g = self.flush_lock.lock();
        let old = self.flushed_where();
        let f = match self.find_by_offset(old, old == 0) {
            Some(f) => f,
            // Retention deleted the files holding the flushed offset: go on
            // with the oldest file left.
            None => match self.first_file() {
                Some(f) if f.file_from_offset() > old => f,
                _ => return Ok(true),
            },
        };
        self.flush_paused_here();
        let where_ = if f.is_available() {
            let pos = f.flush(least_pages)?;
            f.sync_created()?;
            f.file_from_offset() + pos as u64
        } else {
            // Deleted after it was picked (retention): nothing of it is
            // to be flushed any more; the next call takes the next file.
            f.file_from_offset() + self.file_size() as u64
        };
        if where_ > old {
            self.flushed_where.store(where_, Ordering::Release);
            self.committed_where.fetch_max(where_, Ordering::AcqRel);
        }
        Ok(where_ == old)
    }

    /// Routes appends of files created from now on through `pool`.
    pub fn set_transient_pool(&self, pool: Option<Arc<TransientStorePool>>) {
        *self.pool.write() = pool;
    }

    /// Commits transient buffers into the mappings (every file holding
    /// uncommitted bytes), returning buffers of fully committed files to the
    /// pool. Returns true when anything was committed.
    pub fn commit(&self, least_pages: usize) -> bool {
        let _g = self.commit_lock.lock();
        let pool = self.pool.read().clone();
        let mut any = false;
        for f in self.files() {
            if !f.is_transient() {
                continue;
            }
            let before = f.committed_position();
            let (committed, released) = f.commit(least_pages);
            any |= committed > before;
            if let (Some(b), Some(p)) = (released, &pool) {
                p.give_back(b);
            }
            self.committed_where
                .fetch_max(f.file_from_offset() + committed as u64, Ordering::AcqRel);
        }
        any
    }

    /// Flushes every file from the flushed offset to the end of written data.
    /// Returns the new flushed offset.
    pub fn flush_all(&self) -> Result<u64> {
        let _g = self.flush_lock.lock();
        let mut where_ = self.flushed_where();
        for f in self.files() {
            let end = f.file_from_offset() + self.file_size() as u64;
            if end <= where_ && where_ != 0 {
                continue;
            }
            self.flush_paused_here();
            let pos = f.flush(0)?;
            f.sync_created()?;
            where_ = where_.max(f.file_from_offset() + pos as u64);
        }
        self.flushed_where.fetch_max(where_, Ordering::AcqRel);
        self.committed_where.fetch_max(where_, Ordering::AcqRel);
        Ok(self.flushed_where())
    }

    /// Cuts the queue at `offset`: the containing file keeps `offset % size`
    /// bytes and the dirty bytes after them are zeroed and synced (so a later
    /// crash cannot resurrect stale records); files starting after `offset`
    /// are destroyed. Returns the number of non-zero bytes discarded (up to
    /// page granularity).
    pub fn truncate_dirty(&self, offset: u64) -> Result<u64> {
        let mut discarded = 0u64;
        let mut keep = Vec::new();
        for f in self.files() {
            let from = f.file_from_offset();
            let end = from + self.file_size() as u64;
            if end <= offset {
                keep.push(f);
            } else if offset >= from {
                let pos = (offset - from) as usize;
                let dirty_end = f.dirty_extent(pos);
                f.set_positions(pos);
                if self.writable && dirty_end > pos {
                    f.zero_range(pos, dirty_end)?;
                    f.sync_all()?;
                }
                discarded += (dirty_end - pos) as u64;
                keep.push(f);
            } else {
                discarded += f.dirty_extent(0) as u64;
                if self.writable {
                    f.destroy()?;
                }
            }
        }
        *self.files.write() = keep;
        Ok(discarded)
    }

    /// Drops the queue's hold on every file (the store shut down): each
    /// file's mapping and descriptor are released as soon as no reader holds
    /// it any more, and no file is created from now on.
    pub fn release(&self) {
        self.released.store(true, Ordering::Release);
        self.files.write().clear();
    }

    /// Removes `files` from the head of the queue (they must be its first files).
    pub fn remove_head(&self, count: usize) -> Vec<Arc<MappedFile>> {
        let mut files = self.files.write();
        let n = count.min(files.len());
        files.drain(..n).collect()
    }

    /// Removes the last file from the queue and, if the queue is writable,
    /// destroys it (ConsumeQueue's `truncateDirtyLogicFiles` deletes whole
    /// files from the tail). Returns the removed file.
    pub fn delete_last_file(&self) -> Result<Option<Arc<MappedFile>>> {
        let last = self.files.write().pop();
        if let Some(f) = &last {
            if self.writable {
                f.destroy()?;
            }
        }
        Ok(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read-only queue whose known files were all deleted adopts the files
    /// left, even when a file it listed is deleted before it looks at it (a
    /// dangling link stands in for that file).
    #[test]
    fn adopting_from_nothing_passes_over_files_deleted_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let cl = dir.path().join("cl");
        let w = MappedFileQueue::new(cl.clone(), 128, true);
        for at in [128, 256] {
            let f = w.last_file_or_create(at).unwrap();
            f.append(|_, _| (128, ())).unwrap();
        }
        drop(w);
        std::os::unix::fs::symlink(
            dir.path().join("gone"),
            cl.join(crate::log::mapped_file::file_name(0)),
        )
        .unwrap();
        let r = MappedFileQueue::new(cl, 128, false);
        assert_eq!(r.adopt_new_files().unwrap(), 2);
        assert_eq!(r.min_offset(), Some(128));
    }

    /// A read-only queue with no file yet takes the segment size from the
    /// first file; an empty first file is refused (never mapped) until it
    /// has its length, and a later file of another length stops adoption.
    #[test]
    fn adopting_from_nothing_takes_the_first_files_size() {
        let dir = tempfile::tempdir().unwrap();
        let cl = dir.path().join("cl");
        std::fs::create_dir_all(&cl).unwrap();
        let first = cl.join(crate::log::mapped_file::file_name(0));
        std::fs::File::create(&first).unwrap();
        let r = MappedFileQueue::new(cl.clone(), 1 << 30, false);
        r.adopt_size_from_files(1);
        assert_eq!(r.adopt_new_files().unwrap(), 0);
        assert_eq!(r.file_size(), 1 << 30);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&first)
            .unwrap()
            .set_len(256)
            .unwrap();
        let odd = cl.join(crate::log::mapped_file::file_name(512));
        std::fs::File::create(&odd).unwrap().set_len(128).unwrap();
        std::fs::File::create(cl.join(crate::log::mapped_file::file_name(256)))
            .unwrap()
            .set_len(256)
            .unwrap();
        assert_eq!(r.adopt_new_files().unwrap(), 2);
        assert_eq!(r.file_size(), 256);
        assert_eq!(r.adopt_new_files().unwrap(), 0);
        assert_eq!(r.files().len(), 2);
    }

    /// A file whose length is not a multiple of the unit is never adopted.
    #[test]
    fn adopting_refuses_an_illegal_first_length() {
        let dir = tempfile::tempdir().unwrap();
        let cl = dir.path().join("cq");
        std::fs::create_dir_all(&cl).unwrap();
        std::fs::File::create(cl.join(crate::log::mapped_file::file_name(0)))
            .unwrap()
            .set_len(30)
            .unwrap();
        let r = MappedFileQueue::new(cl, 6_000_000, false);
        r.adopt_size_from_files(20);
        assert_eq!(r.adopt_new_files().unwrap(), 0);
        assert_eq!(r.file_size(), 6_000_000);
    }

    #[test]
    fn create_roll_find() {
        let dir = tempfile::tempdir().unwrap();
        let q = MappedFileQueue::new(dir.path().join("cl"), 128, true);
        let f = q.last_file_or_create(256).unwrap();
        assert_eq!(f.file_from_offset(), 256);
        f.append(|_, _| (128, ())).unwrap();
        let g = q.last_file_or_create(0).unwrap();
        assert_eq!(g.file_from_offset(), 384);
        assert_eq!(
            q.find_by_offset(300, false).unwrap().file_from_offset(),
            256
        );
        assert_eq!(
            q.find_by_offset(400, false).unwrap().file_from_offset(),
            384
        );
        assert!(q.find_by_offset(100, false).is_none());
        assert_eq!(q.find_by_offset(100, true).unwrap().file_from_offset(), 256);
        assert!(q.find_by_offset(512, false).is_none());
        assert_eq!(q.min_offset(), Some(256));
        assert_eq!(q.max_offset(), 384);
        drop(q);
        assert_eq!(detect_file_size(&dir.path().join("cl")).unwrap(), Some(128));
        let (q, _) = MappedFileQueue::load(dir.path().join("cl"), 128, true).unwrap();
        assert_eq!(q.len(), 2);
        assert!(MappedFileQueue::load(dir.path().join("cl"), 256, true).is_err());
    }

    /// Retention deletes the files holding the flushed offset, one while a
    /// flush holds it: flushing goes on with the files left, nothing fails.
    #[test]
    fn flush_goes_on_past_files_deleted_by_retention() {
        let dir = tempfile::tempdir().unwrap();
        let q =
            MappedFileQueue::new_with(dir.path().join("cq"), 4096, true, Reserve::CONSUME_QUEUE);
        for i in 0..4u64 {
            let f = q.last_file_or_create(i * 4096).unwrap();
            f.append(|tail, _| {
                tail.fill(1);
                (tail.len(), ())
            })
            .unwrap();
        }
        // A flush picked file 0, then retention deleted it.
        let held = q.find_by_offset(0, true).unwrap();
        assert!(
            held.needs_sync(),
            "a new queue file is synced by its first flush"
        );
        for f in q.remove_head(1) {
            f.destroy().unwrap();
        }
        held.flush(0).unwrap();
        held.sync_created().unwrap();
        held.sync_all().unwrap();
        // The flushed offset (0) now lies in no file: the oldest file left
        // is flushed next.
        assert!(!q.flush(0).unwrap());
        assert_eq!(q.flushed_where(), 2 * 4096);
        // Retention deletes file 1 (flushed) and file 2 (not yet flushed,
        // holding the flushed offset): the flush goes on with file 3.
        for f in q.remove_head(2) {
            f.destroy().unwrap();
        }
        assert!(!q.flush(0).unwrap());
        assert_eq!(q.flushed_where(), 4 * 4096);
        assert!(q.files().iter().all(|f| !f.needs_sync()));
        // A file missing behind the store's back is still an error.
        std::fs::remove_file(q.last_file().unwrap().path()).unwrap();
        assert!(q.last_file().unwrap().sync_all().is_err());
    }

    #[test]
    fn short_newest_file_is_extended_or_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("cl");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(file_name(0)), vec![0u8; 128]).unwrap();
        std::fs::write(d.join(file_name(128)), vec![0u8; 10]).unwrap();
        let (q, info) = MappedFileQueue::load(d.clone(), 128, false).unwrap();
        assert_eq!(q.len(), 1);
        assert!(info.short_file.is_some());
        assert_eq!(q.short_newest(), None);
        // A writer's load leaves the file as it is; the repair extends it.
        let (q, info) = MappedFileQueue::load(d.clone(), 128, true).unwrap();
        assert_eq!(q.len(), 1);
        assert!(info.short_file.is_some());
        assert_eq!(std::fs::metadata(d.join(file_name(128))).unwrap().len(), 10);
        assert_eq!(
            q.repair_short_newest().unwrap(),
            Some(d.join(file_name(128)))
        );
        assert_eq!(q.len(), 2);
        assert_eq!(q.repair_short_newest().unwrap(), None);
        assert_eq!(
            std::fs::metadata(d.join(file_name(128))).unwrap().len(),
            128
        );
    }

    #[test]
    fn gaps_between_files_are_tolerated_and_repaired() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("cq");
        std::fs::create_dir_all(&d).unwrap();
        // 0 full, 128 short, 256 missing, 384 full, 512 full (the newest).
        std::fs::write(d.join(file_name(0)), vec![1u8; 128]).unwrap();
        std::fs::write(d.join(file_name(128)), vec![2u8; 30]).unwrap();
        std::fs::write(d.join(file_name(384)), vec![4u8; 128]).unwrap();
        std::fs::write(d.join(file_name(512)), vec![5u8; 128]).unwrap();
        assert!(MappedFileQueue::load(d.clone(), 128, true).is_err());
        // Read-only: the files before the first gap only.
        let (q, _) =
            MappedFileQueue::load_tolerating_gaps(d.clone(), 128, false, Reserve::WHOLE).unwrap();
        assert_eq!(q.len(), 1);
        assert!(q.gaps().is_empty());
        // A writer's load changes nothing on disk; the repair makes both full size.
        let (q, _) =
            MappedFileQueue::load_tolerating_gaps(d.clone(), 128, true, Reserve::WHOLE).unwrap();
        assert_eq!(q.len(), 3);
        assert_eq!(
            q.gaps(),
            vec![d.join(file_name(128)), d.join(file_name(256))]
        );
        assert!(!d.join(file_name(256)).exists());
        assert_eq!(std::fs::metadata(d.join(file_name(128))).unwrap().len(), 30);
        assert_eq!(q.repair_gaps().unwrap().len(), 2);
        let offsets: Vec<u64> = q.files().iter().map(|f| f.file_from_offset()).collect();
        assert_eq!(offsets, vec![0, 128, 256, 384, 512]);
        let short = std::fs::read(d.join(file_name(128))).unwrap();
        assert_eq!(&short[..30], &[2u8; 30][..]);
        assert_eq!(&short[30..], &[0u8; 98][..]);
        assert_eq!(
            std::fs::read(d.join(file_name(256))).unwrap(),
            vec![0u8; 128]
        );
        assert!(q.repair_gaps().unwrap().is_empty());
    }

    #[test]
    fn short_middle_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("cl");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(file_name(0)), vec![0u8; 10]).unwrap();
        std::fs::write(d.join(file_name(128)), vec![0u8; 128]).unwrap();
        let e = MappedFileQueue::load(d, 128, true).unwrap_err();
        assert!(matches!(e, StoreError::Corrupted { .. }), "{e}");
    }

    #[test]
    fn gap_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("cl");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(file_name(0)), vec![0u8; 128]).unwrap();
        std::fs::write(d.join(file_name(256)), vec![0u8; 128]).unwrap();
        assert!(MappedFileQueue::load(d, 128, true).is_err());
    }
}
