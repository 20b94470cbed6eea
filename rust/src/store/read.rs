//! Reads: pulls of a queue, lookups by CommitLog offset and by key, and,
//! for read-only stores, following the writer's files.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::Store;
use crate::error::{Result, StoreError};
use crate::log::commitlog::RecordRead;
use crate::log::message::{
    decode_msg_id, find_properties, is_valid_topic, props, topic_problem, RecordFrame, RecordRef,
    RecordView,
};
use crate::queue::consume_queue::ConsumeQueue;
use crate::queue::reader::{
    pull, Damage as UnitDamage, GetResult, PullRequest, PullSink, TransferLimits,
};

/// Damaged records remembered for "log once"; beyond this many, new ones are
/// still logged but no longer remembered.
const DAMAGE_LOG_MEMORY: usize = 65_536;

/// Read-only stores: least time between two looks for new queue
/// directories made by pulls of an unknown queue.
const FOLLOW_NEW_QUEUES_EVERY: Duration = Duration::from_millis(5);

/// The index's time unit: an entry keeps whole seconds (docs/format.md §19).
const INDEX_TIME_UNIT_MS: i64 = 1000;

/// `(queue_id, queue_offset)` of the messages an index search found, and
/// how many records it pointed at were damaged.
pub type KeyHits = (Vec<(i32, i64)>, u64);

impl Store {
    // -- reads ---------------------------------------------------------------

    /// Pulls up to `max_msgs` messages of a queue from `offset`
    /// (docs/format.md §18.3): [`Store::pull`] of
    /// `PullRequest { max_msgs, ..PullRequest::at(topic, queue_id, offset) }`
    /// with the tags `tags`, into a `Vec`.
    pub fn get_message(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msgs: usize,
        tags: Option<&[String]>,
    ) -> Result<GetResult> {
        let mut req = PullRequest {
            max_msgs,
            ..PullRequest::at(topic, queue_id, offset)
        };
        if let Some(tags) = tags {
            req = req.tags(tags);
        }
        let limits = req.limits.as_ref().unwrap_or(&self.limits);
        let sink = Vec::with_capacity(max_msgs.min(limits.max_count_in_memory).min(1024));
        self.pull(&req, sink)
    }

    /// The pull `req` into `sink` (see [`PullSink`]): visibility, the
    /// read-only store's following of the writer, the pull itself
    /// ([`crate::queue::reader::pull`], with the store's transfer limits
    /// unless `req.limits` names others), and the accounting of damaged records and
    /// messages served.
    pub fn pull<S: PullSink>(&self, req: &PullRequest<'_>, sink: S) -> Result<GetResult<S>> {
        self.pull_within(req, &self.limits, sink)
    }

    /// [`Store::pull`] with `limits` as the transfer limits of a request
    /// that names none (the Arrow pull's are those of one batch).
    pub(crate) fn pull_within<S: PullSink>(
        &self,
        req: &PullRequest<'_>,
        limits: &TransferLimits,
        sink: S,
    ) -> Result<GetResult<S>> {
        self.check_open()?;
        self.await_visible()?;
        let (topic, queue_id) = (req.topic, req.queue_id);
        let mut cq = self.cqs.get(topic, queue_id);
        let follow = self.opts.read_only;
        if follow
            && cq
                .as_ref()
                .map_or(true, |q| req.offset >= q.max_offset_in_queue())
        {
            cq = self.follow_queue(topic, queue_id, cq)?;
        }
        let r = pull(&self.commitlog, cq.as_ref(), req, limits, follow, sink);
        if !r.damaged.is_empty() {
            self.log_damage(topic, queue_id, &r.damaged);
        }
        self.count_get(r.messages.served());
        Ok(r)
    }

