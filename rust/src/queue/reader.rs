//! Reading a consume queue: RocketMQ's `getMessage` (docs/format.md §18.3).
//!
//! ```text
//!  consumequeue units [offset ..]  --(phy, size, tagsCode)-->  CommitLog records
//! ```
//! The tagsCode is only a prefilter; a candidate's stored TAGS string is then
//! compared exactly, so hash collisions ("Aa" vs "BB") never leak.

use std::path::PathBuf;
use std::sync::Arc;

use rustc_hash::FxHashSet;

use crate::log::commitlog::{CommitLog, RecordAt, RecordRead};
use crate::log::message::{
    find_property, java_string_hash, props, RecordFrame, RecordRef, RecordView,
};
use crate::queue::consume_queue::{ConsumeQueue, CqUnit, CQ_UNIT_SIZE};

crate::rocketmq_enum! {
    /// RocketMQ's `GetMessageStatus`, same order.
    pub enum GetStatus {
        /// Messages found.
        Found = 0 => "FOUND",
        /// Units scanned, but none matched the tag filter.
        NoMatchedMessage = 1 => "NO_MATCHED_MESSAGE",
        /// The messages at the offset were deleted by retention.
        MessageWasRemoving = 2 => "MESSAGE_WAS_REMOVING",
        /// No message readable at the offset (yet).
        OffsetFoundNull = 3 => "OFFSET_FOUND_NULL",
        /// The offset lies past the max offset.
        OffsetOverflowBadly = 4 => "OFFSET_OVERFLOW_BADLY",
        /// The offset is the max offset: nothing new.
        OffsetOverflowOne = 5 => "OFFSET_OVERFLOW_ONE",
        /// The offset lies below the min offset.
        OffsetTooSmall = 6 => "OFFSET_TOO_SMALL",
        /// RocketMQ's unknown queue (never returned: it reads as empty).
        NoMatchedLogicQueue = 7 => "NO_MATCHED_LOGIC_QUEUE",
        /// The queue holds no message.
        NoMessageInQueue = 8 => "NO_MESSAGE_IN_QUEUE",
    }
}

/// An exact tag subscription (`None` in [`pull`] means every tag).
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

    /// A filter keeping exactly the records whose TAGS is one of `tags`
    /// (compared as they are: no trimming, `*` is a tag like any other, an
    /// empty list keeps nothing).
    pub fn exact<S: AsRef<str>>(tags: &[S]) -> Self {
        let mut f = TagFilter::default();
        for t in tags {
            f.codes.insert(java_string_hash(t.as_ref()));
            f.tags.insert(t.as_ref().to_owned());
        }
        f
    }

    /// True when a unit's tag hash code may be one of the filter's tags.
    #[inline]
    pub fn matches_code(&self, code: i64) -> bool {
        self.codes.contains(&(code as i32))
    }

    /// True when a record's TAGS property (in `props_raw`) is one of the tags.
    pub fn matches_record(&self, props_raw: &[u8]) -> bool {
        find_property(props_raw, props::TAGS)
            .and_then(|t| std::str::from_utf8(t).ok())
            .is_some_and(|t| self.tags.contains(t))
    }
}

/// Transfer limits of one pull (docs/format.md §18.4 `isTheBatchFull`).
#[derive(Debug, Clone, Copy)]
pub struct TransferLimits {
    /// Bytes a pull serves at most from memory (`max_transfer_bytes_on_message_in_memory`).
    pub max_bytes_in_memory: usize,
    /// Messages a pull serves at most from memory.
    pub max_count_in_memory: usize,
    /// Bytes a pull serves at most from disk (`max_transfer_bytes_on_message_in_disk`).
    pub max_bytes_in_disk: usize,
    /// Messages a pull serves at most from disk.
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

/// A queue unit a pull skipped because what it points at cannot be served:
/// a damaged record (size fields, body CRC), no record at all, or a record
/// that is not this queue's message at this offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// CommitLog offset the unit points at.
    pub phy_offset: i64,
    /// Logical offset of the unit in its queue.
    pub queue_offset: i64,
    /// The CommitLog file holding `phy_offset`, when one does.
    pub path: Option<PathBuf>,
    /// Why the unit is skipped.
    pub reason: &'static str,
}

