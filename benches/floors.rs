//! The byte-moving parts of the physical floor of each row of the
//! side-by-side table (benches/RESULTS.md): a `memcpy` and a CRC-32
//! (`crc32fast`, as the store computes it) of the bytes a row moves per
//! message, with nothing else around them.
//!
//! `cargo bench --bench floors` (or all of the floor table at once:
//! `python benches/python/floors.py`). The bytes: the table's record (one
//! topic `BenchTopic`, a 100-byte body, a tag and a key `K1000000`, the
//! property CRC, IPv4 hosts), whose size the ids carry (`record_<n>B`), and
//! a `get_arrow` row of `queue_offset` and `body` (8 + 100 bytes,
//! `offset_body_108B`). The log is a 128 MiB buffer, larger than the
//! caches, written and read at a moving position as a CommitLog is:
//!
//! - `memcpy_to_log`: a record in cache copied to the log's next position
//!   (a put's write);
//! - `memcpy_from_log`: the log's next record copied into a buffer in cache
//!   (a pull copying each record out);
//! - `memcpy_from_log_random`: a record at a random position of the log
//!   (a lookup by key: the record is not in cache);
//! - `crc32_hot`: the CRC of a record in cache (a put's CRC of what it is
//!   writing);
//! - `crc32_log`: the CRC of the log's next record (a read's check).
//!
//! Each iteration handles 10,000 messages; criterion reports messages per
//! second, `floors.py` nanoseconds per message.
// A benchmark: criterion_group! makes an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Duration;

use _native::internals::message::{prop_crc_extra, record_len};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

/// Messages per iteration.
const MSGS: usize = 10_000;
/// The log buffer: larger than the last-level cache.
const LOG: usize = 128 << 20;

/// Bytes of the table's record: topic, 100-byte body, tag and key, the
/// property CRC, IPv4 born and store hosts.
fn table_record_len() -> usize {
    let props = b"TAGS\x01TagA\x02KEYS\x01K1000000";
    let host = SocketAddr::from(([127, 0, 0, 1], 10911));
    let props_len = props.len() + prop_crc_extra(props);
    record_len(100, "BenchTopic".len(), props_len, &host, &host)
}

/// A CRC-32 hasher made once and cloned per use, as the store does (the CPU
/// feature check of `Hasher::new` runs once).
fn crc32(base: &crc32fast::Hasher, bytes: &[u8]) -> u32 {
    let mut h = base.clone();
    h.update(bytes);
    h.finalize()
}

/// A xorshift step: the random record positions of the lookup row.
fn next_random(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn bench_floors(c: &mut Criterion) {
    let mut log: Vec<u8> = (0..LOG).map(|i| (i * 31 + 7) as u8).collect();
    let base = crc32fast::Hasher::new();
    let mut g = c.benchmark_group("floors");
    g.throughput(Throughput::Elements(MSGS as u64));
    g.sample_size(20);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(2));
    let sizes = [
        (
            format!("record_{}B", table_record_len()),
            table_record_len(),
        ),
        ("offset_body_108B".to_owned(), 108),
    ];
    for (name, n) in &sizes {
        let n = *n;
        let hot: Vec<u8> = (0..n).map(|i| i as u8).collect();
        let mut out = vec![0u8; n];
        let mut pos = 0usize;
        g.bench_function(BenchmarkId::new("memcpy_to_log", name), |b| {
            b.iter(|| {
                for _ in 0..MSGS {
                    if pos + n > LOG {
                        pos = 0;
                    }
                    log[pos..pos + n].copy_from_slice(black_box(&hot));
                    pos += n;
                }
                black_box(&log[pos.saturating_sub(n)]);
            })
        });
        g.bench_function(BenchmarkId::new("memcpy_from_log", name), |b| {
            b.iter(|| {
                for _ in 0..MSGS {
                    if pos + n > LOG {
                        pos = 0;
                    }
                    out.copy_from_slice(black_box(&log[pos..pos + n]));
                    black_box(&mut out);
                    pos += n;
                }
            })
        });
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        g.bench_function(BenchmarkId::new("memcpy_from_log_random", name), |b| {
            b.iter(|| {
                for _ in 0..MSGS {
                    let at = (next_random(&mut seed) as usize) % (LOG - n);
                    out.copy_from_slice(black_box(&log[at..at + n]));
                    black_box(&mut out);
                }
            })
        });
        g.bench_function(BenchmarkId::new("crc32_hot", name), |b| {
            b.iter(|| {
                let mut acc = 0u32;
                for _ in 0..MSGS {
                    acc ^= crc32(&base, black_box(&hot));
                }
                acc
            })
        });
        g.bench_function(BenchmarkId::new("crc32_log", name), |b| {
            b.iter(|| {
                let mut acc = 0u32;
                for _ in 0..MSGS {
                    if pos + n > LOG {
                        pos = 0;
                    }
                    acc ^= crc32(&base, black_box(&log[pos..pos + n]));
                    pos += n;
                }
                acc
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_floors);
criterion_main!(benches);
