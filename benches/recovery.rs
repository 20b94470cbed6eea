//! Normal-recovery scan speed with CRC checks, warm page cache.
//!
//! `cargo bench --bench recovery`: three full 128 MiB CommitLog files of
//! 1 KiB-body messages (normal recovery scans the last three files), scanned
//! with `check_crc = true`; throughput in bytes.
// A benchmark: a failed unwrap fails it, with its message; criterion_group!
// makes an undocumented public function.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use _native::internals::commitlog::{CommitLog, CommitLogConfig};
use _native::MessageSpec;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const FILE: usize = 128 << 20;

fn bench_recovery(c: &mut Criterion) {
    let base = std::env::var_os("ROCKETSTORE_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| Some(std::path::PathBuf::from("/dev/shm")).filter(|p| p.is_dir()))
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(base).unwrap();
    let cfg = CommitLogConfig {
        dir: dir.path().join("commitlog"),
        file_size: FILE,
        max_message_size: 4 << 20,
        store_host: "127.0.0.1:10911".parse().unwrap(),
        delay_levels: vec![1000],
        prop_crc: true,
    };
    let log = CommitLog::load(cfg.clone(), true).unwrap();
    let body: Vec<u8> = (0..1024u32).map(|i| (i * 31) as u8).collect();
    // Three full files (the put that rolls into a fourth one stops the loop).
    while log.queue().len() < 4 {
        log.put(
            MessageSpec::new("bench", 0, &body)
                .with_properties(b"TAGS\x01t")
                .born_at(1_700_000_000_000),
        )
        .unwrap();
    }
    drop(log);
    let log = CommitLog::load(cfg, false).unwrap();
    let bytes = log.scan(0, true, |_, _, _| {}).bytes_scanned;
    let mut g = c.benchmark_group("recovery");
    g.throughput(Throughput::Bytes(bytes));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(10));
    g.bench_function("normal_scan_crc_3x128MiB", |b| {
        b.iter(|| {
            let r = log.scan(0, true, |_, _, _| {});
            assert_eq!(r.bytes_scanned, bytes);
            r
        })
    });
    g.finish();
}

criterion_group!(benches, bench_recovery);
criterion_main!(benches);
