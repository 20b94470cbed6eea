//! Batches of one topic and queue: every message is checked first (one
//! refusal refuses the batch), then written one CommitLog file's worth per
//! append, holding the queue between files so queue offsets stay in
//! CommitLog order.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, MutexGuard};

use crate::error::{Result, StoreError};
use crate::log::mapped_file::MappedFile;
use crate::log::message::{
    encode_blank, encode_v1_crc_of_copy, find_property, props, record_len, sysflag, topic_problem,
    MessageSpec, END_FILE_MIN_BLANK_LENGTH, MAX_PROPERTIES_LEN,
};

use super::{CommitLog, PutState, PutStatus, Refused, RESERVE_FAILURES};

/// Messages for one topic and queue, appended by [`CommitLog::append_batch`].
#[derive(Debug, Clone)]
pub struct BatchInput<'a> {
    /// Topic of every message.
    pub topic: &'a str,
    /// Queue id of every message.
    pub queue_id: i32,
    /// The producer's flag of every message.
    pub flag: i32,
    /// Born time of every message (ms since the epoch).
    pub born_timestamp: i64,
    /// Born host of every message.
    pub born_host: SocketAddr,
    /// The messages' bodies, in order.
    pub bodies: &'a [&'a [u8]],
    /// Every message's serialized properties, concatenated: message `i`
    /// has `props[props_ends[i - 1]..props_ends[i]]`. Empty `props_ends`:
    /// no message has properties.
    pub props: &'a [u8],
    /// End of each message's properties in `props` (empty: none has any).
    pub props_ends: &'a [usize],
}

impl BatchInput<'_> {
    /// Serialized properties of message `i`.
    #[inline]
    pub fn props_of(&self, i: usize) -> &[u8] {
        if self.props_ends.is_empty() {
            return b"";
        }
        let from = if i == 0 { 0 } else { self.props_ends[i - 1] };
        &self.props[from..self.props_ends[i]]
    }

    /// Stored length of message `i`'s properties (with the property CRC
    /// when `prop_crc`).
    #[inline]
    pub fn props_len(&self, i: usize, prop_crc: bool) -> usize {
        let p = self.props_of(i);
        if prop_crc {
            p.len() + crate::log::message::prop_crc_extra(p)
        } else {
            p.len()
        }
    }

    /// Message `i` as a spec for the encoder, with the batch's `sys_flag`.
    #[inline]
    pub fn spec_of(&self, i: usize, sys_flag: i32) -> MessageSpec<'_> {
        MessageSpec {
            topic: Cow::Borrowed(self.topic),
            queue_id: self.queue_id,
            flag: self.flag,
            sys_flag,
            born_timestamp: self.born_timestamp,
            born_host: self.born_host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: Cow::Borrowed(self.bodies[i]),
            properties: Cow::Borrowed(self.props_of(i)),
        }
    }

    /// Encoded length of message `i`.
    #[inline]
    pub fn record_len(&self, i: usize, store_host: &SocketAddr, prop_crc: bool) -> usize {
        record_len(
            self.bodies[i].len(),
            self.topic.len(),
            self.props_len(i, prop_crc),
            &self.born_host,
            store_host,
        )
    }
}

/// Why a batch was refused before anything was written (the message's
/// index is in the reason).
pub type BatchRefusal = Refused;

/// What a batch put did: one result for the whole batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOutcome {
    /// `PUT_OK`, or why the batch (or its rest) was not written.
    pub status: PutStatus,
    /// CommitLog offset of the first message (-1 when none was written).
    pub first_offset: i64,
    /// Queue offset of the first message; the others follow consecutively.
    pub first_queue_offset: i64,
    /// Messages written.
    pub count: usize,
    /// Record bytes written.
    pub bytes: u64,
    /// Store timestamp of the first message.
    pub store_timestamp: i64,
    /// CommitLog offset just past the last message written.
    pub end_offset: i64,
    /// Why the status is not `PUT_OK`, when the store knows more.
    pub reason: Option<String>,
    /// Every message's CommitLog offset, when asked for.
    pub offsets: Vec<i64>,
}

