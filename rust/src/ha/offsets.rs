//! The offsets sync (docs/format.md §21.7): a master serves the latest
//! snapshot of its consumer offsets and delay offsets on a listener of its
//! own (`ha_offsets_port`, never the HA port); a slave fetches one with
//! [`fetch`]. The snapshot's tables come from above (the store's Python
//! side publishes them); this module only holds, serves and fetches bytes.
//!
//! ```text
//!  master                                       slave
//!  publish(tables) -> latest snapshot
//!  listener <--------- request (8 bytes) ------ fetch, every ha_offsets_interval
//!           ---------- snapshot, then close --> (applied above once its
//!                                                CommitLog reaches the
//!                                                snapshot's commitlog_end)
//! ```

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::sync::Mutex;

use crate::lock::fork_generation;
use crate::log::commitlog::now_ms;

use super::offsets_wire::{check_request, request, Snapshot, HEADER_LEN, REQUEST_LEN};
use super::AllowedNet;

/// How often the accept loop looks at the stop flag.
const POLL: Duration = Duration::from_millis(50);
/// How long a connection waits for the master's first snapshot.
const FIRST_PUBLISH_WAIT: Duration = Duration::from_secs(2);

/// The offsets sync's state on either side (for `ha_status`).
#[derive(Debug, Default)]
pub struct OffsetsState {
    /// Master: the latest snapshot's bytes.
    published: Mutex<Option<Arc<Vec<u8>>>>,
    /// Master: when the latest snapshot was published (ms; 0: never).
    pub published_ms: AtomicI64,
    /// Master: snapshots sent.
    pub served: AtomicU64,
    /// Master: when a slave last got one (ms; 0: never).
    pub last_served_ms: AtomicI64,
    /// Slave: when a fetch last succeeded (ms; 0: never).
    pub last_fetch_ms: AtomicI64,
    /// Slave: when a snapshot was last applied (ms; 0: never).
    pub last_applied_ms: AtomicI64,
    /// Slave: the master's clock when the last applied snapshot was taken.
    pub applied_taken_ms: AtomicI64,
    /// Slave: the master's CommitLog end in the last applied snapshot.
    pub applied_end: AtomicU64,
    /// Slave: why the last fetch failed (None: it worked).
    pub error: Mutex<Option<String>>,
    /// Slave: the last error logged (each is logged once until it changes).
    logged: Mutex<Option<String>>,
    /// Slave: a fetch worked since the store opened (logged once).
    worked: AtomicBool,
}

impl OffsetsState {
    /// Makes `snap` the snapshot served from now on.
    pub fn publish(&self, snap: &Snapshot) -> Result<(), String> {
        let bytes = snap.encode()?;
        *self.published.lock() = Some(Arc::new(bytes));
        self.published_ms.store(now_ms(), Ordering::Release);
        Ok(())
    }

    fn latest(&self) -> Option<Arc<Vec<u8>>> {
        self.published.lock().clone()
    }

    /// Records a fetch's outcome; logs a failure once until it changes, and
    /// the first success after one.
    pub fn fetched(&self, from: &str, outcome: &Result<Snapshot, String>) {
        let mut logged = self.logged.lock();
        match outcome {
            Ok(_) => {
                self.last_fetch_ms.store(now_ms(), Ordering::Release);
                *self.error.lock() = None;
                if logged.take().is_some() | !self.worked.swap(true, Ordering::AcqRel) {
                    log::info!("HA: offsets sync from {from} works");
                }
            }
            Err(why) => {
                if logged.as_deref() != Some(why.as_str()) {
                    log::warn!(
                        "HA: no offsets from {from}: {why} (a RocketMQ master serves none; \
                         replication goes on)"
                    );
                    *logged = Some(why.clone());
                }
                *self.error.lock() = Some(why.clone());
            }
        }
    }
}

/// A master's offsets listener and its connections.
pub struct OffsetsServer {
    port: u16,
    stop: Arc<AtomicBool>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    generation: u64,
}

