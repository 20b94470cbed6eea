//! Batches of one topic and queue: every message is checked first (one
//! refusal refuses the batch), the room the batch takes (blocks of the
//! current file, and every new file it needs) is made before any byte is
//! written (so it is all or nothing), then it is written one CommitLog
//! file's worth per append, under one hold of the put lock so queue
//! offsets stay in CommitLog order.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::sync::{Condvar, MutexGuard};

use crate::error::Result;
use crate::log::mapped_file::MappedFile;
use crate::log::message::{
    batch_delay_problem, body_size_problem, encode_blank, encode_v1_crc_of_copy, find_property,
    has_prop_crc, prop_crc_given, properties_size_problem, props, queue_id_problem, record_len,
    record_size_problem, sysflag, topic_problem, MessageSpec, StoreStamp,
    END_FILE_MIN_BLANK_LENGTH,
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

/// What one file's worth of a batch wrote.
struct FileWorth {
    /// CommitLog offset of its first message (`None`: only a blank).
    first: Option<i64>,
    /// Record bytes written.
    bytes: u64,
    /// CommitLog offset just past its last message.
    end: i64,
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
    /// Checks every message of a batch against the put rules
    /// (`log/message/rules.rs`: the single put's, in the same order, and
    /// what a batch may not hold); nothing is written. `Err` names the first
    /// refused message (its index, then the single put's sentence) and the
    /// status it gets.
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
        if let Some(why) = queue_id_problem(b.queue_id) {
            return Err(refuse(None, PutStatus::MessageIllegal, why));
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
            let at = |r: Refused| refuse(Some(i), r.status, r.reason);
            if let Some(why) = body_size_problem(b.bodies[i].len(), self.cfg.max_message_size) {
                return Err(at(Refused::illegal(why)));
            }
            let p = b.props_of(i);
            if let Some(why) = find_property(p, props::DELAY).and_then(batch_delay_problem) {
                return Err(at(Refused::illegal(why)));
            }
            if has_prop_crc(p) {
                return Err(at(Refused::illegal(prop_crc_given())));
            }
            if let Some(broken) = properties_size_problem(p, b.props_len(i, self.cfg.prop_crc)) {
                return Err(at(broken.into()));
            }
            let len = b.record_len(i, &self.cfg.store_host, self.cfg.prop_crc);
            let (max, file_size) = (self.cfg.max_message_size, self.cfg.file_size);
            if let Some(why) = record_size_problem(len, max, file_size) {
                return Err(at(Refused::illegal(why)));
            }
        }
        Ok(())
    }

    /// Appends a validated batch (see [`CommitLog::validate_batch`]) to one
    /// queue: consecutive queue offsets, CommitLog order. `on_file` runs
    /// after each file's worth is published.
    ///
    /// All or nothing: before its first byte is written, the batch reserves
    /// the blocks it takes in the current file and makes (and reserves)
    /// every further CommitLog file it needs; if any of that fails, nothing
    /// is written and the outcome says `CREATE_MAPPED_FILE_FAILED` (the
    /// files made for it are removed). The put lock is held until the batch
    /// ends, so no other writer changes where its files begin.
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
        let first = match self.file_with_room(&mut hold.st) {
            Ok(f) => f,
            Err(e) => {
                out.status = PutStatus::CreateMappedFileFailed;
                out.reason = Some(format!("cannot create a CommitLog file: {e}"));
                return Ok(out);
            }
        };
        let needs = plan_files(
            b,
            first.file_size() - first.wrote_position(),
            first.file_size(),
            &self.cfg.store_host,
            self.cfg.prop_crc,
        );
        let files = match self.make_room(&first, &needs) {
            Ok(files) => files,
            Err(e) => {
                out.status = PutStatus::CreateMappedFileFailed;
                out.reason = Some(format!("cannot make room for the batch: {e}"));
                return Ok(out);
            }
        };
        let mut i = 0usize;
        let mut qo = *hold.st.table.slot(b.topic, b.queue_id);
        out.first_queue_offset = qo;
        for (k, (file, need)) in files.iter().zip(&needs).enumerate() {
            if k > 0 {
                // The previous file is full (it ends with a blank).
                let last = k + 1 == files.len();
                if let Err(e) = self.mfq.push_prepared(file, last) {
                    for f in &files[k + 1..] {
                        self.mfq.discard_prepared(f);
                    }
                    return Err(e);
                }
                hold.st.current = Some(file.clone());
            }
            let ts = self.stamp(&mut hold.st);
            // The busy check sees how long this file's worth holds the lock.
            self.lock_since.store(ts, Ordering::Relaxed);
            if k == 0 {
                out.store_timestamp = ts;
            }
            let start = i;
            let offsets = want_offsets.then_some(&mut out.offsets);
            let worth = self.write_file_worth(file, *need, b, ts, (&mut i, &mut qo), offsets);
            let worth = match worth {
                Ok(w) => w,
                Err(e) => {
                    // Reserved above: an append cannot fail here short of a
                    // broken invariant; the files made ahead go.
                    for f in &files[k + 1..] {
                        self.mfq.discard_prepared(f);
                    }
                    return Err(e);
                }
            };
            if i > start {
                file.set_store_timestamp(ts);
                *hold.st.table.slot(b.topic, b.queue_id) = qo;
                if out.first_offset < 0 {
                    out.first_offset = worth.first.unwrap_or(-1);
                }
                out.count += i - start;
                out.bytes += worth.bytes;
                self.puts.add_locked((i - start) as u64, worth.bytes);
                out.end_offset = worth.end;
                on_file();
            }
        }
        debug_assert_eq!(i, n, "the plan holds every message of the batch");
        drop(hold);
        Ok(out)
    }

    /// Writes messages from `*i` on into `file` (its reserved `need`
    /// bytes), queue offsets from `*qo`, until the batch ends or the next
    /// record does not fit (then a blank ends the file); advances both.
    fn write_file_worth(
        &self,
        file: &MappedFile,
        need: usize,
        b: &BatchInput<'_>,
        ts: i64,
        (i, qo): (&mut usize, &mut i64),
        mut offsets: Option<&mut Vec<i64>>,
    ) -> Result<FileWorth> {
        let n = b.bodies.len();
        let sys_flag = self.batch_sys_flag(b);
        let store_host = self.cfg.store_host;
        let prop_crc = self.cfg.prop_crc;
        let from = file.file_from_offset() as i64;
        let mut worth = FileWorth {
            first: None,
            bytes: 0,
            end: -1,
        };
        file.append_reserved(need, |tail, at| {
            let mut pos = 0usize;
            while *i < n {
                let len = b.record_len(*i, &store_host, prop_crc);
                if pos + len + END_FILE_MIN_BLANK_LENGTH > tail.len() {
                    // END_OF_FILE: the blank fills the file; go on in the next.
                    let rest = tail.len() - pos;
                    encode_blank(&mut tail[pos..], rest);
                    return (tail.len(), ());
                }
                let phy = from + (at + pos) as i64;
                worth.first.get_or_insert(phy);
                let spec = b.spec_of(*i, sys_flag);
                let w = encode_v1_crc_of_copy(
                    &mut tail[pos..],
                    &spec,
                    &StoreStamp {
                        sys_flag,
                        store_host: &store_host,
                        queue_offset: *qo,
                        phy_offset: phy,
                        store_timestamp: ts,
                        prop_crc,
                    },
                );
                debug_assert_eq!(w, len);
                if let Some(o) = offsets.as_deref_mut() {
                    o.push(phy);
                }
                pos += len;
                worth.bytes += len as u64;
                worth.end = phy + len as i64;
                *qo += 1;
                *i += 1;
            }
            (pos, ())
        })?;
        Ok(worth)
    }

    /// Makes room for a batch before it writes: reserves `needs[0]` bytes
    /// past the write position of `first` (the file being written), then
    /// makes the files after it (one per further entry of `needs`) and
    /// reserves their `needs[k]` bytes. Returns `first` and the files made;
    /// on failure (logged) the files made are removed again.
    fn make_room(&self, first: &Arc<MappedFile>, needs: &[usize]) -> Result<Vec<Arc<MappedFile>>> {
        let reserve = |f: &MappedFile, end: usize| {
            f.ensure_reserved(end).inspect_err(|e| {
                RESERVE_FAILURES.log(log::Level::Error, || {
                    format!("cannot reserve CommitLog space: {e}")
                });
            })
        };
        reserve(first, first.wrote_position() + needs[0])?;
        let mut files = vec![first.clone()];
        let size = first.file_size() as u64;
        for (k, need) in needs.iter().enumerate().skip(1) {
            let made = self
                .mfq
                .prepare_file(first.file_from_offset() + k as u64 * size)
                .inspect_err(|e| self.create_failed(e))
                .and_then(|f| {
                    reserve(&f, *need).map(|()| f.clone()).inspect_err(|_| {
                        self.mfq.discard_prepared(&f);
                    })
                });
            match made {
                Ok(f) => files.push(f),
                Err(e) => {
                    for f in &files[1..] {
                        self.mfq.discard_prepared(f);
                    }
                    return Err(e);
                }
            }
        }
        if files.len() > 1 {
            self.created_file();
        }
        Ok(files)
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
    /// last one or a new one; the error (logged) when none can be created.
    #[inline]
    fn file_with_room(&self, st: &mut PutState) -> Result<Arc<MappedFile>> {
        match &st.current {
            Some(f) if !f.is_full() => Ok(f.clone()),
            _ => match self.mfq.last_file_or_create(0) {
                Ok(f) => {
                    self.created_file();
                    st.current = Some(f.clone());
                    Ok(f)
                }
                Err(e) => {
                    self.create_failed(&e);
                    Err(e)
                }
            },
        }
    }
}

