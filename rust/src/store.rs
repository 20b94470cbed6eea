//! The store facade the bindings drive: the writer lock, the CommitLog, the
//! running state (closed, read-only, poisoned) and the flush policy.
//!
//! Services (recovery orchestration, dispatch, expiry) are driven from
//! Python; this type offers them one engine call per step.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::allocate::{Prefaulter, DEFAULT_WINDOW};
use crate::commitlog::{
    account_record, CommitLog, CommitLogConfig, Prepared, PutOutcome, PutStatus, QueueOffsetTable,
    ScanReport,
};
use crate::error::{Result, StoreError};
use crate::lock::StoreLock;
use crate::mapped_file_queue::{detect_file_size, list_segment_files};
use crate::message::{find_property, props, MessageSpec};

/// Default CommitLog segment size for a new store (1 GiB).
pub const DEFAULT_COMMIT_LOG_FILE_SIZE: usize = 1 << 30;

/// How a store is opened.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub root: PathBuf,
    pub commit_log_dir: PathBuf,
    /// `None`: take the size from the files, or the default for a new store.
    pub commit_log_file_size: Option<usize>,
    pub max_message_size: usize,
    pub store_host: SocketAddr,
    pub delay_levels: Vec<i64>,
    pub sync_flush: bool,
    pub read_only: bool,
}

/// What recovery found and did.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    pub mode: &'static str,
    pub files_scanned: usize,
    pub bytes_scanned: u64,
    pub records: u64,
    pub end_offset: u64,
    pub bytes_truncated: u64,
    pub stop_reason: Option<String>,
}

/// An open store.
pub struct Store {
    opts: StoreOptions,
    lock: Mutex<Option<StoreLock>>,
    commitlog: CommitLog,
    closed: AtomicBool,
    poisoned: Mutex<Option<String>>,
    prefaulter: Mutex<Option<Prefaulter>>,
}

impl Store {
    /// Takes the writer lock (unless read-only) before reading anything, then
    /// loads the CommitLog files. Call [`Store::recover`] next.
    pub fn open(opts: StoreOptions) -> Result<Self> {
        let lock = if opts.read_only {
            if !opts.root.is_dir() {
                return Err(StoreError::InvalidArgument(format!(
                    "no store at {}",
                    opts.root.display()
                )));
            }
            None
        } else {
            Some(StoreLock::acquire(&opts.root.join("lock"), &opts.root)?)
        };
        let files = list_segment_files(&opts.commit_log_dir)?;
        let on_disk = detect_file_size(&opts.commit_log_dir)?;
        // A lone empty file is a crash while the first file was being created:
        // loading extends it. Any other size that differs is refused.
        let lone_short = |_cfg: usize, disk: usize| files.len() == 1 && disk == 0;
        let file_size = match (opts.commit_log_file_size, on_disk) {
            (Some(cfg), Some(disk)) if cfg != disk && !lone_short(cfg, disk) => {
                return Err(StoreError::Mismatch(format!(
                    "mapped_file_size_commit_log is {cfg} but the CommitLog files in {} are {disk} bytes",
                    opts.commit_log_dir.display()
                )))
            }
            (Some(cfg), _) => cfg,
            (None, Some(disk)) => disk,
            (None, None) => DEFAULT_COMMIT_LOG_FILE_SIZE,
        };
        let cfg = CommitLogConfig {
            dir: opts.commit_log_dir.clone(),
            file_size,
            max_message_size: opts.max_message_size,
            store_host: opts.store_host,
            delay_levels: opts.delay_levels.clone(),
        };
        let commitlog = CommitLog::load(cfg, !opts.read_only)?;
        let prefaulter = if opts.read_only {
            None
        } else {
            Prefaulter::start(commitlog.queue_arc(), DEFAULT_WINDOW)
                .map_err(|e| StoreError::io("start the prefault thread", e))
                .map(Some)?
        };
        Ok(Self {
            opts,
            lock: Mutex::new(lock),
            commitlog,
            closed: AtomicBool::new(false),
            poisoned: Mutex::new(None),
            prefaulter: Mutex::new(prefaulter),
        })
    }

    pub fn options(&self) -> &StoreOptions {
        &self.opts
    }

    pub fn commitlog(&self) -> &CommitLog {
        &self.commitlog
    }

    pub fn is_read_only(&self) -> bool {
        self.opts.read_only
    }

