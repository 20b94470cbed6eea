//! The store's replication (see [`crate::ha`]): starting and stopping the
//! master's listener or the slave's client, a slave's refusal of puts, the
//! SYNC_MASTER wait, and the status the bindings show.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Store;
use crate::error::{Result, StoreError};
use crate::ha::acks::Acks;
use crate::ha::master::Master;
use crate::ha::slave::{self, ClientStatus};
use crate::ha::HaRole;
use crate::log::commitlog::{now_ms, PutStatus, Refused};
use crate::running::Flag;
use crate::services::service_thread::{ServiceThread, STOP_TIMEOUT};

/// A SYNC_MASTER put's replication check, taken right after its append.
#[derive(Debug, Clone, Copy)]
pub struct ReplicaCheck {
    /// RocketMQ's `isSlaveOK`.
    ok: bool,
    /// When it was taken (`slave_timeout` counts from here).
    since: Instant,
    /// Where the put's first record starts: a slave must hold it from there.
    start: u64,
}

/// The running side of replication.
pub enum HaRunning {
    /// A master's listener and connections.
    Master(Master),
    /// A slave's client thread.
    Slave(ServiceThread),
}

/// One connected slave, as `ha_status` shows it.
#[derive(Debug, Clone)]
pub struct SlaveView {
    /// `host:port` of the slave.
    pub address: String,
    /// Its last report (-1: none yet).
    pub acked_offset: i64,
    /// This store's CommitLog end minus the report.
    pub lag_bytes: u64,
    /// Seconds since it last reported (since it connected, before a report).
    pub lag_seconds: f64,
}

/// Replication as `ha_status` shows it.
#[derive(Debug, Clone)]
pub struct HaStatus {
    /// `ASYNC_MASTER`, `SYNC_MASTER` or `SLAVE`.
    pub role: &'static str,
    /// The listening port of a master (None: not listening).
    pub port: Option<u16>,
    /// A master's connected slaves.
    pub slaves: Vec<SlaveView>,
    /// A slave's master (`ha_master_address`).
    pub master_address: Option<String>,
    /// A slave: connected to its master now.
    pub connected: bool,
    /// A slave: its CommitLog end (what it applied).
    pub applied_offset: u64,
    /// A slave: the master's end its last frame showed minus `applied_offset`.
    pub lag_bytes: u64,
    /// A slave: seconds since the last frame (None: none yet).
    pub lag_seconds: Option<f64>,
    /// A slave: why replication stopped or the connection last closed.
    pub error: Option<String>,
    /// A slave: true once replication stopped for good.
    pub stopped: bool,
    /// A slave: its bytes were found equal to the master's on connecting.
    pub verified: bool,
    /// A slave: they were not (the logs forked).
    pub diverged: bool,
    /// A slave: its end is below the master's first file (reseed it).
    pub needs_reseed: bool,
}

impl Store {
    /// The replication role.
    pub fn ha_role(&self) -> HaRole {
        HaRole::from_code(self.role.load(Ordering::Acquire))
    }

    /// Why a SLAVE refuses puts.
    pub(super) fn slave_refusal(&self) -> Option<Refused> {
        (self.ha_role() == HaRole::Slave).then(|| {
            Refused::new(
                PutStatus::ServiceNotAvailable,
                format!(
                    "this store is a SLAVE: it takes its messages from its master ({}), \
                     not from puts",
                    self.opts.ha.master_address.as_deref().unwrap_or("none set")
                ),
            )
        })
    }

    /// Starts replication (writer only): a master listens when
    /// `listen_port` is set, a slave follows `master_address` when set.
    /// Returns the port a master listens on.
    pub fn start_ha(&self) -> Result<Option<u16>> {
        self.check_open()?;
        if self.opts.read_only || self.ha.lock().is_some() {
            return Ok(self.ha_port());
        }
        let ha = &self.opts.ha;
        let running = match self.ha_role() {
            HaRole::Slave => {
                if ha.master_address.is_none() {
                    return Ok(None);
                }
                let flags = self.flags.clone();
                HaRunning::Slave(
                    slave::start(
                        ha.clone(),
                        self.commitlog.clone(),
                        self.dispatcher.clone(),
                        self.ha_client.clone(),
                        move |why| {
                            flags.fail(Flag::NotWriteable, why);
                        },
                    )
                    .map_err(|e| StoreError::io("start the HA client thread", e))?,
                )
            }
            _ => {
                if ha.listen_port.is_none() {
                    return Ok(None);
                }
                let m =
                    Master::start(ha, self.commitlog.clone(), self.acks.clone()).map_err(|e| {
                        StoreError::io(
                            format!(
                                "listen for slaves on {}:{}",
                                ha.listen_address,
                                ha.listen_port.unwrap_or(0)
                            ),
                            e,
                        )
                    })?;
                self.ha_port.store(m.port() as u32, Ordering::Release);
                HaRunning::Master(m)
            }
        };
        *self.ha.lock() = Some(running);
        Ok(self.ha_port())
    }