    /// Read-only stores: a pull that reached the end of what this process
    /// knows of a queue first picks up what the writer appended to it (a
    /// queue unknown here: new queue directories, at most every 5 ms).
    fn follow_queue(
        &self,
        topic: &str,
        queue_id: i32,
        cq: Option<Arc<ConsumeQueue>>,
    ) -> Result<Option<Arc<ConsumeQueue>>> {
        if let Some(q) = cq {
            if q.may_have_grown() {
                let before = q.max_offset_in_queue();
                let min = self.commitlog.min_offset();
                let mut after = q.refresh(min, Some(self.commitlog.max_offset() as i64))?;
                if q.may_have_grown() {
                    // A unit past the records known here: follow the
                    // CommitLog first (a unit is appended after its record).
                    self.commitlog.refresh()?;
                    after = q.refresh(min, Some(self.commitlog.max_offset() as i64))?;
                }
                if after != before {
                    self.dispatcher.bump_seq();
                }
            }
            return Ok(Some(q));
        }
        let now = self.opened.elapsed().as_micros() as u64;
        let last = self.last_follow_us.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= FOLLOW_NEW_QUEUES_EVERY.as_micros() as u64
            && self
                .last_follow_us
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.refresh()?;
        }
        Ok(self.cqs.get(topic, queue_id))
    }

    /// Logs each damaged record a pull skipped, once per record.
    fn log_damage(&self, topic: &str, queue_id: i32, damaged: &[UnitDamage]) {
        let mut seen = self.damage_logged.lock();
        for d in damaged {
            if seen.contains(&d.phy_offset) {
                continue;
            }
            if seen.len() < DAMAGE_LOG_MEMORY {
                seen.insert(d.phy_offset);
            }
            let file = d.path.as_ref().map_or_else(
                || "no CommitLog file".to_owned(),
                |p| p.display().to_string(),
            );
            log::warn!(
                "skipped a damaged message of {topic}/{queue_id} at queue offset {}: \
                 {} ({file}, CommitLog offset {})",
                d.queue_offset,
                d.reason,
                d.phy_offset
            );
        }
    }

    /// The message whose record starts at CommitLog offset `phy`, as a read
    /// sees it: after acknowledged puts became visible, and only below the
    /// visibility horizon; `None` when no record starts there. A damaged
    /// record (body CRC, size fields) is an error naming its file and
    /// offset, never a message.
    pub fn look_message_by_offset(&self, phy: u64) -> Result<Option<(RecordView, Vec<u8>)>> {
        self.check_open()?;
        self.await_visible()?;
        self.read_visible_record(phy, self.visible_end())
    }

    /// The message with offset message id `msg_id` (store host and
    /// CommitLog offset, 32 or 56 hex digits), as
    /// [`Store::look_message_by_offset`] finds it: `None` when no record
    /// starts there or its store host is another. A string that is no
    /// offset message id is an `InvalidArgument`.
    pub fn look_message_by_id(&self, msg_id: &str) -> Result<Option<(RecordView, Vec<u8>)>> {
        self.check_open()?;
        let Some((host, off)) = decode_msg_id(msg_id) else {
            return Err(StoreError::InvalidArgument(format!(
                "{msg_id:?} is not an offset message id (32 or 56 hex digits)"
            )));
        };
        if off < 0 {
            return Ok(None);
        }
        Ok(self
            .look_message_by_offset(off as u64)?
            .filter(|(view, _)| view.store_host == host))
    }

    /// Checks a topic given to a read. A topic that fails the put rule is
    /// refused (an `InvalidArgument`) only when the store does not hold it:
    /// a name that could never have been written is a mistake better
    /// reported at once (a consumer would otherwise poll nothing forever),
    /// while a topic that exists on disk is always readable.
    pub fn check_read_topic(&self, topic: &str) -> Result<()> {
        if is_valid_topic(topic) {
            return Ok(());
        }
        self.check_open()?;
        let exists = !self.consume_queues().queue_ids(topic).is_empty()
            || self
                .commitlog()
                .queue_offsets()
                .entries()
                .iter()
                .any(|(t, _, _)| t == topic);
        if exists {
            return Ok(());
        }
        let why = topic_problem(topic).unwrap_or_default();
        Err(StoreError::InvalidArgument(format!(
            "{why}, and the store holds no such topic"
        )))
    }

    /// Messages carrying `key` stored in `[begin, end]` (ms, both
    /// included, exact to the millisecond), ascending by offset, hash
    /// collisions filtered out (docs/format.md §19.3: up to three rounds).
    pub fn query_message(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin: i64,
        end: i64,
    ) -> Result<Vec<(RecordView, Vec<u8>)>> {
        let found = self.query_frames(topic, key, max_num, begin, end)?;
        Ok(found
            .into_iter()
            .filter_map(|(f, raw)| Some((f.view(&raw)?, raw)))
            .collect())
    }

    /// [`Store::query_message`] with each message as its record's frame
    /// and bytes (its fields decoded by whoever reads them: `RecordRef`).
    pub fn query_frames(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin: i64,
        end: i64,
    ) -> Result<Vec<(RecordFrame, Vec<u8>)>> {
        let key = KeyLookup::of(topic, key);
        self.query_key(&key, max_num, begin, end)
    }

    /// Starts loading what a lookup of `key` reads first (its hash slot in
    /// the newest index file), so the caller's work before the lookup
    /// overlaps that cache miss; returns the key for
    /// [`Store::query_key`].
    pub fn prefetch_key<'k>(&self, topic: &'k str, key: &'k str) -> KeyLookup<'k> {
        let key = KeyLookup::of(topic, key);
        if let Some(index) = &self.index {
            index.prefetch_key(key.hash);
        }
        key
    }

    /// [`Store::query_frames`] of a key whose hash is computed
    /// ([`Store::prefetch_key`]).
    pub fn query_key(
        &self,
        lookup: &KeyLookup<'_>,
        max_num: usize,
        begin: i64,
        end: i64,
    ) -> Result<Vec<(RecordFrame, Vec<u8>)>> {
        let (topic, key) = (lookup.topic, lookup.key);
        self.check_open()?;
        if let Some(e) = &self.index_error {
            return Err(StoreError::Mismatch(format!(
                "key queries are refused: {e}"
            )));
        }
        let Some(index) = &self.index else {
            return Ok(Vec::new());
        };
        self.await_visible()?;
        let visible = self.visible_end();
        let mut out: Vec<(RecordFrame, Vec<u8>)> = Vec::with_capacity(max_num.min(4));
        // A found message's PHYSICALOFFSET field (the results' order).
        let phy_of = |(f, raw): &(RecordFrame, Vec<u8>)| {
            RecordRef::new(raw, *f).physical_offset().unwrap_or(-1)
        };
        // The index keeps whole seconds since its file's begin (an entry of a
        // message stored at T reads as a time in (T - 1000, T]): the search
        // starts a second early and the records' own store timestamps (ms)
        // decide (docs/format.md §19.3).
        let index_begin = if begin > 0 {
            begin.saturating_sub(INDEX_TIME_UNIT_MS - 1)
        } else {
            begin
        };
        let mut index_end = end;
        for _round in 0..3 {
            let mut r = index.query_hashed(lookup.hash, max_num, index_begin, index_end);
            // Sorted in place (the collision round below only takes their
            // minimum timestamp, and emptiness survives the dedup).
            r.phy_offsets.sort_unstable();
            r.phy_offsets.dedup();
            // The records lie anywhere in the CommitLog: their loads start
            // together, before the first is read.
            let mut file = None;
            for &off in &r.phy_offsets {
                self.commitlog.prefetch(&mut file, off, QUERY_PREFETCH);
            }
            for &off in &r.phy_offsets {
                let Ok(off) = u64::try_from(off) else {
                    continue;
                };
                if out.iter().any(|m| phy_of(m) == off as i64) {
                    continue;
                }
                if let Some((f, raw)) = self.read_visible_frame(off, visible)? {
                    let rec = RecordRef::new(&raw, f);
                    let stored = rec.store_timestamp().unwrap_or(i64::MIN);
                    if carries_key(&rec, topic, key) && (begin..=end).contains(&stored) {
                        out.push((f, raw));
                    }
                }
            }
            if !out.is_empty() || r.phy_offsets.is_empty() {
                break;
            }
            // Everything found was a hash collision: look further back.
            let Some(first_ts) = r
                .phy_offsets
                .iter()
                .filter_map(|o| self.commitlog.store_timestamp_at(*o))
                .min()
            else {
                break;
            };
            if first_ts <= begin || first_ts >= index_end {
                break;
            }
            index_end = first_ts - 1;
        }
        out.sort_by_key(phy_of);
        out.truncate(max_num);
        Ok(out)
    }

    /// Every message of `topic` whose UNIQ_KEY or KEYS holds `key`, by the
    /// index, with no cap (unlike [`Store::query_message`]): `(queue_id,
    /// queue_offset)` ascending by CommitLog offset, and how many records
    /// the index pointed at were damaged (skipped, as a scan skips them).
    /// `None` when the store has no usable index.
    pub fn key_hits(&self, topic: &str, key: &str) -> Result<Option<KeyHits>> {
        self.check_open()?;
        if self.index_error.is_some() {
            return Ok(None);
        }
        let Some(index) = &self.index else {
            return Ok(None);
        };
        self.await_visible()?;
        let visible = self.visible_end();
        let built = crate::index::index_file::build_key(topic, key);
        let mut offsets = Vec::new();
        for f in index.files() {
            f.select_phy_offsets(&mut offsets, &built, usize::MAX, 0, i64::MAX);
        }
        offsets.sort_unstable();
        offsets.dedup();
        let (mut hits, mut damaged) = (Vec::new(), 0u64);
        for off in offsets {
            let Ok(off) = u64::try_from(off) else {
                continue;
            };
            match self.read_visible_frame(off, visible) {
                Ok(Some((f, raw))) => {
                    let rec = RecordRef::new(&raw, f);
                    if carries_key(&rec, topic, key) {
                        let (qid, qoff) = (rec.queue_id(), rec.queue_offset());
                        hits.push((qid.unwrap_or(-1), qoff.unwrap_or(-1)));
                    }
                }
                Ok(None) => {}
                Err(StoreError::Corrupted { .. }) => damaged += 1,
                Err(e) => return Err(e),
            }
        }
        Ok(Some((hits, damaged)))
    }

    /// The CommitLog range `[begin, end)` the index covers: from its first
    /// entry's record to the end of its last entry's record (`None` without
    /// a usable index, or an empty one). Records starting outside it may
    /// carry keys the index does not know.
    pub fn index_coverage(&self) -> Option<(i64, i64)> {
        if self.index_error.is_some() {
            return None;
        }
        let files: Vec<_> = self
            .index
            .as_ref()?
            .files()
            .into_iter()
            .filter(|f| f.index_count() > 1)
            .collect();
        let begin = files.first()?.begin_phy_offset();
        let last = files.last()?.end_phy_offset();
        let size = u64::try_from(last)
            .ok()
            .and_then(|o| match self.commitlog.read_checked(o) {
                RecordRead::Found(v, _) => Some(v.total_size as i64),
                _ => None,
            })
            .unwrap_or(1);
        Some((begin, last + size))
    }

    /// The record at `offset`, if it lies wholly below the visibility
    /// horizon `visible` (see [`Store::visible_end`]); a damaged record is an
    /// error naming its file and offset.
    pub fn read_visible_record(
        &self,
        offset: u64,
        visible: u64,
    ) -> Result<Option<(RecordView, Vec<u8>)>> {
        let Some((f, raw)) = self.read_visible_frame(offset, visible)? else {
            return Ok(None);
        };
        match f.view(&raw) {
            Some(v) => Ok(Some((v, raw))),
            None => Err(StoreError::corrupted(
                "CommitLog",
                offset,
                "field outside the record",
            )),
        }
    }

    /// [`Store::read_visible_record`] with the record's frame (its fields
    /// not decoded).
    pub fn read_visible_frame(
        &self,
        offset: u64,
        visible: u64,
    ) -> Result<Option<(RecordFrame, Vec<u8>)>> {
        match self.commitlog.read_frame_at(offset) {
            RecordRead::Found(f, at) => {
                let end = offset + f.total_size() as u64;
                let raw = at.bytes().to_vec();
                if end > visible && self.opts.read_only && self.commitlog.refresh()? {
                    // Read-only: the writer may have appended it since.
                    let visible = self.visible_end();
                    return Ok(Some((f, raw)).filter(|_| end <= visible));
                }
                Ok(Some((f, raw)).filter(|_| end <= visible))
            }
            RecordRead::Damaged { path, reason } => {
                Err(StoreError::corrupted(path, offset, reason))
            }
            RecordRead::NoFile | RecordRead::NotYet | RecordRead::NoRecord => Ok(None),
        }
    }

    /// Read-only stores: follows the writer (new files, new records, new
    /// queue units). Returns true when new messages became visible.
    pub fn refresh(&self) -> Result<bool> {
        self.check_open()?;
        if !self.opts.read_only {
            return Ok(false);
        }
        let log_moved = self.commitlog.refresh()?;
        if let Some(i) = &self.index {
            i.refresh()?;
        }
        let changed = self.cqs.refresh(
            self.commitlog.min_offset(),
            Some(self.commitlog.max_offset() as i64),
        )?;
        // The CommitLog moving alone also wakes waiters: a pull that stopped
        // before a unit whose CommitLog file was not adopted yet retries.
        if changed || log_moved {
            self.dispatcher.bump_seq();
        }
        Ok(changed)
    }

    /// Waits (up to `timeout`) for the dispatch sequence to move past `seen`.
    /// Read-only stores poll the files every few milliseconds instead.
    pub fn wait_for_dispatch(&self, seen: u64, timeout: Duration) -> Result<u64> {
        self.check_open()?;
        if !self.opts.read_only {
            return Ok(self.dispatcher.wait_for_seq(seen, timeout));
        }
        let deadline = std::time::Instant::now() + timeout;
        loop {
            self.refresh()?;
            let s = self.dispatcher.seq();
            if s != seen || std::time::Instant::now() >= deadline {
                return Ok(s);
            }
            std::thread::sleep(Duration::from_millis(5).min(deadline - std::time::Instant::now()));
        }
    }
}

