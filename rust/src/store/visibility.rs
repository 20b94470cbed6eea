//! Read-your-writes: the visibility horizon (the end of the furthest put
//! acknowledged in this process) and how a read waits for it, dispatching,
//! committing and asking for a flush itself.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Store;
use crate::consumer_offsets::ConsumerOffsetTable;
use crate::error::Result;

impl Store {
    /// True when a put acknowledged in this process is not yet visible to
    /// reads (the hot read path's only cost: two loads and a compare).
    #[inline]
    pub fn visibility_pending(&self) -> bool {
        self.acked_end.load(Ordering::Acquire) > self.dispatcher.dispatch_from()
    }

    /// End of what lookups by offset or id in this process may see: under
    /// SYNC_FLUSH `min(dispatched, flushed)`, the horizon of every read
    /// (dispatch follows the flushed offset, so queues and the index stop
    /// there too); otherwise everything written. Read-only: the end of the
    /// records this process recovered and followed.
    #[inline]
    pub fn visible_end(&self) -> u64 {
        if self.opts.read_only {
            // The records recovery and following found (never the bytes
            // past the end a writer's recovery would cut).
            self.commitlog.max_offset()
        } else if self.opts.flush.sync_flush() {
            self.dispatcher
                .dispatch_from()
                .min(self.commitlog.flushed_offset())
        } else {
            u64::MAX
        }
    }

    /// Waits until every put acknowledged before this call is visible to
    /// reads: dispatched, and under SYNC_FLUSH flushed (read-your-writes).
    /// The reader dispatches what is pending itself, commits a transient
    /// write buffer holding the data, asks the group commit for a flush;
    /// then waits, at most `sync_flush_timeout`. If dispatch or flushing
    /// failed it returns at once (and later reads do not retry): reads then
    /// serve what is visible.
    #[inline]
    pub fn await_visible(&self) -> Result<()> {
        if self.visibility_pending() {
            let deadline = self.visibility_deadline();
            self.await_visible_until(deadline, deadline).map(|_| ())
        } else {
            Ok(())
        }
    }

    /// Stops every read from waiting for puts acknowledged so far (the
    /// interpreter is exiting: no thread may stay in the engine).
    pub fn give_up_visibility(&self) {
        let acked = self.acked_end.load(Ordering::Acquire);
        self.vis_abandoned.fetch_max(acked, Ordering::AcqRel);
    }

    /// When a read starting now stops waiting for the horizon.
    pub fn visibility_deadline(&self) -> Instant {
        Instant::now() + self.opts.flush.sync_timeout
    }

