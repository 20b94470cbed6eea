//! The CommitLog: every message of every topic, appended to one queue of
//! mapped files (SPEC §1).
//!
//! ```text
//!  file k: [record][record]...[record][size|CBD43194 blank ........]
//!  file k+1: [record]...                      (message retried here)
//! ```
//! A record is written only if at least 8 bytes remain after it, so every
//! full file ends with an 8-byte blank header. One put lock serialises
//! appends; it also owns the queue-offset table (`topic-queueId` → next
//! logical offset). The store timestamp is taken under that lock.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use crate::error::{Result, StoreError};
use crate::mapped_file::{MappedFile, Reserve};
use crate::mapped_file_queue::MappedFileQueue;
use crate::message::{
    self, body_crc, compressed_body_problem, encode_blank, encode_v1, find_property, parse_record,
    props, record_len, sys_flag_problem, sysflag, topic_problem, MessageSpec, Parsed,
    PropertiesBuilder, RecordView, END_FILE_MIN_BLANK_LENGTH, MAX_PROPERTIES_LEN, SCHEDULE_TOPIC,
};
use crate::ratelog::RateLimited;

/// Result status of a put (RocketMQ's `PutMessageStatus`, same order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PutStatus {
    PutOk = 0,
    FlushDiskTimeout = 1,
    FlushSlaveTimeout = 2,
    SlaveNotAvailable = 3,
    ServiceNotAvailable = 4,
    CreateMappedFileFailed = 5,
    MessageIllegal = 6,
    PropertiesSizeExceeded = 7,
    OsPageCacheBusy = 8,
    UnknownError = 9,
}

/// What a put did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutOutcome {
    pub status: PutStatus,
    pub wrote_offset: i64,
    pub wrote_bytes: i32,
    pub queue_offset: i64,
    pub store_timestamp: i64,
    /// Why the put was not `PUT_OK` (a short sentence naming the field and
    /// the rule); `None` when it was. Built only on the refusal path.
    pub reason: Option<String>,
}

impl PutOutcome {
    /// A rejected put: nothing written.
    pub fn rejected(refused: Refused) -> Self {
        Self {
            status: refused.status,
            wrote_offset: -1,
            wrote_bytes: 0,
            queue_offset: -1,
            store_timestamp: 0,
            reason: Some(refused.reason),
        }
    }
}

/// A put refused before anything was written: the status and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: PutStatus,
    pub reason: String,
}

impl Refused {
    pub fn new(status: PutStatus, reason: impl Into<String>) -> Self {
        Self {
            status,
            reason: reason.into(),
        }
    }

    /// `MESSAGE_ILLEGAL` because of `reason`.
    pub fn illegal(reason: impl Into<String>) -> Self {
        Self::new(PutStatus::MessageIllegal, reason)
    }
}

/// Format-relevant CommitLog settings.
#[derive(Debug, Clone)]
pub struct CommitLogConfig {
    pub dir: PathBuf,
    pub file_size: usize,
    pub max_message_size: usize,
    pub store_host: SocketAddr,
    /// Delay per level in ms (index 0 = level 1).
    pub delay_levels: Vec<i64>,
}

/// Milliseconds since the Unix epoch.
#[inline]
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `topic -> queue id -> next queue offset`.
#[derive(Debug, Default, Clone)]
pub struct QueueOffsetTable {
    map: FxHashMap<String, FxHashMap<i32, i64>>,
}

impl QueueOffsetTable {
    #[inline]
    pub fn get(&self, topic: &str, queue_id: i32) -> i64 {
        self.map
            .get(topic)
            .and_then(|q| q.get(&queue_id))
            .copied()
            .unwrap_or(0)
    }

    /// The entry of `topic-queue_id`, created at 0.
    #[inline]
    pub fn slot(&mut self, topic: &str, queue_id: i32) -> &mut i64 {
        if !self.map.contains_key(topic) {
            self.map.insert(topic.to_owned(), FxHashMap::default());
        }
        self.map
            .get_mut(topic)
            .expect("inserted above")
            .entry(queue_id)
            .or_insert(0)
    }

    #[inline]
    pub fn set(&mut self, topic: &str, queue_id: i32, next: i64) {
        *self.slot(topic, queue_id) = next;
    }

