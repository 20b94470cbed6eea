//! The master's side (RocketMQ's `AcceptSocketService` and `HAConnection`):
//! a listener, and for each slave a reader of its reports and a writer of
//! frames.
//!
//! The writer waits for the slave's first report, then sends from there (a
//! report of 0: from the first byte of the last CommitLog file, or of the
//! first file with `new_slave_from_first_file`): frames of at most
//! `batch_size` bytes, never across a file's end, of every written byte
//! (flushed or not), many to a `writev` straight from the mapped files,
//! and an empty frame after `heartbeat` without one. The
//! reader closes the connection after `housekeeping` without a byte, on a
//! negative report or one past this store's end.

use std::collections::HashMap;
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::sync::Mutex;

use crate::lock::fork_generation;
use crate::log::commitlog::CommitLog;
use crate::log::mapped_file::MappedFile;

use super::acks::{Acks, SlaveConn};
use super::wire::{frame_header, ReportReader, FRAME_HEADER};
use super::HaOptions;

/// How often blocked loops look at the stop flag.
const POLL: Duration = Duration::from_millis(50);

/// Why a connection closed normally (logged at info, not as a warning).
const SLAVE_CLOSED: &str = "the slave closed it";
const SHUTTING_DOWN: &str = "the store is shutting down";

/// The last warning a master (by its port) gave a slave host (by its
/// address) when it closed or refused its connection. A slave that keeps
/// reconnecting and is closed for the same reason each time (a port per
/// attempt) is warned about once; the repeats go to the debug level until
/// a connection from that host gets as far as being sent frames.
static WARNED: Mutex<Option<HashMap<(u16, IpAddr), String>>> = Mutex::new(None);

/// True when `why` is what the master on `port` last warned `host` about;
/// remembers it otherwise.
fn warned_before(port: u16, host: IpAddr, why: &str) -> bool {
    let mut warned = WARNED.lock();
    let map = warned.get_or_insert_with(HashMap::new);
    if map.get(&(port, host)).is_some_and(|w| w == why) {
        return true;
    }
    map.insert((port, host), why.to_string());
    false
}

/// True when the master on `port` has a warning on record for `host`.
fn has_warned(port: u16, host: IpAddr) -> bool {
    WARNED
        .lock()
        .as_ref()
        .is_some_and(|m| m.contains_key(&(port, host)))
}

/// A connection from `host` works again: its next failure is warned about.
fn forget_warning(port: u16, host: IpAddr) {
    if let Some(m) = WARNED.lock().as_mut() {
        m.remove(&(port, host));
    }
}

/// The local port of a connection (0 if the socket cannot tell).
fn local_port(s: &TcpStream) -> u16 {
    s.local_addr().map(|a| a.port()).unwrap_or(0)
}

/// One connection's shared state.
struct Conn {
    stream: TcpStream,
    slave: Arc<SlaveConn>,
    /// Where sending starts, from the slave's first report (-1 until it came).
    request: AtomicI64,
    closed: AtomicBool,
    /// Its last report was `fallbehind_max` or more behind (logged once
    /// per change of this state).
    behind: AtomicBool,
}

impl Conn {
    /// Closes the connection once, logging why.
    fn close(&self, acks: &Acks, why: &str) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            let host = self.slave.addr.ip();
            let level = if why == SLAVE_CLOSED || why == SHUTTING_DOWN {
                log::Level::Info
            } else if warned_before(local_port(&self.stream), host, why) {
                log::Level::Debug
            } else {
                log::Level::Warn
            };
            log::log!(
                level,
                "HA: closing the connection of slave {}: {why}",
                self.slave.addr
            );
            let _ = self.stream.shutdown(Shutdown::Both);
            acks.remove(&self.slave);
        }
    }
}

/// A running master: the listener and its connections.
pub struct Master {
    port: u16,
    stop: Arc<AtomicBool>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    conns: Arc<Mutex<Vec<Arc<Conn>>>>,
    acks: Arc<Acks>,
    /// The process's fork generation at start: a forked child's copy
    /// touches neither the parent's threads nor its connections.
    generation: u64,
}