/// Where a pull puts the messages it serves: each is a checked record of
/// the queue, handed over where it lies in its mapped file, with its frame
/// (its fields are decoded by the sink, those it needs: `RecordRef`, or
/// all of them, [`RecordFrame::view`]). `Vec` (the [`GetResult`] of
/// [`pull`]) decodes and copies each out.
pub trait PullSink {
    /// Takes one message (already checked and filtered).
    fn push(&mut self, frame: RecordFrame, rec: RecordAt);
    /// Messages taken so far.
    fn served(&self) -> usize;
}

impl PullSink for Vec<(RecordView, Vec<u8>)> {
    #[inline]
    fn push(&mut self, frame: RecordFrame, rec: RecordAt) {
        // The frame is this record's (the pull checked it): it decodes.
        if let Some(view) = frame.view(rec.bytes()) {
            self.push((view, rec.bytes().to_vec()));
        }
    }

    fn served(&self) -> usize {
        self.len()
    }
}

/// Transfer limits that leave a pull to its `max_msgs` and `bytes` alone
/// (for reads that serve no network peer, such as columnar ones).
pub fn limits_of_batch(bytes: usize) -> TransferLimits {
    TransferLimits {
        max_bytes_in_memory: bytes,
        max_count_in_memory: usize::MAX,
        max_bytes_in_disk: bytes,
        max_count_in_disk: usize::MAX,
        memory_window: u64::MAX,
    }
}

/// What a pull found (`M`: where its messages went, see [`PullSink`]).
#[derive(Debug, Clone)]
pub struct GetResult<M = Vec<(RecordView, Vec<u8>)>> {
    /// What the pull found.
    pub status: GetStatus,
    /// Where the next pull starts.
    pub next_begin_offset: i64,
    /// The queue's min offset.
    pub min_offset: i64,
    /// The queue's max offset (one past its last message).
    pub max_offset: i64,
    /// The messages: each record's view and bytes (or the sink that took them).
    pub messages: M,
    /// Units skipped as damaged: records that fail the read checks, and
    /// records in a range recovery skipped (`on_corruption="skip"` or
    /// `rocketstore repair`). Queue offsets stay dense: the next pull starts
    /// after them; they are never served.
    pub damaged: Vec<Damage>,
    /// Offsets this pull moved past because retention deleted their
    /// messages: below the queue's min offset (`OFFSET_TOO_SMALL`), or units
    /// pointing below the CommitLog's first file, whatever the status. With
    /// `next_begin_offset > offset`, every offset in between is a message,
    /// skipped, damaged, or (with a tag filter) filtered out.
    pub skipped: u64,
}

/// A pull that found no message: its status, offsets and skipped count.
#[derive(Debug, Clone, Copy)]
struct Empty {
    status: GetStatus,
    next: i64,
    min: i64,
    max: i64,
    skipped: u64,
}

impl Empty {
    fn new(status: GetStatus, next: i64, min: i64, max: i64) -> Self {
        Self {
            status,
            next,
            min,
            max,
            skipped: 0,
        }
    }

    /// `OFFSET_TOO_SMALL`: the pull moves to the min offset, and every
    /// offset below it counts as skipped.
    fn too_small(offset: i64, min: i64, max: i64) -> Self {
        Self {
            skipped: (min - offset).max(0) as u64,
            ..Self::new(GetStatus::OffsetTooSmall, min, min, max)
        }
    }

    fn with<M>(self, messages: M) -> GetResult<M> {
        GetResult {
            status: self.status,
            next_begin_offset: self.next,
            min_offset: self.min,
            max_offset: self.max,
            messages,
            damaged: Vec::new(),
            skipped: self.skipped,
        }
    }
}

