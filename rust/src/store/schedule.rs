//! Delayed delivery, the engine step (docs/format.md §17.3): re-put the due messages of
//! one delay level from `SCHEDULE_TOPIC_XXXX` into their real topic.
//!
//! The Python schedule service decides *when* (one timer per level) and
//! keeps the progress; one call here reads the due units of a level from the
//! given consume-queue offset and appends their delivered copies in one
//! batch, returning how far it got.
//!
//! The delivered copy is what RocketMQ 4.9.8's `messageTimeup` writes: the
//! stored body, flag, sys flag, born time and host, reconsume times and the
//! properties string as stored — `DELAY`, `REAL_TOPIC` and `REAL_QID` stay in
//! it — to topic `REAL_TOPIC`, queue `REAL_QID`, with a new store time. The
//! delay conversion of the put path is skipped, so the copy is not parked
//! again; its consume-queue tag code is the hash of `TAGS` (dispatch computes
//! it as for any message outside `SCHEDULE_TOPIC_XXXX`).

use super::Store;
use crate::error::{Result, StoreError};
use crate::log::commitlog::{CommitLog, PutOutcome, PutStatus, RecordRead};
use crate::log::message::{
    find_property, props, MessageSpec, RecordView, SCHEDULE_TOPIC, TRANS_HALF_TOPIC,
};
use crate::queue::consume_queue::CqUnit;
use crate::ratelog::RateLimited;
use std::borrow::Cow;

/// Copies that were dropped (unreadable record, no real topic, refused put).
static DROPPED: RateLimited = RateLimited::new();

/// What one delivery step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliverStep {
    /// The first consume-queue offset of the level not handled yet: the
    /// level's new progress.
    pub next_offset: i64,
    /// Copies appended to their real topic.
    pub delivered: u64,
    /// Units passed over without a copy (logged): a record that cannot be
    /// read, one without a usable `REAL_TOPIC`/`REAL_QID`, a copy the put
    /// refuses for good.
    pub dropped: u64,
    /// Deliver time (ms) of the unit at `next_offset` when it is not due
    /// yet; -1 when the step stopped for another reason.
    pub due_at: i64,
    /// True when the step stopped at `max_msgs` with due units possibly left.
    pub more: bool,
    /// Why the step stopped before a due message (the store takes no puts,
    /// a CommitLog file could not be created); it is retried later.
    pub blocked: Option<String>,
    /// CommitLog offset just past the last copy appended (0 when none).
    pub end_offset: u64,
}

/// A parked message to deliver: its record and its real queue.
struct Parked {
    raw: Vec<u8>,
    view: RecordView,
    topic: String,
    qid: i32,
}

/// A unit of the level as the step found it.
enum Item {
    /// Nothing to put: pass over the unit.
    Skip,
    /// Put the copy of this message.
    Put(Box<Parked>),
}

/// Why the stored record cannot be delivered, or its real topic and queue.
fn real_destination(view: &RecordView, raw: &[u8]) -> std::result::Result<(String, i32), String> {
    let p = &raw[view.properties.clone()];
    let topic = find_property(p, props::REAL_TOPIC)
        .and_then(|t| std::str::from_utf8(t).ok())
        .ok_or("it has no REAL_TOPIC property")?;
    let qid = find_property(p, props::REAL_QID)
        .and_then(|q| std::str::from_utf8(q).ok())
        .and_then(|q| q.trim().parse::<i32>().ok())
        .ok_or("it has no REAL_QID property holding a queue id")?;
    // A copy into the half-message topic would be a transaction nobody
    // prepared; one into SCHEDULE_TOPIC_XXXX would be parked and delivered
    // again for ever.
    if topic == TRANS_HALF_TOPIC || topic == SCHEDULE_TOPIC {
        return Err(format!("its REAL_TOPIC is {topic}"));
    }
    Ok((topic.to_owned(), qid))
}

/// RocketMQ's `correctDeliverTimestamp`: a deliver time further ahead than
/// the level's delay (the clock went back since the message was stored)
/// counts as due now.
fn deliver_time(tags_code: i64, now: i64, delay: i64) -> i64 {
    if tags_code > now.saturating_add(delay) {
        now
    } else {
        tags_code
    }
}

