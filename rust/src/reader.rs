//! Reading a consume queue: RocketMQ's `getMessage` (SPEC §2.5).
//!
//! ```text
//!  consumequeue units [offset ..]  --(phy, size, tagsCode)-->  CommitLog records
//! ```
//! The tagsCode is only a prefilter; a candidate's stored TAGS string is then
//! compared exactly, so hash collisions ("Aa" vs "BB") never leak.

use std::sync::Arc;

use rustc_hash::FxHashSet;

use crate::commitlog::CommitLog;
use crate::consume_queue::{ConsumeQueue, CQ_UNIT_SIZE};
use crate::message::{find_property, java_string_hash, props, RecordView};

/// RocketMQ's `GetMessageStatus`, same order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum GetStatus {
    Found = 0,
    NoMatchedMessage = 1,
    MessageWasRemoving = 2,
    OffsetFoundNull = 3,
    OffsetOverflowBadly = 4,
    OffsetOverflowOne = 5,
    OffsetTooSmall = 6,
    NoMatchedLogicQueue = 7,
    NoMessageInQueue = 8,
}

/// An exact tag subscription (`None` in [`get_message`] means every tag).
#[derive(Debug, Clone, Default)]
pub struct TagFilter {
    codes: FxHashSet<i32>,
    tags: FxHashSet<String>,
}

impl TagFilter {
    /// A filter over `tags`; `None` when the list means "everything"
    /// (empty, or containing `*`).
    pub fn new<S: AsRef<str>>(tags: &[S]) -> Option<Self> {
        let mut f = TagFilter::default();
        for t in tags {
            let t = t.as_ref().trim();
            if t == "*" {
                return None;
            }
            if !t.is_empty() {
                f.codes.insert(java_string_hash(t));
                f.tags.insert(t.to_owned());
            }
        }
        if f.tags.is_empty() {
            None
        } else {
            Some(f)
        }
    }

    #[inline]
    fn matches_code(&self, code: i64) -> bool {
        self.codes.contains(&(code as i32))
    }

    fn matches_record(&self, props_raw: &[u8]) -> bool {
        find_property(props_raw, props::TAGS)
            .and_then(|t| std::str::from_utf8(t).ok())
            .is_some_and(|t| self.tags.contains(t))
    }
}

/// Transfer limits of one pull (SPEC §2.5 `isTheBatchFull`).
#[derive(Debug, Clone, Copy)]
pub struct TransferLimits {
    pub max_bytes_in_memory: usize,
    pub max_count_in_memory: usize,
    pub max_bytes_in_disk: usize,
    pub max_count_in_disk: usize,
    /// A message further than this many bytes behind the CommitLog end
    /// counts as "in disk" (`totalPhysicalRAM * accessMessageInMemoryMaxRatio`).
    pub memory_window: u64,
}

impl TransferLimits {
    fn batch_full(
        &self,
        size: usize,
        max_msgs: usize,
        bytes: usize,
        count: usize,
        in_disk: bool,
    ) -> bool {
        if bytes == 0 || count == 0 {
            return false; // the first message always fits
        }
        if max_msgs <= count {
            return true;
        }
        let (max_bytes, max_count) = if in_disk {
            (self.max_bytes_in_disk, self.max_count_in_disk)
        } else {
            (self.max_bytes_in_memory, self.max_count_in_memory)
        };
        bytes + size > max_bytes || count + 1 > max_count
    }
}

/// Physical memory of the machine in bytes.
pub fn total_physical_memory() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages > 0 && size > 0 {
        pages as u64 * size as u64
    } else {
        8 << 30
    }
}

/// What a pull found.
#[derive(Debug, Clone)]
pub struct GetResult {
    pub status: GetStatus,
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
    pub messages: Vec<(RecordView, Vec<u8>)>,
    /// Units skipped because their record lies in a damaged range that
    /// recovery skipped (`on_corruption="skip"` or `rocketstore repair`).
    pub damaged: u64,
}

impl GetResult {
    fn empty(status: GetStatus, next: i64, min: i64, max: i64) -> Self {
        Self {
            status,
            next_begin_offset: next,
            min_offset: min,
            max_offset: max,
            messages: Vec::new(),
            damaged: 0,
        }
    }
}

/// Units scanned per pull at least (RocketMQ reads 16000 bytes of units).
const MIN_SCAN_UNITS: usize = 16_000 / CQ_UNIT_SIZE;

