//! Columnar pulls on the engine, without Python: `Store::get_arrow` over
//! every queue of a store on the real disk (the temp dir, or
//! `ROCKETSTORE_DISK_BENCH_DIR`), one topic, 4 queues, 100-byte bodies, one
//! key and one tag per message: the geometry of benches/RESULTS.md.
//!
//! `cargo bench --features arrow --bench arrow_get`. Rows: batches of 1,024
//! and 4,096 messages, bodies copied or zero-copy (views into the mapped
//! CommitLog), every column or only `queue_offset` and `body`; and, for
//! scale, `get_message` pulls of 32 copying each record out.
// A benchmark: a failed unwrap fails it, with its message; criterion_group!
// makes an undocumented public function.
#![allow(clippy::unwrap_used, missing_docs)]

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use _native::{GetStatus, MessageSpec, Projection, PullRequest, PutStatus, Store, StoreOptions};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const TOPIC: &str = "BenchTopic";
const QUEUES: i32 = 4;
const TAGS: [&str; 4] = ["TagA", "TagB", "TagC", "TagD"];
/// Messages in the store.
const READ_N: usize = 200_000;

fn disk_base() -> std::path::PathBuf {
    std::env::var_os("ROCKETSTORE_DISK_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

fn filled(dir: &std::path::Path) -> Arc<Store> {
    let opts = StoreOptions {
        commit_log_file_size: Some(256 << 20),
        consume_queue_file_size: Some(20 * 300_000),
        max_message_size: 4 << 20,
        store_host: "127.0.0.1:10911".parse().unwrap(),
        delay_levels: vec![1000],
        message_index_enable: true,
        max_hash_slot_num: 500_000,
        max_index_num: 2_000_000,
        ..StoreOptions::at(dir)
    };
    let store = Arc::new(Store::open_running(opts).unwrap());
    let body = [7u8; 100];
    let mut buf = Vec::with_capacity(64);
    for i in 0..READ_N {
        buf.clear();
        write!(buf, "TAGS\x01{}\x02KEYS\x01K{i}", TAGS[i & 3]).unwrap();
        let spec = MessageSpec::new(TOPIC, (i % 4) as i32, &body)
            .with_properties(buf.as_slice())
            .born_at(1_700_000_000_000);
        let p = store.prepare(spec).unwrap().unwrap();
        assert_eq!(store.put_prepared(&p).unwrap().status, PutStatus::PutOk);
    }
    store.drain_dispatch().unwrap();
    store
}

/// Reads every queue to its end with `get_arrow`; returns the rows.
fn read_all(store: &Store, batch: usize, projection: &Projection, zero_copy: bool) -> usize {
    let mut rows = 0;
    for q in 0..QUEUES {
        let mut off = 0;
        loop {
            let req = PullRequest {
                max_msgs: batch,
                ..PullRequest::at(TOPIC, q, off)
            };
            let r = store
                .get_arrow(&req, projection.clone(), zero_copy)
                .unwrap();
            if r.status != GetStatus::Found {
                break;
            }
            rows += r.messages.num_rows();
            off = r.next_begin_offset;
        }
    }
    rows
}

fn bench_arrow_get(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(disk_base()).unwrap();
    let store = filled(dir.path());
    let all = Projection::all(false);
    let two = Projection::of(&["queue_offset", "body"]).unwrap();
    let mut g = c.benchmark_group("arrow_get");
    g.throughput(Throughput::Elements(READ_N as u64));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    for (name, batch, projection, zero_copy) in [
        ("copy_1024", 1024, &all, false),
        ("copy_4096", 4096, &all, false),
        ("zero_copy_1024", 1024, &all, true),
        ("zero_copy_4096", 4096, &all, true),
        ("copy_1024_offset_body", 1024, &two, false),
        ("copy_4096_offset_body", 4096, &two, false),
        ("zero_copy_1024_offset_body", 1024, &two, true),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| assert_eq!(read_all(&store, batch, projection, zero_copy), READ_N))
        });
    }
    g.bench_function("get_message_32", |b| {
        b.iter(|| {
            let mut rows = 0;
            for q in 0..QUEUES {
                let mut off = 0;
                loop {
                    let r = store.get_message(TOPIC, q, off, 32, None).unwrap();
                    if r.status != GetStatus::Found {
                        break;
                    }
                    rows += r.messages.len();
                    off = r.next_begin_offset;
                }
            }
            assert_eq!(rows, READ_N);
        })
    });
    g.finish();
    store.shutdown().unwrap();
}

criterion_group!(benches, bench_arrow_get);
criterion_main!(benches);
