//! The put path: validation against the running state, single puts (the
//! non-blocking fast path and the locked one), batches, redeliveries of
//! delayed messages and, under SYNC_FLUSH, the group-commit wait.

use std::sync::atomic::Ordering;

use super::Store;
use crate::error::{Result, StoreError};
use crate::ha::HaRole;
use crate::log::commitlog::{
    BatchInput, BatchOutcome, BatchRefusal, Prepared, PutOutcome, PutStatus, Refused,
};
use crate::log::message::{find_property, props, BatchProperties, MessageSpec, DEFAULT_BORN_HOST};

impl Store {
    /// A put to a closed store, or to a read-only one, is an error.
    pub fn check_open_writer(&self) -> Result<()> {
        self.check_open()?;
        if self.opts.read_only {
            return Err(StoreError::ReadOnly);
        }
        Ok(())
    }

    fn check_writable(&self) -> Result<Option<Refused>> {
        self.check_open_writer()?;
        if let Some(r) = self.slave_refusal() {
            return Ok(Some(r));
        }
        if !self.flags.is_writeable() {
            return Ok(self
                .flags
                .refusal()
                .map(|why| Refused::new(PutStatus::ServiceNotAvailable, why)));
        }
        Ok(None)
    }

    /// Why a flush wait ended with `status` (None for PUT_OK).
    fn flush_wait_reason(&self, status: PutStatus) -> Option<String> {
        (status != PutStatus::PutOk).then(|| match self.flusher.failure() {
            Some(why) => format!("the message was written but the flush failed: {why}"),
            None => format!(
                "the message was written but not confirmed on disk within \
                 sync_flush_timeout ({} ms)",
                self.opts.flush.sync_timeout.as_millis()
            ),
        })
    }

    /// The outcome of a message refused before it reached the store (its
    /// fields broke a put rule): the store's state (closed, read-only) is
    /// reported first, as for any put; a store that takes no puts now
    /// still gives the message's own refusal.
    pub fn refused(&self, why: Refused) -> Result<PutOutcome> {
        self.check_open_writer()?;
        Ok(PutOutcome::rejected(why))
    }

