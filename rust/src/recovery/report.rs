//! The recovery steps' order and the typed reports they return (one type
//! per step, and [`RecoveryReport`], all of them in one).

use std::path::PathBuf;

use crate::checkpoint::CheckpointRepair;
use crate::consumer_offsets::OffsetKey;
use crate::log::commitlog::Damage;

/// How the last writer stopped, so how the CommitLog is scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// It stopped cleanly (no abort file): scan from the third-last file.
    #[default]
    Normal,
    /// It crashed (the abort file was left behind): scan from the file the
    /// checkpoint points at and re-dispatch every valid record.
    Abnormal,
}

impl RecoveryMode {
    /// `"normal"` or `"abnormal"`.
    pub fn as_str(self) -> &'static str {
        match self {
            RecoveryMode::Normal => "normal",
            RecoveryMode::Abnormal => "abnormal",
        }
    }
}

/// The recovery steps, in the order they must run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum RecoveryStep {
    /// The store is open; no step ran yet.
    #[default]
    Opened,
    /// `check_file_sizes`.
    FileSizes,
    /// `judge_damage`.
    JudgeDamage,
    /// `scan_commit_log_normally` or `_abnormally`.
    ScanCommitLog,
    /// `recover_consume_queues`.
    ConsumeQueues,
    /// `rebuild_queue_holes`.
    QueueHoles,
    /// `truncate`.
    Truncate,
    /// `rebuild_index`.
    Index,
    /// `redispatch`.
    Redispatch,
    /// `clamp_consumer_offsets`.
    ConsumerOffsets,
    /// `rebuild_queue_offset_table` (the last step).
    QueueOffsetTable,
}

impl RecoveryStep {
    const ORDER: [RecoveryStep; 11] = [
        RecoveryStep::Opened,
        RecoveryStep::FileSizes,
        RecoveryStep::JudgeDamage,
        RecoveryStep::ScanCommitLog,
        RecoveryStep::ConsumeQueues,
        RecoveryStep::QueueHoles,
        RecoveryStep::Truncate,
        RecoveryStep::Index,
        RecoveryStep::Redispatch,
        RecoveryStep::ConsumerOffsets,
        RecoveryStep::QueueOffsetTable,
    ];

    /// The name of the store method that runs this step.
    pub fn method(self) -> &'static str {
        match self {
            RecoveryStep::Opened => "open",
            RecoveryStep::FileSizes => "check_file_sizes",
            RecoveryStep::JudgeDamage => "judge_damage",
            RecoveryStep::ScanCommitLog => "scan_commit_log_normally/abnormally",
            RecoveryStep::ConsumeQueues => "recover_consume_queues",
            RecoveryStep::QueueHoles => "rebuild_queue_holes",
            RecoveryStep::Truncate => "truncate",
            RecoveryStep::Index => "rebuild_index",
            RecoveryStep::Redispatch => "redispatch",
            RecoveryStep::ConsumerOffsets => "clamp_consumer_offsets",
            RecoveryStep::QueueOffsetTable => "rebuild_queue_offset_table",
        }
    }

    /// The step after this one (`None` after the last).
    pub fn next(self) -> Option<RecoveryStep> {
        let i = Self::ORDER.iter().position(|&s| s == self)?;
        Self::ORDER.get(i + 1).copied()
    }
}

/// What [`Store::check_file_sizes`] repaired.
#[derive(Debug, Clone, Default)]
pub struct FileSizeReport {
    /// Short newest CommitLog / ConsumeQueue files (a crash while they were
    /// created) extended with zeros to full size.
    pub short_files_extended: Vec<PathBuf>,
    /// A short newest index file (it holds no entry) removed; the index is
    /// rebuilt from where the previous file ended.
    pub short_index_file_removed: Option<PathBuf>,
    /// The checkpoint was missing (created) or short (extended).
    pub checkpoint: Option<CheckpointRepair>,
}

/// The rule [`Store::judge_damage`] set for telling a torn tail from damage.
#[derive(Debug, Clone, Default)]
pub struct DamageRule {
    /// The durable CommitLog offset from the checkpoint's mark: invalid data
    /// at or past it is a torn tail, before it damage. `None`: the
    /// checkpoint has no mark; its physicMsgTimestamp is used instead.
    pub durable_mark: Option<u64>,
    /// The checkpoint's physicMsgTimestamp (used when there is no mark).
    pub physic_msg_timestamp: i64,
    /// Damaged ranges an earlier recovery skipped (always skipped).
    pub known_damaged: Vec<(u64, u64)>,
    /// Damage inside durable data is skipped (and reported), not refused.
    pub skip_damaged: bool,
}

