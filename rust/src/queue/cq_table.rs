//! The `consumequeue/` directory: one [`ConsumeQueue`] per `topic/queueId`.
//!
//! ```text
//!  consumequeue/<topic>/<queueId>/00000000000000000000 ...
//! ```
//! Queues are loaded at start (directories whose name is not an integer
//! queue id are skipped, as RocketMQ does), created lazily by dispatch, and
//! never created by a read: asking for an unknown queue returns `None`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::sync::RwLock;
use rustc_hash::FxHashMap;

use crate::error::{Result, StoreError};
use crate::log::commitlog::QueueOffsetTable;
use crate::log::mapped_file_queue::{detect_file_size_tolerating_short, list_segment_files};
use crate::log::message::is_readable_topic;
use crate::queue::consume_queue::{round_cq_file_size, ConsumeQueue, DEFAULT_CQ_FILE_SIZE};

/// New queue files in one flush round above which one `syncfs` is cheaper
/// than an fsync of each file and its directory.
const SYNCFS_THRESHOLD: usize = 32;

type Queues = FxHashMap<String, FxHashMap<i32, Arc<ConsumeQueue>>>;

/// Every consume queue of a store.
pub struct ConsumeQueueTable {
    root: PathBuf,
    file_size: usize,
    writable: bool,
    queues: RwLock<Queues>,
}