    /// Raises the entry to at least `next`.
    pub fn raise(&mut self, topic: &str, queue_id: i32, next: i64) {
        if self.get(topic, queue_id) < next {
            self.set(topic, queue_id, next);
        }
    }

    /// Every `(topic, queue_id, next_offset)`.
    pub fn entries(&self) -> Vec<(String, i32, i64)> {
        let mut v: Vec<_> = self
            .map
            .iter()
            .flat_map(|(t, q)| q.iter().map(move |(id, n)| (t.clone(), *id, *n)))
            .collect();
        v.sort();
        v
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }
}

struct PutState {
    table: QueueOffsetTable,
    /// The file being appended to (saves a queue lookup per put). Only puts
    /// add files, expiry never removes the last one, and truncation resets it.
    current: Option<Arc<MappedFile>>,
}

/// Failed CommitLog file creations (rate-limited log).
static CREATE_FAILURES: RateLimited = RateLimited::new();
/// Failed reservations of the next chunk of a CommitLog file (rate-limited).
static RESERVE_FAILURES: RateLimited = RateLimited::new();

impl From<crate::message::PropertyError> for Refused {
    fn from(e: crate::message::PropertyError) -> Self {
        let crate::message::PropertyError::Illegal(why) = e;
        Self::illegal(why)
    }
}

/// A message ready to append: validated, delay-converted, CRC computed.
pub struct Prepared<'a> {
    pub spec: MessageSpec<'a>,
    sys_flag: i32,
    crc: i32,
    /// Encoded record length.
    pub len: usize,
}

/// The CommitLog.
pub struct CommitLog {
    cfg: CommitLogConfig,
    mfq: Arc<MappedFileQueue>,
    put: Mutex<PutState>,
}

/// What a scan of the CommitLog found.
#[derive(Debug, Clone, Default)]
pub struct ScanReport {
    /// Offset just past the last valid record.
    pub end_offset: u64,
    pub files_scanned: usize,
    pub bytes_scanned: u64,
    pub records: u64,
    /// Why the scan stopped, when it stopped before the end of the last file.
    pub stop_reason: Option<String>,
}

impl CommitLog {
    /// Loads the CommitLog directory (files marked full; call
    /// [`CommitLog::recover`] next).
    pub fn load(cfg: CommitLogConfig, writable: bool) -> Result<Self> {
        let (mfq, info) = MappedFileQueue::load_with(
            cfg.dir.clone(),
            cfg.file_size,
            writable,
            Reserve::COMMIT_LOG,
        )?;
        if let Some(p) = info.extended_short_file {
            log::warn!("extended short CommitLog file {} to full size", p.display());
        }
        Ok(Self {
            cfg,
            mfq: Arc::new(mfq),
            put: Mutex::new(PutState {
                table: QueueOffsetTable::default(),
                current: None,
            }),
        })
    }

    pub fn config(&self) -> &CommitLogConfig {
        &self.cfg
    }

    pub fn queue(&self) -> &MappedFileQueue {
        &self.mfq
    }

    /// Drops every file (the store shut down): mappings and descriptors are
    /// released as soon as no reader holds them; no file is created again.
    pub fn release(&self) {
        self.put.lock().current = None;
        self.mfq.release();
    }

    /// A shared handle on the file queue (for background threads).
    pub fn queue_arc(&self) -> Arc<MappedFileQueue> {
        self.mfq.clone()
    }

    pub fn file_size(&self) -> usize {
        self.cfg.file_size
    }

    /// End of readable data.
    pub fn max_offset(&self) -> u64 {
        self.mfq.max_offset()
    }

    /// Start of the first file, or -1 when the log holds no file.
    pub fn min_offset(&self) -> i64 {
        self.mfq.min_offset().map(|o| o as i64).unwrap_or(-1)
    }

    pub fn flushed_offset(&self) -> u64 {
        self.mfq.flushed_where()
    }

    /// Start of the file after the one holding `offset`.
    pub fn roll_next_file(&self, offset: u64) -> u64 {
        let s = self.cfg.file_size as u64;
        offset + s - offset % s
    }

