//! Single puts: validating a message against the format's rules (delay
//! conversion, CRC; [`Prepared`]), the put lock with its page-cache-busy
//! check, and the append of one record under it (rolling to a new file when
//! the record does not fit).

use std::borrow::Cow;
use std::sync::atomic::Ordering;

use crate::error::{Result, StoreError};
use crate::log::message::{
    self, body_crc, body_size_problem, compressed_body_problem, delay_level, encode_blank,
    encode_v1, properties_size_problem, props, queue_id_problem, record_len, record_size_problem,
    sys_flag_problem, sysflag, topic_problem, MessageSpec, PropertiesBuilder, StoreStamp,
    END_FILE_MIN_BLANK_LENGTH, SCHEDULE_TOPIC,
};

use super::{
    now_ms, CommitLog, LockedPut, PutOutcome, PutState, PutStatus, Refused, RESERVE_FAILURES,
};

impl From<crate::log::message::PropertyError> for Refused {
    fn from(e: crate::log::message::PropertyError) -> Self {
        let crate::log::message::PropertyError::Illegal(why) = e;
        Self::illegal(why)
    }
}

/// A message ready to append: validated, delay-converted, CRC computed.
pub struct Prepared<'a> {
    /// The message as it will be written (delay-converted).
    pub spec: MessageSpec<'a>,
    sys_flag: i32,
    crc: i32,
    /// The record ends with the property CRC.
    prop_crc: bool,
    /// Encoded record length.
    pub len: usize,
}

