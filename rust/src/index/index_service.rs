//! The `index/` directory (RocketMQ's `IndexService`): the list of index
//! files, oldest first; indexing dispatched keys into the newest file and
//! rolling to a new one when it is full; queries across files; loading,
//! retention and truncation; and the `index_flush` [`ServiceThread`] that
//! flushes each full file and then advances the checkpoint's index
//! timestamp. One file's bytes are [`crate::index::index_file`]'s.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::sync::{Mutex, RwLock};

use crate::checkpoint::Checkpoint;
use crate::error::{Result, StoreError};
use crate::index::index_file::{
    build_key, check_geometry, human_time_name, index_file_size, index_key_hash_of, is_index_name,
    IndexFile, DEFAULT_MAX_MSGS_NUM_BATCH,
};
use crate::log::message::sysflag;
use crate::running::{Flag, RunningFlags};
use crate::services::service_thread::{ServiceThread, STOP_TIMEOUT};

/// What [`IndexStore::query`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryOffsetResult {
    /// CommitLog offsets, newest file first (hash collisions included).
    pub phy_offsets: Vec<i64>,
    /// End timestamp of the newest index file.
    pub index_last_update_timestamp: i64,
    /// End CommitLog offset of the newest index file.
    pub index_last_update_phy_offset: i64,
}

type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// What loading does with an index file shorter than the geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Short {
    /// The newest one is removed (a crash while it was created).
    Remove,
    /// The newest one is skipped.
    Skip,
    /// Loading stops at the first file of another size (a repair).
    Stop,
}

/// The `index/` directory (RocketMQ's `IndexService`).
pub struct IndexStore {
    dir: PathBuf,
    hash_slot_num: usize,
    index_num: usize,
    writable: bool,
    max_msgs_num_batch: AtomicUsize,
    files: RwLock<Vec<Arc<IndexFile>>>,
    write_lock: Mutex<()>,
    clock: RwLock<Clock>,
    checkpoint: RwLock<Option<Arc<Checkpoint>>>,
    /// Full files waiting to be flushed, shared with the flush service.
    full: Arc<FullFiles>,
    /// The `index_flush` service, started with the first full file.
    flusher: Mutex<Option<ServiceThread>>,
    /// The store's running state: a panic of the flush service sets
    /// WRITE_INDEX_FILE_ERROR.
    flags: RwLock<Option<Arc<RunningFlags>>>,
}

/// A full file and the checkpoint to advance once it is flushed.
type FullFile = (Arc<IndexFile>, Option<Arc<Checkpoint>>);

/// Full files to flush.
#[derive(Default)]
struct FullFiles {
    queue: Mutex<Vec<FullFile>>,
    /// Held while a batch is flushed, so [`IndexStore::flush`] returns only
    /// after the service's batch in progress is on disk.
    flushing: Mutex<()>,
    /// Why the first failed flush failed. Sticky: after a failed msync or
    /// fsync the kernel may have dropped the dirty pages, so a later flush
    /// could succeed over lost entries; nothing is flushed again and the
    /// index checkpoint is never advanced past the failed file.
    failed: std::sync::OnceLock<String>,
}

impl FullFiles {
    fn is_empty(&self) -> bool {
        self.queue.lock().is_empty()
    }

    /// Flushes every queued file (RocketMQ's `IndexService.flush(IndexFile)`).
    /// The first failure is kept and poisons the store (`flags`): this call
    /// and every later one return it.
    fn flush_pending(&self, flags: Option<&RunningFlags>) -> Result<()> {
        let _g = self.flushing.lock();
        if let Some(why) = self.failed.get() {
            return Err(StoreError::Poisoned(why.clone()));
        }
        let batch = std::mem::take(&mut *self.queue.lock());
        for (file, checkpoint) in batch {
            #[cfg(feature = "failpoints")]
            crate::failpoint::pause("pause_index_flush");
            if let Err(e) = flush_full(&file, checkpoint.as_deref()) {
                let why = format!("index flush failed: {e}");
                log::error!("{why}");
                if let Some(f) = flags {
                    f.fail(Flag::FlushFailed, why.clone());
                }
                let _ = self.failed.set(why);
                return Err(e);
            }
        }
        Ok(())
    }
}

