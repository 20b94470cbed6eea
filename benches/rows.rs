//! The rows of the side-by-side table against RocketMQ's own store
//! (benches/RESULTS.md), measured on the engine without Python: one topic,
//! 4 queues, 100-byte bodies, one key and one tag per message, stores on the
//! real disk (the temp dir, `ROCKETSTORE_DISK_BENCH_DIR` to choose).
//!
//! `cargo bench --bench rows`. Rows: put (1 and 4 threads, properties built
//! per message), a batch of 1,000 under one lock hold, pulls of 32 with one
//! byte of each body read, lookups by key, and SYNC_FLUSH producers (1 and 8
//! threads, each put waiting for its flush).
// A benchmark: a failed unwrap fails it, with its message; criterion_group!
// makes an undocumented public function.
#![allow(clippy::unwrap_used, missing_docs)]

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use _native::{FlushConfig, FlushDiskType, GetStatus, MessageSpec, PutStatus, Store, StoreOptions};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const TOPIC: &str = "BenchTopic";
const QUEUES: i32 = 4;
const TAGS: [&str; 4] = ["TagA", "TagB", "TagC", "TagD"];
/// Messages per timed put round.
const ROUND: usize = 20_000;
/// Messages in the store the read rows pull from.
const READ_N: usize = 200_000;

fn disk_base() -> std::path::PathBuf {
    std::env::var_os("ROCKETSTORE_DISK_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

fn open(dir: &std::path::Path, flush: FlushDiskType) -> Arc<Store> {
    let opts = StoreOptions {
        commit_log_file_size: Some(256 << 20),
        consume_queue_file_size: Some(20 * 300_000),
        max_message_size: 4 << 20,
        store_host: "127.0.0.1:10911".parse().unwrap(),
        delay_levels: vec![1000],
        read_only: false,
        message_index_enable: true,
        max_hash_slot_num: 500_000,
        max_index_num: 2_000_000,
        flush: FlushConfig {
            flush_disk_type: flush,
            ..FlushConfig::default()
        },
        ..StoreOptions::at(dir)
    };
    Arc::new(Store::open_running(opts).unwrap())
}

/// The properties a producer sends: the tag and one key, built per message.
fn props(buf: &mut Vec<u8>, i: usize) {
    buf.clear();
    write!(buf, "TAGS\x01{}\x02KEYS\x01K{i}", TAGS[i & 3]).unwrap();
}

fn put_one(store: &Store, body: &[u8], queue: i32, i: usize, buf: &mut Vec<u8>) {
    props(buf, i);
    let spec = MessageSpec::new(TOPIC, queue, body)
        .with_properties(buf.as_slice())
        .born_at(1_700_000_000_000);
    let p = store.prepare(spec).unwrap().unwrap();
    let r = store.put_prepared(&p).unwrap();
    assert_eq!(r.status, PutStatus::PutOk);
}

/// `threads` producers (thread t writes queue t % 4), `n` messages in all.
fn producers(store: &Store, threads: usize, n: usize, first: usize) {
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let body = [7u8; 100];
                let mut buf = Vec::with_capacity(64);
                let per = n / threads;
                for i in first + t * per..first + (t + 1) * per {
                    put_one(store, &body, t as i32 % QUEUES, i, &mut buf);
                }
            });
        }
    });
}

