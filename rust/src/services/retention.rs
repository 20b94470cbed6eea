//! Retention: the single steps the Python retention service runs to delete
//! expired files (docs/format.md §16). The service decides *when* (clock,
//! `delete_when`, disk usage, size cap) and passes its decision whole as a
//! [`RetentionPolicy`]; these steps do the file work, each a batch.
//!
//! ```text
//!  CommitLog  [f0][f1][f2][f3][f4]  <- f4 is written: never deleted
//!              ^^^^^^^^ expired (mtime + file_reserved_time <= now), at most
//!                       `max_files` a round, stopping at the first file
//!                       that is not expired (never a hole in the middle)
//!  new CommitLog min = start of f2
//!  ConsumeQueue files whose last unit points below it, then the min
//!  offset of every queue (`correct_min_offset`), then index files whose
//!  last entry points below it (never the newest of each).
//! ```
//!
//! A file's age is its mtime: a CommitLog file gets the store time of its
//! last message as mtime when it fills (`MappedFile::stamp_mtime_when_full`),
//! and files written by an earlier process or by RocketMQ keep theirs.
//!
//! Deleting unlinks the file at once; the mapping lives as long as a reader
//! still holds the file (`Arc<MappedFile>`), so a read in progress finishes
//! on intact bytes and nothing is ever unmapped under a reader. RocketMQ's
//! forced release after `destroyMapedFileIntervalForcibly` is not needed:
//! the last holder unmaps, whenever it lets go.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::index::index_service::IndexStore;
use crate::log::commitlog::CommitLog;
use crate::queue::cq_table::ConsumeQueueTable;
use crate::ratelog::RateLimited;

/// Expired CommitLog files kept because dispatch had not passed them
/// (rate-limited log).
static HELD_BY_DISPATCH: RateLimited = RateLimited::new();

/// What one CommitLog step may delete: the retention service's decision for
/// one round, passed whole from Python to the step (a knob is a field here,
/// not a parameter of every layer in between).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// The service's clock, ms since the epoch.
    pub now_ms: i64,
    /// Age (by mtime) a file must reach at `now_ms` to go
    /// (`file_reserved_time`, in ms).
    pub reserved_ms: i64,
    /// Pause between two deletions (`delete_commit_log_files_interval`).
    pub interval: Duration,
    /// Delete whatever the age (disk usage above a watermark, a forced
    /// round, the size cap).
    pub immediately: bool,
    /// At most this many files in the step (`delete_file_batch_max`).
    pub max_files: usize,
}

impl RetentionPolicy {
    /// Whether a file last modified at `modified_ms` may go: old enough, or
    /// `immediately`.
    fn expired(&self, modified_ms: i64) -> bool {
        self.immediately || self.now_ms >= modified_ms.saturating_add(self.reserved_ms)
    }
}

/// What one CommitLog step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitLogRetention {
    /// CommitLog files deleted.
    pub deleted: usize,
    /// Start of the first deleted file (-1 when none).
    pub from_offset: i64,
    /// New CommitLog min offset (-1 when the log holds no file).
    pub min_offset: i64,
}

/// What one queue step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueRetention {
    /// Consume-queue files deleted.
    pub consume_queue_files: usize,
    /// Index files deleted.
    pub index_files: usize,
}

/// Deletes the oldest CommitLog files `policy` lets go (see
/// [`RetentionPolicy`]), never the last file, never a file dispatch has not
/// passed (`dispatched`, the dispatch offset: its records have no queue
/// units yet, and the queues would skip their offsets). Stops at the first
/// file that is not expired, not dispatched or cannot be deleted.
pub fn delete_expired_commit_log(
    commitlog: &CommitLog,
    policy: &RetentionPolicy,
    dispatched: u64,
) -> Result<CommitLogRetention> {
    let mfq = commitlog.queue();
    let mut report = CommitLogRetention {
        from_offset: -1,
        ..Default::default()
    };
    if !mfq.is_writable() {
        return Err(crate::error::StoreError::ReadOnly);
    }
    let files = mfq.files();
    let candidates = files.len().saturating_sub(1);
    let mut first_err = None;
    for f in files.iter().take(candidates.min(policy.max_files)) {
        // Read before the file goes: a deleted file has no mtime.
        let modified_ms = f.last_modified_ms();
        if !policy.expired(modified_ms) {
            break;
        }
        if f.file_from_offset() + f.file_size() as u64 > dispatched {
            HELD_BY_DISPATCH.log(log::Level::Warn, || {
                format!(
                    "CommitLog file {} is kept until it is dispatched (dispatch is at {dispatched})",
                    f.path().display()
                )
            });
            break;
        }
        if report.deleted > 0 && !policy.interval.is_zero() {
            std::thread::sleep(policy.interval);
        }
        // Out of the queue first, so no new reader finds it; readers that
        // already hold it keep the mapping until they let go.
        let removed = mfq.remove_head(1);
        debug_assert!(removed.first().is_some_and(|r| Arc::ptr_eq(r, f)));
        if let Err(e) = f.destroy() {
            log::warn!("cannot delete expired CommitLog file: {e}");
            first_err = Some(e);
            break;
        }
        log::info!(
            "deleted expired CommitLog file {} (age {:.1} h)",
            f.path().display(),
            (policy.now_ms - modified_ms).max(0) as f64 / 3_600_000.0
        );
        if report.deleted == 0 {
            report.from_offset = f.file_from_offset() as i64;
        }
        report.deleted += 1;
    }
    report.min_offset = commitlog.min_offset();
    if report.deleted > 0 {
        sync_dir(mfq.dir());
    }
    match first_err {
        Some(e) if report.deleted == 0 => Err(e),
        _ => Ok(report),
    }
}