/// `(topic, queue id, dir)` of every queue directory under `root`.
fn list_queue_dirs(root: &Path) -> Result<Vec<(String, i32, PathBuf)>> {
    let mut out = Vec::new();
    let topics = match std::fs::read_dir(root) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(StoreError::io(format!("list {}", root.display()), e)),
    };
    for t in topics {
        let t = t.map_err(|e| StoreError::io(format!("list {}", root.display()), e))?;
        let Some(topic) = t.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !t.path().is_dir() || !is_readable_topic(&topic) {
            continue;
        }
        let qdirs = std::fs::read_dir(t.path())
            .map_err(|e| StoreError::io(format!("list {}", t.path().display()), e))?;
        for q in qdirs {
            let q = q.map_err(|e| StoreError::io(format!("list {}", t.path().display()), e))?;
            let Some(qid) = q.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            if qid >= 0 && q.path().is_dir() {
                out.push((topic.clone(), qid, q.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// A lone queue file larger than the settled size (cannot be a short newest file).
fn lone_too_big(dirs: &[(String, i32, PathBuf)], size: usize) -> Result<Option<(usize, PathBuf)>> {
    for (_, _, dir) in dirs {
        if let Some(s) = detect_file_size_tolerating_short(dir)? {
            if s > size {
                return Ok(Some((s, dir.clone())));
            }
        }
    }
    Ok(None)
}

impl ConsumeQueueTable {
    /// Loads every queue under `root`. The file size is `configured` (rounded
    /// up to ×20) or, when `None`, taken from the files; all queues must agree.
    pub fn load(root: PathBuf, configured: Option<usize>, writable: bool) -> Result<Self> {
        let dirs = list_queue_dirs(&root)?;
        // A directory holding one file only tells a size if that file is not
        // a short newest file (a crash while it was created): settle the size
        // from directories with several files first.
        let mut full: Option<(usize, PathBuf)> = None;
        let mut lone: Option<(usize, PathBuf)> = None;
        for (_, _, dir) in &dirs {
            let Some(size) = detect_file_size_tolerating_short(dir)? else {
                continue;
            };
            let is_lone = list_segment_files(dir)?.len() == 1;
            let slot = if is_lone { &mut lone } else { &mut full };
            match slot {
                Some((s, other)) if !is_lone && *s != size => {
                    return Err(StoreError::Mismatch(format!(
                        "consume queue files differ in size: {} has {size}-byte files, {} has {s}",
                        dir.display(),
                        other.display()
                    )))
                }
                Some((s, _)) if is_lone && *s >= size => {}
                _ => *slot = Some((size, dir.clone())),
            }
        }
        let file_size = match (configured.map(round_cq_file_size), full, lone) {
            (Some(cfg), Some((disk, dir)), _) if cfg != disk => {
                return Err(StoreError::Mismatch(format!(
                    "mapped_file_size_consume_queue is {cfg} but the files in {} are {disk} bytes",
                    dir.display()
                )))
            }
            (Some(cfg), _, Some((disk, dir))) if disk > cfg => {
                return Err(StoreError::Mismatch(format!(
                    "mapped_file_size_consume_queue is {cfg} but {} holds a {disk}-byte file",
                    dir.display()
                )))
            }
            (Some(cfg), _, _) => cfg,
            (None, Some((disk, _)), _) => disk,
            (None, None, Some((disk, _))) => disk,
            (None, None, None) => DEFAULT_CQ_FILE_SIZE,
        };
        if let Some((disk, dir)) = &lone_too_big(&dirs, file_size)? {
            return Err(StoreError::Mismatch(format!(
                "consume queue file size is {file_size} but {} holds a {disk}-byte file",
                dir.display()
            )));
        }
        let table = Self {
            root,
            file_size,
            writable,
            queues: RwLock::new(FxHashMap::default()),
        };
        {
            let mut q = table.queues.write();
            for (topic, qid, _) in dirs {
                let cq = ConsumeQueue::load(&table.root, &topic, qid, file_size, writable)?;
                q.entry(topic).or_default().insert(qid, Arc::new(cq));
            }
        }
        Ok(table)
    }

    /// Size of every consume-queue file.
    pub fn file_size(&self) -> usize {
        self.file_size
    }

    /// The store's `consumequeue` directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The queue of `topic/queue_id`, if it exists.
    pub fn get(&self, topic: &str, queue_id: i32) -> Option<Arc<ConsumeQueue>> {
        self.queues.read().get(topic)?.get(&queue_id).cloned()
    }

    /// The queue of `topic/queue_id`, created (in memory; its first file is
    /// created by the first unit) when missing. Writers only.
    pub fn get_or_create(&self, topic: &str, queue_id: i32) -> Result<Arc<ConsumeQueue>> {
        if let Some(q) = self.get(topic, queue_id) {
            return Ok(q);
        }
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        if queue_id < 0 || !is_readable_topic(topic) {
            return Err(StoreError::InvalidArgument(format!(
                "no consume queue for {topic:?}/{queue_id}"
            )));
        }
        let mut w = self.queues.write();
        let entry = w.entry(topic.to_owned()).or_default();
        if let Some(q) = entry.get(&queue_id) {
            return Ok(q.clone());
        }
        let cq = Arc::new(ConsumeQueue::load(
            &self.root,
            topic,
            queue_id,
            self.file_size,
            true,
        )?);
        entry.insert(queue_id, cq.clone());
        Ok(cq)
    }

    /// Drops every queue (the store shut down): their files are released as
    /// soon as no reader holds them, and none creates a file any more.
    pub fn release(&self) {
        let mut w = self.queues.write();
        for q in w.values().flat_map(|m| m.values()) {
            q.queue().release();
        }
        w.clear();
    }

    /// Every queue, sorted by topic and id.
    pub fn all(&self) -> Vec<Arc<ConsumeQueue>> {
        let r = self.queues.read();
        let mut v: Vec<_> = r.values().flat_map(|m| m.values().cloned()).collect();
        v.sort_by(|a, b| (a.topic(), a.queue_id()).cmp(&(b.topic(), b.queue_id())));
        v
    }

    /// Queue ids of `topic`, sorted.
    pub fn queue_ids(&self, topic: &str) -> Vec<i32> {
        let mut v: Vec<i32> = self
            .queues
            .read()
            .get(topic)
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default();
        v.sort_unstable();
        v
    }

    /// Topics with at least one queue, sorted.
    pub fn topics(&self) -> Vec<String> {
        let mut v: Vec<String> = self.queues.read().keys().cloned().collect();
        v.sort();
        v
    }

    /// Recovers every queue; returns the largest CommitLog end offset any
    /// queue references (-1 when none).
    pub fn recover_all(&self) -> Result<i64> {
        let mut max = -1i64;
        for q in self.all() {
            q.recover()?;
            max = max.max(q.max_physic_offset());
        }
        Ok(max)
    }

    /// Cuts every queue's units that point at or past `phy` (docs/format.md §15.2).
    pub fn truncate_dirty_logic_files(&self, phy: i64) -> Result<()> {
        for q in self.all() {
            q.truncate_dirty_logic_files(phy)?;
        }
        Ok(())
    }

    /// Deletes every queue's files (no CommitLog left to point into).
    pub fn destroy_all(&self) -> Result<()> {
        for q in self.all() {
            q.destroy()?;
        }
        self.queues.write().clear();
        Ok(())
    }

    /// `topic -> queue -> next offset` from the queues' ends, with each
    /// queue's min offset corrected to `commit_log_min` (docs/format.md §15.2).
    pub fn queue_offset_table(&self, commit_log_min: i64) -> QueueOffsetTable {
        let mut t = QueueOffsetTable::default();
        for q in self.all() {
            t.set(q.topic(), q.queue_id(), q.max_offset_in_queue());
            q.correct_min_offset(commit_log_min);
        }
        t
    }

    /// Read-only stores: adopts queues another process created and advances
    /// every queue's end; min offsets follow the CommitLog's min offset
    /// `phy_min`; no unit past `phy_end` (where the CommitLog's records end
    /// as this process knows them) is adopted ([`ConsumeQueue::refresh`]).
    /// Returns true when anything changed.
    pub fn refresh(&self, phy_min: i64, phy_end: Option<i64>) -> Result<bool> {
        let mut changed = false;
        for (topic, qid, _) in list_queue_dirs(&self.root)? {
            if self.get(&topic, qid).is_none() && is_readable_topic(&topic) {
                let cq =
                    ConsumeQueue::load_read_only(&self.root, &topic, qid, self.file_size, phy_min)?;
                self.queues
                    .write()
                    .entry(topic)
                    .or_default()
                    .insert(qid, Arc::new(cq));
                changed = true;
            }
        }
        for q in self.all() {
            let before = q.max_offset_in_queue();
            if q.refresh(phy_min, phy_end)? != before {
                changed = true;
            }
        }
        Ok(changed)
    }

    /// Flushes every queue; returns false if any flush failed (logged).
    ///
    /// New queue files are made durable here (dispatch does not sync them).
    /// When many were created since the last round (thousands of new queue
    /// ids), one `syncfs` of the store's file system replaces an fsync of
    /// each file and its directory.
    pub fn flush_all(&self, least_pages: usize) -> Result<()> {
        let queues = self.all();
        let created: Vec<_> = queues
            .iter()
            .filter_map(|q| q.queue().last_file())
            .filter(|f| f.needs_sync())
            .collect();
        if created.len() >= SYNCFS_THRESHOLD {
            crate::log::mapped_file::sync_file_system(&self.root)?;
            for f in &created {
                f.mark_created_synced();
            }
        }
        for q in queues {
            q.flush(least_pages)?;
        }
        Ok(())
    }
}
