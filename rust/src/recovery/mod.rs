//! Recovery as named steps (docs/format.md §15.2, RocketMQ 4.9.8's
//! `DefaultMessageStore.recover()`), each returning a typed report.
//!
//! Opening a store ([`Store::open`](crate::store::Store::open)) takes the writer lock (creating the
//! `lock` file) and maps the files; it changes nothing else on disk. The
//! steps below then bring the store back to a consistent state. Python's
//! `RecoveryService` calls them in this order; the engine refuses a step
//! called out of order ([`StoreError::RecoveryOrder`]), and refuses puts and
//! reads until the last step ran:
//!
//! ```text
//!  open ─► check_file_sizes ─► judge_damage ─► scan_commit_log_{normally|abnormally}
//!       ─► recover_consume_queues ─► rebuild_queue_holes ─► truncate
//!       ─► rebuild_index ─► redispatch ─► clamp_consumer_offsets
//!       ─► rebuild_queue_offset_table  (recovered: puts and reads allowed)
//! ```
//!
//! RocketMQ recovers the consume queues first and then the CommitLog. Here
//! the CommitLog is judged first: a refused open (damage inside durable
//! data) must change nothing, and the queues' units are checked against the
//! CommitLog's recovered end. A read-only open runs the same steps; each
//! writes nothing there (it finds the ends only).
//!
//! [`Store::recover`](crate::store::Store::recover) runs every step in
//! order (engine-only callers).
//!
//! This module owns the step order ([`RecoveryStep`], [`RecoveryState`]),
//! the typed reports and the rules the steps share; the steps themselves are
//! methods of the store (`store/recover_scan.rs` finds the recovered end,
//! `store/recover_rebuild.rs` cuts and rebuilds at it), so the store
//! depends on recovery and never the other way round.
//!
//! # Files
//!
//! - `mod.rs`: the step order and the rules the steps share.
//! - `report.rs`: the steps' typed reports and [`RecoveryReport`].

use std::sync::Arc;

use crate::error::StoreError;
use crate::log::commitlog::{Damage, DamagePolicy};
use crate::queue::consume_queue::{ConsumeQueue, CqHole};

mod report;
pub use report::*;

/// Where a store is in its recovery, and what the steps hand each other.
#[derive(Debug, Default)]
pub struct RecoveryState {
    pub(crate) done: RecoveryStep,
    pub(crate) report: RecoveryReport,
    pub(crate) policy: Option<DamagePolicy>,
    pub(crate) start_file: usize,
    pub(crate) start_offset: u64,
    pub(crate) damaged: Vec<(u64, u64)>,
    pub(crate) max_phy_cq: i64,
    pub(crate) holes: Vec<(Arc<ConsumeQueue>, Vec<CqHole>)>,
    /// Re-index from here (a short newest index file was removed).
    pub(crate) index_from: Option<i64>,
}

impl RecoveryState {
    /// The last step that ran.
    pub fn done(&self) -> RecoveryStep {
        self.done
    }
}

/// The error for `step` called when `done` was the last step that ran.
pub(crate) fn out_of_order(step: RecoveryStep, done: RecoveryStep) -> StoreError {
    let msg = match done.next() {
        None => format!(
            "recovery step {} called after recovery finished",
            step.method()
        ),
        Some(next) => format!(
            "recovery step {} called out of order: the next step is {} (last done: {})",
            step.method(),
            next.method(),
            done.method()
        ),
    };
    StoreError::RecoveryOrder(msg)
}

/// The error for a put or read before recovery finished.
pub(crate) fn not_recovered(done: RecoveryStep) -> StoreError {
    StoreError::RecoveryOrder(format!(
        "the store is not recovered yet: run the recovery steps first (next: {})",
        done.next()
            .unwrap_or(RecoveryStep::QueueOffsetTable)
            .method()
    ))
}

/// The damaged ranges still in the log after a recovery scan: those an
/// earlier recovery recorded and those the scan skipped, below `end`.
pub(crate) fn damaged_ranges(known: &[(u64, u64)], found: &[Damage], end: u64) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = known
        .iter()
        .copied()
        .chain(found.iter().map(|d| (d.offset, d.end)))
        .filter(|&(s, e)| e > s && s < end)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}