    /// Finds the end of valid CommitLog data, cuts what lies after it (writer
    /// only) and rebuilds the queue-offset table.
    pub fn recover(&self, check_crc: bool) -> Result<RecoveryReport> {
        let mut table = QueueOffsetTable::default();
        let scan: ScanReport = self
            .commitlog
            .scan(0, check_crc, |_, v, rec| account_record(&mut table, v, rec));
        let truncated = if self.opts.read_only {
            0
        } else {
            self.commitlog.truncate_to(scan.end_offset)?
        };
        if self.opts.read_only {
            self.set_read_only_end(scan.end_offset);
        }
        self.commitlog.set_queue_offsets(table);
        Ok(RecoveryReport {
            mode: "scan",
            files_scanned: scan.files_scanned,
            bytes_scanned: scan.bytes_scanned,
            records: scan.records,
            end_offset: scan.end_offset,
            bytes_truncated: truncated,
            stop_reason: scan.stop_reason,
        })
    }

    fn set_read_only_end(&self, end: u64) {
        for f in self.commitlog.queue().files() {
            let from = f.file_from_offset();
            let pos = end.saturating_sub(from).min(f.file_size() as u64);
            f.set_positions(pos as usize);
        }
    }

    fn check_writable(&self) -> Result<Option<PutStatus>> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        if self.opts.read_only {
            return Err(StoreError::ReadOnly);
        }
        if self.poisoned.lock().is_some() {
            return Ok(Some(PutStatus::ServiceNotAvailable));
        }
        Ok(None)
    }

    /// Checks the store state for a read.
    pub fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(StoreError::Closed)
        } else {
            Ok(())
        }
    }

    /// Validates a message for this store; `Err(status)` means rejected.
    pub fn prepare<'a>(
        &self,
        spec: MessageSpec<'a>,
    ) -> Result<std::result::Result<Prepared<'a>, PutStatus>> {
        if let Some(s) = self.check_writable()? {
            return Ok(Err(s));
        }
        Ok(self.commitlog.prepare(spec))
    }

    /// Appends without blocking, if possible (see [`CommitLog::try_put_prepared`]).
    /// Never used for SYNC_FLUSH, whose put must wait for the disk.
    pub fn try_put_fast(&self, p: &Prepared<'_>) -> Option<Result<PutOutcome>> {
        if self.opts.sync_flush {
            return None;
        }
        self.commitlog.try_put_prepared(p)
    }

    /// Appends and, under SYNC_FLUSH, waits until the record is on disk.
    pub fn put_prepared(&self, p: &Prepared<'_>) -> Result<PutOutcome> {
        let mut out = self.commitlog.put_prepared(p)?;
        if self.opts.sync_flush && out.status == PutStatus::PutOk && wants_wait(&p.spec) {
            out.status = self.flush_for_ack();
        }
        Ok(out)
    }

    /// Appends a batch under one lock hold, then one flush wait.
    pub fn put_batch<'a>(&self, specs: Vec<MessageSpec<'a>>) -> Result<Vec<PutOutcome>> {
        if let Some(s) = self.check_writable()? {
            return Ok(specs.iter().map(|_| PutOutcome::rejected(s)).collect());
        }
        let any_wait = specs.iter().any(wants_wait);
        let mut out = self.commitlog.put_batch(specs)?;
        if self.opts.sync_flush && any_wait && out.iter().any(|o| o.status == PutStatus::PutOk) {
            let st = self.flush_for_ack();
            for o in out.iter_mut().filter(|o| o.status == PutStatus::PutOk) {
                o.status = st;
            }
        }
        Ok(out)
    }

    fn flush_for_ack(&self) -> PutStatus {
        match self.commitlog.flush_all() {
            Ok(_) => PutStatus::PutOk,
            Err(e) => {
                self.poison(format!("flush failed: {e}"));
                PutStatus::FlushDiskTimeout
            }
        }
    }

    /// Marks the store unwriteable after a failed write or flush.
    pub fn poison(&self, why: String) {
        log::error!("store poisoned: {why}");
        self.poisoned.lock().get_or_insert(why);
    }

    /// Why puts are refused, if they are.
    pub fn poison_reason(&self) -> Option<String> {
        self.poisoned.lock().clone()
    }

    /// Forces everything written to disk; returns the flushed offset.
    pub fn flush(&self) -> Result<u64> {
        self.check_open()?;
        if self.opts.read_only {
            return Ok(self.commitlog.flushed_offset());
        }
        self.commitlog.flush_all().inspect_err(|e| {
            self.poison(format!("flush failed: {e}"));
        })
    }

    /// Flushes and closes; later calls fail with [`StoreError::Closed`].
    pub fn shutdown(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if let Some(mut p) = self.prefaulter.lock().take() {
            p.stop();
        }
        let flushed = if !self.opts.read_only && self.poisoned.lock().is_none() {
            self.commitlog.flush_all().map(|_| ())
        } else {
            Ok(())
        };
        // Release the writer lock even when the final flush failed.
        self.lock.lock().take();
        flushed
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// A message waits for the disk unless its `WAIT` property is `false`.
fn wants_wait(spec: &MessageSpec<'_>) -> bool {
    !matches!(find_property(&spec.properties, props::WAIT), Some(v) if v.eq_ignore_ascii_case(b"false"))
}