    /// Validates `spec` and converts delayed messages (SPEC §1.9, §1.10).
    ///
    /// A refusal carries a sentence naming the field and the rule; the checks
    /// cost nothing more than before on the success path (the sentence is
    /// built only when a check fails).
    pub fn prepare<'a>(&self, spec: MessageSpec<'a>) -> std::result::Result<Prepared<'a>, Refused> {
        let mut spec = spec;
        if let Some(why) = topic_problem(&spec.topic) {
            return Err(Refused::illegal(why));
        }
        if spec.queue_id < 0 {
            return Err(Refused::illegal(format!(
                "queue_id must be >= 0, got {}",
                spec.queue_id
            )));
        }
        if spec.body.len() > self.cfg.max_message_size {
            return Err(Refused::illegal(format!(
                "body is {} bytes, over max_message_size ({} bytes)",
                spec.body.len(),
                self.cfg.max_message_size
            )));
        }
        if spec.sys_flag != 0 {
            if let Some(why) = sys_flag_problem(spec.sys_flag) {
                return Err(Refused::illegal(why));
            }
            if spec.sys_flag & sysflag::COMPRESSED != 0 {
                if let Some(why) = compressed_body_problem(&spec.body) {
                    return Err(Refused::illegal(why));
                }
            }
        }
        let tran = spec.transaction_type();
        if tran == sysflag::TRANSACTION_NOT || tran == sysflag::TRANSACTION_COMMIT {
            if let Some(level) = find_property(&spec.properties, props::DELAY) {
                let level: i64 = std::str::from_utf8(level)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .ok_or_else(|| {
                        Refused::illegal(format!(
                            "property DELAY must be a whole number (a delay level), not {:?}",
                            String::from_utf8_lossy(level)
                        ))
                    })?;
                if level > 0 && !self.cfg.delay_levels.is_empty() {
                    // Like RocketMQ's property map: the clamped level replaces DELAY,
                    // and REAL_TOPIC/REAL_QID replace any earlier values (a message
                    // delayed twice keeps only its latest origin).
                    let level = level.min(self.cfg.delay_levels.len() as i64);
                    let mut b = PropertiesBuilder::with_capacity(spec.properties.len() + 48);
                    for (k, v) in message::iter_properties(&spec.properties) {
                        if k == props::REAL_TOPIC.as_bytes() || k == props::REAL_QID.as_bytes() {
                            continue;
                        }
                        if k == props::DELAY.as_bytes() {
                            b.push(props::DELAY, &level.to_string())
                                .map_err(Refused::from)?;
                        } else {
                            b.push_pair_raw(k, v);
                        }
                    }
                    let qid = spec.queue_id.to_string();
                    b.push(props::REAL_TOPIC, &spec.topic)
                        .map_err(Refused::from)?;
                    b.push(props::REAL_QID, &qid).map_err(Refused::from)?;
                    spec.properties = Cow::Owned(b.finish());
                    spec.topic = Cow::Borrowed(SCHEDULE_TOPIC);
                    spec.queue_id = (level - 1) as i32;
                }
            }
        }
        let props_len = spec.properties.len();
        if props_len > MAX_PROPERTIES_LEN {
            // RocketMQ checks the Java char count first (MESSAGE_ILLEGAL), then bytes.
            let chars = String::from_utf8_lossy(&spec.properties)
                .encode_utf16()
                .count();
            let why = format!(
                "properties (tags, keys and properties together) take {props_len} bytes \
                 ({chars} characters); at most {MAX_PROPERTIES_LEN} are allowed"
            );
            return Err(if chars > MAX_PROPERTIES_LEN {
                Refused::illegal(why)
            } else {
                Refused::new(PutStatus::PropertiesSizeExceeded, why)
            });
        }
        let mut sys_flag = spec.sys_flag & !(sysflag::BORNHOST_V6 | sysflag::STOREHOST_V6);
        if spec.born_host.is_ipv6() {
            sys_flag |= sysflag::BORNHOST_V6;
        }
        if self.cfg.store_host.is_ipv6() {
            sys_flag |= sysflag::STOREHOST_V6;
        }
        let len = record_len(
            spec.body.len(),
            spec.topic.len(),
            props_len,
            &spec.born_host,
            &self.cfg.store_host,
        );
        if len > self.cfg.max_message_size + 64 * 1024 {
            return Err(Refused::illegal(format!(
                "the record would take {len} bytes, over max_message_size + 64 KiB \
                 ({} bytes)",
                self.cfg.max_message_size + 64 * 1024
            )));
        }
        if len + END_FILE_MIN_BLANK_LENGTH > self.cfg.file_size {
            return Err(Refused::illegal(format!(
                "the record would take {len} bytes, but a CommitLog segment of {} bytes holds \
                 at most {} (mapped_file_size_commit_log)",
                self.cfg.file_size,
                self.cfg.file_size - END_FILE_MIN_BLANK_LENGTH
            )));
        }
        let crc = body_crc(&spec.body);
        Ok(Prepared {
            spec,
            sys_flag,
            crc,
            len,
        })
    }

    /// Appends one message.
    pub fn put(&self, spec: MessageSpec<'_>) -> Result<PutOutcome> {
        match self.prepare(spec) {
            Ok(p) => self.put_prepared(&p),
            Err(s) => Ok(PutOutcome::rejected(s)),
        }
    }

    /// Appends a prepared message, waiting for the put lock.
    pub fn put_prepared(&self, p: &Prepared<'_>) -> Result<PutOutcome> {
        let mut st = self.put.lock();
        self.append_locked(&mut st, p, now_ms())
    }

    /// Appends a prepared message only if that cannot block: the put lock is
    /// free and the current file has room (no file must be created). `None`
    /// means "call [`CommitLog::put_prepared`] with the GIL released".
    pub fn try_put_prepared(&self, p: &Prepared<'_>) -> Option<Result<PutOutcome>> {
        let mut st = self.put.try_lock()?;
        let last = st.current.as_ref()?;
        if last.wrote_position() + p.len + END_FILE_MIN_BLANK_LENGTH > last.file_size() {
            return None;
        }
        Some(self.append_locked(&mut st, p, now_ms()))
    }

    /// Appends messages in order under one lock hold; a message that fails
    /// validation gets its status and is skipped.
    pub fn put_batch<'a>(
        &self,
        specs: impl IntoIterator<Item = std::result::Result<MessageSpec<'a>, Refused>>,
    ) -> Result<Vec<PutOutcome>> {
        // Each message is validated and encoded as it is appended (no
        // intermediate batch-sized buffers: those cost more than the work).
        let specs = specs.into_iter();
        let mut out = Vec::with_capacity(specs.size_hint().0);
        let mut st = self.put.lock();
        let ts = now_ms();
        for s in specs {
            match s.and_then(|s| self.prepare(s)) {
                Ok(p) => out.push(self.append_locked(&mut st, &p, ts)?),
                Err(refused) => out.push(PutOutcome::rejected(refused)),
            }
        }
        Ok(out)
    }

    fn append_locked(&self, st: &mut PutState, p: &Prepared<'_>, ts: i64) -> Result<PutOutcome> {
        let spec = &p.spec;
        let tran = spec.transaction_type();
        let counted = tran == sysflag::TRANSACTION_NOT || tran == sysflag::TRANSACTION_COMMIT;
        let mut slot = if counted {
            Some(st.table.slot(&spec.topic, spec.queue_id))
        } else {
            None
        };
        let queue_offset = slot.as_deref().copied().unwrap_or(0);
        for _attempt in 0..2 {
            let file = match &st.current {
                Some(f) if !f.is_full() => f.clone(),
                _ => {
                    match self.mfq.last_file_or_create(0) {
                        Ok(f) => {
                            if let Some(n) = CREATE_FAILURES.reset() {
                                log::warn!("CommitLog files can be created again after {n} failed attempts");
                            }
                            st.current = Some(f.clone());
                            f
                        }
                        Err(e) => {
                            // A full disk fails every put: log a few lines and a count,
                            // not one line per attempt.
                            CREATE_FAILURES.log(log::Level::Error, || {
                                format!("cannot create CommitLog file: {e}")
                            });
                            return Ok(PutOutcome::rejected(Refused::new(
                                PutStatus::CreateMappedFileFailed,
                                format!("cannot create a CommitLog file: {e}"),
                            )));
                        }
                    }
                }
            };
            let from = file.file_from_offset() as i64;
            // At most the record and the 8 bytes a blank needs are written;
            // their blocks are reserved first (a chunk at a time). A full
            // disk fails the put with a status, never a fault.
            let appended = file.append_reserved(p.len + END_FILE_MIN_BLANK_LENGTH, |tail, at| {
                if p.len + END_FILE_MIN_BLANK_LENGTH > tail.len() {
                    encode_blank(tail, tail.len());
                    return (tail.len(), None);
                }
                let phy = from + at as i64;
                let n = encode_v1(
                    tail,
                    spec,
                    p.sys_flag,
                    p.crc,
                    &self.cfg.store_host,
                    queue_offset,
                    phy,
                    ts,
                );
                (n, Some(phy))
            });
            let appended = match appended {
                Ok(a) => {
                    if let Some(n) = RESERVE_FAILURES.reset() {
                        log::warn!(
                            "CommitLog space can be reserved again after {n} failed attempts"
                        );
                    }
                    a
                }
                Err(e @ StoreError::Io { .. }) => {
                    RESERVE_FAILURES.log(log::Level::Error, || {
                        format!("cannot reserve CommitLog space: {e}")
                    });
                    return Ok(PutOutcome::rejected(Refused::new(
                        PutStatus::CreateMappedFileFailed,
                        format!("cannot reserve space in the CommitLog file: {e}"),
                    )));
                }
                Err(e) => return Err(e),
            };
            if let Some(phy) = appended {
                file.set_store_timestamp(ts);
                if let Some(slot) = slot.as_deref_mut() {
                    *slot = queue_offset + 1;
                }
                return Ok(PutOutcome {
                    status: PutStatus::PutOk,
                    wrote_offset: phy,
                    wrote_bytes: p.len as i32,
                    queue_offset,
                    store_timestamp: ts,
                    reason: None,
                });
            }
            // END_OF_FILE: the blank filled the file; retry in the next one.
        }
        Err(StoreError::InvalidArgument(
            "message did not fit in a fresh CommitLog file".into(),
        ))
    }

    /// Snapshot of the queue-offset table.
    pub fn queue_offsets(&self) -> QueueOffsetTable {
        self.put.lock().table.clone()
    }

    /// Replaces the queue-offset table (after recovery).
    pub fn set_queue_offsets(&self, table: QueueOffsetTable) {
        self.put.lock().table = table;
    }

    /// Next queue offset of `topic-queue_id`.
    pub fn next_queue_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.put.lock().table.get(topic, queue_id)
    }

    /// Scans records from the start of file `start_index`, calling `visit`
    /// for each valid record, and stops at the first invalid one or at the
    /// end of the last file.
    pub fn scan(
        &self,
        start_index: usize,
        check_crc: bool,
        mut visit: impl FnMut(u64, &RecordView, &[u8]),
    ) -> ScanReport {
        let files = self.mfq.files();
        let mut rep = ScanReport::default();
        let Some(first) = files.get(start_index) else {
            rep.end_offset = files.first().map(|f| f.file_from_offset()).unwrap_or(0);
            return rep;
        };
        rep.end_offset = first.file_from_offset();
        for (i, f) in files.iter().enumerate().skip(start_index) {
            rep.files_scanned += 1;
            let data = f.raw();
            let mut pos = 0usize;
            let from = f.file_from_offset();
            let mut reached_blank = false;
            loop {
                match parse_record(&data[pos..], check_crc) {
                    Parsed::Record(v) => {
                        let rec = &data[pos..pos + v.total_size];
                        if v.physical_offset != (from + pos as u64) as i64 {
                            rep.stop_reason = Some(format!(
                                "record at {} carries physical offset {}",
                                from + pos as u64,
                                v.physical_offset
                            ));
                            break;
                        }
                        visit(from + pos as u64, &v, rec);
                        pos += v.total_size;
                        rep.records += 1;
                    }
                    Parsed::Blank => {
                        reached_blank = true;
                        break;
                    }
                    Parsed::End { reason } => {
                        if data[pos..].iter().take(8).any(|&b| b != 0) {
                            rep.stop_reason =
                                Some(format!("{reason} at offset {}", from + pos as u64));
                        }
                        break;
                    }
                }
            }
            rep.bytes_scanned += pos as u64;
            if reached_blank {
                rep.end_offset = from + f.file_size() as u64;
                if i + 1 == files.len() {
                    // The log ends with a full file: the next put creates a new one.
                    break;
                }
                continue;
            }
            rep.end_offset = from + pos as u64;
            break;
        }
        rep
    }

    /// Magic and store timestamp of the first record of file `index`.
    pub fn first_record_of_file(&self, index: usize) -> Option<(i32, i64)> {
        let f = self.mfq.files().get(index)?.clone();
        match parse_record(f.raw(), false) {
            Parsed::Record(v) => Some((v.magic, v.store_timestamp)),
            _ => None,
        }
    }

    /// Cuts everything after `offset` (zeroing the cut bytes) and sets the
    /// flushed offset to it. Returns bytes discarded.
    pub fn truncate_to(&self, offset: u64) -> Result<u64> {
        let mut st = self.put.lock();
        st.current = None;
        let n = self.mfq.truncate_dirty(offset)?;
        self.mfq.set_flushed_where(offset);
        Ok(n)
    }

    /// Bytes of `f` from `pos` that a reader may parse: below the write
    /// position for the writer; for a read-only store (another process
    /// writes) the whole mapped file, whose records are validated as parsed.
    fn readable<'f>(&self, f: &'f MappedFile, pos: usize) -> Option<&'f [u8]> {
        if self.mfq.is_writable() {
            f.readable_from(pos)
        } else {
            f.raw().get(pos..)
        }
    }

    /// The valid record at `phy` whose length must be `size` (a CQ unit).
    pub fn read_record_sized(&self, phy: i64, size: i32) -> Option<(RecordView, Vec<u8>)> {
        let (v, raw) = self.read_record(u64::try_from(phy).ok()?)?;
        (v.total_size as i64 == size as i64).then_some((v, raw))
    }

    /// The store timestamp of the record at `phy`, if one is there.
    pub fn store_timestamp_at(&self, phy: i64) -> Option<i64> {
        let phy = u64::try_from(phy).ok()?;
        let f = self.mfq.find_by_offset(phy, false)?;
        let pos = (phy - f.file_from_offset()) as usize;
        match parse_record(self.readable(&f, pos)?, false) {
            Parsed::Record(v) => Some(v.store_timestamp),
            _ => None,
        }
    }

    /// Read-only stores: adopts CommitLog files another process created and
    /// forgets files it deleted.
    pub fn refresh(&self) -> Result<()> {
        if self.mfq.is_writable() {
            return Ok(());
        }
        let gone = self
            .mfq
            .files()
            .iter()
            .take_while(|f| !f.path().exists())
            .count();
        if gone > 0 {
            self.mfq.remove_head(gone);
        }
        self.mfq.adopt_new_files()?;
        // Advance the end over records that became valid since.
        let files = self.mfq.files();
        let start = files
            .iter()
            .position(|f| !f.is_full())
            .unwrap_or(files.len());
        for f in files.iter().skip(start) {
            let data = f.raw();
            let mut pos = f.wrote_position();
            let full = loop {
                match parse_record(&data[pos..], false) {
                    Parsed::Record(v) => pos += v.total_size,
                    Parsed::Blank => break true,
                    Parsed::End { .. } => break false,
                }
            };
            f.set_positions(if full { f.file_size() } else { pos });
            if !full {
                break;
            }
        }
        Ok(())
    }

    /// The valid record at `phy`, with its bytes copied out.
    pub fn read_record(&self, phy: u64) -> Option<(RecordView, Vec<u8>)> {
        let f = self.mfq.find_by_offset(phy, false)?;
        let pos = (phy - f.file_from_offset()) as usize;
        let data = self.readable(&f, pos)?;
        match parse_record(data, false) {
            Parsed::Record(v) => {
                let bytes = data[..v.total_size].to_vec();
                Some((v, bytes))
            }
            _ => None,
        }
    }

    /// The file that holds `phy`.
    pub fn file_for(&self, phy: u64) -> Option<Arc<MappedFile>> {
        self.mfq.find_by_offset(phy, false)
    }

    /// Flushes everything written.
    pub fn flush_all(&self) -> Result<u64> {
        self.mfq.flush_all()
    }
}

/// Rebuilds the queue-offset table from a record as a scan visits it.
pub fn account_record(table: &mut QueueOffsetTable, v: &RecordView, rec: &[u8]) {
    let tran = v.sys_flag & sysflag::TRANSACTION_TYPE_MASK;
    if tran == sysflag::TRANSACTION_NOT || tran == sysflag::TRANSACTION_COMMIT {
        let topic = String::from_utf8_lossy(&rec[v.topic.clone()]);
        table.raise(&topic, v.queue_id, v.queue_offset + 1);
    }
}