    /// Validates a message for this store; `Err(refused)` means rejected.
    #[allow(clippy::type_complexity)]
    pub fn prepare<'a>(
        &self,
        spec: MessageSpec<'a>,
    ) -> Result<std::result::Result<Prepared<'a>, Refused>> {
        if let Some(s) = self.check_writable()? {
            return Ok(Err(s));
        }
        Ok(self.commitlog.prepare(spec))
    }

    /// Appends without blocking, if possible (see [`CommitLog::try_put_prepared`]).
    /// Never used for SYNC_FLUSH, whose put must wait for the disk.
    pub fn try_put_fast(&self, p: &Prepared<'_>) -> Option<Result<PutOutcome>> {
        if self.opts.flush.sync_flush() || self.ha_role() == HaRole::SyncMaster {
            return None;
        }
        let r = self.commitlog.try_put_prepared(p)?;
        self.wrote();
        if let Ok(o) = &r {
            self.note_acked(o);
        }
        Some(r)
    }

    /// Appends and, under SYNC_FLUSH, waits (group commit) until the record
    /// is on disk.
    pub fn put_prepared(&self, p: &Prepared<'_>) -> Result<PutOutcome> {
        let mut out = self.commitlog.put_prepared(p)?;
        self.wrote();
        let end = (out.wrote_offset + out.wrote_bytes as i64) as u64;
        let wait = out.status == PutStatus::PutOk && wants_wait(&p.spec);
        let replica = wait
            .then(|| self.replica_check(out.wrote_offset as u64, end))
            .flatten();
        if self.opts.flush.sync_flush() && wait {
            out.status = self.flusher.wait_flushed(end);
            out.reason = self.flush_wait_reason(out.status);
        }
        if let Some(r) = replica {
            self.apply_replica_wait(&mut out.status, &mut out.reason, end, r);
        }
        self.note_acked(&out);
        Ok(out)
    }

    /// Appends a batch under one lock hold, then one flush wait.
    pub fn put_batch<'a>(
        &self,
        specs: impl IntoIterator<Item = std::result::Result<MessageSpec<'a>, Refused>>,
    ) -> Result<Vec<PutOutcome>> {
        if let Some(r) = self.check_writable()? {
            return Ok(specs
                .into_iter()
                .map(|_| PutOutcome::rejected(r.clone()))
                .collect());
        }
        let mut any_wait = false;
        let specs = specs.into_iter().inspect(|s| {
            if let Ok(s) = s {
                any_wait = any_wait || wants_wait(s);
            }
        });
        let mut out = self.commitlog.put_batch(specs)?;
        self.wrote();
        let end = out
            .iter()
            .filter(|o| o.status == PutStatus::PutOk)
            .map(|o| (o.wrote_offset + o.wrote_bytes as i64) as u64)
            .max();
        let first = out
            .iter()
            .filter(|o| o.status == PutStatus::PutOk)
            .map(|o| o.wrote_offset as u64)
            .min();
        let replica = first
            .zip(end)
            .filter(|_| any_wait)
            .and_then(|(s, e)| self.replica_check(s, e));
        let flush_wait = self.opts.flush.sync_flush() && any_wait;
        if let (true, Some(end)) = (flush_wait || replica.is_some(), end) {
            let mut st = PutStatus::PutOk;
            let mut why = None;
            if flush_wait {
                st = self.flusher.wait_flushed(end);
                why = self.flush_wait_reason(st);
            }
            if let Some(r) = replica {
                self.apply_replica_wait(&mut st, &mut why, end, r);
            }
            for o in out.iter_mut().filter(|o| o.status == PutStatus::PutOk) {
                o.status = st;
                o.reason.clone_from(&why);
            }
        }
        if let Some(last) = out.iter().rev().find(|o| o.status == PutStatus::PutOk) {
            self.note_acked(last);
        }
        Ok(out)
    }

    /// Appends a batch as [`Store::put_batch`] does, waiting for nothing:
    /// written messages are `PUT_OK`, and the flag says whether one of
    /// them asks to wait (its `WAIT` property, §15). [`Store::wait_stored`]
    /// then waits for them as a put would.
    pub fn put_batch_unwaited<'a>(
        &self,
        specs: impl IntoIterator<Item = std::result::Result<MessageSpec<'a>, Refused>>,
    ) -> Result<(Vec<PutOutcome>, bool)> {
        if let Some(r) = self.check_writable()? {
            let out = specs
                .into_iter()
                .map(|_| PutOutcome::rejected(r.clone()))
                .collect();
            return Ok((out, false));
        }
        let mut any_wait = false;
        let specs = specs.into_iter().inspect(|s| {
            if let Ok(s) = s {
                any_wait = any_wait || wants_wait(s);
            }
        });
        let out = self.commitlog.put_batch(specs)?;
        self.wrote();
        Ok((out, any_wait))
    }

    /// Waits for the CommitLog bytes `[start, end)`, already written, as a
    /// put of them waits: under SYNC_FLUSH until they are on disk, on a
    /// SYNC_MASTER until a slave holds them (§21.5), counted from now. The
    /// status and reason a put would get; `PUT_OK` makes them visible to
    /// reads in this process as an acknowledged put.
    pub fn wait_stored(&self, start: u64, end: u64) -> (PutStatus, Option<String>) {
        let replica = self.replica_check(start, end);
        let (mut status, mut why) = (PutStatus::PutOk, None);
        if self.opts.flush.sync_flush() {
            status = self.flusher.wait_flushed(end);
            why = self.flush_wait_reason(status);
        }
        if let Some(r) = replica {
            self.apply_replica_wait(&mut status, &mut why, end, r);
        }
        if status == PutStatus::PutOk {
            self.acked_end.fetch_max(end, Ordering::AcqRel);
        }
        (status, why)
    }

    /// Appends the delivered copies of delayed messages (see
    /// [`CommitLog::put_redeliveries`]); under SYNC_FLUSH waits once for the
    /// batch to be on disk (a FLUSH_DISK_TIMEOUT copy is written all the
    /// same). `Err(refused)` when the store takes no puts now (poisoned).
    #[allow(clippy::type_complexity)]
    pub fn put_redeliveries<'a>(
        &self,
        specs: impl IntoIterator<Item = MessageSpec<'a>>,
    ) -> Result<std::result::Result<Vec<PutOutcome>, Refused>> {
        if let Some(r) = self.check_writable()? {
            return Ok(Err(r));
        }
        let out = self.commitlog.put_redeliveries(specs)?;
        self.wrote();
        let end = out
            .iter()
            .filter(|o| o.status == PutStatus::PutOk)
            .map(|o| (o.wrote_offset + o.wrote_bytes as i64) as u64)
            .max();
        if let (true, Some(end)) = (self.opts.flush.sync_flush(), end) {
            self.flusher.wait_flushed(end);
        }
        Ok(Ok(out))
    }

    /// Appends `bodies` to one queue of `topic`, message `i` with the
    /// properties `props` built for it (born now, at the default born host):
    /// all or nothing. An illegal message refuses the batch (after the
    /// store's state: closed or read-only is an error, as for any put);
    /// otherwise see [`Store::put_batch_input`]. A batch not written (the
    /// room it needs could not be made: nothing is written then) says so in
    /// its reason (`... (0 of n messages were written)`), and its first
    /// queue offset is -1.
    pub fn put_bodies(
        &self,
        topic: &str,
        queue_id: i32,
        bodies: &[&[u8]],
        props: &BatchProperties,
        want_offsets: bool,
    ) -> Result<std::result::Result<BatchOutcome, BatchRefusal>> {
        let born_timestamp = self.commitlog.clock_ms();
        if let Some(why) = props.illegal() {
            self.check_open_writer()?;
            return Ok(Err(Refused::illegal(why)));
        }
        let input = BatchInput {
            topic,
            queue_id,
            flag: 0,
            born_timestamp,
            born_host: DEFAULT_BORN_HOST,
            bodies,
            props: props.bytes(),
            props_ends: props.ends(),
        };
        let mut out = match self.put_batch_input(&input, want_offsets)? {
            Ok(out) => out,
            Err(refused) => return Ok(Err(refused)),
        };
        if out.status != PutStatus::PutOk {
            let why = out
                .reason
                .take()
                .unwrap_or_else(|| format!("{:?}", out.status));
            out.reason = Some(format!(
                "{why} ({} of {} messages were written)",
                out.count,
                bodies.len()
            ));
        }
        if out.count == 0 {
            out.first_queue_offset = -1;
        }
        Ok(Ok(out))
    }

    /// Appends a batch of messages to one queue: every message is checked
    /// first and one refused message refuses the batch (nothing written);
    /// then the room it needs is made (nothing written if that fails, see
    /// `CommitLog::append_batch`), one append per CommitLog file's worth
    /// and, under SYNC_FLUSH, one flush wait for the whole batch.
    pub fn put_batch_input(
        &self,
        b: &BatchInput<'_>,
        want_offsets: bool,
    ) -> Result<std::result::Result<BatchOutcome, BatchRefusal>> {
        if let Some(r) = self.check_writable()? {
            return Ok(Err(r));
        }
        let lens = match self.commitlog.measure_batch(b) {
            Ok(lens) => lens,
            Err(r) => return Ok(Err(r)),
        };
        let dispatcher = &self.dispatcher;
        let acks = &self.acks;
        let mut out = self.commitlog.append_measured(b, &lens, want_offsets, || {
            dispatcher.wakeup();
            acks.log_grew();
        })?;
        let end = out.end_offset as u64;
        // Only SYNC_FLUSH and a SYNC_MASTER wait: only they read the
        // messages' WAIT properties (a scan of every message's).
        let wait = out.status == PutStatus::PutOk
            && out.count > 0
            && (self.opts.flush.sync_flush() || self.ha_role() == HaRole::SyncMaster)
            && (0..b.bodies.len()).any(|i| wants_wait_props(b.props_of(i)));
        let replica = wait
            .then(|| self.replica_check(out.first_offset as u64, end))
            .flatten();
        if wait && self.opts.flush.sync_flush() {
            out.status = self.flusher.wait_flushed(end);
            out.reason = self.flush_wait_reason(out.status);
        }
        if let Some(r) = replica {
            self.apply_replica_wait(&mut out.status, &mut out.reason, end, r);
        }
        if out.status == PutStatus::PutOk && out.count > 0 {
            // Reads in this process wait until the whole batch is visible.
            self.acked_end
                .fetch_max(out.end_offset as u64, Ordering::AcqRel);
        }
        Ok(Ok(out))
    }
    /// Waits for a slave (SYNC_MASTER) and lets its status override the
    /// flush's when not PUT_OK, as RocketMQ combines the two.
    fn apply_replica_wait(
        &self,
        status: &mut PutStatus,
        reason: &mut Option<String>,
        end: u64,
        check: super::replication::ReplicaCheck,
    ) {
        let (st, why) = self.replica_wait(end, check);
        if st != PutStatus::PutOk {
            *status = st;
            *reason = why;
        }
    }

    // -- visibility ----------------------------------------------------------

    /// Raises the visibility horizon to the end of an acknowledged put.
    #[inline]
    fn note_acked(&self, o: &PutOutcome) {
        if o.status == PutStatus::PutOk {
            let end = (o.wrote_offset + o.wrote_bytes as i64) as u64;
            self.acked_end.fetch_max(end, Ordering::AcqRel);
        }
    }
}

/// A message waits for the disk when its `WAIT` property is absent or
/// "true" (Java's `Boolean.parseBoolean`: any other value means false).
fn wants_wait(spec: &MessageSpec<'_>) -> bool {
    wants_wait_props(&spec.properties)
}

fn wants_wait_props(properties: &[u8]) -> bool {
    match find_property(properties, props::WAIT) {
        None => true,
        Some(v) => v.eq_ignore_ascii_case(b"true"),
    }
}