impl CommitLog {
    /// Validates `spec` against the put rules (`log/message/rules.rs`) and
    /// converts delayed messages (docs/format.md §17.3, §17.1).
    ///
    /// A refusal carries a sentence naming the field and the rule; the checks
    /// cost nothing more than before on the success path (the sentence is
    /// built only when a check fails).
    pub fn prepare<'a>(&self, spec: MessageSpec<'a>) -> std::result::Result<Prepared<'a>, Refused> {
        self.prepare_as(spec, false)
    }

    /// Drops a `__CRC32#` property the caller's properties carry
    /// (`has_prop_crc`, from the put's scan: a stored record's, or a stale
    /// copy's: the store writes its own, as RocketMQ 5.x deletes it before
    /// encoding) and
    /// returns the length the properties take in the record, the property
    /// CRC included when it is written.
    fn stored_properties_len(&self, spec: &mut MessageSpec<'_>, has_prop_crc: bool) -> usize {
        if has_prop_crc {
            spec.properties = Cow::Owned(message::strip_prop_crc(&spec.properties));
        }
        if self.cfg.prop_crc {
            spec.properties.len() + message::prop_crc_extra(&spec.properties)
        } else {
            spec.properties.len()
        }
    }

    /// [`CommitLog::prepare`] for a put from a producer (`redelivery` false),
    /// or for the delivered copy of a delayed message (`redelivery` true):
    /// the copy of a record already stored skips the producer's sys_flag and
    /// compressed-body rules (the stored flags and body are kept as they are;
    /// the IPv6 host bits are derived again) and the delay conversion, which
    /// would park it in `SCHEDULE_TOPIC_XXXX` once more (docs/format.md §17.3).
    fn prepare_as<'a>(
        &self,
        spec: MessageSpec<'a>,
        redelivery: bool,
    ) -> std::result::Result<Prepared<'a>, Refused> {
        let mut spec = spec;
        if let Some(why) = topic_problem(&spec.topic) {
            return Err(Refused::illegal(why));
        }
        if let Some(why) = queue_id_problem(spec.queue_id) {
            return Err(Refused::illegal(why));
        }
        if let Some(why) = body_size_problem(spec.body.len(), self.cfg.max_message_size) {
            return Err(Refused::illegal(why));
        }
        if spec.sys_flag != 0 && !redelivery {
            if let Some(why) = sys_flag_problem(spec.sys_flag) {
                return Err(Refused::illegal(why));
            }
            if spec.sys_flag & sysflag::COMPRESSED != 0 {
                if let Some(why) = compressed_body_problem(&spec.body) {
                    return Err(Refused::illegal(why));
                }
            }
        }
        // One pass over the properties finds what the put needs of them.
        let scan = message::scan_for_put(&spec.properties);
        let has_prop_crc = scan.prop_crc;
        let tran = spec.transaction_type();
        if !redelivery && (tran == sysflag::TRANSACTION_NOT || tran == sysflag::TRANSACTION_COMMIT)
        {
            if let Some(level) = scan.delay {
                let level = delay_level(level).map_err(Refused::illegal)?;
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
        let prop_crc = self.cfg.prop_crc;
        let props_len = self.stored_properties_len(&mut spec, has_prop_crc);
        if let Some(broken) = properties_size_problem(&spec.properties, props_len) {
            return Err(broken.into());
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
        if let Some(why) = record_size_problem(len, self.cfg.max_message_size, self.cfg.file_size) {
            return Err(Refused::illegal(why));
        }
        let crc = body_crc(&spec.body);
        Ok(Prepared {
            spec,
            sys_flag,
            crc,
            prop_crc,
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

    /// Sets `os_page_cache_busy_time_out_mills` (ms, ≥ 1).
    pub fn set_busy_timeout_ms(&self, ms: i64) {
        self.busy_timeout_ms.store(ms.max(1), Ordering::Relaxed);
    }

    /// RocketMQ's `isOSPageCacheBusy`: a put finding the put lock held for
    /// longer than `os_page_cache_busy_time_out_mills` is refused with
    /// `OS_PAGE_CACHE_BUSY` instead of queueing behind it (the holder is
    /// stuck on page cache or disk). Free lock: one relaxed load.
    #[inline]
    pub(super) fn page_cache_busy(&self) -> Option<Refused> {
        let since = self.lock_since.load(Ordering::Relaxed);
        if since == 0 {
            return None;
        }
        let held = now_ms() - since;
        let limit = self.busy_timeout_ms.load(Ordering::Relaxed);
        // RocketMQ ignores absurd differences (a clock step) the same way.
        (held > limit && held < 10_000_000).then(|| {
            Refused::new(
                PutStatus::OsPageCacheBusy,
                format!(
                    "the CommitLog put lock has been held for {held} ms, over \
                     os_page_cache_busy_time_out_mills ({limit} ms)"
                ),
            )
        })
    }

    /// Takes the put lock, noting when (for [`CommitLog::page_cache_busy`]).
    #[inline]
    fn lock_put(&self) -> LockedPut<'_> {
        let mut g = self.put.lock();
        let ts = self.stamp(&mut g);
        self.lock_since.store(ts, Ordering::Relaxed);
        LockedPut {
            g,
            since: &self.lock_since,
            ts,
        }
    }

    /// Appends a prepared message, waiting for the put lock.
    pub fn put_prepared(&self, p: &Prepared<'_>) -> Result<PutOutcome> {
        if let Some(busy) = self.page_cache_busy() {
            return Ok(PutOutcome::rejected(busy));
        }
        let mut st = self.lock_put();
        let ts = if self.wait_queue_free(&mut st.g, &p.spec.topic, p.spec.queue_id) {
            self.stamp(&mut st.g)
        } else {
            st.ts
        };
        self.append_locked(&mut st.g, p, ts)
    }

    /// Holds the put lock for `d` (tests of the busy check).
    #[doc(hidden)]
    pub fn hold_put_lock_for(&self, d: std::time::Duration) {
        let _st = self.lock_put();
        std::thread::sleep(d);
    }

    /// Appends a prepared message only if that cannot block: the put lock is
    /// free and the current file has room (no file must be created). `None`
    /// means "call [`CommitLog::put_prepared`] with the GIL released".
    pub fn try_put_prepared(&self, p: &Prepared<'_>) -> Option<Result<PutOutcome>> {
        let mut st = self.put.try_lock()?;
        let last = st.current.as_ref()?;
        if last.wrote_position() + p.len + END_FILE_MIN_BLANK_LENGTH > last.file_size()
            || st.is_busy(&p.spec.topic, p.spec.queue_id)
        {
            return None;
        }
        // Held only for one copy into a mapped page: not tracked for the
        // busy check, which needs a holder stuck for a second.
        let ts = self.stamp(&mut st);
        Some(self.append_locked(&mut st, p, ts))
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
        if let Some(busy) = self.page_cache_busy() {
            out.extend(specs.map(|_| PutOutcome::rejected(busy.clone())));
            return Ok(out);
        }
        let mut st = self.lock_put();
        let mut ts = st.ts;
        for s in specs {
            match s.and_then(|s| self.prepare(s)) {
                Ok(p) => {
                    if self.wait_queue_free(&mut st.g, &p.spec.topic, p.spec.queue_id) {
                        // Others wrote while this waited: take a fresh time.
                        ts = self.stamp(&mut st.g);
                    }
                    out.push(self.append_locked(&mut st.g, &p, ts)?)
                }
                Err(refused) => out.push(PutOutcome::rejected(refused)),
            }
        }
        Ok(out)
    }

    /// Appends the delivered copies of delayed messages in order under one
    /// lock hold, without the delay conversion (see [`CommitLog::prepare_as`]).
    ///
    /// A copy refused for good (`MESSAGE_ILLEGAL`, `PROPERTIES_SIZE_EXCEEDED`)
    /// gets its outcome and the next one is tried; the first put that fails
    /// for a reason that may pass (no CommitLog file could be created) ends
    /// the batch, so the result may be shorter than `specs` and nothing after
    /// a failed copy is ever written before it.
    pub fn put_redeliveries<'a>(
        &self,
        specs: impl IntoIterator<Item = MessageSpec<'a>>,
    ) -> Result<Vec<PutOutcome>> {
        let specs = specs.into_iter();
        let mut out = Vec::with_capacity(specs.size_hint().0);
        let mut st = self.put.lock();
        let ts = now_ms();
        for s in specs {
            let o = match self.prepare_as(s, true) {
                Ok(p) => self.append_locked(&mut st, &p, ts)?,
                Err(refused) => PutOutcome::rejected(refused),
            };
            let stop = !matches!(
                o.status,
                PutStatus::PutOk | PutStatus::MessageIllegal | PutStatus::PropertiesSizeExceeded
            );
            out.push(o);
            if stop {
                break;
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
            // The current file is borrowed, not cloned: no reference count
            // traffic (two atomic read-modify-writes) per put.
            let file = match &st.current {
                Some(f) if !f.is_full() => f,
                _ => match self.mfq.last_file_or_create(0) {
                    Ok(f) => {
                        self.created_file();
                        &*st.current.insert(f)
                    }
                    Err(e) => {
                        self.create_failed(&e);
                        return Ok(PutOutcome::rejected(Refused::new(
                            PutStatus::CreateMappedFileFailed,
                            format!("cannot create a CommitLog file: {e}"),
                        )));
                    }
                },
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
                    p.crc,
                    &StoreStamp {
                        sys_flag: p.sys_flag,
                        store_host: &self.cfg.store_host,
                        queue_offset,
                        phy_offset: phy,
                        store_timestamp: ts,
                        prop_crc: p.prop_crc,
                    },
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
            if appended.is_none() {
                // The blank filled the file: its age is now fixed.
                file.stamp_mtime_when_full();
            }
            if let Some(phy) = appended {
                file.set_store_timestamp(ts);
                self.puts.add_locked(1, p.len as u64);
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
        Err(StoreError::internal(
            "message did not fit in a fresh CommitLog file",
        ))
    }
}