    /// Stops replication (before the store's other threads stop).
    pub fn stop_ha(&self) {
        if self.is_forked_copy() {
            return;
        }
        let running = self.ha.lock().take();
        match running {
            Some(HaRunning::Master(m)) => m.stop(),
            Some(HaRunning::Slave(t)) => {
                t.stop(STOP_TIMEOUT);
            }
            None => {}
        }
    }

    /// The port a master listens on (None: not listening).
    pub fn ha_port(&self) -> Option<u16> {
        match self.ha_port.load(Ordering::Acquire) {
            0 => None,
            p => Some(p as u16),
        }
    }

    /// The master's "the log grew" wake-up (after every append).
    #[inline]
    pub(super) fn wrote(&self) {
        self.dispatcher.wakeup();
        self.acks.log_grew();
    }

    /// SYNC_MASTER: whether the put of `[start, end)` may wait for a slave
    /// (RocketMQ's `isSlaveOK`, taken right after the append). None for
    /// other roles.
    pub(super) fn replica_check(&self, start: u64, end: u64) -> Option<ReplicaCheck> {
        (self.ha_role() == HaRole::SyncMaster).then(|| ReplicaCheck {
            ok: self.acks.slave_ok(end, self.opts.ha.fallbehind_max),
            since: Instant::now(),
            start,
        })
    }

    /// SYNC_MASTER: waits until a slave reported `end` (the rest of
    /// `slave_timeout` from `since`); the status and reason a put gets.
    pub(super) fn replica_wait(
        &self,
        end: u64,
        check: ReplicaCheck,
    ) -> (PutStatus, Option<String>) {
        let ha = &self.opts.ha;
        let ReplicaCheck { ok, since, start } = check;
        if !ok {
            let why = if self.acks.connections() == 0 {
                "no slave is connected".to_owned()
            } else {
                format!(
                    "the best slave is at offset {}, {} bytes or more behind the message's end \
                     {end} (ha_slave_fallbehind_max)",
                    self.acks.best(),
                    ha.fallbehind_max
                )
            };
            return (
                PutStatus::SlaveNotAvailable,
                Some(format!(
                    "the message was stored here but not replicated: {why}"
                )),
            );
        }
        let left = ha.slave_timeout.saturating_sub(since.elapsed());
        if self.acks.wait_for(start, end, left) {
            (PutStatus::PutOk, None)
        } else {
            (
                PutStatus::FlushSlaveTimeout,
                Some(format!(
                    "the message was stored here but no slave reported it within \
                     slave_timeout ({} ms)",
                    ha.slave_timeout.as_millis()
                )),
            )
        }
    }

    /// The acks of this master's slaves.
    pub fn acks(&self) -> &Acks {
        &self.acks
    }

    /// Replication's state now.
    pub fn ha_status(&self) -> HaStatus {
        let ha = &self.opts.ha;
        let end = self.commitlog.max_offset();
        let now = now_ms();
        let slaves = self
            .acks
            .slaves()
            .iter()
            .map(|s| {
                let acked = s.acked.load(Ordering::Acquire);
                let since = match s.last_report_ms.load(Ordering::Acquire) {
                    0 => s.connected_ms,
                    t => t,
                };
                SlaveView {
                    address: s.addr.to_string(),
                    acked_offset: acked,
                    lag_bytes: end.saturating_sub(acked.max(0) as u64),
                    lag_seconds: Duration::from_millis((now - since).max(0) as u64).as_secs_f64(),
                }
            })
            .collect();
        let c: &ClientStatus = &self.ha_client;
        let last = c.last_frame_ms.load(Ordering::Acquire);
        HaStatus {
            role: self.ha_role().name(),
            port: self.ha_port(),
            slaves,
            master_address: ha.master_address.clone(),
            connected: c.connected.load(Ordering::Acquire),
            applied_offset: end,
            lag_bytes: c.master_end.load(Ordering::Acquire).saturating_sub(end),
            lag_seconds: (last > 0).then(|| (now - last).max(0) as f64 / 1000.0),
            error: c.error.lock().clone(),
            stopped: c.stopped.load(Ordering::Acquire),
            verified: c.verified.load(Ordering::Acquire),
            diverged: c.diverged.load(Ordering::Acquire),
            needs_reseed: c.needs_reseed.load(Ordering::Acquire),
        }
    }
}