impl OffsetsServer {
    /// Binds `addr:port` and serves `state`'s latest snapshot to every
    /// allowed peer that asks.
    pub fn start(
        addr: std::net::IpAddr,
        port: u16,
        allowed: Vec<AllowedNet>,
        timeout: Duration,
        state: Arc<OffsetsState>,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(SocketAddr::new(addr, port))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        log::info!("HA: serving offsets to slaves on {addr}:{port}");
        let s = Self {
            port,
            stop: Arc::new(AtomicBool::new(false)),
            threads: Arc::new(Mutex::new(Vec::new())),
            generation: fork_generation(),
        };
        let (stop, threads) = (s.stop.clone(), s.threads.clone());
        let h = std::thread::Builder::new()
            .name("rocketstore-ha-offsets".into())
            .spawn(move || {
                // The last address refused: a slave asking again and again is logged once.
                let mut refused = None;
                while !stop.load(Ordering::Acquire) {
                    match listener.accept() {
                        Ok((c, peer)) => {
                            if !allowed.is_empty() && !allowed.iter().any(|n| n.contains(peer.ip()))
                            {
                                if refused.replace(peer.ip()) != Some(peer.ip()) {
                                    log::warn!(
                                        "HA: refused an offsets connection from {peer}: \
                                         not in ha_allowed_slaves"
                                    );
                                }
                                let _ = c.shutdown(Shutdown::Both);
                                continue;
                            }
                            let (st, sp) = (state.clone(), stop.clone());
                            let spawned = std::thread::Builder::new()
                                .name("rocketstore-ha-offsets-serve".into())
                                .spawn(move || {
                                    if let Err(why) = serve(c, &st, &sp, timeout) {
                                        log::warn!("HA: offsets request of {peer}: {why}");
                                    }
                                });
                            let mut ts = threads.lock();
                            ts.retain(|t| !t.is_finished());
                            match spawned {
                                Ok(t) => ts.push(t),
                                Err(e) => log::warn!("HA: cannot serve offsets to {peer}: {e}"),
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
                        Err(e) => {
                            log::warn!("HA: offsets accept failed: {e}");
                            std::thread::sleep(POLL);
                        }
                    }
                }
            })?;
        s.threads.lock().push(h);
        Ok(s)
    }

    /// The port listened on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Closes the listener and joins the threads (in a forked child:
    /// nothing; they are the parent's).
    pub fn stop(&self) {
        if fork_generation() != self.generation {
            std::mem::forget(std::mem::take(&mut *self.threads.lock()));
            return;
        }
        self.stop.store(true, Ordering::Release);
        let threads: Vec<_> = self.threads.lock().drain(..).collect();
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for OffsetsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Answers one connection: reads its request, sends the latest snapshot,
/// closes it.
fn serve(
    mut c: TcpStream,
    state: &OffsetsState,
    stop: &AtomicBool,
    timeout: Duration,
) -> Result<(), String> {
    c.set_nonblocking(false)
        .and_then(|_| c.set_read_timeout(Some(timeout)))
        .and_then(|_| c.set_write_timeout(Some(timeout)))
        .map_err(|e| format!("cannot set up the connection: {e}"))?;
    let mut req = [0u8; REQUEST_LEN];
    c.read_exact(&mut req)
        .map_err(|e| format!("no request: {e}"))?;
    check_request(&req)?;
    let since = Instant::now();
    let snap = loop {
        if let Some(s) = state.latest() {
            break s;
        }
        if stop.load(Ordering::Acquire) || since.elapsed() > FIRST_PUBLISH_WAIT {
            let _ = c.shutdown(Shutdown::Both);
            return Err("no snapshot published yet".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    c.write_all(&snap)
        .and_then(|_| c.flush())
        .map_err(|e| format!("write failed: {e}"))?;
    state.served.fetch_add(1, Ordering::AcqRel);
    state.last_served_ms.store(now_ms(), Ordering::Release);
    let _ = c.shutdown(Shutdown::Both);
    Ok(())
}

/// Fetches one snapshot from `addr` (`host:port`), each step bounded by
/// `timeout`.
pub fn fetch(addr: &str, timeout: Duration) -> Result<Snapshot, String> {
    let sa = addr
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {addr:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr:?} resolves to no address"))?;
    let mut s = TcpStream::connect_timeout(&sa, timeout)
        .map_err(|e| format!("cannot connect to {sa}: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .and_then(|_| s.set_write_timeout(Some(timeout)))
        .map_err(|e| format!("cannot set up the connection: {e}"))?;
    s.write_all(&request())
        .map_err(|e| format!("request failed: {e}"))?;
    let mut h = [0u8; HEADER_LEN];
    s.read_exact(&mut h)
        .map_err(|e| format!("no snapshot came: {e}"))?;
    let body = Snapshot::body_len(&h)?;
    let mut b = Vec::with_capacity(HEADER_LEN + body);
    b.extend_from_slice(&h);
    b.resize(HEADER_LEN + body, 0);
    s.read_exact(&mut b[HEADER_LEN..])
        .map_err(|e| format!("the snapshot stopped midway: {e}"))?;
    let _ = s.shutdown(Shutdown::Both);
    Snapshot::decode(&b)
}

/// The offsets address a slave derives from `ha_master_address`: the same
/// host, the HA port + 1.
pub fn derived_address(master: &str) -> Option<String> {
    let (host, port) = master.rsplit_once(':')?;
    let port: u16 = port.trim().parse().ok()?;
    Some(format!("{host}:{}", port.checked_add(1)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_snapshot_is_served_and_fetched() {
        let state = Arc::new(OffsetsState::default());
        let snap = Snapshot {
            commitlog_end: 10,
            taken_ms: 5,
            consumer: b"{}".to_vec(),
            delay: b"{}".to_vec(),
        };
        state.publish(&snap).expect("publish");
        let ip = "127.0.0.1".parse().expect("ip");
        let srv = OffsetsServer::start(ip, 0, Vec::new(), Duration::from_secs(2), state.clone())
            .expect("listen");
        let got = fetch(&format!("127.0.0.1:{}", srv.port()), Duration::from_secs(2));
        assert_eq!(got, Ok(snap));
        // Counted after the reply is written: the fetch may return first.
        let since = Instant::now();
        while state.served.load(Ordering::Acquire) == 0 && since.elapsed() < Duration::from_secs(2)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(state.served.load(Ordering::Acquire), 1);
        srv.stop();
        let none = OffsetsServer::start(
            ip,
            0,
            vec![AllowedNet::parse("10.0.0.1").expect("net")],
            Duration::from_secs(2),
            state,
        )
        .expect("listen");
        assert!(fetch(
            &format!("127.0.0.1:{}", none.port()),
            Duration::from_secs(2)
        )
        .is_err());
    }

    #[test]
    fn the_address_is_derived_from_the_masters() {
        assert_eq!(
            derived_address("10.0.0.1:10912").as_deref(),
            Some("10.0.0.1:10913")
        );
        assert_eq!(derived_address("[::1]:7").as_deref(), Some("[::1]:8"));
        assert_eq!(derived_address("h:65535"), None);
        assert_eq!(derived_address("nonsense"), None);
    }
}