/// How a pull treats one unit whose message it could not read.
enum Unreadable {
    /// The CommitLog file expired: skip every unit pointing into it.
    Removed,
    /// Not readable yet (a writer's pending bytes, or a CommitLog file a
    /// read-only store has not adopted): the pull stops before this unit.
    Later,
    /// The unit cannot be served: skip it, count it.
    Damaged(Option<PathBuf>, &'static str),
}

/// Units scanned per pull at least (RocketMQ reads 16000 bytes of units).
const MIN_SCAN_UNITS: usize = 16_000 / CQ_UNIT_SIZE;

/// One pull of a queue, as every layer takes it (the store, the Arrow
/// pull, [`pull`]): built once per call and passed by reference. The
/// required fields come from [`PullRequest::at`], the others are named:
///
/// ```
/// use _native::PullRequest;
/// let req = PullRequest { max_msgs: 8, ..PullRequest::at("orders", 0, 100) }.tags(&["paid"]);
/// assert_eq!((req.offset, req.max_msgs), (100, 8));
/// assert!(req.filter.is_some());
/// ```
#[derive(Debug, Clone, Default)]
pub struct PullRequest<'a> {
    /// The queue's topic.
    pub topic: &'a str,
    /// The queue's id.
    pub queue_id: i32,
    /// The logical offset the pull starts at.
    pub offset: i64,
    /// Messages served at most (RocketMQ's `maxMsgNums`).
    pub max_msgs: usize,
    /// Only messages carrying one of these tags (`None`: every message).
    pub filter: Option<TagFilter>,
    /// Replaces the store's transfer limits (RocketMQ's per-pull caps)
    /// when given.
    pub limits: Option<TransferLimits>,
}

impl<'a> PullRequest<'a> {
    /// Messages a pull serves at most unless told (RocketMQ's default).
    pub const DEFAULT_MAX_MSGS: usize = 32;

    /// A pull of queue `topic`/`queue_id` from `offset`: up to
    /// [`Self::DEFAULT_MAX_MSGS`] messages, every tag, the store's limits.
    pub fn at(topic: &'a str, queue_id: i32, offset: i64) -> Self {
        Self {
            topic,
            queue_id,
            offset,
            max_msgs: Self::DEFAULT_MAX_MSGS,
            filter: None,
            limits: None,
        }
    }

    /// The request with the tag subscription `tags` ([`TagFilter::new`]:
    /// an empty list or `*` means every tag).
    pub fn tags<S: AsRef<str>>(self, tags: &[S]) -> Self {
        Self {
            filter: TagFilter::new(tags),
            ..self
        }
    }
}