/// Deletes ConsumeQueue files wholly below CommitLog offset `min_phy` (and
/// corrects every queue's min offset), pausing `interval` after each queue
/// that lost files, then index files whose entries all point below it.
pub fn delete_expired_queues(
    cqs: &ConsumeQueueTable,
    index: Option<&IndexStore>,
    min_phy: i64,
    interval: Duration,
) -> QueueRetention {
    let mut report = QueueRetention::default();
    for cq in cqs.all() {
        let n = cq.delete_expired_by_offset(min_phy);
        if n > 0 {
            log::info!(
                "deleted {n} expired consume queue file(s) of {}/{}",
                cq.topic(),
                cq.queue_id()
            );
            report.consume_queue_files += n;
            if !interval.is_zero() {
                std::thread::sleep(interval);
            }
        }
    }
    if let Some(index) = index {
        report.index_files = index.delete_expired(min_phy);
        if report.index_files > 0 {
            log::info!("deleted {} expired index file(s)", report.index_files);
        }
    }
    report
}

/// Makes the deletions durable. A failure is logged, not returned: the
/// files are gone either way, and a name that comes back after a crash is
/// deleted again by the next round.
fn sync_dir(dir: &std::path::Path) {
    if let Err(e) = crate::paths::sync_dir(dir) {
        log::warn!("{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::commitlog::CommitLogConfig;
    use crate::log::message::MessageSpec;

    fn log(dir: &std::path::Path) -> CommitLog {
        CommitLog::load(
            CommitLogConfig {
                dir: crate::paths::commit_log_dir(dir),
                file_size: 256,
                max_message_size: 1024,
                store_host: "127.0.0.1:10911".parse().unwrap(),
                delay_levels: vec![1000],
                prop_crc: true,
            },
            true,
        )
        .unwrap()
    }

    fn put(cl: &CommitLog) {
        let spec = MessageSpec {
            born_host: "127.0.0.1:1".parse().unwrap(),
            ..MessageSpec::new("t", 0, &[7u8; 100]).born_at(1)
        };
        let out = cl.put(spec).unwrap();
        assert_eq!(out.status, crate::log::commitlog::PutStatus::PutOk);
    }

    #[test]
    fn deletes_oldest_files_never_the_last_and_a_reader_keeps_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let cl = log(dir.path());
        for _ in 0..8 {
            put(&cl); // one 191-byte record per 256-byte file
        }
        let files = cl.queue().files();
        assert_eq!(files.len(), 8);
        let held = files[0].clone();
        let before = held.read(0, 191).unwrap().to_vec();
        let now = crate::log::commitlog::now_ms();
        let policy = RetentionPolicy {
            now_ms: now,
            reserved_ms: 3_600_000,
            interval: Duration::ZERO,
            immediately: false,
            max_files: 10,
        };
        // Nothing is old enough yet.
        let r = delete_expired_commit_log(&cl, &policy, u64::MAX).unwrap();
        assert_eq!(r.deleted, 0);
        // Everything is, but at most 3 a round.
        let aged = RetentionPolicy {
            now_ms: now + 7_200_000,
            max_files: 3,
            ..policy
        };
        let r = delete_expired_commit_log(&cl, &aged, u64::MAX).unwrap();
        assert_eq!(r.deleted, 3);
        assert_eq!(r.from_offset, 0);
        assert_eq!(r.min_offset, 3 * 256);
        assert!(!held.path().exists(), "unlinked at once");
        assert_eq!(
            held.read(0, 191).unwrap(),
            &before[..],
            "reader's bytes intact"
        );
        // Not past what is dispatched, whatever the age.
        let now_all = RetentionPolicy {
            now_ms: 0,
            reserved_ms: 0,
            immediately: true,
            max_files: 100,
            ..policy
        };
        let r = delete_expired_commit_log(&cl, &now_all, 4 * 256 - 1).unwrap();
        assert_eq!(r.deleted, 0, "file 3 ends past the dispatch offset");
        let r = delete_expired_commit_log(&cl, &now_all, u64::MAX).unwrap();
        assert_eq!(r.deleted, 4, "immediately: all but the last");
        assert_eq!(cl.queue().len(), 1);
        assert_eq!(cl.min_offset(), 7 * 256);
    }
}
