//! The store's side of the offsets sync (docs/format.md §21.7, see
//! [`crate::ha::offsets`]): a master's listener and the snapshots its
//! Python side publishes; a slave's fetch, which hands a snapshot up only
//! once this store's CommitLog holds the master's log up to where the
//! snapshot was taken.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Store;
use crate::error::{Result, StoreError};
use crate::ha::offsets::{self, OffsetsServer};
use crate::ha::offsets_wire::Snapshot;
use crate::ha::HaRole;
use crate::log::commitlog::now_ms;

/// The offsets sync as `ha_status` shows it.
#[derive(Debug, Clone)]
pub struct OffsetsView {
    /// Master: the offsets port (None: not listening).
    pub port: Option<u16>,
    /// Slave: where it fetches from (None: nowhere).
    pub address: Option<String>,
    /// Master: snapshots sent.
    pub served: u64,
    /// Master: when a slave last got one; slave: when one was last applied
    /// (ms since the epoch; 0: never).
    pub last_sync_ms: i64,
    /// Slave: when a fetch last succeeded (ms; 0: never).
    pub last_fetch_ms: i64,
    /// Slave: the master's clock when the applied snapshot was taken (0: none).
    pub applied_taken_ms: i64,
    /// Slave: why the last fetch failed.
    pub error: Option<String>,
}

/// What a slave's fetch found.
pub enum Fetched {
    /// A snapshot this store's CommitLog now covers: apply it.
    Ready(Snapshot),
    /// A snapshot taken past this store's CommitLog end, still not reached
    /// after the wait: try again later.
    Ahead(u64),
}

impl Store {
    /// Starts a master's offsets listener (`ha_offsets_port`); its port.
    pub fn start_ha_offsets(&self) -> Result<Option<u16>> {
        self.check_open()?;
        let ha = &self.opts.ha;
        let mut running = self.ha_offsets_server.lock();
        if running.is_none() && !self.opts.read_only && ha.role != HaRole::Slave {
            if let Some(port) = ha.offsets_port {
                let srv = OffsetsServer::start(
                    ha.listen_address,
                    port,
                    ha.allowed_slaves.clone(),
                    ha.housekeeping,
                    self.ha_offsets.clone(),
                )
                .map_err(|e| {
                    StoreError::io(format!("serve offsets on {}:{port}", ha.listen_address), e)
                })?;
                *running = Some(srv);
            }
        }
        Ok(running.as_ref().map(OffsetsServer::port))
    }

    /// Stops the offsets listener.
    pub fn stop_ha_offsets(&self) {
        if let Some(s) = self.ha_offsets_server.lock().take() {
            s.stop();
        }
    }

    /// The port a master serves offsets on (None: not serving).
    pub fn ha_offsets_port(&self) -> Option<u16> {
        self.ha_offsets_server
            .lock()
            .as_ref()
            .map(OffsetsServer::port)
    }

    /// Master: serves `consumer` and `delay` (the two json documents) from
    /// now on, stamped with this store's CommitLog end now (taken after the
    /// tables: every record they count lies below it). False when no
    /// listener runs.
    pub fn ha_offsets_publish(&self, consumer: Vec<u8>, delay: Vec<u8>) -> Result<bool> {
        if self.ha_offsets_server.lock().is_none() {
            return Ok(false);
        }
        let snap = Snapshot {
            commitlog_end: self.commitlog.max_offset(),
            taken_ms: now_ms(),
            consumer,
            delay,
        };
        self.ha_offsets
            .publish(&snap)
            .map_err(StoreError::InvalidArgument)?;
        Ok(true)
    }

    /// Slave: fetches the master's snapshot (each network step bounded by
    /// `timeout`), then waits up to `wait` for this store's CommitLog to
    /// reach the snapshot's `commitlog_end`. None when the store has no
    /// offsets address; Err when the fetch failed (logged once per reason).
    pub fn ha_offsets_fetch(
        &self,
        timeout: Duration,
        wait: Duration,
    ) -> Result<Option<std::result::Result<Fetched, String>>> {
        self.check_open()?;
        let Some(addr) = self.opts.ha.offsets_address.as_deref() else {
            return Ok(None);
        };
        let got = offsets::fetch(addr, timeout);
        self.ha_offsets.fetched(addr, &got);
        let snap = match got {
            Ok(s) => s,
            Err(why) => return Ok(Some(Err(why))),
        };
        let since = Instant::now();
        while self.commitlog.max_offset() < snap.commitlog_end {
            if since.elapsed() >= wait || self.check_not_closed().is_err() {
                return Ok(Some(Ok(Fetched::Ahead(snap.commitlog_end))));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Some(Ok(Fetched::Ready(snap))))
    }

    /// Slave: records that the snapshot taken at `taken_ms` was applied.
    pub fn ha_offsets_applied(&self, commitlog_end: u64, taken_ms: i64) {
        let s = &self.ha_offsets;
        s.applied_end.store(commitlog_end, Ordering::Release);
        s.applied_taken_ms.store(taken_ms, Ordering::Release);
        s.last_applied_ms.store(now_ms(), Ordering::Release);
    }

    /// The offsets sync's state now.
    pub fn ha_offsets_view(&self) -> OffsetsView {
        let s = &self.ha_offsets;
        let slave = self.opts.ha.role == HaRole::Slave;
        OffsetsView {
            port: self.ha_offsets_port(),
            address: if slave {
                self.opts.ha.offsets_address.clone()
            } else {
                None
            },
            served: s.served.load(Ordering::Acquire),
            last_sync_ms: if slave {
                s.last_applied_ms.load(Ordering::Acquire)
            } else {
                s.last_served_ms.load(Ordering::Acquire)
            },
            last_fetch_ms: s.last_fetch_ms.load(Ordering::Acquire),
            applied_taken_ms: s.applied_taken_ms.load(Ordering::Acquire),
            error: s.error.lock().clone(),
        }
    }
}
