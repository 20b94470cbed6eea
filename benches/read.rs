//! The cost of checking the body CRC on read.
//!
//! `cargo bench --bench read`. A CommitLog holds records with 100-byte,
//! 1 KiB and 16 KiB bodies; each iteration reads all records of one size
//! from the mapping and copies them out, as a pull does, two ways in the same
//! run: `unchecked` parses the record without the CRC (what reads did
//! before), `checked` goes through the read path's record check
//! (`check_read_record`: sizes and body CRC).
// A benchmark: a failed unwrap fails it, with its message; criterion_group!
// makes an undocumented public function.
#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use _native::internals::commitlog::{check_read_record, CommitLog, CommitLogConfig};
use _native::internals::message::{parse_record, Parsed};
use _native::MessageSpec;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const N: usize = 4096;

fn base_dir() -> tempfile::TempDir {
    let base = std::env::var_os("ROCKETSTORE_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| Some(std::path::PathBuf::from("/dev/shm")).filter(|p| p.is_dir()))
        .unwrap_or_else(std::env::temp_dir);
    tempfile::tempdir_in(base).unwrap()
}

/// A CommitLog of `N` records with `body_len`-byte bodies; returns it and
/// the records' offsets.
fn written_log(dir: &std::path::Path, body_len: usize) -> (CommitLog, Vec<u64>) {
    let cfg = CommitLogConfig {
        dir: dir.join("commitlog"),
        file_size: 128 << 20,
        max_message_size: 4 << 20,
        store_host: "127.0.0.1:10911".parse().unwrap(),
        delay_levels: vec![1000],
        prop_crc: true,
    };
    let log = CommitLog::load(cfg, true).unwrap();
    let body = vec![7u8; body_len];
    let offsets = (0..N)
        .map(|i| {
            let o = log
                .put(
                    MessageSpec::new("bench", (i % 8) as i32, &body)
                        .with_properties(b"TAGS\x01t")
                        .born_at(1_700_000_000_000),
                )
                .unwrap();
            o.wrote_offset as u64
        })
        .collect();
    (log, offsets)
}

fn bench_read(c: &mut Criterion) {
    for (name, body_len) in [("100B", 100), ("1KiB", 1024), ("16KiB", 16 * 1024)] {
        let dir = base_dir();
        let (log, offsets) = written_log(dir.path(), body_len);
        let file = log.file_for(0).unwrap();
        let data = file.raw();
        let mut g = c.benchmark_group("read");
        g.throughput(Throughput::Elements(N as u64));
        g.sample_size(20);
        g.measurement_time(Duration::from_secs(3));
        g.bench_function(format!("unchecked_{name}"), |b| {
            b.iter(|| {
                let mut n = 0usize;
                for &o in &offsets {
                    let buf = &data[o as usize..];
                    if let Parsed::Record(v) = parse_record(buf, false) {
                        n += black_box(buf[..v.total_size].to_vec()).len();
                    }
                }
                n
            })
        });
        g.bench_function(format!("checked_{name}"), |b| {
            b.iter(|| {
                let mut n = 0usize;
                for &o in &offsets {
                    let buf = &data[o as usize..];
                    let total = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                    let rec = &buf[..total];
                    if check_read_record(rec).is_ok() {
                        n += black_box(rec.to_vec()).len();
                    }
                }
                n
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench_read);
criterion_main!(benches);