/// Delivers the messages of delay `level` (1-based) that are due at `now`
/// (ms since the epoch), starting at consume-queue offset `from` of
/// `SCHEDULE_TOPIC_XXXX` queue `level − 1`; at most `max_msgs` copies.
///
/// `from` below the queue's min offset (expired files) starts at the min.
/// Units are taken in queue order and the step stops at the first one not
/// yet due, so a level's progress is always one offset.
pub fn deliver_due(
    store: &Store,
    level: usize,
    from: i64,
    now: i64,
    max_msgs: usize,
) -> Result<DeliverStep> {
    store.check_open()?;
    if store.is_read_only() {
        return Err(StoreError::ReadOnly);
    }
    let levels = &store.options().delay_levels;
    if level == 0 || level > levels.len() {
        return Err(StoreError::InvalidArgument(format!(
            "delay level {level} is not configured (message_delay_level has {} levels)",
            levels.len()
        )));
    }
    let delay = levels[level - 1];
    let mut step = DeliverStep {
        next_offset: from.max(0),
        due_at: -1,
        ..DeliverStep::default()
    };
    let Some(cq) = store
        .consume_queues()
        .get(SCHEDULE_TOPIC, (level - 1) as i32)
    else {
        return Ok(step);
    };
    let max_msgs = max_msgs.max(1);
    let mut offset = step.next_offset.max(cq.min_offset_in_queue());
    let end = cq.max_offset_in_queue();
    let commitlog = store.commitlog();
    // (consume-queue offset, what to do with it), in queue order.
    let mut items: Vec<(i64, Item)> = Vec::new();
    let mut puts = 0usize;
    'gather: while offset < end && puts < max_msgs {
        let Some(units) = cq.units(offset, max_msgs - puts) else {
            // Not readable here: below the min (files expired meanwhile) or
            // the end of a file's data; move on if there is a next file.
            let min = cq.min_offset_in_queue();
            if offset < min {
                offset = min;
                continue;
            }
            let next = cq.roll_next_file(offset);
            if next < end && cq.unit_at(next).is_some() {
                offset = next;
                continue;
            }
            break;
        };
        for u in units {
            if puts >= max_msgs {
                break 'gather;
            }
            if u.is_pre_blank() || !u.is_valid() {
                items.push((offset, Item::Skip));
                offset += 1;
                continue;
            }
            let at = deliver_time(u.tags_code, now, delay);
            if at > now {
                step.due_at = at;
                break 'gather;
            }
            let Some(item) = judge_due_unit(commitlog, &u, offset, level, &mut step) else {
                // Written but not readable yet: try again next time.
                break 'gather;
            };
            if matches!(item, Item::Put(_)) {
                puts += 1;
            }
            items.push((offset, item));
            offset += 1;
        }
    }
    step.more = puts >= max_msgs && offset < end;
    let outcomes = put_copies(store, &items, puts, &mut step)?;
    step.next_offset = offset;
    account_outcomes(&mut step, &items, outcomes);
    Ok(step)
}

/// What to do with a due unit of level `level` at queue offset `offset`:
/// put a copy of its message, or skip it (dropped: logged and counted);
/// `None` when its record is written but not readable yet.
fn judge_due_unit(
    commitlog: &CommitLog,
    u: &CqUnit,
    offset: i64,
    level: usize,
    step: &mut DeliverStep,
) -> Option<Item> {
    let read = match u64::try_from(u.phy_offset) {
        Ok(phy) => commitlog.read_checked(phy),
        Err(_) => RecordRead::NoRecord,
    };
    let found = match read {
        RecordRead::Found(v, raw) if v.total_size as i64 == u.size as i64 => Ok((v, raw)),
        RecordRead::Found(..) => Err("its unit's size differs from the record's".into()),
        // Written but not readable yet: try again next time.
        RecordRead::NotYet => return None,
        RecordRead::NoFile => Err("its CommitLog file is gone".to_string()),
        RecordRead::NoRecord => Err("no record starts at its offset".to_string()),
        RecordRead::Damaged { path, reason } => Err(format!(
            "the record is damaged ({reason}) in {}",
            path.display()
        )),
    };
    Some(match found {
        Err(why) => {
            DROPPED.log(log::Level::Warn, || {
                format!(
                    "delayed message at {SCHEDULE_TOPIC} queue {} offset {offset} \
                     (CommitLog offset {}) cannot be read: {why}; it is not delivered",
                    level - 1,
                    u.phy_offset
                )
            });
            step.dropped += 1;
            Item::Skip
        }
        Ok((view, raw)) => match real_destination(&view, &raw) {
            Ok((topic, qid)) => Item::Put(Box::new(Parked {
                raw,
                view,
                topic,
                qid,
            })),
            Err(why) => {
                DROPPED.log(log::Level::Error, || {
                    format!(
                        "delayed message at {SCHEDULE_TOPIC} queue {} offset {offset} \
                         is not delivered: {why}",
                        level - 1
                    )
                });
                step.dropped += 1;
                Item::Skip
            }
        },
    })
}