/// Pulls up to `max_msgs` messages of `cq` from logical `offset`.
///
/// `NO_MATCHED_LOGIC_QUEUE` cannot occur here: like RocketMQ 4.9.8, an
/// unknown queue reads as an empty one (`NO_MESSAGE_IN_QUEUE`), except that
/// we create nothing on disk for it.
pub fn get_message(
    commitlog: &CommitLog,
    cq: Option<&Arc<ConsumeQueue>>,
    offset: i64,
    max_msgs: usize,
    filter: Option<&TagFilter>,
    limits: &TransferLimits,
) -> GetResult {
    let Some(cq) = cq else {
        return GetResult::empty(GetStatus::NoMessageInQueue, 0, 0, 0);
    };
    let min = cq.min_offset_in_queue();
    let max = cq.max_offset_in_queue();
    if max == 0 {
        return GetResult::empty(GetStatus::NoMessageInQueue, 0, min, max);
    }
    if offset < min {
        return GetResult::empty(GetStatus::OffsetTooSmall, min, min, max);
    }
    if offset == max {
        return GetResult::empty(GetStatus::OffsetOverflowOne, offset, min, max);
    }
    if offset > max {
        return GetResult::empty(GetStatus::OffsetOverflowBadly, max, min, max);
    }
    // RocketMQ scans up to 16000 bytes of units per pull. Units are read in
    // chunks: without a tag filter `max_msgs` units usually fill the batch,
    // so decoding 800 units up front would be wasted; more chunks follow
    // while units are skipped (filtered, or their CommitLog file expired).
    let budget = MIN_SCAN_UNITS.max(max_msgs);
    let chunk = if filter.is_some() { budget } else { max_msgs };
    let Some(mut units) = cq.units(offset, chunk) else {
        return GetResult::empty(
            GetStatus::OffsetFoundNull,
            cq.roll_next_file(offset),
            min,
            max,
        );
    };
    let max_phy = commitlog.max_offset() as i64;
    let mut status = GetStatus::NoMatchedMessage;
    let mut messages = Vec::with_capacity(max_msgs.min(units.len()));
    let mut bytes = 0usize;
    let mut scanned = 0usize;
    let mut next_phy_file_start = i64::MIN;
    let mut damaged = 0u64;
    'scan: loop {
        let fetched = units.len();
        for u in &units {
            let in_disk = (max_phy - u.phy_offset).max(0) as u64 > limits.memory_window;
            if limits.batch_full(
                u.size.max(0) as usize,
                max_msgs,
                bytes,
                messages.len(),
                in_disk,
            ) {
                break 'scan;
            }
            scanned += 1;
            if u.phy_offset < next_phy_file_start {
                continue;
            }
            if let Some(f) = filter {
                if !f.matches_code(u.tags_code) {
                    continue;
                }
            }
            if commitlog.is_damaged(u.phy_offset) {
                // Recovery skipped this damaged record; its unit stays so
                // queue offsets stay dense: skip it and count it.
                damaged += 1;
                continue;
            }
            let Some((view, raw)) = commitlog.read_record_sized(u.phy_offset, u.size) else {
                if messages.is_empty() {
                    status = GetStatus::MessageWasRemoving;
                }
                next_phy_file_start = commitlog.roll_next_file(u.phy_offset.max(0) as u64) as i64;
                continue;
            };
            // A damaged unit can point at another valid record of the right
            // size: deliver a record only if it is this queue's message at
            // this logical offset.
            let logical = offset + scanned as i64 - 1;
            // (5.x multi-dispatch messages sit in several queues at other
            // offsets; they are taken as the unit says.)
            if (view.queue_id != cq.queue_id()
                || view.queue_offset != logical
                || &raw[view.topic.clone()] != cq.topic().as_bytes())
                && find_property(&raw[view.properties.clone()], "INNER_MULTI_DISPATCH").is_none()
            {
                continue;
            }
            if let Some(f) = filter {
                if !f.matches_record(&raw[view.properties.clone()]) {
                    continue;
                }
            }
            bytes += raw.len();
            messages.push((view, raw));
            status = GetStatus::Found;
        }
        let next = offset + scanned as i64;
        // One pull never crosses into the next consume-queue file.
        if messages.len() >= max_msgs
            || scanned >= budget
            || fetched < chunk
            || cq.roll_next_file(next - 1) == next
        {
            break;
        }
        match cq.units(next, chunk.min(budget - scanned)) {
            Some(more) if !more.is_empty() => units = more,
            _ => break,
        }
    }
    GetResult {
        status,
        next_begin_offset: offset + scanned as i64,
        min_offset: min,
        max_offset: max,
        messages,
        damaged,
    }
}