impl Master {
    /// Binds `listen_address:listen_port` and starts accepting slaves.
    pub fn start(opts: &HaOptions, log: Arc<CommitLog>, acks: Arc<Acks>) -> std::io::Result<Self> {
        let port = opts.listen_port.unwrap_or(0);
        let listener = TcpListener::bind(SocketAddr::new(opts.listen_address, port))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        log::info!("HA: listening for slaves on {}:{port}", opts.listen_address);
        let m = Self {
            port,
            stop: Arc::new(AtomicBool::new(false)),
            threads: Arc::new(Mutex::new(Vec::new())),
            conns: Arc::new(Mutex::new(Vec::new())),
            acks,
            generation: fork_generation(),
        };
        let (stop, threads, conns, acks, opts) = (
            m.stop.clone(),
            m.threads.clone(),
            m.conns.clone(),
            m.acks.clone(),
            opts.clone(),
        );
        let h = std::thread::Builder::new()
            .name("rocketstore-ha-accept".into())
            .spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    match listener.accept() {
                        Ok((s, peer)) => {
                            accept(s, peer, &opts, &log, &acks, &stop, &threads, &conns)
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
                        Err(e) => {
                            log::warn!("HA: accept failed: {e}");
                            std::thread::sleep(POLL);
                        }
                    }
                }
            })?;
        m.threads.lock().push(h);
        Ok(m)
    }

    /// The port listened on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Closes every connection and the listener; joins the threads. In a
    /// forked child nothing is closed or joined (the sockets are shared
    /// with the parent, whose threads serve them).
    pub fn stop(&self) {
        if fork_generation() != self.generation {
            std::mem::forget(std::mem::take(&mut *self.threads.lock()));
            std::mem::forget(std::mem::take(&mut *self.conns.lock()));
            return;
        }
        self.stop.store(true, Ordering::Release);
        for c in self.conns.lock().drain(..) {
            c.close(&self.acks, SHUTTING_DOWN);
        }
        let threads: Vec<_> = self.threads.lock().drain(..).collect();
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Serves a new connection, unless its address is not allowed (then it is
/// closed before a byte is sent).
#[allow(clippy::too_many_arguments)]
fn accept(
    s: TcpStream,
    peer: SocketAddr,
    opts: &HaOptions,
    log: &Arc<CommitLog>,
    acks: &Arc<Acks>,
    stop: &Arc<AtomicBool>,
    threads: &Arc<Mutex<Vec<JoinHandle<()>>>>,
    conns: &Arc<Mutex<Vec<Arc<Conn>>>>,
) {
    if !opts.allowed_slaves.is_empty() && !opts.allowed_slaves.iter().any(|n| n.contains(peer.ip()))
    {
        let why = "not in ha_allowed_slaves";
        let level = if warned_before(local_port(&s), peer.ip(), why) {
            log::Level::Debug
        } else {
            log::Level::Warn
        };
        log::log!(level, "HA: refused a connection from {peer}: {why}");
        let _ = s.shutdown(Shutdown::Both);
        return;
    }
    let setup = s
        .set_nonblocking(false)
        .and_then(|_| s.set_nodelay(true))
        .and_then(|_| s.set_read_timeout(Some(POLL)))
        .and_then(|_| s.set_write_timeout(Some(opts.housekeeping)))
        .and_then(|_| s.try_clone());
    let (r, w) = match setup {
        Ok(w) => (s, w),
        Err(e) => {
            log::warn!("HA: cannot set up the connection from {peer}: {e}");
            return;
        }
    };
    let level = if has_warned(local_port(&r), peer.ip()) {
        log::Level::Debug // a host that keeps coming back after a warning
    } else {
        log::Level::Info
    };
    log::log!(level, "HA: slave {peer} connected");
    let conn = Arc::new(Conn {
        stream: r,
        slave: acks.add(peer),
        request: AtomicI64::new(-1),
        closed: AtomicBool::new(false),
        behind: AtomicBool::new(false),
    });
    let mut ts = threads.lock();
    ts.retain(|t| !t.is_finished());
    conns.lock().retain(|c| !c.closed.load(Ordering::Acquire));
    conns.lock().push(conn.clone());
    let (c1, a1, l1, o1, s1) = (
        conn.clone(),
        acks.clone(),
        log.clone(),
        opts.clone(),
        stop.clone(),
    );
    let (c2, a2, l2, o2, s2) = (conn, acks.clone(), log.clone(), opts.clone(), stop.clone());
    let spawned = std::thread::Builder::new()
        .name("rocketstore-ha-read".into())
        .spawn(move || read_reports(&c1, &a1, &l1, &o1, &s1))
        .and_then(|h1| {
            ts.push(h1);
            std::thread::Builder::new()
                .name("rocketstore-ha-write".into())
                .spawn(move || {
                    let mut w = w;
                    write_frames(&c2, &mut w, &a2, &l2, &o2, &s2)
                })
        });
    match spawned {
        Ok(h2) => ts.push(h2),
        Err(e) => log::warn!("HA: cannot start the threads of slave {peer}: {e}"),
    }
}

/// Reads the slave's reports until the connection closes.
fn read_reports(c: &Conn, acks: &Acks, log: &CommitLog, opts: &HaOptions, stop: &AtomicBool) {
    let mut reader = ReportReader::new();
    let mut buf = [0u8; 1024];
    let mut last_read = Instant::now();
    let mut stream = &c.stream;
    while !stop.load(Ordering::Acquire) && !c.closed.load(Ordering::Acquire) {
        match stream.read(&mut buf) {
            Ok(0) => return c.close(acks, SLAVE_CLOSED),
            Ok(n) => {
                last_read = Instant::now();
                match reader.feed(&buf[..n], log.max_offset()) {
                    Ok(Some(off)) => {
                        if c.request.load(Ordering::Acquire) < 0 {
                            // The first report: where sending starts, and
                            // what the slave's copy holds.
                            let start = match start_offset(off, log, opts) {
                                Ok(s) => s,
                                Err(why) => {
                                    let min = log.min_offset();
                                    if min > 0 && off < min as u64 {
                                        // Tells a rocketstore slave where this log
                                        // starts (docs/format.md §21.8): an empty
                                        // frame there, then the close.
                                        let _ = (&c.stream).write_all(&frame_header(min as u64, 0));
                                    }
                                    return c.close(acks, &why);
                                }
                            };
                            let from = if off == 0 { start } else { 0 };
                            c.slave.from.store(from as i64, Ordering::SeqCst);
                            c.request.store(start as i64, Ordering::Release);
                        }
                        acks.report(&c.slave, off);
                        log_behind(c, log.max_offset().saturating_sub(off), opts);
                    }
                    Ok(None) => {}
                    Err(why) => {
                        if c.request.load(Ordering::Acquire) < 0 {
                            // A first report past this log's end: an empty
                            // frame at the end tells a rocketstore slave where
                            // this log ends (docs/format.md §21.4).
                            let _ = stream.write_all(&frame_header(log.max_offset(), 0));
                        }
                        return c.close(acks, &why);
                    }
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if last_read.elapsed() > opts.housekeeping {
                    return c.close(
                        acks,
                        &format!(
                            "no report for {} ms (ha_housekeeping_interval)",
                            opts.housekeeping.as_millis()
                        ),
                    );
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return c.close(acks, &format!("read failed: {e}")),
        }
    }
}

/// Logs a slave falling `ha_slave_fallbehind_max` behind, and catching up
/// again, once per change.
fn log_behind(c: &Conn, lag: u64, opts: &HaOptions) {
    let behind = lag >= opts.fallbehind_max;
    if c.behind.swap(behind, Ordering::AcqRel) == behind {
        return;
    }
    if behind {
        log::warn!(
            "HA: slave {} fell behind: {lag} bytes (ha_slave_fallbehind_max {}); \
             SYNC_MASTER puts are SLAVE_NOT_AVAILABLE while no slave is closer",
            c.slave.addr,
            opts.fallbehind_max
        );
    } else {
        log::info!("HA: slave {} caught up ({lag} bytes behind)", c.slave.addr);
    }
}

/// Where a slave whose first report is `req` starts, or why it cannot.
fn start_offset(req: u64, log: &CommitLog, opts: &HaOptions) -> Result<u64, String> {
    let size = log.file_size() as u64;
    let min = log.min_offset();
    if req == 0 {
        if opts.new_slave_from_first_file {
            return Ok(min.max(0) as u64);
        }
        let max = log.max_offset();
        return Ok(max - max % size);
    }
    if min >= 0 && req < min as u64 {
        return Err(format!(
            "it reported offset {req}, below this store's first CommitLog file at {min}: \
             the bytes it needs are deleted (reseed it)"
        ));
    }
    Ok(req)
}

/// Sends frames from the slave's first report on, until the connection closes.
fn write_frames(
    c: &Conn,
    w: &mut TcpStream,
    acks: &Acks,
    log: &CommitLog,
    opts: &HaOptions,
    stop: &AtomicBool,
) {
    let live = || !stop.load(Ordering::Acquire) && !c.closed.load(Ordering::Acquire);
    while live() && c.request.load(Ordering::Acquire) < 0 {
        std::thread::sleep(Duration::from_millis(10));
    }
    if !live() {
        return;
    }
    let mut next = c.request.load(Ordering::Acquire) as u64;
    log::info!("HA: sending to slave {} from offset {next}", c.slave.addr);
    forget_warning(local_port(&c.stream), c.slave.addr.ip());
    let mut last_write = Instant::now();
    let mut out = Frames::default();
    while live() {
        let seen = acks.grew_seq();
        let min = log.min_offset();
        if min >= 0 && next < min as u64 {
            return c.close(
                acks,
                &format!(
                    "offset {next} was deleted before it was sent (the slave is too far behind)"
                ),
            );
        }
        next = out.gather(log, next, opts.batch_size);
        if out.is_empty() && last_write.elapsed() >= opts.heartbeat {
            out.heartbeat(next);
        }
        if out.is_empty() {
            acks.wait_grew(seen, opts.heartbeat.min(POLL));
            continue;
        }
        if let Err(e) = out.send(w) {
            return c.close(acks, &format!("write failed: {e}"));
        }
        last_write = Instant::now();
    }
}

/// Most bytes of frames the writer sends in one system call.
const WRITE_MAX: usize = 1 << 20;
/// Most frames it sends in one system call (two slices each).
const WRITE_FRAMES: usize = 64;

/// The frames of one write: headers, and the CommitLog files their bodies
/// are viewed in (no copy; the bytes go from the mapped file to the socket).
#[derive(Default)]
struct Frames {
    headers: Vec<[u8; FRAME_HEADER]>,
    /// Each frame's file and the body's position and size in it.
    bodies: Vec<(Arc<MappedFile>, usize, usize)>,
}

impl Frames {
    fn is_empty(&self) -> bool {
        self.headers.is_empty()
    }

    /// Takes frames from `next` on: each of at most `batch` bytes from one
    /// file, up to [`WRITE_MAX`] bytes or [`WRITE_FRAMES`] frames, as far
    /// as the log is written. Returns the offset after the last one.
    fn gather(&mut self, log: &CommitLog, mut next: u64, batch: usize) -> u64 {
        let mut total = 0;
        while total < WRITE_MAX && self.headers.len() < WRITE_FRAMES {
            let Some(f) = log.file_for(next) else { break };
            let pos = (next - f.file_from_offset()) as usize;
            let Some(n) = f.readable_from(pos).map(|d| d.len().min(batch)) else {
                break;
            };
            if n == 0 {
                break;
            }
            self.headers.push(frame_header(next, n as u32));
            self.bodies.push((f, pos, n));
            total += n;
            next += n as u64;
        }
        next
    }

    /// An empty frame at `next` (a heartbeat).
    fn heartbeat(&mut self, next: u64) {
        self.headers.push(frame_header(next, 0));
    }

    /// Writes every frame (one `writev` when the socket takes it whole),
    /// then forgets them.
    fn send(&mut self, w: &mut TcpStream) -> std::io::Result<()> {
        let r = self.write_all(w);
        self.headers.clear();
        self.bodies.clear();
        r
    }

    fn write_all(&self, w: &mut TcpStream) -> std::io::Result<()> {
        let mut parts: Vec<&[u8]> = Vec::with_capacity(2 * self.headers.len());
        for (i, h) in self.headers.iter().enumerate() {
            parts.push(h);
            if let Some((f, pos, n)) = self.bodies.get(i) {
                parts.push(f.read(*pos, *n).ok_or_else(|| {
                    std::io::Error::other("a CommitLog file shrank under a frame")
                })?);
            }
        }
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut done = 0;
        while done < total {
            // The parts from the first byte not yet written on.
            let mut skip = done;
            let mut slices = Vec::with_capacity(parts.len());
            for p in &parts {
                if skip >= p.len() {
                    skip -= p.len();
                } else {
                    slices.push(IoSlice::new(&p[skip..]));
                    skip = 0;
                }
            }
            match w.write_vectored(&slices) {
                Ok(0) => return Err(std::io::Error::from(ErrorKind::WriteZero)),
                Ok(n) => done += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
