//! Put latency across CommitLog rolls, and SYNC_FLUSH throughput with and
//! without warm-up. A small harness (not criterion): it records every put's
//! latency and prints percentiles.
//!
//! ```text
//! cargo bench --bench roll                 # both parts
//! cargo bench --bench roll -- roll         # put latency at rolls only
//! cargo bench --bench roll -- sync         # SYNC_FLUSH warm-up on/off only
//! ```
//! Stores live on the real disk (the temp dir, `ROCKETSTORE_DISK_BENCH_DIR`
//! to choose): creating, reserving and syncing files costs nothing on tmpfs.
// A benchmark: a failed unwrap fails it, with its message; criterion_group!
// makes an undocumented public function.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use _native::{
    FlushConfig, FlushDiskType, MessageSpec, PutStatus, Store, StoreOptions, WarmConfig,
};

fn base_dir() -> std::path::PathBuf {
    std::env::var_os("ROCKETSTORE_DISK_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

fn open(
    dir: &std::path::Path,
    segment: usize,
    sync_flush: bool,
    preallocate: bool,
    warm: bool,
) -> Arc<Store> {
    let opts = StoreOptions {
        commit_log_file_size: Some(segment),
        consume_queue_file_size: None,
        max_message_size: 4 << 20,
        store_host: "127.0.0.1:10911".parse().unwrap(),
        delay_levels: vec![1000],
        read_only: false,
        message_index_enable: false,
        max_hash_slot_num: 1000,
        max_index_num: 4000,
        transient_store_pool_size: 1,
        flush: FlushConfig {
            flush_disk_type: if sync_flush {
                FlushDiskType::SyncFlush
            } else {
                FlushDiskType::AsyncFlush
            },
            ..FlushConfig::default()
        },
        preallocate,
        warm: WarmConfig {
            enabled: warm,
            ..Default::default()
        },
        ..StoreOptions::at(dir)
    };
    Arc::new(Store::open_running(opts).unwrap())
}

fn spec(body: &[u8]) -> MessageSpec<'_> {
    MessageSpec::new("bench", 0, body).born_at(1_700_000_000_000)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

/// Puts 1 KiB messages through `rolls` CommitLog rolls of `segment`-byte
/// files, pacing the producer so the allocator (a background thread) is not
/// starved of the CPU; returns (all latencies, latencies of the puts that
/// rolled into a new file).
fn roll_run(
    segment: usize,
    rolls: usize,
    preallocate: bool,
    warm: bool,
) -> (Vec<Duration>, Vec<Duration>) {
    let dir = tempfile::tempdir_in(base_dir()).unwrap();
    let store = open(dir.path(), segment, false, preallocate, warm);
    let body = vec![b'r'; 1024];
    // The first file (and with preallocation the second) exist before timing.
    let first = store.prepare(spec(&body)).unwrap().unwrap();
    assert_eq!(store.put_prepared(&first).unwrap().status, PutStatus::PutOk);
    std::thread::sleep(Duration::from_millis(if warm { 2000 } else { 300 }));
    let mut all = Vec::new();
    let mut at_roll = Vec::new();
    let seg = segment as i64;
    let mut files_seen = 1;
    let mut i = 0usize;
    while files_seen <= rolls {
        let p = store.prepare(spec(&body)).unwrap().unwrap();
        let t = Instant::now();
        let out = store.put_prepared(&p).unwrap();
        let d = t.elapsed();
        assert_eq!(out.status, PutStatus::PutOk);
        all.push(d);
        if out.wrote_offset / seg >= files_seen as i64 {
            files_seen += 1;
            at_roll.push(d);
        }
        i += 1;
        // ~ a producer writing 100 MB/s, one segment per (segment / 100 MB) s.
        if i % 256 == 0 {
            std::thread::sleep(Duration::from_micros(
                256u64 * 1024 * 1_000_000 / (100 << 20),
            ));
        }
    }
    store.shutdown().unwrap();
    (all, at_roll)
}

fn bench_roll() {
    let segment: usize = std::env::var("ROLL_SEGMENT_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
        << 20;
    let rolls: usize = std::env::var("ROLLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    println!(
        "## put latency across {rolls} CommitLog rolls ({} MiB segments, 1 KiB bodies, ASYNC_FLUSH)",
        segment >> 20
    );
    println!("| preallocate | warm-up | puts | p50 µs | p99 µs | p99.9 µs | max µs | roll put median µs | roll put max µs |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (pre, warm) in [(false, false), (true, false), (true, true)] {
        let (mut all, mut at_roll) = roll_run(segment, rolls, pre, warm);
        all.sort();
        at_roll.sort();
        println!(
            "| {pre} | {warm} | {} | {} | {} | {} | {} | {} | {} |",
            all.len(),
            us(pct(&all, 0.5)),
            us(pct(&all, 0.99)),
            us(pct(&all, 0.999)),
            us(*all.last().unwrap()),
            us(pct(&at_roll, 0.5)),
            us(*at_roll.last().unwrap_or(&Duration::ZERO)),
        );
    }
}

/// `threads` producers, one message in flight each, for `secs` seconds
/// after a warm-up second; returns messages per second.
fn sync_run(threads: usize, warm: bool, secs: f64) -> f64 {
    let dir = tempfile::tempdir_in(base_dir()).unwrap();
    let store = open(dir.path(), 256 << 20, true, true, warm);
    let body = vec![b's'; 1024];
    {
        let p = store.prepare(spec(&body)).unwrap().unwrap();
        assert_eq!(store.put_prepared(&p).unwrap().status, PutStatus::PutOk);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let counting = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let (store, stop, counting, count, body) = (
                store.clone(),
                stop.clone(),
                counting.clone(),
                count.clone(),
                body.clone(),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let p = store.prepare(spec(&body)).unwrap().unwrap();
                    let out = store.put_prepared(&p).unwrap();
                    assert_eq!(out.status, PutStatus::PutOk);
                    if counting.load(Ordering::Relaxed) {
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    counting.store(true, Ordering::Relaxed);
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let n = count.load(Ordering::Relaxed);
    let el = t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    store.shutdown().unwrap();
    n as f64 / el
}

fn bench_sync() {
    let secs: f64 = std::env::var("SYNC_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5.0);
    println!("## SYNC_FLUSH, 1 KiB bodies, 256 MiB segments, {secs} s per run");
    println!("| producers | warm-up | msg/s | × one fsync per message |");
    println!("|---|---|---|---|");
    let one = sync_run(1, false, secs);
    println!("| 1 | false | {one:.0} | 1.0 |");
    for warm in [false, true] {
        let r = sync_run(8, warm, secs);
        println!("| 8 | {warm} | {r:.0} | {:.1} |", r / one);
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let want = |name: &str| args.is_empty() || args.iter().any(|a| a == name);
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average at start: {}", l.trim());
    }
    if want("roll") {
        bench_roll();
    }
    if want("sync") {
        bench_sync();
    }
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average at end: {}", l.trim());
    }
}
