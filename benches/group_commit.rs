//! SYNC_FLUSH group commit with native producer threads (no GIL), each with
//! one message in flight: 1 thread is one fsync per message.
//!
//! `cargo bench --bench group_commit`. Stores live in the temp dir on the
//! real disk (`ROCKETSTORE_DISK_BENCH_DIR` to choose): fsync on tmpfs is free.
// A benchmark: a failed unwrap fails it, with its message; criterion_group!
// makes an undocumented public function.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use _native::{FlushConfig, FlushDiskType, MessageSpec, PutStatus, Store, StoreOptions};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const PER_ROUND: usize = 400;

fn open(dir: &std::path::Path) -> Arc<Store> {
    let opts = StoreOptions {
        commit_log_file_size: Some(64 << 20),
        consume_queue_file_size: Some(20 * 100_000),
        max_message_size: 4 << 20,
        store_host: "127.0.0.1:10911".parse().unwrap(),
        delay_levels: vec![1000],
        read_only: false,
        message_index_enable: false,
        max_hash_slot_num: 1000,
        max_index_num: 4000,
        transient_store_pool_size: 1,
        flush: FlushConfig {
            flush_disk_type: FlushDiskType::SyncFlush,
            ..FlushConfig::default()
        },
        ..StoreOptions::at(dir)
    };
    Arc::new(Store::open_running(opts).unwrap())
}

fn put_one(store: &Store, body: &[u8]) {
    let spec = MessageSpec::new("bench", 0, body).born_at(1_700_000_000_000);
    let p = store.prepare(spec).unwrap().unwrap();
    let r = store.put_prepared(&p).unwrap();
    assert_eq!(r.status, PutStatus::PutOk);
}

fn bench(c: &mut Criterion) {
    let base = std::env::var_os("ROCKETSTORE_DISK_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(base).unwrap();
    let store = open(dir.path());
    let mut g = c.benchmark_group("sync_flush");
    g.throughput(Throughput::Elements(PER_ROUND as u64));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    for threads in [1usize, 4, 8] {
        let before = store.flusher().group_stats();
        g.bench_with_input(
            BenchmarkId::new("producers", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let t = Instant::now();
                        std::thread::scope(|s| {
                            for _ in 0..threads {
                                let store = &store;
                                s.spawn(move || {
                                    let body = [7u8; 100];
                                    for _ in 0..PER_ROUND / threads {
                                        put_one(store, &body);
                                    }
                                });
                            }
                        });
                        total += t.elapsed();
                    }
                    total
                })
            },
        );
        let after = store.flusher().group_stats();
        let flushes = (after.flushes - before.flushes).max(1);
        eprintln!(
            "{threads} producers: {:.2} requests per flush, flush {:.0} us, gather {:.0} us (means)",
            (after.requests - before.requests) as f64 / flushes as f64,
            (after.flush_ns - before.flush_ns) as f64 / flushes as f64 / 1e3,
            (after.gather_ns - before.gather_ns) as f64 / flushes as f64 / 1e3,
        );
    }
    g.finish();
    store.shutdown().unwrap();
}

criterion_group!(benches, bench);
criterion_main!(benches);