/// Pulls up to `req.max_msgs` messages of `cq` from logical `req.offset`.
///
/// `NO_MATCHED_LOGIC_QUEUE` cannot occur here: like RocketMQ 4.9.8, an
/// unknown queue reads as an empty one (`NO_MESSAGE_IN_QUEUE`), except that
/// we create nothing on disk for it.
///
/// A unit whose message cannot be read is never served: the pull skips
/// the units pointing into an expired CommitLog file
/// (`MESSAGE_WAS_REMOVING`), stops before a unit whose message is not
/// readable yet (`follow`: a read-only store first adopts CommitLog files
/// another process created), and skips and reports a unit whose record is
/// damaged (see [`Damage`]). `limits` are the pull's transfer limits
/// (`req.limits` when given).
///
/// `sink` takes each message served.
pub fn pull<S: PullSink>(
    commitlog: &CommitLog,
    cq: Option<&Arc<ConsumeQueue>>,
    req: &PullRequest<'_>,
    limits: &TransferLimits,
    follow: bool,
    mut sink: S,
) -> GetResult<S> {
    let limits = req.limits.as_ref().unwrap_or(limits);
    let (offset, max_msgs, filter) = (req.offset, req.max_msgs, req.filter.as_ref());
    let Some(cq) = cq else {
        return Empty::new(GetStatus::NoMessageInQueue, 0, 0, 0).with(sink);
    };
    let (min, max) = match queue_bounds(cq, offset) {
        Ok(bounds) => bounds,
        Err(r) => return r.with(sink),
    };
    let (budget, chunk) = scan_sizes(max_msgs, filter.is_some());
    let Some(mut units) = cq.units(offset, chunk) else {
        return no_units_at(cq, offset, min, max).with(sink);
    };
    let max_phy = commitlog.max_offset() as i64;
    let mut status = GetStatus::NoMatchedMessage;
    let mut served = 0usize;
    let mut damaged = Vec::new();
    let mut skipped = 0u64;
    // Units pointing below the CommitLog's first file lost their message to
    // retention; they count as skipped whatever the tag filter says.
    let mut phy_min = commitlog.min_offset();
    let mut bytes = 0usize;
    let mut scanned = 0usize;
    let mut next_phy_file_start = i64::MIN;
    let mut refreshed = false;
    let mut pf = None;
    // The CommitLog file of the last record read (see `read_frame_in`).
    let mut rf = None;
    'scan: loop {
        let fetched = units.len();
        for (i, u) in units.iter().enumerate() {
            prefetch_ahead(commitlog, &mut pf, &units, i);
            let in_disk = (max_phy - u.phy_offset).max(0) as u64 > limits.memory_window;
            if limits.batch_full(u.size.max(0) as usize, max_msgs, bytes, served, in_disk) {
                break 'scan;
            }
            scanned += 1;
            if u.phy_offset >= 0 && (u.phy_offset < next_phy_file_start || u.phy_offset < phy_min) {
                skipped += 1;
                if served == 0 {
                    status = GetStatus::MessageWasRemoving;
                }
                continue;
            }
            if let Some(f) = filter {
                if !f.matches_code(u.tags_code) {
                    continue;
                }
            }
            let logical = offset + scanned as i64 - 1;
            if commitlog.is_damaged(u.phy_offset) {
                // Recovery skipped this damaged record; its unit stays so
                // queue offsets stay dense: skip it and count it.
                damaged.push(in_damaged_range(commitlog, u.phy_offset, logical));
                continue;
            }
            let (frame, at) =
                match read_queue_unit(commitlog, cq, u, logical, (follow, &mut refreshed, &mut rf))
                {
                    UnitRead::Message(frame, at) => (frame, at),
                    UnitRead::Damaged(d) => {
                        damaged.push(d);
                        continue;
                    }
                    UnitRead::Removed => {
                        skipped += 1;
                        if served == 0 {
                            status = GetStatus::MessageWasRemoving;
                        }
                        phy_min = commitlog.min_offset();
                        next_phy_file_start =
                            commitlog.roll_next_file(u.phy_offset.max(0) as u64) as i64;
                        continue;
                    }
                    UnitRead::Later => {
                        // Serve what came before; the next pull starts here.
                        scanned -= 1;
                        if served == 0 {
                            status = GetStatus::OffsetFoundNull;
                        }
                        break 'scan;
                    }
                };
            if let Some(f) = filter {
                let props = at.bytes().get(frame.properties());
                if !f.matches_record(props.unwrap_or_default()) {
                    continue;
                }
            }
            bytes += at.len;
            served += 1;
            sink.push(frame, at);
            status = GetStatus::Found;
        }
        let done = served >= max_msgs || scanned >= budget || fetched < chunk;
        match next_chunk(cq, offset + scanned as i64, done, chunk, budget, scanned) {
            Some(more) => units = more,
            None => break,
        }
    }
    GetResult {
        status,
        next_begin_offset: offset + scanned as i64,
        min_offset: min,
        max_offset: max,
        messages: sink,
        damaged,
        skipped,
    }
}

/// How many units ahead of its read a record is prefetched.
const PREFETCH_AHEAD: usize = 4;

/// Hints into the CPU caches the record [`PREFETCH_AHEAD`] units after
/// unit `i` (at `i == 0`, the first ones too), so it is loaded by the time
/// the pull reads it. `file` is the last CommitLog file hinted into.
#[inline]
fn prefetch_ahead(
    commitlog: &CommitLog,
    file: &mut Option<Arc<crate::log::mapped_file::MappedFile>>,
    units: &[CqUnit],
    i: usize,
) {
    if i == 0 {
        for u in units.iter().take(PREFETCH_AHEAD + 1) {
            commitlog.prefetch(file, u.phy_offset, u.size);
        }
    } else if let Some(u) = units.get(i + PREFETCH_AHEAD) {
        commitlog.prefetch(file, u.phy_offset, u.size);
    }
}

