//! Dispatch throughput: CommitLog records -> ConsumeQueue units (+ index).
//!
//! `cargo bench --bench dispatch`. The CommitLog is written once; each
//! iteration dispatches all of it into fresh consume queues (and a fresh
//! index for the keyed variant). Only dispatching is timed.
// A benchmark: a failed unwrap fails it, with its message; criterion_group!
// makes an undocumented public function.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use _native::internals::commitlog::{CommitLog, CommitLogConfig};
use _native::internals::dispatch::Dispatcher;
use _native::internals::index::IndexStore;
use _native::internals::queue::ConsumeQueueTable;
use _native::MessageSpec;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const N: u64 = 200_000;

fn base_dir() -> tempfile::TempDir {
    let base = std::env::var_os("ROCKETSTORE_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| Some(std::path::PathBuf::from("/dev/shm")).filter(|p| p.is_dir()))
        .unwrap_or_else(std::env::temp_dir);
    tempfile::tempdir_in(base).unwrap()
}

fn written_log(dir: &std::path::Path, keyed: bool) -> Arc<CommitLog> {
    let cfg = CommitLogConfig {
        dir: dir.join("commitlog"),
        file_size: 128 << 20,
        max_message_size: 4 << 20,
        store_host: "127.0.0.1:10911".parse().unwrap(),
        delay_levels: vec![1000],
        prop_crc: true,
    };
    let log = CommitLog::load(cfg, true).unwrap();
    let body = [7u8; 100];
    for i in 0..N {
        let props = if keyed {
            format!("TAGS\x01t\x02KEYS\x01key-{i}")
        } else {
            "TAGS\x01t".to_string()
        };
        log.put(
            MessageSpec::new("bench", (i % 8) as i32, &body)
                .with_properties(props.into_bytes())
                .born_at(1_700_000_000_000),
        )
        .unwrap();
    }
    Arc::new(log)
}

fn bench(c: &mut Criterion, name: &str, keyed: bool) {
    let dir = base_dir();
    let log = written_log(dir.path(), keyed);
    let mut g = c.benchmark_group("dispatch");
    g.throughput(Throughput::Elements(N));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(10));
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let out = base_dir();
                let cqs = Arc::new(
                    ConsumeQueueTable::load(
                        out.path().join("consumequeue"),
                        Some(20 * 300_000),
                        true,
                    )
                    .unwrap(),
                );
                let index = keyed.then(|| {
                    Arc::new(
                        IndexStore::load(&out.path().join("index"), 500_000, 2_000_000, true, 0)
                            .unwrap()
                            .0,
                    )
                });
                let d = Dispatcher::new(log.clone(), cqs, index, None, vec![1000], 0);
                let t = Instant::now();
                d.drain().unwrap();
                total += t.elapsed();
                assert_eq!(d.behind_bytes(), 0);
            }
            total
        })
    });
    g.finish();
}

fn bench_dispatch(c: &mut Criterion) {
    bench(c, "cq_only", false);
    bench(c, "cq_and_index_1key", true);
}

criterion_group!(benches, bench_dispatch);
criterion_main!(benches);
