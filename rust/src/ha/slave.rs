//! The slave's side (RocketMQ's `HAClient`): connect to the master, report
//! at once (the start of its last complete record, so that the master sends
//! that record again and the slave can compare it with its own), then at
//! least every `heartbeat` and after every read that moved its end, apply
//! whole frames (many per read), and close the connection (then connect
//! again) when a frame breaks the protocol or nothing came for
//! `housekeeping`. A fatal error (the segment sizes differ) stops
//! replication; [`ClientStatus::error`] says why.

use std::io::{ErrorKind, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::Mutex;

use crate::log::commitlog::{now_ms, CommitLog};
use crate::services::dispatch::Dispatcher;
use crate::services::service_thread::{ServiceThread, Signal};

use super::apply::{Applier, ApplyError};
use super::wire::{report, FrameParser};
use super::HaOptions;

/// How often the read loop looks at the stop flag and the clocks.
const POLL: Duration = Duration::from_millis(50);

/// What a slave knows of its replication (for `ha_status`).
#[derive(Debug, Default)]
pub struct ClientStatus {
    /// Connected to the master now.
    pub connected: AtomicBool,
    /// The master's end as its last frame showed it (start + size).
    pub master_end: AtomicU64,
    /// When the last frame came (ms since the epoch; 0: never).
    pub last_frame_ms: AtomicI64,
    /// Connections made since the store opened.
    pub connects: AtomicU64,
    /// Why replication stopped (a fatal error), or the last connection's
    /// closing reason.
    pub error: Mutex<Option<String>>,
    /// True once replication stopped for good.
    pub stopped: AtomicBool,
    /// The bytes this store held when the connection began were found
    /// equal to the master's (docs/format.md §21.4).
    pub verified: AtomicBool,
    /// They were not: the logs forked (replication stopped).
    pub diverged: AtomicBool,
    /// The master's log starts past this store's end: it needs a reseed
    /// (replication stopped).
    pub needs_reseed: AtomicBool,
}

/// Why one connection ended.
enum End {
    /// Stop asked for.
    Stopped,
    /// Closed (reconnect after a pause).
    Closed(String),
    /// Replication cannot go on.
    Fatal(String),
}

/// Starts the slave's thread following `opts.master_address`.
pub fn start(
    opts: HaOptions,
    log: Arc<CommitLog>,
    dispatcher: Arc<Dispatcher>,
    status: Arc<ClientStatus>,
    on_panic: impl Fn(String) + Send + 'static,
) -> std::io::Result<ServiceThread> {
    let pause = opts.heartbeat.min(Duration::from_secs(1));
    let master = opts.master_address.clone().unwrap_or_default();
    // The last reason logged: a master that stays away is logged once, not
    // at every attempt; a connection made in between logs again.
    let mut logged: Option<String> = None;
    ServiceThread::start("ha_client", on_panic, move |sig| {
        let before = status.connects.load(Ordering::Acquire);
        let end = session(&opts, &log, &dispatcher, &status, sig);
        status.connected.store(false, Ordering::Release);
        if status.connects.load(Ordering::Acquire) != before {
            logged = None;
        }
        match end {
            End::Stopped => {}
            End::Closed(why) => {
                if logged.as_deref() != Some(why.as_str()) {
                    log::warn!("HA: connection to master {master} closed: {why}");
                    logged = Some(why.clone());
                }
                *status.error.lock() = Some(why);
                sig.wait(pause);
            }
            End::Fatal(why) => {
                log::error!("HA: replication from {master} stopped: {why}");
                *status.error.lock() = Some(why);
                status.stopped.store(true, Ordering::Release);
                sig.request_stop();
            }
        }
    })
}

fn resolve(addr: &str) -> Result<SocketAddr, String> {
    addr.to_socket_addrs()
        .map_err(|e| format!("cannot resolve ha_master_address {addr:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("ha_master_address {addr:?} resolves to no address"))
}

/// One connection to the master, from connecting to its end.
fn session(
    opts: &HaOptions,
    log: &Arc<CommitLog>,
    dispatcher: &Arc<Dispatcher>,
    status: &ClientStatus,
    sig: &Signal,
) -> End {
    let Some(master) = opts.master_address.as_deref() else {
        sig.wait(POLL);
        return End::Stopped;
    };
    let addr = match resolve(master) {
        Ok(a) => a,
        Err(why) => return End::Closed(why),
    };
    let timeout = opts.housekeeping.min(Duration::from_secs(3));
    let mut s = match TcpStream::connect_timeout(&addr, timeout) {
        Ok(s) => s,
        Err(e) => return End::Closed(format!("cannot connect to {addr}: {e}")),
    };
    let setup = s
        .set_nodelay(true)
        .and_then(|_| s.set_read_timeout(Some(POLL)))
        .and_then(|_| s.set_write_timeout(Some(opts.housekeeping)));
    if let Err(e) = setup {
        return End::Closed(format!("cannot set up the connection: {e}"));
    }
    status.connected.store(true, Ordering::Release);
    status.connects.fetch_add(1, Ordering::AcqRel);
    log::info!("HA: connected to master {addr}");
    let end = follow(&mut s, opts, log, dispatcher, status, sig);
    let _ = s.shutdown(Shutdown::Both);
    end
}

/// Reports and applies frames until the connection ends.
fn follow(
    s: &mut TcpStream,
    opts: &HaOptions,
    log: &Arc<CommitLog>,
    dispatcher: &Arc<Dispatcher>,
    status: &ClientStatus,
    sig: &Signal,
) -> End {
    let mut applier = Applier::new(log.clone(), dispatcher.clone());
    let mut parser = FrameParser::new();
    let mut reported = applier.report_offset();
    status.verified.store(applier.verified(), Ordering::Release);
    if let Err(e) = s.write_all(&report(reported)) {
        return End::Closed(format!("report failed: {e}"));
    }
    let mut last_report = Instant::now();
    let mut last_frame = Instant::now();
    loop {
        if sig.is_stopped() {
            return End::Stopped;
        }
        match parser.read_from(s) {
            Ok(0) => return End::Closed("the master closed the connection".into()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return End::Closed(format!("read failed: {e}")),
        }
        loop {
            match parser.next_frame_ref() {
                Ok(Some(f)) => {
                    last_frame = Instant::now();
                    status.last_frame_ms.store(now_ms(), Ordering::Release);
                    status
                        .master_end
                        .store(f.start + f.body.len() as u64, Ordering::Release);
                    match applier.apply(&f) {
                        Ok(_) => {}
                        Err(ApplyError::Protocol(why)) => return End::Closed(why),
                        Err(ApplyError::Fatal(why)) => return End::Fatal(why),
                        Err(ApplyError::Diverged(why)) => {
                            status.diverged.store(true, Ordering::Release);
                            return End::Fatal(why);
                        }
                        Err(ApplyError::Behind(why)) => {
                            status.needs_reseed.store(true, Ordering::Release);
                            return End::Closed(why);
                        }
                        Err(ApplyError::Ahead(why)) => {
                            status.diverged.store(true, Ordering::Release);
                            return End::Closed(why);
                        }
                    }
                    if applier.verified() {
                        // What a refusal's frame said no longer holds.
                        status.needs_reseed.store(false, Ordering::Release);
                        status.diverged.store(false, Ordering::Release);
                    }
                    status.verified.store(applier.verified(), Ordering::Release);
                }
                Ok(None) => break,
                Err(why) => return End::Closed(why),
            }
        }
        let end = applier.report_offset();
        if end > reported || last_report.elapsed() >= opts.heartbeat {
            if let Err(e) = s.write_all(&report(end)) {
                return End::Closed(format!("report failed: {e}"));
            }
            reported = end;
            last_report = Instant::now();
        }
        if last_frame.elapsed() > opts.housekeeping {
            return End::Closed(format!(
                "no frame for {} ms (ha_housekeeping_interval){}",
                opts.housekeeping.as_millis(),
                if parser.pending() > 0 {
                    "; a frame stopped midway"
                } else {
                    ""
                }
            ));
        }
    }
}