/// `(budget, chunk)`: units a pull scans at most, and per read. RocketMQ
/// scans up to 16000 bytes of units per pull. Units are read in chunks:
/// without a tag filter `max_msgs` units usually fill the batch, so decoding
/// 800 units up front would be wasted; more chunks follow while units are
/// skipped (filtered, or their CommitLog file expired).
fn scan_sizes(max_msgs: usize, filtered: bool) -> (usize, usize) {
    let budget = MIN_SCAN_UNITS.max(max_msgs);
    let chunk = if filtered { budget } else { max_msgs };
    (budget, chunk)
}

/// The next chunk of units from `next` for a pull that is not `done`
/// (`scanned` of `budget` units so far); `None` when there are none, or at
/// the end of a consume-queue file: one pull never crosses into the next.
fn next_chunk(
    cq: &ConsumeQueue,
    next: i64,
    done: bool,
    chunk: usize,
    budget: usize,
    scanned: usize,
) -> Option<Vec<CqUnit>> {
    if done || cq.roll_next_file(next - 1) == next {
        return None;
    }
    cq.units(next, chunk.min(budget - scanned))
        .filter(|more| !more.is_empty())
}

/// `(min, max)` offsets of `cq`, or the result of a pull from `offset`
/// outside them (nothing to read there).
fn queue_bounds(cq: &ConsumeQueue, offset: i64) -> Result<(i64, i64), Empty> {
    let min = cq.min_offset_in_queue();
    let max = cq.max_offset_in_queue();
    if max == 0 {
        return Err(Empty::new(GetStatus::NoMessageInQueue, 0, min, max));
    }
    if offset < min {
        return Err(Empty::too_small(offset, min, max));
    }
    if offset == max {
        return Err(Empty::new(GetStatus::OffsetOverflowOne, offset, min, max));
    }
    if offset > max {
        return Err(Empty::new(GetStatus::OffsetOverflowBadly, max, min, max));
    }
    Ok((min, max))
}

/// The result of a pull from `offset` (inside `[min, max)`) that found no
/// units there.
fn no_units_at(cq: &ConsumeQueue, offset: i64, min: i64, max: i64) -> Empty {
    // Retention may have deleted the queue file since the min offset was
    // read: it moves the min offset before it removes a file.
    let min_now = cq.min_offset_in_queue();
    if offset < min_now {
        return Empty::too_small(offset, min_now, max);
    }
    Empty::new(
        GetStatus::OffsetFoundNull,
        cq.roll_next_file(offset),
        min,
        max,
    )
}

/// The damage of a unit at `logical` whose record lies in a damaged range
/// recovery skipped.
fn in_damaged_range(commitlog: &CommitLog, phy_offset: i64, logical: i64) -> Damage {
    Damage {
        phy_offset,
        queue_offset: logical,
        path: commitlog
            .file_for(phy_offset.max(0) as u64)
            .map(|f| f.path().into()),
        reason: "the record is in a damaged range recovery skipped",
    }
}

/// How a pull reads its units' records: whether it follows a writer
/// (read-only stores), whether it adopted new CommitLog files already, and
/// the CommitLog file of its last read.
type ReadState<'a> = (
    bool,
    &'a mut bool,
    &'a mut Option<Arc<crate::log::mapped_file::MappedFile>>,
);

/// What a pull finds at a unit: its message, or why it serves none.
enum UnitRead {
    /// This queue's message at the unit's logical offset.
    Message(RecordFrame, RecordAt),
    /// A damaged record, or another queue's message.
    Damaged(Damage),
    /// The record's CommitLog file expired.
    Removed,
    /// Not readable yet.
    Later,
}