/// Puts the copies among `items` (`puts` of them) in one batch. A refused
/// batch writes nothing: the step is blocked and no outcome returned.
fn put_copies(
    store: &Store,
    items: &[(i64, Item)],
    puts: usize,
    step: &mut DeliverStep,
) -> Result<Vec<PutOutcome>> {
    let specs = items.iter().filter_map(|(_, it)| match it {
        Item::Put(p) => Some(MessageSpec {
            topic: Cow::Borrowed(p.topic.as_str()),
            queue_id: p.qid,
            flag: p.view.flag,
            sys_flag: p.view.sys_flag,
            born_timestamp: p.view.born_timestamp,
            born_host: p.view.born_host,
            reconsume_times: p.view.reconsume_times,
            prepared_transaction_offset: 0,
            body: Cow::Borrowed(&p.raw[p.view.body.clone()]),
            properties: Cow::Borrowed(&p.raw[p.view.properties.clone()]),
        }),
        Item::Skip => None,
    });
    let outcomes = if puts == 0 {
        Ok(Vec::new())
    } else {
        store.put_redeliveries(specs)?
    };
    Ok(match outcomes {
        Ok(o) => o,
        Err(refused) => {
            // Nothing was written: progress stops at the first copy to put.
            step.blocked = Some(refused.reason);
            Vec::new()
        }
    })
}

/// Counts what the puts of the copies did and moves the step's progress
/// back to the first copy not delivered (blocked there).
fn account_outcomes(step: &mut DeliverStep, items: &[(i64, Item)], outcomes: Vec<PutOutcome>) {
    let mut outcomes = outcomes.into_iter();
    for (at, item) in items {
        let Item::Put(p) = item else {
            continue;
        };
        let Some(o) = outcomes.next() else {
            // Not attempted: the batch stopped before it.
            step.next_offset = *at;
            step.more = false;
            step.due_at = -1;
            if step.blocked.is_none() {
                step.blocked = Some("the batch stopped before this message".into());
            }
            break;
        };
        match o.status {
            PutStatus::PutOk | PutStatus::FlushDiskTimeout => {
                step.delivered += 1;
                step.end_offset = step
                    .end_offset
                    .max((o.wrote_offset + o.wrote_bytes as i64) as u64);
            }
            PutStatus::MessageIllegal | PutStatus::PropertiesSizeExceeded => {
                DROPPED.log(log::Level::Error, || {
                    format!(
                        "delayed message at CommitLog offset {} is not delivered to {} \
                         queue {}: {}",
                        p.view.physical_offset,
                        p.topic,
                        p.qid,
                        o.reason.as_deref().unwrap_or("refused")
                    )
                });
                step.dropped += 1;
            }
            _ => {
                step.next_offset = *at;
                step.more = false;
                step.due_at = -1;
                step.blocked = Some(
                    o.reason
                        .clone()
                        .unwrap_or_else(|| format!("the put answered {:?}", o.status)),
                );
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliver_time_corrects_a_clock_that_went_back() {
        assert_eq!(deliver_time(1_000, 500, 1_000), 1_000);
        assert_eq!(deliver_time(5_000, 500, 1_000), 500);
        assert_eq!(deliver_time(i64::MAX, i64::MAX - 1, 1_000), i64::MAX);
    }
}