fn bench_puts(c: &mut Criterion) {
    let mut g = c.benchmark_group("rows_put");
    g.throughput(Throughput::Elements(ROUND as u64));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(6));
    for threads in [1usize, 4] {
        let dir = tempfile::tempdir_in(disk_base()).unwrap();
        let store = open(dir.path(), FlushDiskType::AsyncFlush);
        let mut next = 0usize;
        g.bench_with_input(
            BenchmarkId::new("key_tag_threads", threads),
            &threads,
            |b, &t| {
                b.iter_custom(|iters| {
                    let t0 = Instant::now();
                    for _ in 0..iters {
                        producers(&store, t, ROUND, next);
                        next += ROUND;
                    }
                    t0.elapsed()
                })
            },
        );
        store.shutdown().unwrap();
    }
    let dir = tempfile::tempdir_in(disk_base()).unwrap();
    let store = open(dir.path(), FlushDiskType::AsyncFlush);
    let mut next = 0usize;
    g.bench_function("batch_1000_key_tag", |b| {
        let body = [7u8; 100];
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                for chunk in 0..ROUND / 1000 {
                    let first = next;
                    let bufs: Vec<Vec<u8>> = (first..first + 1000)
                        .map(|i| {
                            let mut v = Vec::with_capacity(64);
                            props(&mut v, i);
                            v
                        })
                        .collect();
                    let q = chunk as i32 % QUEUES;
                    let t0 = Instant::now();
                    let outs = store
                        .put_batch(bufs.iter().map(|p| {
                            Ok(MessageSpec::new(TOPIC, q, &body)
                                .with_properties(p.as_slice())
                                .born_at(1_700_000_000_000))
                        }))
                        .unwrap();
                    total += t0.elapsed();
                    assert!(outs.iter().all(|o| o.status == PutStatus::PutOk));
                    next += 1000;
                }
            }
            total
        })
    });
    store.shutdown().unwrap();
    g.finish();
}

fn bench_reads(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(disk_base()).unwrap();
    let store = open(dir.path(), FlushDiskType::AsyncFlush);
    let body = [7u8; 100];
    let mut buf = Vec::with_capacity(64);
    for i in 0..READ_N {
        put_one(&store, &body, (i & 3) as i32, i, &mut buf);
    }
    store.flush().unwrap();
    let mut g = c.benchmark_group("rows_read");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(6));
    g.throughput(Throughput::Elements(READ_N as u64));
    g.bench_function("get_batch32_touch_body", |b| {
        b.iter(|| {
            let mut sum = 0u64;
            let mut count = 0usize;
            for q in 0..QUEUES {
                let mut off = 0i64;
                loop {
                    let r = store.get_message(TOPIC, q, off, 32, None).unwrap();
                    if r.status != GetStatus::Found {
                        break;
                    }
                    for (v, raw) in &r.messages {
                        sum += u64::from(raw[v.body.start]);
                        count += 1;
                    }
                    off = r.next_begin_offset;
                }
            }
            assert_eq!(count, READ_N);
            sum
        })
    });
    const QUERIES: usize = 10_000;
    let keys: Vec<String> = (0..QUERIES)
        .map(|i| format!("K{}", (i * 7919 + 13) % READ_N))
        .collect();
    g.throughput(Throughput::Elements(QUERIES as u64));
    g.bench_function("query_by_key", |b| {
        b.iter(|| {
            let mut hits = 0usize;
            for k in &keys {
                hits += store
                    .query_message(TOPIC, k, 32, 0, i64::MAX)
                    .unwrap()
                    .len();
            }
            assert_eq!(hits, QUERIES);
            hits
        })
    });
    g.finish();
    store.shutdown().unwrap();
}

fn bench_sync_flush(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(disk_base()).unwrap();
    let store = open(dir.path(), FlushDiskType::SyncFlush);
    let mut g = c.benchmark_group("rows_sync_flush");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    let mut next = 0usize;
    for threads in [1usize, 8] {
        let n = 50 * threads;
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(
            BenchmarkId::new("key_tag_threads", threads),
            &threads,
            |b, &t| {
                b.iter_custom(|iters| {
                    let t0 = Instant::now();
                    for _ in 0..iters {
                        producers(&store, t, n, next);
                        next += n;
                    }
                    t0.elapsed()
                })
            },
        );
    }
    g.finish();
    store.shutdown().unwrap();
}

criterion_group!(benches, bench_puts, bench_reads, bench_sync_flush);
criterion_main!(benches);