/// Reads the record unit `u` (at `logical`) points at ([`read_unit`]) and
/// checks it is this queue's message ([`this_queues_message`]).
fn read_queue_unit(
    commitlog: &CommitLog,
    cq: &ConsumeQueue,
    u: &CqUnit,
    logical: i64,
    read: ReadState<'_>,
) -> UnitRead {
    let damage = |path, reason| Damage {
        phy_offset: u.phy_offset,
        queue_offset: logical,
        path,
        reason,
    };
    match read_unit(commitlog, u.phy_offset, u.size, read) {
        Ok((frame, at)) => {
            match this_queues_message(commitlog, cq, u.phy_offset, logical, &frame, at.bytes()) {
                Ok(()) => UnitRead::Message(frame, at),
                Err((path, reason)) => UnitRead::Damaged(damage(path, reason)),
            }
        }
        Err(Unreadable::Removed) => UnitRead::Removed,
        Err(Unreadable::Later) => UnitRead::Later,
        Err(Unreadable::Damaged(path, reason)) => UnitRead::Damaged(damage(path, reason)),
    }
}

/// A damaged unit can point at another valid record of the right size:
/// a record is delivered only if it is this queue's message at this logical
/// offset. (5.x multi-dispatch messages sit in several queues at other
/// offsets; they are taken as the unit says.)
fn this_queues_message(
    commitlog: &CommitLog,
    cq: &ConsumeQueue,
    phy_offset: i64,
    logical: i64,
    frame: &RecordFrame,
    raw: &[u8],
) -> Result<(), (Option<PathBuf>, &'static str)> {
    let rec = RecordRef::new(raw, *frame);
    if (rec.queue_id() != Some(cq.queue_id())
        || rec.queue_offset() != Some(logical)
        || rec.topic() != cq.topic().as_bytes())
        && find_property(rec.properties(), "INNER_MULTI_DISPATCH").is_none()
    {
        let path = commitlog
            .file_for(phy_offset as u64)
            .map(|f| f.path().into());
        Err((path, "the record there is another queue's message"))
    } else {
        Ok(())
    }
}

/// Reads the message a unit points at, or says why it cannot be served.
/// `follow` (read-only stores): a unit past the CommitLog files known here
/// makes the CommitLog adopt new files once per pull (`refreshed`) before it
/// is judged; a writer makes a record readable before its unit is visible.
fn read_unit(
    commitlog: &CommitLog,
    phy: i64,
    size: i32,
    (follow, refreshed, file): ReadState<'_>,
) -> Result<(RecordFrame, RecordAt), Unreadable> {
    let Ok(at) = u64::try_from(phy) else {
        return Err(Unreadable::Damaged(None, "negative CommitLog offset"));
    };
    loop {
        return match commitlog.read_frame_in(file, at) {
            RecordRead::Found(v, raw) if v.total_size() as i64 == size as i64 => Ok((v, raw)),
            RecordRead::Found(v, _) => Err(Unreadable::Damaged(
                commitlog.file_for(at).map(|f| f.path().into()),
                if (v.total_size() as i64) < size as i64 {
                    "the unit's size is larger than the record there"
                } else {
                    "the unit's size is smaller than the record there"
                },
            )),
            RecordRead::NoFile if phy < commitlog.min_offset() => Err(Unreadable::Removed),
            RecordRead::NoFile if follow && !*refreshed => {
                *refreshed = true;
                if let Err(e) = commitlog.refresh() {
                    log::warn!("cannot follow the CommitLog: {e}");
                    return Err(Unreadable::Later);
                }
                continue;
            }
            RecordRead::NoFile => {
                // Past the last CommitLog file. A read-only store may see the
                // unit of a file still being created: wait for it when it is
                // the next file; anything further cannot be real.
                let next_end = commitlog
                    .queue()
                    .last_file()
                    .map(|f| f.file_from_offset() + 2 * f.file_size() as u64)
                    .unwrap_or(0);
                if follow && (at < next_end || commitlog.min_offset() < 0) {
                    Err(Unreadable::Later)
                } else {
                    Err(Unreadable::Damaged(
                        None,
                        "the unit points past the end of the CommitLog",
                    ))
                }
            }
            RecordRead::NotYet => Err(Unreadable::Later),
            RecordRead::NoRecord => Err(Unreadable::Damaged(
                commitlog.file_for(at).map(|f| f.path().into()),
                "no record starts where the unit points",
            )),
            RecordRead::Damaged { path, reason } => Err(Unreadable::Damaged(Some(path), reason)),
        };
    }
}