/// A key to look up: its topic and text, and the hash the index walk
/// compares (`index_key_hash_of`, computed once).
#[derive(Debug, Clone, Copy)]
pub struct KeyLookup<'k> {
    topic: &'k str,
    key: &'k str,
    hash: i32,
}

impl<'k> KeyLookup<'k> {
    /// The lookup of `key` in `topic`.
    pub fn of(topic: &'k str, key: &'k str) -> Self {
        Self {
            topic,
            key,
            hash: crate::index::index_file::index_key_hash_of(topic, key),
        }
    }
}

/// Bytes of each record a key query prefetches: the index does not hold
/// a record's size; a record with a 100-byte body, a key and a tag is
/// about 240 bytes.
const QUERY_PREFETCH: i32 = 256;

/// True when the record is of `topic` and carries `key` (UNIQ_KEY or a KEYS token).
fn carries_key(rec: &RecordRef<'_>, topic: &str, key: &str) -> bool {
    if rec.topic() != topic.as_bytes() {
        return false;
    }
    let [uniq, keys] = find_properties(rec.properties(), [props::UNIQ_KEY, props::KEYS]);
    uniq == Some(key.as_bytes())
        || keys.is_some_and(|k| k.split(|&b| b == b' ').any(|t| t == key.as_bytes()))
}