    /// One slice of [`Store::await_visible`], for callers that must check
    /// for signals or interpreter exit between slices: waits until the
    /// horizon is visible or given up on (`Ok(true)`), or `stop_at` passes
    /// first (`Ok(false)`; call again with the same `deadline`).
    #[cold]
    #[inline(never)]
    pub fn await_visible_until(&self, deadline: Instant, stop_at: Instant) -> Result<bool> {
        let target = self.acked_end.load(Ordering::Acquire);
        if target <= self.dispatcher.dispatch_from()
            || target <= self.vis_abandoned.load(Ordering::Acquire)
        {
            return Ok(true);
        }
        self.vis.waits.fetch_add(1, Ordering::Relaxed);
        let mut committed = false;
        let mut dispatched = false;
        loop {
            let seen = self.dispatcher.seq();
            let from = self.dispatcher.dispatch_from();
            if from >= target {
                return Ok(true);
            }
            self.check_open()?;
            if self.dispatcher.failure().is_some() {
                self.vis.failed.fetch_add(1, Ordering::Relaxed);
                self.vis_abandoned.fetch_max(target, Ordering::AcqRel);
                return Ok(true);
            }
            // Transient pool: the data may still be in the write buffer.
            if self.opts.flush.transient
                && self.commitlog.queue().committed_where() < target
                && self.commitlog.queue().commit(0)
                && !committed
            {
                committed = true;
                self.vis.commits.fetch_add(1, Ordering::Relaxed);
            }
            if self.opts.flush.sync_flush() && self.commitlog.flushed_offset() < target {
                self.flusher.request_flush(target);
            }
            // Dispatch what is readable now instead of waiting for the thread.
            match self.dispatcher.dispatch_once((target - from) as usize) {
                Ok(st) if st.records > 0 && !dispatched => {
                    dispatched = true;
                    self.vis.inline_dispatches.fetch_add(1, Ordering::Relaxed);
                }
                Ok(_) => {}
                // A file that cannot be created or mapped for now: the
                // dispatch thread retries it (and says so in the running
                // flags); this read serves what is visible.
                Err(e) if crate::running::is_transient_resource(&e) => return Ok(true),
                Err(e) => {
                    // As when the dispatch thread fails: the store is
                    // poisoned; this read serves what is visible.
                    log::error!("dispatch failed: {e}");
                    self.dispatcher.record_failure(&e);
                    self.vis.failed.fetch_add(1, Ordering::Relaxed);
                    self.vis_abandoned.fetch_max(target, Ordering::AcqRel);
                    return Ok(true);
                }
            }
            if self.dispatcher.dispatch_from() >= target {
                return Ok(true);
            }
            if self.dispatcher.failure().is_some() || self.flusher.failure().is_some() {
                self.vis.failed.fetch_add(1, Ordering::Relaxed);
                self.vis_abandoned.fetch_max(target, Ordering::AcqRel);
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                self.vis.timeouts.fetch_add(1, Ordering::Relaxed);
                log::warn!(
                    "a read waited {:?} for acknowledged messages to become visible \
                     (visible up to {}, acknowledged up to {target}); serving what is visible",
                    self.opts.flush.sync_timeout,
                    self.dispatcher.dispatch_from()
                );
                return Ok(true);
            }
            if now >= stop_at {
                return Ok(false);
            }
            self.dispatcher
                .wait_for_seq(seen, (stop_at - now).min(Duration::from_millis(10)));
        }
    }

    /// Visibility statistics: `(waits, inline dispatches, transient
    /// commits, timeouts, failed)`.
    pub fn visibility_stats(&self) -> (u64, u64, u64, u64, u64) {
        let v = &self.vis;
        (
            v.waits.load(Ordering::Relaxed),
            v.inline_dispatches.load(Ordering::Relaxed),
            v.commits.load(Ordering::Relaxed),
            v.timeouts.load(Ordering::Relaxed),
            v.failed.load(Ordering::Relaxed),
        )
    }

    /// CommitLog offset just past the messages below the committed
    /// offsets: what must be durable before those offsets are persisted.
    /// An offset above its queue's end counts as the end; unknown queues
    /// and expired messages count for nothing.
    pub fn committed_end(&self, offsets: &ConsumerOffsetTable) -> u64 {
        let mut end = 0u64;
        for (key, qid, off) in offsets.iter() {
            let Some(cq) = self.cqs.get(key.topic(), qid) else {
                continue;
            };
            let last = off.min(cq.max_offset_in_queue()) - 1;
            if last < cq.min_offset_in_queue().max(0) {
                continue;
            }
            if let Some(u) = cq.unit_at(last).filter(|u| !u.is_pre_blank()) {
                end = end.max((u.phy_offset + u.size.max(0) as i64).max(0) as u64);
            }
        }
        end
    }

    /// Makes the CommitLog durable up to the messages below the committed
    /// `offsets`, before they are persisted (so no persisted offset ever
    /// points past durable data, in any flush mode).
    pub fn flush_for_offsets(&self, offsets: &ConsumerOffsetTable) -> Result<()> {
        self.check_open()?;
        if self.opts.read_only {
            return Ok(());
        }
        let end = self.committed_end(offsets);
        self.flusher.flush_to(end)
    }
}