/// Where a batch goes, starting in a file with `room` bytes left: the bytes
/// it takes in that file and then in each new file (of `file_size` bytes)
/// it needs, laid out as [`CommitLog::append_batch`] writes it. A file the
/// batch goes on from ends with a blank (it takes the whole rest); the
/// last file takes the records and a blank's 8 bytes (at most its rest).
fn plan_files(
    b: &BatchInput<'_>,
    room: usize,
    file_size: usize,
    store_host: &SocketAddr,
    prop_crc: bool,
) -> Vec<usize> {
    let mut needs = Vec::with_capacity(1);
    let mut tail = room;
    let mut pos = 0usize;
    for i in 0..b.bodies.len() {
        let len = b.record_len(i, store_host, prop_crc);
        if pos + len + END_FILE_MIN_BLANK_LENGTH > tail {
            needs.push(tail);
            tail = file_size;
            pos = 0;
        }
        pos += len;
    }
    needs.push((pos + END_FILE_MIN_BLANK_LENGTH).min(tail));
    needs
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::message::DEFAULT_BORN_HOST;

    const SEG: usize = 4096;
    const MAX: usize = 1024;

    fn commitlog(dir: &std::path::Path, prop_crc: bool) -> CommitLog {
        let cfg = crate::log::commitlog::CommitLogConfig {
            dir: dir.join("commitlog"),
            file_size: SEG,
            max_message_size: MAX,
            store_host: "127.0.0.1:10911".parse().unwrap(),
            delay_levels: vec![1000, 5000],
            prop_crc,
        };
        CommitLog::load(cfg, true).unwrap()
    }

    /// A batch of a good message then `body` with `props` to `topic`.
    fn refusal(cl: &CommitLog, topic: &str, queue_id: i32, body: &[u8], props: &[u8]) -> Refused {
        let bodies: [&[u8]; 2] = [b"ok", body];
        let mut all = b"A\x01b".to_vec();
        all.extend_from_slice(props);
        let ends = [3, all.len()];
        let b = BatchInput {
            topic,
            queue_id,
            flag: 0,
            born_timestamp: 1,
            born_host: DEFAULT_BORN_HOST,
            bodies: &bodies,
            props: &all,
            props_ends: &ends,
        };
        cl.validate_batch(&b).unwrap_err()
    }

    #[test]
    fn a_broken_rule_reads_the_same_alone_and_in_a_batch() {
        let dir = tempfile::tempdir().unwrap();
        for prop_crc in [false, true] {
            let cl = commitlog(dir.path(), prop_crc);
            let long_chars = format!("k\u{1}{}", "v".repeat(40_000));
            let long_bytes = format!("k\u{1}{}", "é".repeat(20_000));
            let cases: [(&str, i32, Vec<u8>, &[u8]); 7] = [
                ("a b", 0, b"x".to_vec(), b""),
                ("T", -1, b"x".to_vec(), b""),
                ("T", 0, vec![b'x'; MAX + 1], b""),
                ("T", 0, b"x".to_vec(), b"DELAY\x01soon"),
                ("T", 0, b"x".to_vec(), long_chars.as_bytes()),
                ("T", 0, b"x".to_vec(), long_bytes.as_bytes()),
                ("T", 0, vec![b'x'; MAX], &[b'p'; 3000][..]),
            ];
            for (topic, queue_id, body, props) in cases {
                let spec =
                    MessageSpec::new(topic, queue_id, body.clone()).with_properties(props.to_vec());
                let Err(alone) = cl.prepare(spec) else {
                    panic!("{topic} {queue_id} {props:?}: accepted")
                };
                let batch = refusal(&cl, topic, queue_id, &body, props);
                let whole_batch = topic != "T" || queue_id < 0;
                let want = if whole_batch {
                    alone.reason.clone()
                } else {
                    format!("message 1: {}", alone.reason)
                };
                assert_eq!((batch.status, batch.reason), (alone.status, want));
            }
        }
    }

    #[test]
    fn a_batch_refuses_a_delayed_message_and_the_store_s_property_crc() {
        let dir = tempfile::tempdir().unwrap();
        let cl = commitlog(dir.path(), false);
        let delayed = refusal(&cl, "T", 0, b"x", b"DELAY\x012");
        assert_eq!(
            delayed.reason,
            "message 1: delayed messages cannot be put in a batch"
        );
        let crc = refusal(&cl, "T", 0, b"x", b"__CRC32#\x010000000001");
        assert_eq!(crc.reason, format!("message 1: {}", prop_crc_given()));
        // DELAY 0 is no delay: the batch is accepted.
        let bodies: [&[u8]; 1] = [b"x"];
        let props = b"DELAY\x010";
        let b = BatchInput {
            topic: "T",
            queue_id: 0,
            flag: 0,
            born_timestamp: 1,
            born_host: DEFAULT_BORN_HOST,
            bodies: &bodies,
            props,
            props_ends: &[props.len()],
        };
        assert!(cl.validate_batch(&b).is_ok());
    }
}