/// A batch's hold on its queue: on drop (also on unwinding) the queue is
/// released and waiting writers are woken.
struct BatchHold<'a, 'b> {
    st: MutexGuard<'a, PutState>,
    cv: &'a Condvar,
    since: &'a AtomicI64,
    topic: &'b str,
    queue_id: i32,
}

impl Drop for BatchHold<'_, '_> {
    fn drop(&mut self) {
        let (topic, queue_id) = (self.topic, self.queue_id);
        if let Some(i) = self
            .st
            .busy
            .iter()
            .position(|(t, q)| *q == queue_id && t == topic)
        {
            self.st.busy.swap_remove(i);
        }
        self.since.store(0, Ordering::Relaxed);
        self.cv.notify_all();
    }
}
impl CommitLog {
    /// Checks every message of a batch; nothing is written. `Err` names
    /// the first refused message (its index and why) and the status it gets.
    pub fn validate_batch(&self, b: &BatchInput<'_>) -> std::result::Result<(), BatchRefusal> {
        let refuse = |index: Option<usize>, status, why: String| BatchRefusal {
            status,
            reason: match index {
                Some(i) => format!("message {i}: {why}"),
                None => why,
            },
        };
        if let Some(why) = topic_problem(b.topic) {
            return Err(refuse(None, PutStatus::MessageIllegal, why));
        }
        if b.queue_id < 0 {
            return Err(refuse(
                None,
                PutStatus::MessageIllegal,
                format!("queue_id {} is negative", b.queue_id),
            ));
        }
        let n = b.bodies.len();
        if !b.props_ends.is_empty() && b.props_ends.len() != n {
            return Err(refuse(
                None,
                PutStatus::MessageIllegal,
                format!("{} property sets for {n} bodies", b.props_ends.len()),
            ));
        }
        for i in 0..n {
            let body = b.bodies[i].len();
            if body > self.cfg.max_message_size {
                return Err(refuse(
                    Some(i),
                    PutStatus::MessageIllegal,
                    format!(
                        "body of {body} bytes exceeds max_message_size {}",
                        self.cfg.max_message_size
                    ),
                ));
            }
            let p = b.props_of(i);
            if crate::log::message::has_prop_crc(p) {
                return Err(refuse(
                    Some(i),
                    PutStatus::MessageIllegal,
                    "property __CRC32# is the store's own; it cannot be put".into(),
                ));
            }
            let stored = b.props_len(i, self.cfg.prop_crc);
            if stored > MAX_PROPERTIES_LEN {
                let chars = String::from_utf8_lossy(p).encode_utf16().count();
                let status = if chars > MAX_PROPERTIES_LEN {
                    PutStatus::MessageIllegal
                } else {
                    PutStatus::PropertiesSizeExceeded
                };
                return Err(refuse(
                    Some(i),
                    status,
                    if stored > p.len() {
                        format!(
                            "properties of {} bytes ({stored} with the store's property \
                             CRC) exceed {MAX_PROPERTIES_LEN}",
                            p.len()
                        )
                    } else {
                        format!("properties of {stored} bytes exceed {MAX_PROPERTIES_LEN}")
                    },
                ));
            }
            if !p.is_empty() {
                if p.len() > MAX_PROPERTIES_LEN {
                    let chars = String::from_utf8_lossy(p).encode_utf16().count();
                    let status = if chars > MAX_PROPERTIES_LEN {
                        PutStatus::MessageIllegal
                    } else {
                        PutStatus::PropertiesSizeExceeded
                    };
                    return Err(refuse(
                        Some(i),
                        status,
                        format!(
                            "properties of {} bytes exceed {MAX_PROPERTIES_LEN}",
                            p.len()
                        ),
                    ));
                }
                // Like RocketMQ's batches: no delayed messages (they would
                // leave the queue for SCHEDULE_TOPIC_XXXX).
                if let Some(level) = find_property(p, props::DELAY) {
                    let delayed = std::str::from_utf8(level)
                        .ok()
                        .and_then(|s| s.trim().parse::<i64>().ok())
                        .map_or(true, |l| l > 0);
                    if delayed {
                        return Err(refuse(
                            Some(i),
                            PutStatus::MessageIllegal,
                            "delayed messages cannot be put in a batch".into(),
                        ));
                    }
                }
            }
            let len = b.record_len(i, &self.cfg.store_host, self.cfg.prop_crc);
            if len > self.cfg.max_message_size + 64 * 1024
                || len + END_FILE_MIN_BLANK_LENGTH > self.cfg.file_size
            {
                return Err(refuse(
                    Some(i),
                    PutStatus::MessageIllegal,
                    format!(
                        "a record of {len} bytes does not fit a CommitLog file of {} bytes",
                        self.cfg.file_size
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Appends a validated batch (see [`CommitLog::validate_batch`]) to one
    /// queue: consecutive queue offsets, CommitLog order. The put lock is
    /// held for one CommitLog file's worth at a time; between files other
    /// writers get in (writers to this queue wait for the batch to finish).
    /// `on_file` runs after each file's worth is published.
    ///
    /// A failure to create a CommitLog file mid-batch stops it: the
    /// outcome then carries that status and counts the messages written.
    pub fn append_batch(
        &self,
        b: &BatchInput<'_>,
        want_offsets: bool,
        mut on_file: impl FnMut(),
    ) -> Result<BatchOutcome> {
        let n = b.bodies.len();
        let mut out = BatchOutcome::nothing_yet(n, want_offsets);
        if n == 0 {
            return Ok(out);
        }
        if let Some(busy) = self.page_cache_busy() {
            out.status = busy.status;
            out.reason = Some(busy.reason);
            return Ok(out);
        }
        let mut hold = self.hold_queue(b);
        let sys_flag = self.batch_sys_flag(b);
        let store_host = self.cfg.store_host;
        let prop_crc = self.cfg.prop_crc;
        let mut i = 0usize;
        let mut qo = *hold.st.table.slot(b.topic, b.queue_id);
        out.first_queue_offset = qo;
        while i < n {
            if i > 0 {
                // A file's worth is done: let waiting writers in.
                self.lock_since.store(0, Ordering::Relaxed);
                MutexGuard::bump(&mut hold.st);
            }
            let ts = self.stamp(&mut hold.st);
            // The busy check sees how long this file's worth holds the lock.
            self.lock_since.store(ts, Ordering::Relaxed);
            if i == 0 {
                out.store_timestamp = ts;
            }
            let Some(file) = self.file_with_room(&mut hold.st) else {
                out.status = PutStatus::CreateMappedFileFailed;
                break;
            };
            let from = file.file_from_offset() as i64;
            let start = i;
            let offsets = &mut out.offsets;
            let mut bytes = 0u64;
            let mut end = -1i64;
            // Reserve blocks for what this file will take: the records that
            // fit and a blank's 8 bytes (at most the rest of the file).
            let need = reserve_need(
                b,
                i,
                file.file_size() - file.wrote_position(),
                &store_host,
                prop_crc,
            );
            let appended = file.append_reserved(need, |tail, at| {
                let mut pos = 0usize;
                let mut first = None;
                while i < n {
                    let len = b.record_len(i, &store_host, prop_crc);
                    if pos + len + END_FILE_MIN_BLANK_LENGTH > tail.len() {
                        // END_OF_FILE: the blank fills the file; go on in the next.
                        let rest = tail.len() - pos;
                        encode_blank(&mut tail[pos..], rest);
                        return (tail.len(), first);
                    }
                    let phy = from + (at + pos) as i64;
                    first.get_or_insert(phy);
                    let spec = b.spec_of(i, sys_flag);
                    let w = encode_v1_crc_of_copy(
                        &mut tail[pos..],
                        &spec,
                        sys_flag,
                        &store_host,
                        qo,
                        phy,
                        ts,
                        prop_crc,
                    );
                    debug_assert_eq!(w, len);
                    if want_offsets {
                        offsets.push(phy);
                    }
                    pos += len;
                    bytes += len as u64;
                    end = phy + len as i64;
                    qo += 1;
                    i += 1;
                }
                (pos, first)
            });
            let first_phy = match appended {
                Ok(f) => f,
                Err(e @ StoreError::Io { .. }) => {
                    RESERVE_FAILURES.log(log::Level::Error, || {
                        format!("cannot reserve CommitLog space: {e}")
                    });
                    out.status = PutStatus::CreateMappedFileFailed;
                    out.reason = Some(format!("cannot reserve space in the CommitLog file: {e}"));
                    break;
                }
                Err(e) => return Err(e),
            };
            if i > start {
                file.set_store_timestamp(ts);
                *hold.st.table.slot(b.topic, b.queue_id) = qo;
                if out.first_offset < 0 {
                    out.first_offset = first_phy.unwrap_or(-1);
                }
                out.count += i - start;
                out.bytes += bytes;
                self.puts.add_locked((i - start) as u64, bytes);
                out.end_offset = end;
                on_file();
            }
        }
        drop(hold);
        Ok(out)
    }
}

impl CommitLog {
    /// Takes the put lock for a batch to `b`'s queue, once no other batch
    /// holds that queue, and marks the queue held.
    #[inline]
    fn hold_queue<'a, 'b>(&'a self, b: &BatchInput<'b>) -> BatchHold<'a, 'b> {
        let mut st = self.put.lock();
        self.wait_queue_free(&mut st, b.topic, b.queue_id);
        st.busy.push((b.topic.to_owned(), b.queue_id));
        BatchHold {
            st,
            cv: &self.batch_done,
            since: &self.lock_since,
            topic: b.topic,
            queue_id: b.queue_id,
        }
    }

    /// The sys_flag of every record of a batch: not a transaction, with the
    /// IPv6 bits of its hosts.
    #[inline]
    fn batch_sys_flag(&self, b: &BatchInput<'_>) -> i32 {
        let mut sys_flag = sysflag::TRANSACTION_NOT;
        if b.born_host.is_ipv6() {
            sys_flag |= sysflag::BORNHOST_V6;
        }
        if self.cfg.store_host.is_ipv6() {
            sys_flag |= sysflag::STOREHOST_V6;
        }
        sys_flag
    }

    /// The file to append to: the current one while it has room, else the
    /// last one or a new one; `None` (logged) when none can be created.
    #[inline]
    fn file_with_room(&self, st: &mut PutState) -> Option<Arc<MappedFile>> {
        match &st.current {
            Some(f) if !f.is_full() => Some(f.clone()),
            _ => match self.mfq.last_file_or_create(0) {
                Ok(f) => {
                    self.created_file();
                    st.current = Some(f.clone());
                    Some(f)
                }
                Err(e) => {
                    self.create_failed(&e);
                    None
                }
            },
        }
    }
}

/// Bytes to reserve in a file with `room` bytes left for the batch's
/// records from `i` on: those that fit and a blank's 8 bytes (at most the
/// rest of the file).
#[inline]
fn reserve_need(
    b: &BatchInput<'_>,
    i: usize,
    room: usize,
    store_host: &SocketAddr,
    prop_crc: bool,
) -> usize {
    let mut need = END_FILE_MIN_BLANK_LENGTH;
    for j in i..b.bodies.len() {
        need += b.record_len(j, store_host, prop_crc);
        if need >= room {
            break;
        }
    }
    need
}

impl BatchOutcome {
    /// The outcome of a batch of `n` messages before any is written.
    fn nothing_yet(n: usize, want_offsets: bool) -> Self {
        Self {
            status: PutStatus::PutOk,
            first_offset: -1,
            first_queue_offset: -1,
            count: 0,
            bytes: 0,
            store_timestamp: 0,
            end_offset: -1,
            reason: None,
            offsets: if want_offsets {
                Vec::with_capacity(n)
            } else {
                Vec::new()
            },
        }
    }
}