/// How long the index flush service sleeps without a full file.
const INDEX_FLUSH_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

impl std::fmt::Debug for IndexStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexStore")
            .field("dir", &self.dir)
            .field("hash_slot_num", &self.hash_slot_num)
            .field("index_num", &self.index_num)
            .field("files", &self.files.read().len())
            .finish()
    }
}

fn system_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl IndexStore {
    fn empty(dir: PathBuf, hash_slot_num: usize, index_num: usize, writable: bool) -> Result<Self> {
        check_geometry(hash_slot_num, index_num)?;
        Ok(Self {
            dir,
            hash_slot_num,
            index_num,
            writable,
            max_msgs_num_batch: AtomicUsize::new(DEFAULT_MAX_MSGS_NUM_BATCH),
            files: RwLock::new(Vec::new()),
            write_lock: Mutex::new(()),
            clock: RwLock::new(Arc::new(system_now_ms)),
            checkpoint: RwLock::new(None),
            full: Arc::new(FullFiles::default()),
            flusher: Mutex::new(None),
            flags: RwLock::new(None),
        })
    }

    /// Loads `dir` (RocketMQ's `IndexService.load`). After an abnormal exit
    /// (`!last_exit_ok`), files whose end timestamp is newer than
    /// `index_checkpoint_ts` are destroyed; the second value is then the
    /// begin CommitLog offset of the oldest destroyed file, from which the
    /// caller re-dispatches to the index. A file whose size does not match
    /// the geometry is refused with [`StoreError::Mismatch`].
    pub fn load(
        dir: &Path,
        hash_slot_num: usize,
        index_num: usize,
        last_exit_ok: bool,
        index_checkpoint_ts: i64,
    ) -> Result<(Self, Option<i64>)> {
        Self::load_inner(
            dir,
            hash_slot_num,
            index_num,
            true,
            last_exit_ok,
            index_checkpoint_ts,
            Short::Remove,
        )
    }

    /// Loads `dir` read-only: nothing is destroyed or written.
    pub fn load_read_only(dir: &Path, hash_slot_num: usize, index_num: usize) -> Result<Self> {
        Ok(Self::load_inner(dir, hash_slot_num, index_num, false, true, 0, Short::Skip)?.0)
    }

    /// Loads `dir` for a writer without changing anything on disk: a short
    /// newest file is skipped (not removed) and no file is destroyed. The
    /// store's recovery steps remove and destroy what must go
    /// (`crate::recovery`, [`IndexStore::destroy_newer_than`]).
    pub fn load_for_recovery(dir: &Path, hash_slot_num: usize, index_num: usize) -> Result<Self> {
        Ok(Self::load_inner(dir, hash_slot_num, index_num, true, true, 0, Short::Skip)?.0)
    }

    /// Loads `dir` for a repair, like [`IndexStore::load_for_recovery`],
    /// except that the first file of another size than the geometry (a
    /// truncated or damaged file) and every newer one are left out instead
    /// of refusing the store: recovery removes them and rebuilds their
    /// entries from the CommitLog.
    pub fn load_for_repair(dir: &Path, hash_slot_num: usize, index_num: usize) -> Result<Self> {
        Ok(Self::load_inner(dir, hash_slot_num, index_num, true, true, 0, Short::Stop)?.0)
    }

    fn load_inner(
        dir: &Path,
        hash_slot_num: usize,
        index_num: usize,
        writable: bool,
        last_exit_ok: bool,
        index_checkpoint_ts: i64,
        short: Short,
    ) -> Result<(Self, Option<i64>)> {
        let store = Self::empty(dir.to_path_buf(), hash_slot_num, index_num, writable)?;
        let mut files = Vec::new();
        let mut redispatch_from = None;
        let paths = list_index_files(dir)?;
        let expected = index_file_size(hash_slot_num, index_num).unwrap_or(usize::MAX) as u64;
        let last = paths.len().saturating_sub(1);
        for (i, path) in paths.into_iter().enumerate() {
            // The newest file shorter than the geometry: a crash while it was
            // being created, so it holds no entry. A writer removes it and
            // re-indexes from where the previous file ended; a reader skips it.
            let len = std::fs::metadata(&path)
                .map_err(|e| StoreError::io(format!("stat {}", path.display()), e))?
                .len();
            if short == Short::Stop && len != expected {
                break;
            }
            if i == last && len < expected {
                if writable && short == Short::Remove {
                    log::warn!(
                        "removing index file {} ({len} bytes: a crash while it was created)",
                        path.display()
                    );
                    std::fs::remove_file(&path)
                        .map_err(|e| StoreError::io(format!("remove {}", path.display()), e))?;
                    let prev_end = files
                        .last()
                        .map(|f: &Arc<IndexFile>| f.end_phy_offset())
                        .unwrap_or(0);
                    redispatch_from.get_or_insert(prev_end);
                }
                continue;
            }
            let f = IndexFile::open(&path, hash_slot_num, index_num, writable)?;
            if writable && !last_exit_ok && f.end_timestamp() > index_checkpoint_ts {
                log::info!(
                    "destroying index file {} (end {} > index checkpoint {index_checkpoint_ts}) after an abnormal exit",
                    path.display(),
                    f.end_timestamp()
                );
                redispatch_from.get_or_insert(f.begin_phy_offset());
                f.destroy()?;
                continue;
            }
            files.push(Arc::new(f));
        }
        *store.files.write() = files;
        Ok((store, redispatch_from))
    }

    /// The store's `index` directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Caps the number of offsets a query returns (default 64).
    pub fn set_max_msgs_num_batch(&self, n: usize) {
        self.max_msgs_num_batch.store(n, Ordering::Release);
    }

    /// Replaces the clock used to name new files (ms since the epoch).
    pub fn set_clock(&self, clock: Arc<dyn Fn() -> i64 + Send + Sync>) {
        *self.clock.write() = clock;
    }

    /// The checkpoint whose index timestamp advances when a full file has
    /// been flushed.
    pub fn set_checkpoint(&self, checkpoint: Arc<Checkpoint>) {
        *self.checkpoint.write() = Some(checkpoint);
    }

    /// The store's running state, for the flush service's failures.
    pub fn set_running_flags(&self, flags: Arc<RunningFlags>) {
        *self.flags.write() = Some(flags);
    }

    /// A snapshot of the files, oldest first.
    pub fn files(&self) -> Vec<Arc<IndexFile>> {
        self.files.read().clone()
    }

    /// End CommitLog offset of the newest file (0 if none).
    pub fn end_phy_offset(&self) -> i64 {
        self.files
            .read()
            .last()
            .map(|f| f.end_phy_offset())
            .unwrap_or(0)
    }

    /// End timestamp of the newest file (0 if none).
    pub fn end_timestamp(&self) -> i64 {
        self.files
            .read()
            .last()
            .map(|f| f.end_timestamp())
            .unwrap_or(0)
    }

    /// A file name for now, unique in the directory and sorting after every
    /// existing file.
    fn new_file_path(&self, newest: Option<&Arc<IndexFile>>) -> PathBuf {
        let now = (self.clock.read())();
        let newest_name = newest.map(|f| f.file_name());
        for ms in now..now.saturating_add(1000) {
            let name = human_time_name(ms);
            let after_newest = match newest_name.as_deref() {
                Some(n) => name.as_str() > n,
                None => true,
            };
            if after_newest && !self.dir.join(&name).exists() {
                return self.dir.join(name);
            }
        }
        // The clock went far backwards: take the decimal successor of the
        // newest name (still 17 digits, still sorting last).
        let mut n: u64 = newest_name.and_then(|n| n.parse().ok()).unwrap_or(0);
        loop {
            n += 1;
            let name = format!("{n:017}");
            if !self.dir.join(&name).exists() {
                return self.dir.join(name);
            }
        }
    }

    /// The newest file if it has room, else a new one whose header starts at
    /// the previous file's end (RocketMQ's `getAndCreateLastIndexFile`); the
    /// full previous file is flushed on a background thread.
    fn writable_last_file(&self) -> Result<Arc<IndexFile>> {
        let newest = self.files.read().last().cloned();
        if let Some(f) = &newest {
            if !f.is_write_full() {
                return Ok(f.clone());
            }
        }
        let (prev_phy, prev_ts) = newest
            .as_ref()
            .map(|f| (f.end_phy_offset(), f.end_timestamp()))
            .unwrap_or((0, 0));
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| StoreError::io(format!("create {}", self.dir.display()), e))?;
        let path = self.new_file_path(newest.as_ref());
        #[cfg(feature = "failpoints")]
        crate::failpoint::check("create_index_file")
            .map_err(|e| StoreError::io(format!("create {}", path.display()), e))?;
        let f = Arc::new(IndexFile::create(
            &path,
            self.hash_slot_num,
            self.index_num,
            prev_phy,
            prev_ts,
        )?);
        self.files.write().push(f.clone());
        if let Some(prev) = newest {
            self.flush_full_in_background(prev);
        }
        Ok(f)
    }

    /// Hands a full file to the `index_flush` service (started on first
    /// use); if the thread cannot start, the file is flushed here.
    fn flush_full_in_background(&self, file: Arc<IndexFile>) {
        let checkpoint = self.checkpoint.read().clone();
        self.full.queue.lock().push((file, checkpoint));
        let mut flusher = self.flusher.lock();
        if flusher.is_none() {
            let full = self.full.clone();
            let flags = self.flags.read().clone();
            let on_panic = move |why: String| {
                if let Some(f) = &flags {
                    f.fail(Flag::WriteIndexFileError, why);
                }
            };
            let flags = self.flags.read().clone();
            match ServiceThread::start("index_flush", on_panic, move |s| {
                // A failure poisons the store (and is logged) in flush_pending.
                let _ = full.flush_pending(flags.as_deref());
                s.wait_unless(INDEX_FLUSH_IDLE, || !full.is_empty());
            }) {
                Ok(t) => *flusher = Some(t),
                Err(e) => {
                    log::warn!("cannot start the index flush thread ({e}); flushing inline");
                    drop(flusher);
                    let _ = self.flush_full_files();
                    return;
                }
            }
        }
        if let Some(t) = flusher.as_ref() {
            t.wakeup();
        }
    }

    fn put_key(
        &self,
        file: Arc<IndexFile>,
        key: &str,
        phy: i64,
        ts: i64,
    ) -> Result<Arc<IndexFile>> {
        if file.put_key(key, phy, ts)? {
            return Ok(file);
        }
        log::warn!(
            "index file {} is full, creating another one",
            file.path().display()
        );
        let next = self.writable_last_file()?;
        if next.put_key(key, phy, ts)? {
            Ok(next)
        } else {
            Err(StoreError::internal(format!(
                "fresh index file {} refused a key",
                next.path().display()
            )))
        }
    }

    /// Indexes one dispatched message (RocketMQ's `buildIndex`): skipped if
    /// `phy` is below the newest file's end offset or the message is a
    /// ROLLBACK; else `topic#uniq_key` and `topic#key` for every non-empty
    /// key. Returns how many keys were written.
    pub fn build_index(
        &self,
        topic: &str,
        keys: &[&str],
        uniq_key: Option<&str>,
        phy: i64,
        store_ts: i64,
        tran_type: i32,
    ) -> Result<usize> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let _g = self.write_lock.lock();
        let mut file = self.writable_last_file()?;
        if phy < file.end_phy_offset() {
            return Ok(0);
        }
        if tran_type & sysflag::TRANSACTION_TYPE_MASK == sysflag::TRANSACTION_ROLLBACK {
            return Ok(0);
        }
        let mut n = 0;
        if let Some(u) = uniq_key {
            file = self.put_key(file, &build_key(topic, u), phy, store_ts)?;
            n += 1;
        }
        for k in keys.iter().filter(|k| !k.is_empty()) {
            file = self.put_key(file, &build_key(topic, k), phy, store_ts)?;
            n += 1;
        }
        Ok(n)
    }

    /// Offsets stored under `topic#key` in `[begin, end]`, newest file first,
    /// at most `min(max_num, max_msgs_num_batch)` (RocketMQ's `queryOffset`).
    pub fn query(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin: i64,
        end: i64,
    ) -> QueryOffsetResult {
        self.query_hashed(index_key_hash_of(topic, key), max_num, begin, end)
    }

    /// Starts loading the hash slot of `key_hash` ([`index_key_hash_of`])
    /// in the newest file, where a lookup starts: a caller with work to do
    /// before its lookup overlaps the slot's cache miss with it.
    pub fn prefetch_key(&self, key_hash: i32) {
        if let Some(f) = self.files.read().last() {
            f.prefetch_slot(key_hash);
        }
    }

    /// [`IndexStore::query`] of the key whose hash is `key_hash`: the hash
    /// is all the walk compares (no `topic#key` string), and no snapshot of
    /// the list is taken (the read lock is held for the walk only).
    pub fn query_hashed(
        &self,
        key_hash: i32,
        max_num: usize,
        begin: i64,
        end: i64,
    ) -> QueryOffsetResult {
        let max = max_num.min(self.max_msgs_num_batch.load(Ordering::Acquire));
        let files = self.files.read();
        let mut r = QueryOffsetResult::default();
        if let Some(newest) = files.last() {
            r.index_last_update_timestamp = newest.end_timestamp();
            r.index_last_update_phy_offset = newest.end_phy_offset();
        }
        for f in files.iter().rev() {
            if f.is_time_matched(begin, end) {
                f.select_hashed(&mut r.phy_offsets, key_hash, max, begin, end);
            }
            if f.begin_timestamp() < begin || r.phy_offsets.len() >= max {
                break;
            }
        }
        r
    }

    /// Deletes leading files (never the newest) whose end offset is below
    /// `min_phy` (docs/format.md §16). Returns how many were deleted.
    pub fn delete_expired(&self, min_phy: i64) -> usize {
        if !self.writable {
            return 0;
        }
        let files = self.files();
        match files.first() {
            Some(f) if f.end_phy_offset() < min_phy => {}
            _ => return 0,
        }
        let mut count = 0;
        for f in files.iter().take(files.len() - 1) {
            if f.end_phy_offset() >= min_phy {
                break;
            }
            if let Err(e) = f.destroy() {
                log::warn!("cannot delete expired index file: {e}");
                break;
            }
            count += 1;
        }
        let mut list = self.files.write();
        let n = count.min(list.len());
        list.drain(..n);
        count
    }

    /// Destroys the newest files holding entries at or past CommitLog offset
    /// `phy` (the log was cut there, so those entries point at records that
    /// no longer exist, and new records there would be skipped as already
    /// indexed). Returns the begin offset of the oldest destroyed file, from
    /// which the caller re-indexes.
    pub fn destroy_from(&self, phy: i64) -> Result<Option<i64>> {
        if !self.writable {
            return Ok(None);
        }
        let _g = self.write_lock.lock();
        let mut list = self.files.write();
        let mut from = None;
        while let Some(f) = list.last() {
            if f.end_phy_offset() < phy || f.index_count() <= 1 && f.end_phy_offset() <= 0 {
                break;
            }
            log::info!(
                "destroying index file {} (entries up to {} past the CommitLog end {phy})",
                f.path().display(),
                f.end_phy_offset()
            );
            from = Some(f.begin_phy_offset());
            f.destroy()?;
            list.pop();
        }
        Ok(from)
    }

    /// Destroys the file at position `pos` of the list (oldest first) and
    /// every newer one: a repair rebuilds their entries from the CommitLog.
    /// Returns their paths, oldest first.
    pub fn destroy_files_from(&self, pos: usize) -> Result<Vec<PathBuf>> {
        if !self.writable {
            return Ok(Vec::new());
        }
        let _g = self.write_lock.lock();
        let mut list = self.files.write();
        let mut gone = Vec::new();
        while list.len() > pos {
            let Some(f) = list.pop() else { break };
            log::info!("destroying damaged index file {}", f.path().display());
            f.destroy()?;
            gone.push(f.path().to_path_buf());
        }
        gone.reverse();
        Ok(gone)
    }

    /// Destroys every file whose end timestamp is newer than `ts` (the
    /// index checkpoint: after an abnormal exit their pages may be lost).
    /// Returns the destroyed files' paths and begin offsets, oldest first.
    pub fn destroy_newer_than(&self, ts: i64) -> Result<Vec<(PathBuf, i64)>> {
        if !self.writable {
            return Ok(Vec::new());
        }
        let _g = self.write_lock.lock();
        let mut list = self.files.write();
        let mut gone = Vec::new();
        let mut i = 0;
        while let Some(f) = list.get(i).cloned() {
            if f.end_timestamp() <= ts {
                i += 1;
                continue;
            }
            log::info!(
                "destroying index file {} (end {} > index checkpoint {ts}) after an abnormal exit",
                f.path().display(),
                f.end_timestamp()
            );
            f.destroy()?;
            list.remove(i);
            gone.push((f.path().to_path_buf(), f.begin_phy_offset()));
        }
        Ok(gone)
    }

    /// Flushes the full files not yet flushed (waiting for the flush
    /// service's batch in progress) and forces every file written since its
    /// last flush.
    pub fn flush(&self) -> Result<()> {
        self.flush_full_files()?;
        for f in self.files() {
            #[cfg(feature = "failpoints")]
            crate::failpoint::pause("pause_index_flush");
            f.flush()?;
        }
        Ok(())
    }

    /// Waits for background flushes and drops every file (the store shut
    /// down): mappings and descriptors are released as soon as no reader
    /// holds them.
    pub fn release(&self) {
        self.stop_flusher();
        self.files.write().clear();
    }

    /// Stops the flush service (bounded) and flushes what it left.
    fn stop_flusher(&self) {
        let flusher = self.flusher.lock().take();
        if let Some(t) = flusher {
            t.stop(STOP_TIMEOUT);
        }
        // A failure poisons the store (and is logged) in flush_pending.
        let _ = self.flush_full_files();
    }

    /// Flushes the full files not yet flushed; a failure poisons the store.
    fn flush_full_files(&self) -> Result<()> {
        let flags = self.flags.read().clone();
        self.full.flush_pending(flags.as_deref())
    }

    /// Follows a writer in another process (read-only stores): drops files
    /// it deleted, re-reads the newest header, and opens files it created.
    pub fn refresh(&self) -> Result<()> {
        if self.writable {
            return Ok(());
        }
        let mut files = self.files.write();
        let gone = files.iter().take_while(|f| !f.path().exists()).count();
        files.drain(..gone);
        if let Some(last) = files.last() {
            last.reload_header();
        }
        let newest = files.last().map(|f| f.file_name());
        for path in list_index_files(&self.dir)? {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            if newest.is_some() && name <= newest {
                continue;
            }
            match IndexFile::open(&path, self.hash_slot_num, self.index_num, false) {
                Ok(f) => files.push(Arc::new(f)),
                // Still being created by the writer: next time.
                Err(StoreError::Mismatch(_)) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Drop for IndexStore {
    fn drop(&mut self) {
        self.stop_flusher();
    }
}

/// Flushes a full file, then records its end timestamp in the checkpoint
/// (RocketMQ's `IndexService.flush(IndexFile)`); the timestamp is recorded
/// only once the file is on disk.
fn flush_full(file: &IndexFile, checkpoint: Option<&Checkpoint>) -> Result<()> {
    let ts = if file.is_write_full() {
        file.end_timestamp()
    } else {
        0
    };
    #[cfg(feature = "failpoints")]
    let armed = crate::failpoint::check("index_msync")
        .map_err(|e| StoreError::io(format!("msync {}", file.path().display()), e));
    #[cfg(not(feature = "failpoints"))]
    let armed = Ok(());
    armed.and_then(|_| file.flush())?;
    if ts > 0 {
        if let Some(c) = checkpoint {
            c.set_index_msg_timestamp(ts);
            c.flush()?;
        }
    }
    Ok(())
}

/// Index files of `dir` (17-digit names), oldest first.
pub(crate) fn list_index_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = crate::log::segment_files::list_dir(dir, |name, path| {
        if is_index_name(name) {
            Some(path)
        } else {
            log::warn!("ignoring {} in the index directory", path.display());
            None
        }
    })?;
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn store(dir: &Path, clock: i64) -> IndexStore {
        let (s, r) = IndexStore::load(dir, 100, 101, true, 0).unwrap();
        assert_eq!(r, None);
        s.set_clock(Arc::new(move || clock));
        s.set_max_msgs_num_batch(1000);
        s
    }

    #[test]
    fn store_many_files_collisions_and_repeats() {
        let dir = tempfile::tempdir().unwrap();
        let idx = dir.path().join("index");
        // 100 slots, 400 keys: capacity 100 per file => 4 files; all created
        // in the same millisecond, so names get +1 ms.
        let s = store(&idx, 1_700_000_000_000);
        let ts = 1_700_000_000_000i64;
        for i in 0..200i64 {
            let key = if i % 2 == 0 { "Aa" } else { "BB" };
            let uniq = format!("U{i}");
            let n = s
                .build_index("T", &[key], Some(&uniq), i * 100, ts + i, 0)
                .unwrap();
            assert_eq!(n, 2);
        }
        let files = s.files();
        assert_eq!(files.len(), 4);
        assert!(files.iter().take(3).all(|f| f.is_write_full()));
        assert!(files.iter().take(3).all(|f| f.index_count() == 101));
        let names: HashSet<_> = files.iter().map(|f| f.file_name()).collect();
        assert_eq!(names.len(), 4, "names are unique");
        let mut sorted: Vec<_> = files.iter().map(|f| f.file_name()).collect();
        sorted.sort();
        assert_eq!(
            sorted,
            files.iter().map(|f| f.file_name()).collect::<Vec<_>>()
        );
        assert_eq!(
            files[1].begin_phy_offset(),
            5000,
            "message 50 starts file 1"
        );
        // "Aa" and "BB" collide: a query returns offsets of both keys.
        let r = s.query("T", "Aa", 1000, 0, i64::MAX);
        assert_eq!(r.phy_offsets.len(), 200);
        let set: HashSet<_> = r.phy_offsets.iter().copied().collect();
        assert_eq!(set.len(), 200);
        assert_eq!(r.phy_offsets[0], 19_900, "newest first");
        assert_eq!(r.index_last_update_phy_offset, 19_900);
        assert_eq!(r.index_last_update_timestamp, ts + 199);
        let r = s.query("T", "U7", 1000, 0, i64::MAX);
        assert_eq!(r.phy_offsets, [700]);
        // The batch cap.
        s.set_max_msgs_num_batch(64);
        assert_eq!(s.query("T", "BB", 1000, 0, i64::MAX).phy_offsets.len(), 64);
        // Already indexed offsets are skipped (the full newest file still
        // rolls first, as in RocketMQ: the new file starts at its end).
        assert_eq!(s.build_index("T", &["x"], None, 100, ts, 0).unwrap(), 0);
        assert_eq!(s.files().len(), 5);
        assert_eq!(s.files()[4].begin_phy_offset(), 19_900);
        // ROLLBACK is skipped, PREPARED is indexed.
        assert_eq!(
            s.build_index("T", &["x"], None, 30_000, ts + 300, 0xC)
                .unwrap(),
            0
        );
        assert_eq!(
            s.build_index("T", &["x", ""], None, 30_000, ts + 300, 0x4)
                .unwrap(),
            1
        );
        s.flush().unwrap();
        drop(s);

        let (s, _) = IndexStore::load(&idx, 100, 101, true, 0).unwrap();
        assert_eq!(s.files().len(), 5);
        assert_eq!(s.query("T", "x", 10, 0, i64::MAX).phy_offsets, [30_000]);
        assert_eq!(s.end_phy_offset(), 30_000);
        // Retention deletes leading files whose end offset is below the min
        // (file ends: 4900, 9900, 14900, 19900, 30000).
        assert_eq!(s.delete_expired(10_000), 2);
        assert_eq!(s.files().len(), 3);
        assert_eq!(s.delete_expired(i64::MAX), 2, "never the newest");
        assert_eq!(std::fs::read_dir(&idx).unwrap().count(), 1);
        assert!(matches!(
            IndexStore::load(&idx, 99, 101, true, 0),
            Err(StoreError::Mismatch(_))
        ));
    }

    #[test]
    fn full_file_flush_advances_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let ck = Arc::new(Checkpoint::load_or_create(&dir.path().join("checkpoint")).unwrap());
        let (s, _) = IndexStore::load(&dir.path().join("index"), 10, 3, true, 0).unwrap();
        s.set_checkpoint(ck.clone());
        s.build_index("T", &["a", "b"], None, 10, 5000, 0).unwrap();
        assert_eq!(ck.index_msg_timestamp(), 0);
        s.build_index("T", &["c"], None, 20, 6000, 0).unwrap();
        s.flush().unwrap();
        assert_eq!(ck.index_msg_timestamp(), 5000);
        assert_eq!(
            Checkpoint::load_read_only(ck.path())
                .unwrap()
                .index_msg_timestamp(),
            5000
        );
    }

    #[test]
    fn abnormal_exit_destroys_newer_files() {
        let dir = tempfile::tempdir().unwrap();
        let idx = dir.path().join("index");
        let s = store(&idx, 1_700_000_000_000);
        for i in 0..250i64 {
            s.build_index("T", &["k"], None, 1000 + i, 10_000 + i * 1000, 0)
                .unwrap();
        }
        let files = s.files();
        assert_eq!(files.len(), 3);
        let ckpt = files[0].end_timestamp();
        let second_begin = files[1].begin_phy_offset();
        s.flush().unwrap();
        drop(s);
        // A clean exit keeps everything.
        let (s, r) = IndexStore::load(&idx, 100, 101, true, ckpt).unwrap();
        assert_eq!((s.files().len(), r), (3, None));
        drop(s);
        let (s, r) = IndexStore::load(&idx, 100, 101, false, ckpt).unwrap();
        assert_eq!(s.files().len(), 1);
        assert_eq!(r, Some(second_begin));
        assert_eq!(second_begin, 1100);
        assert_eq!(std::fs::read_dir(&idx).unwrap().count(), 1);
        // Re-dispatching from there rebuilds the keys.
        s.set_clock(Arc::new(|| 1_700_000_000_000));
        for i in 100..250i64 {
            s.build_index("T", &["k"], None, 1000 + i, 10_000 + i * 1000, 0)
                .unwrap();
        }
        let r = s.query("T", "k", 64, 0, i64::MAX);
        assert_eq!(r.phy_offsets.len(), 64);
        assert_eq!(r.phy_offsets[0], 1249);
    }

    #[test]
    fn read_only_refresh() {
        let dir = tempfile::tempdir().unwrap();
        let idx = dir.path().join("index");
        let w = store(&idx, 1_700_000_000_000);
        let r = IndexStore::load_read_only(&idx, 100, 101).unwrap();
        assert!(r.build_index("T", &["k"], None, 1, 1, 0).is_err());
        w.build_index("T", &["k"], None, 5, 1000, 0).unwrap();
        r.refresh().unwrap();
        assert_eq!(r.query("T", "k", 10, 0, i64::MAX).phy_offsets, [5]);
        w.build_index("T", &["k"], None, 6, 2000, 0).unwrap();
        r.refresh().unwrap();
        assert_eq!(r.query("T", "k", 10, 0, i64::MAX).phy_offsets, [6, 5]);
    }
}
