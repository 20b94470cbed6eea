//! Engine append throughput: 100-byte bodies into a pre-touched segment,
//! on tmpfs and on the real disk side by side.
//!
//! `cargo bench --bench append`. Only the appends are timed; creating and
//! pre-touching segments happens outside the measured region.
//!
//! - `append_100B`: one put per message, store timestamps from the system
//!   clock (one `clock_gettime` per put);
//! - `append_100B_cached_clock`: the same with the cached clock a store uses;
//! - `append_batch_100B`: `validate_batch` + `append_batch` of 10,000
//!   bodies to one queue (the engine side of `put_batch`).
//!
//! Each runs with the property CRC (`enabled_append_prop_crc`, the store's
//! default) and without it (`/nocrc`), in the same run, so the difference
//! is its cost per message.
//!
//! Media: `tmpfs` is `/dev/shm` (or `ROCKETSTORE_BENCH_DIR`), `disk` the
//! temp dir (or `ROCKETSTORE_DISK_BENCH_DIR`).
// A benchmark: a failed unwrap fails it, with its message; criterion_group!
// makes an undocumented public function.
#![allow(clippy::unwrap_used, missing_docs)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use _native::internals::clock::CachedClock;
use _native::internals::commitlog::{CommitLog, CommitLogConfig};
use _native::{BatchInput, MessageSpec};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const SEGMENT: usize = 256 << 20;
const BATCH: u64 = 10_000;

struct Log {
    _dir: tempfile::TempDir,
    log: CommitLog,
}

/// The media measured: (name, base directory).
fn media() -> Vec<(&'static str, PathBuf)> {
    let mut v = Vec::new();
    let tmpfs = std::env::var_os("ROCKETSTORE_BENCH_DIR")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from("/dev/shm")).filter(|p| p.is_dir()));
    if let Some(p) = tmpfs {
        v.push(("tmpfs", p));
    }
    let disk = std::env::var_os("ROCKETSTORE_DISK_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    v.push(("disk", disk));
    v
}

fn fresh(base: &PathBuf, clock: Option<&Arc<CachedClock>>, prop_crc: bool) -> Log {
    let dir = tempfile::tempdir_in(base).unwrap();
    let cfg = CommitLogConfig {
        dir: dir.path().join("commitlog"),
        file_size: SEGMENT,
        max_message_size: 4 << 20,
        store_host: "127.0.0.1:10911".parse().unwrap(),
        delay_levels: vec![1000],
        prop_crc,
    };
    let log = CommitLog::load(cfg, true).unwrap();
    if let Some(c) = clock {
        log.use_clock(c.clone());
    }
    log.put(spec(b"warm-up")).unwrap();
    log.queue().last_file().unwrap().pretouch().unwrap();
    Log { _dir: dir, log }
}

fn spec(body: &[u8]) -> MessageSpec<'_> {
    MessageSpec::new("bench", 0, body)
        .with_properties(b"TAGS\x01t")
        .born_at(1_700_000_000_000)
}

/// Times `BATCH` messages per iteration, starting a fresh segment when the
/// current one could not take the next round.
fn run(
    base: &PathBuf,
    clock: Option<&Arc<CachedClock>>,
    prop_crc: bool,
    iters: u64,
    mut round: impl FnMut(&CommitLog),
) -> Duration {
    let mut cur = fresh(base, clock, prop_crc);
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let f = cur.log.queue().last_file().unwrap();
        if f.wrote_position() + (BATCH as usize + 1) * 256 > SEGMENT {
            cur = fresh(base, clock, prop_crc);
        }
        let t = Instant::now();
        round(&cur.log);
        total += t.elapsed();
    }
    total
}

fn bench_append(c: &mut Criterion) {
    let body = [7u8; 100];
    let bodies: Vec<&[u8]> = (0..BATCH).map(|_| &body[..]).collect();
    let props_one = b"TAGS\x01t";
    let props: Vec<u8> = (0..BATCH).flat_map(|_| props_one.iter().copied()).collect();
    let ends: Vec<usize> = (1..=BATCH as usize).map(|i| i * props_one.len()).collect();
    let clock = Arc::new(CachedClock::start().unwrap());
    let mut g = c.benchmark_group("commitlog");
    g.throughput(Throughput::Elements(BATCH));
    g.measurement_time(Duration::from_secs(6));
    for ((medium, base), prop_crc) in media()
        .into_iter()
        .flat_map(|m| [(m.clone(), true), (m, false)])
    {
        let medium = if prop_crc {
            medium.to_string()
        } else {
            format!("{medium}/nocrc")
        };
        let medium = medium.as_str();
        g.bench_function(BenchmarkId::new("append_100B", medium), |b| {
            b.iter_custom(|iters| {
                run(&base, None, prop_crc, iters, |log| {
                    for _ in 0..BATCH {
                        std::hint::black_box(log.put(spec(&body)).unwrap());
                    }
                })
            })
        });
        g.bench_function(BenchmarkId::new("append_100B_cached_clock", medium), |b| {
            b.iter_custom(|iters| {
                run(&base, Some(&clock), prop_crc, iters, |log| {
                    for _ in 0..BATCH {
                        std::hint::black_box(log.put(spec(&body)).unwrap());
                    }
                })
            })
        });
        g.bench_function(BenchmarkId::new("append_batch_100B", medium), |b| {
            b.iter_custom(|iters| {
                run(&base, Some(&clock), prop_crc, iters, |log| {
                    let input = BatchInput {
                        topic: "bench",
                        queue_id: 0,
                        flag: 0,
                        born_timestamp: 1_700_000_000_000,
                        born_host: SocketAddr::from(([127, 0, 0, 1], 0)),
                        bodies: &bodies,
                        props: &props,
                        props_ends: &ends,
                    };
                    log.validate_batch(&input).unwrap();
                    let out = log.append_batch(&input, false, || {}).unwrap();
                    assert_eq!(out.count, BATCH as usize);
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_append);
criterion_main!(benches);
