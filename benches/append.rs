//! Engine append throughput: 100-byte bodies into a pre-touched segment.
//!
//! `cargo bench --bench append`. Only the appends are timed; creating and
//! pre-touching segments happens outside the measured region.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use _native::commitlog::{CommitLog, CommitLogConfig};
use _native::message::MessageSpec;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const SEGMENT: usize = 256 << 20;
const BATCH: u64 = 10_000;

struct Log {
    _dir: tempfile::TempDir,
    log: CommitLog,
}

/// Where segments live: `ROCKETSTORE_BENCH_DIR`, else /dev/shm (no writeback
/// re-protecting pages mid-measurement), else the temp dir.
fn bench_dir() -> tempfile::TempDir {
    let base = std::env::var_os("ROCKETSTORE_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| Some(std::path::PathBuf::from("/dev/shm")).filter(|p| p.is_dir()))
        .unwrap_or_else(std::env::temp_dir);
    tempfile::tempdir_in(base).unwrap()
}

fn fresh() -> Log {
    let dir = bench_dir();
    let cfg = CommitLogConfig {
        dir: dir.path().join("commitlog"),
        file_size: SEGMENT,
        max_message_size: 4 << 20,
        store_host: "127.0.0.1:10911".parse().unwrap(),
        delay_levels: vec![1000],
    };
    let log = CommitLog::load(cfg, true).unwrap();
    log.put(spec(b"warm-up")).unwrap();
    log.queue().last_file().unwrap().pretouch().unwrap();
    Log { _dir: dir, log }
}

fn spec(body: &[u8]) -> MessageSpec<'_> {
    MessageSpec {
        topic: Cow::Borrowed("bench"),
        queue_id: 0,
        flag: 0,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        born_host: SocketAddr::from(([127, 0, 0, 1], 0)),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: Cow::Borrowed(body),
        properties: Cow::Borrowed(b"TAGS\x01t"),
    }
}

fn bench_append(c: &mut Criterion) {
    let body = [7u8; 100];
    let mut g = c.benchmark_group("commitlog");
    g.throughput(Throughput::Elements(BATCH));
    g.measurement_time(Duration::from_secs(8));
    let mut cur = fresh();
    g.bench_function("append_100B", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let f = cur.log.queue().last_file().unwrap();
                if f.wrote_position() + (BATCH as usize + 1) * 256 > SEGMENT {
                    cur = fresh();
                }
                let t = Instant::now();
                for _ in 0..BATCH {
                    let r = cur.log.put(spec(&body)).unwrap();
                    std::hint::black_box(r);
                }
                total += t.elapsed();
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, bench_append);
criterion_main!(benches);
