//! Failover by hand (docs/format.md §21.8): a running slave becomes an
//! `ASYNC_MASTER`. Replication from its master stops, its log is cut at
//! the end of its last complete record (the partial record after it is
//! saved to a side file first), dispatch finishes, the queue-offset table
//! is taken from the consume queues, the promotion marker is written (a
//! later open as a `SLAVE` opens as a master) and the listener starts when
//! `ha_listen_port` is set.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use super::Store;
use crate::error::{Result, StoreError};
use crate::ha::apply::complete_end;
use crate::ha::HaRole;
use crate::paths;

/// What a promotion did.
#[derive(Debug, Clone)]
pub struct Promotion {
    /// The CommitLog end the store continues from as a master.
    pub offset: u64,
    /// The side file holding the partial record cut at `offset` (None:
    /// the log ended at a record's end).
    pub tail_file: Option<PathBuf>,
    /// Bytes in `tail_file`.
    pub tail_bytes: u64,
    /// The port it listens on for slaves (None: `ha_listen_port` not set).
    pub port: Option<u16>,
}

/// Writes `bytes` to `path` (a new file, synced with its folder).
pub(crate) fn write_side_file(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    let ctx = || format!("write {}", path.display());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::io(ctx(), e))?;
    }
    let mut f = std::fs::File::create(path).map_err(|e| StoreError::io(ctx(), e))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(|e| StoreError::io(ctx(), e))?;
    paths::sync_parent(path)
}

impl Store {
    /// Turns this running slave into an `ASYNC_MASTER` (see the module
    /// header); refused for a master or a read-only store.
    pub fn promote(&self) -> Result<Promotion> {
        self.check_open_writer()?;
        if self.is_read_only() {
            return Err(StoreError::InvalidArgument(
                "a store opened read-only cannot be promoted".into(),
            ));
        }
        if self.ha_role() != HaRole::Slave {
            return Err(StoreError::InvalidArgument(format!(
                "this store is an {} already: only a SLAVE is promoted",
                self.ha_role().name()
            )));
        }
        // Nothing more comes from the master from here on.
        self.stop_ha();
        let _g = self.promoting.lock();
        if self.ha_role() != HaRole::Slave {
            return Err(StoreError::InvalidArgument(
                "this store was promoted meanwhile".into(),
            ));
        }
        let end = self.commitlog.max_offset();
        let cut = complete_end(&self.commitlog);
        let (tail_file, tail_bytes) = self.save_tail(cut, end)?;
        self.dispatcher.end_partial_tail(|| {
            if cut < end {
                self.commitlog.truncate_to(cut)?;
            }
            Ok(())
        })?;
        self.drain_dispatch()?;
        let table = self.cqs.queue_offset_table(self.commitlog.min_offset());
        self.commitlog.set_queue_offsets(table);
        if self.commitlog.config().prop_crc {
            // This writer's own range starts where the master's bytes end.
            self.checkpoint.update_prop_crc_ranges(|r| r.open_at(cut));
            self.commitlog
                .set_prop_crc_ranges(self.checkpoint.prop_crc_ranges().for_reads());
        }
        let marker = format!("{} {cut}\n", HaRole::AsyncMaster.name());
        write_side_file(&paths::promoted_file(&self.opts.root), marker.as_bytes())?;
        self.role
            .store(HaRole::AsyncMaster.code(), Ordering::Release);
        self.start_master_prefaulter();
        log::warn!(
            "HA: promoted to ASYNC_MASTER at CommitLog offset {cut}{}",
            match &tail_file {
                Some(p) => format!(
                    " (the partial record after it, {tail_bytes} bytes, saved to {})",
                    p.display()
                ),
                None => String::new(),
            }
        );
        drop(_g);
        let port = self.start_ha()?;
        Ok(Promotion {
            offset: cut,
            tail_file,
            tail_bytes,
            port,
        })
    }

    /// Starts the prefault thread a slave went without (its writes did not
    /// go through the mapping; a master's puts do), unless the store is
    /// closing: `shutdown` marks the store closed before it takes the
    /// thread under the same lock, so a thread started here is stopped.
    /// Without it puts fault on fresh pages (slower, not wrong): a failure
    /// to start it is logged.
    fn start_master_prefaulter(&self) {
        let mut slot = self.prefaulter.lock();
        if slot.is_some() || self.closed.load(Ordering::Acquire) {
            return;
        }
        match super::open::start_prefaulter(&self.opts, &self.commitlog, &self.flags) {
            Ok(p) => *slot = p,
            Err(e) => log::warn!("HA: promoted without a prefault thread: {e}"),
        }
    }

    /// Saves the bytes `[cut, end)` of the CommitLog's last file to the
    /// promotion's side file.
    fn save_tail(&self, cut: u64, end: u64) -> Result<(Option<PathBuf>, u64)> {
        if cut >= end {
            return Ok((None, 0));
        }
        let file = self
            .commitlog
            .file_for(cut)
            .ok_or_else(|| StoreError::internal(format!("no CommitLog file holds offset {cut}")))?;
        let pos = (cut - file.file_from_offset()) as usize;
        let bytes = file.read(pos, (end - cut) as usize).ok_or_else(|| {
            StoreError::internal(format!("cannot read the CommitLog bytes [{cut}, {end})"))
        })?;
        let path = paths::promote_tail_file(&self.opts.root, cut);
        write_side_file(&path, bytes)?;
        Ok((Some(path), bytes.len() as u64))
    }
}
