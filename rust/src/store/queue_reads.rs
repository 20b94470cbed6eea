//! RocketMQ's `MessageStore` calls about one queue's offsets and times:
//! `getMaxOffsetInQueue`, `getMinOffsetInQueue`, `getCommitLogOffsetInQueue`,
//! `getOffsetInQueueByTime`, `getEarliestMessageTime` and
//! `getMessageStoreTimeStamp`. Each looks the queue up (an unknown queue
//! answers 0, or -1 for a time, as RocketMQ does) and reads its units and,
//! for times, the CommitLog records they point at.
//!
//! They read what is dispatched: a caller that wants its own acknowledged
//! puts waits for them first ([`Store::await_visible`]).

use std::sync::Arc;

use super::Store;
use crate::error::Result;
use crate::queue::consume_queue::ConsumeQueue;

impl Store {
    /// The consume queue `topic`/`queue_id`, if it exists.
    pub fn queue(&self, topic: &str, queue_id: i32) -> Result<Option<Arc<ConsumeQueue>>> {
        self.check_open()?;
        Ok(self.consume_queues().get(topic, queue_id))
    }

    /// One past the last logical offset of the queue (0 when unknown).
    pub fn max_offset_in_queue(&self, topic: &str, queue_id: i32) -> Result<i64> {
        Ok(self
            .queue(topic, queue_id)?
            .map_or(0, |q| q.max_offset_in_queue()))
    }

    /// The first logical offset of the queue (0 when unknown).
    pub fn min_offset_in_queue(&self, topic: &str, queue_id: i32) -> Result<i64> {
        Ok(self
            .queue(topic, queue_id)?
            .map_or(0, |q| q.min_offset_in_queue()))
    }

    /// CommitLog offset of the message at logical offset `cq_offset` (0 when
    /// there is none).
    pub fn commit_log_offset_in_queue(
        &self,
        topic: &str,
        queue_id: i32,
        cq_offset: i64,
    ) -> Result<i64> {
        Ok(self
            .queue(topic, queue_id)?
            .and_then(|q| q.unit_at(cq_offset))
            .filter(|u| !u.is_pre_blank())
            .map_or(0, |u| u.phy_offset))
    }

    /// Logical offset of the message stored nearest to `timestamp` (ms), by
    /// RocketMQ's rule (0 when the queue is unknown).
    pub fn offset_in_queue_by_time(
        &self,
        topic: &str,
        queue_id: i32,
        timestamp: i64,
    ) -> Result<i64> {
        let Some(q) = self.queue(topic, queue_id)? else {
            return Ok(0);
        };
        let cl = self.commitlog();
        Ok(
            q.offset_in_queue_by_time(timestamp, cl.min_offset(), |phy, _| {
                cl.store_timestamp_at(phy)
            }),
        )
    }

    /// Store time of the queue's first message (-1 when there is none).
    pub fn earliest_message_time(&self, topic: &str, queue_id: i32) -> Result<i64> {
        let Some(q) = self.queue(topic, queue_id)? else {
            return Ok(-1);
        };
        Ok(q.unit_at(q.min_offset_in_queue())
            .and_then(|u| self.commitlog().store_timestamp_at(u.phy_offset))
            .unwrap_or(-1))
    }

    /// Store time of the message at logical offset `cq_offset` (-1 when
    /// there is none).
    pub fn message_store_timestamp(
        &self,
        topic: &str,
        queue_id: i32,
        cq_offset: i64,
    ) -> Result<i64> {
        let Some(q) = self.queue(topic, queue_id)? else {
            return Ok(-1);
        };
        Ok(q.unit_at(cq_offset)
            .filter(|u| !u.is_pre_blank())
            .and_then(|u| self.commitlog().store_timestamp_at(u.phy_offset))
            .unwrap_or(-1))
    }

    /// Walks the store times of the queue's messages at offsets `[from,
    /// max)` and tells whether they never decrease, starting after a message
    /// stored at `prev` (ms; `i64::MIN` for none). Returns `(monotone, end,
    /// last)`: the offset the walk reached and the last store time it saw
    /// (a caller resumes there when the queue grows). Units whose record is
    /// deleted or damaged are left out; the walk reads each record's header,
    /// never its body. A time search over a queue whose times decrease
    /// somewhere answers wrongly: callers check this first.
    pub fn queue_times_monotone(
        &self,
        topic: &str,
        queue_id: i32,
        from: i64,
        prev: i64,
    ) -> Result<(bool, i64, i64)> {
        let Some(q) = self.queue(topic, queue_id)? else {
            return Ok((true, from, prev));
        };
        let cl = self.commitlog();
        let end = q.max_offset_in_queue();
        let mut next = from.max(q.min_offset_in_queue());
        let mut last = prev;
        while next < end {
            self.check_open()?;
            let want = ((end - next) as usize).min(4096);
            let Some(units) = q.units(next, want) else {
                let n = q.roll_next_file(next).min(end);
                next = if n > next { n } else { end };
                continue;
            };
            if units.is_empty() {
                break;
            }
            for u in units {
                next += 1;
                if u.is_pre_blank() {
                    continue;
                }
                if let Some(ts) = cl.store_timestamp_at(u.phy_offset) {
                    if ts < last {
                        return Ok((false, next, ts));
                    }
                    last = ts;
                }
            }
        }
        Ok((true, next, last))
    }
}