/// What the CommitLog scan found.
#[derive(Debug, Clone, Default)]
pub struct CommitLogScan {
    /// Normal or abnormal.
    pub mode: RecoveryMode,
    /// CommitLog offset the scan started at.
    pub start_offset: u64,
    /// CommitLog files scanned.
    pub files_scanned: usize,
    /// Bytes scanned.
    pub bytes_scanned: u64,
    /// Valid records found.
    pub records_scanned: u64,
    /// Just past the last valid record: where the log is cut.
    pub end_offset: u64,
    /// Why the scan stopped before the end of the last file, if it did.
    pub stop_reason: Option<String>,
    /// Damaged ranges inside durable data that were skipped.
    pub damaged: Vec<Damage>,
}

/// What [`Store::recover_consume_queues`] found.
#[derive(Debug, Clone, Default)]
pub struct ConsumeQueueRecovery {
    /// Consume queues recovered.
    pub consume_queues: usize,
    /// Largest CommitLog end any queue covers (-1: none).
    pub max_physic_offset: i64,
    /// Queues with damaged or lost units between good ones.
    pub queues_with_holes: usize,
}

/// What [`Store::rebuild_queue_holes`] rebuilt.
#[derive(Debug, Clone, Default)]
pub struct QueueHoleRebuild {
    /// Holes found.
    pub holes: usize,
    /// Units the holes lacked.
    pub units_missing: u64,
    /// Units rebuilt from the CommitLog.
    pub units_rebuilt: u64,
}

/// What [`Store::truncate`] cut.
#[derive(Debug, Clone, Default)]
pub struct Truncation {
    /// Where the CommitLog was cut.
    pub end_offset: u64,
    /// Non-zero CommitLog bytes cut and zeroed after the end.
    pub bytes_truncated: u64,
    /// No CommitLog file is left: every consume queue was destroyed.
    pub consume_queues_destroyed: bool,
}

/// What [`Store::rebuild_index`] did.
#[derive(Debug, Clone, Default)]
pub struct IndexRebuild {
    /// Index files destroyed: newer than the index checkpoint after a
    /// crash, or holding entries past the CommitLog end.
    pub files_destroyed: Vec<PathBuf>,
    /// CommitLog offset the index was rebuilt from.
    pub redispatch_from: Option<i64>,
    /// Records passed to the index.
    pub records: u64,
}

/// What [`Store::redispatch`] dispatched.
#[derive(Debug, Clone, Default)]
pub struct Redispatch {
    /// Records of the abnormal scan dispatched to the queues and the index.
    pub records: u64,
    /// ... of which were already in their consume queues.
    pub already_in_queues: u64,
    /// Records past the queues' ends dispatched afterwards (both modes).
    pub caught_up_records: u64,
}

/// What [`Store::clamp_consumer_offsets`] lowered.
#[derive(Debug, Clone, Default)]
pub struct ConsumerOffsetClamp {
    /// `(group on topic, queue id, old offset, new offset)`.
    pub lowered: Vec<(OffsetKey, i32, i64, i64)>,
}

/// What [`Store::rebuild_queue_offset_table`] set.
#[derive(Debug, Clone, Default)]
pub struct QueueOffsetTable {
    /// Queues in the table.
    pub queues: usize,
    /// The durable mark written with the checkpoint (`None`: read-only).
    pub durable_mark: Option<u64>,
}

/// What recovery found and did: the steps' reports in one.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// Normal or abnormal.
    pub mode: RecoveryMode,
    /// CommitLog files scanned.
    pub files_scanned: usize,
    /// Bytes scanned.
    pub bytes_scanned: u64,
    /// Valid records found.
    pub records: u64,
    /// Where the CommitLog ends (it was cut there).
    pub end_offset: u64,
    /// Bytes cut off after the end.
    pub bytes_truncated: u64,
    /// Why the scan stopped before the end of the last file, if it did.
    pub stop_reason: Option<String>,
    /// Consume queues recovered.
    pub consume_queues: usize,
    /// Records dispatched again to the queues.
    pub redispatched_records: u64,
    /// ConsumeQueue units rebuilt from the CommitLog in the holes recovery
    /// found between good units.
    pub queue_units_rebuilt: u64,
    /// Index entries rebuilt from this CommitLog offset.
    pub index_redispatch_from: Option<i64>,
    /// Records indexed again.
    pub index_redispatched_records: u64,
    /// Damaged CommitLog ranges inside durable data that were skipped.
    pub damaged: Vec<Damage>,
    /// The durable mark recovery judged by (`None`: the checkpoint had none
    /// and its physicMsgTimestamp was used).
    pub durable_mark: Option<u64>,
    /// Damaged ranges `[start, end)` an earlier recovery skipped and the
    /// durable mark keeps (skipped again without refusing the store).
    pub known_damaged: Vec<(u64, u64)>,
    /// Consumer offsets lowered to their queue's max offset.
    pub consumer_offsets_clamped: usize,
    /// Short newest files extended (found by opening, repaired by recovery).
    pub short_files_extended: Vec<PathBuf>,
    /// Index files removed or destroyed (short, newer than the index
    /// checkpoint after a crash, or past the CommitLog end).
    pub index_files_destroyed: Vec<PathBuf>,
    /// The checkpoint file was missing and was created.
    pub checkpoint_created: bool,
}
