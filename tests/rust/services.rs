//! The store's running state under failure (built only with `--features
//! failpoints`): a failed flush, and a panic injected into each background
//! service, must poison the store — puts refused with SERVICE_NOT_AVAILABLE,
//! the running flags naming the reason — while reads keep working.
//! Fail points are process-global, so the tests hold one lock each.
#![allow(clippy::unwrap_used)] // a test: a failed unwrap fails it, with its message

use std::path::Path;
use std::time::{Duration, Instant};

use _native::{
    FlushConfig, FlushDiskType, GetStatus, MessageSpec, PutOutcome, PutStatus, Store, StoreOptions,
};

mod common;
use common::Points;

/// Small files; every periodic service runs every 10 ms.
fn options(dir: &Path) -> StoreOptions {
    StoreOptions {
        commit_log_file_size: Some(64 << 10),
        consume_queue_file_size: Some(20 * 100),
        max_message_size: 4 << 10,
        max_hash_slot_num: 16,
        max_index_num: 8,
        flush: FlushConfig {
            flush_interval: Duration::from_millis(10),
            commit_interval: Duration::from_millis(10),
            cq_interval: Duration::from_millis(10),
            ..FlushConfig::default()
        },
        ..StoreOptions::at(dir)
    }
}

fn started(opts: StoreOptions) -> Store {
    Store::open_running(opts).unwrap()
}

fn put(store: &Store, i: usize) -> PutOutcome {
    let props = format!("KEYS\u{1}key{i}");
    let spec = MessageSpec::new("T", 0, format!("message {i}").into_bytes())
        .with_properties(props.into_bytes())
        .born_at(1_700_000_000_000);
    match store.prepare(spec).unwrap() {
        Ok(p) => store.put_prepared(&p).unwrap(),
        Err(refused) => PutOutcome::rejected(refused),
    }
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The first `n` messages of queue 0 read back.
fn read_back(store: &Store, n: usize) {
    let got = store.get_message("T", 0, 0, n, None).unwrap();
    assert_eq!(got.status, GetStatus::Found);
    let bodies: Vec<Vec<u8>> = got
        .messages
        .iter()
        .map(|(v, raw)| raw[v.body.clone()].to_vec())
        .collect();
    let want: Vec<Vec<u8>> = (0..n)
        .map(|i| format!("message {i}").into_bytes())
        .collect();
    assert_eq!(bodies, want);
}

/// The store refuses puts, says why, and still serves what it has.
fn assert_poisoned(store: &Store, acked: usize, flag: &str, reason: &str) {
    let end = store.commitlog().max_offset();
    let refused = put(store, 1000);
    assert_eq!(refused.status, PutStatus::ServiceNotAvailable);
    let why = refused.reason.unwrap_or_default();
    assert!(why.contains(reason), "put refused with {why:?}");
    assert_eq!(store.commitlog().max_offset(), end, "a refused put wrote");
    let flags = store.running_flags().describe();
    assert!(
        flags
            .iter()
            .any(|f| f.starts_with(&format!("{flag}: ")) && f.contains(reason)),
        "{flags:?}"
    );
    assert!(store.poison_reason().unwrap().contains(reason));
    read_back(store, acked);
    let keyed = store.query_message("T", "key1", 10, 0, i64::MAX).unwrap();
    assert_eq!(keyed.len(), 1);
}

/// Puts `n` messages and waits until they are dispatched.
fn put_some(store: &Store, n: usize) {
    for i in 0..n {
        assert_eq!(put(store, i).status, PutStatus::PutOk);
    }
    store.drain_dispatch().unwrap();
}

#[test]
fn a_failed_fsync_poisons_and_reads_keep_working() {
    let points = Points::take();
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path());
    opts.flush.flush_disk_type = FlushDiskType::SyncFlush;
    let store = started(opts);
    put_some(&store, 5);
    points.arm("msync", libc::EIO);
    let out = put(&store, 5);
    assert_eq!(out.status, PutStatus::FlushDiskTimeout);
    assert!(
        out.reason.as_deref().unwrap_or("").contains("flush failed"),
        "{:?}",
        out.reason
    );
    points.arm("msync", 0);
    // Sticky: the fsync works again, the store still refuses.
    assert_poisoned(&store, 5, "FLUSH_FAILED", "CommitLog flush failed");
    assert!(
        store.flush().is_err(),
        "a poisoned store must not claim a flush"
    );
    drop(points);
    let _ = store.shutdown();
    // The abort file stays: the next open recovers as after a crash.
    assert!(dir.path().join("abort").exists());
}

/// Arms `panic_<service>`, waits for the store to notice, checks it.
fn panics_poison(service: &str, flag: &str, opts: impl FnOnce(&mut StoreOptions), work: usize) {
    let points = Points::take();
    let dir = tempfile::tempdir().unwrap();
    let mut o = options(dir.path());
    opts(&mut o);
    let store = started(o);
    put_some(&store, 5);
    points.arm(&format!("panic_{service}"), 1);
    let mut i = 5;
    let mut acked = 5;
    // Work that makes the service run a round (a full index file, a roll).
    wait_until(&format!("the {service} panic to poison the store"), || {
        if i < 5 + work {
            if put(&store, i).status == PutStatus::PutOk {
                acked += 1;
            }
            i += 1;
        }
        !store.running_flags().is_writeable()
    });
    points.arm(&format!("panic_{service}"), 0);
    let reason = format!("{service} service panicked: fail point panic_{service}");
    // What was acknowledged stays readable (a read dispatches it itself
    // when the dispatch thread is the one that died).
    assert_poisoned(
        &store,
        if service == "dispatch" { 5 } else { acked },
        flag,
        &reason,
    );
    drop(points);
    let _ = store.shutdown();
}

#[test]
fn a_panic_in_the_async_flush_poisons() {
    panics_poison("flush", "FLUSH_FAILED", |_| {}, 0);
}

#[test]
fn a_panic_in_the_group_commit_poisons_and_releases_waiting_producers() {
    panics_poison(
        "group_commit",
        "FLUSH_FAILED",
        |o| o.flush.flush_disk_type = FlushDiskType::SyncFlush,
        0,
    );
}

#[test]
fn a_panic_in_the_transient_commit_poisons() {
    panics_poison(
        "commit",
        "FLUSH_FAILED",
        |o| {
            o.transient_store_pool_enable = true;
            o.transient_store_pool_size = 2;
            o.flush.transient = true;
        },
        0,
    );
}

#[test]
fn a_panic_in_the_queue_flush_poisons() {
    panics_poison("cq_flush", "FLUSH_FAILED", |_| {}, 0);
}

#[test]
fn a_panic_in_dispatch_poisons() {
    panics_poison("dispatch", "WRITE_LOGICS_QUEUE_ERROR", |_| {}, 1);
}

#[test]
fn a_panic_in_the_allocator_poisons() {
    panics_poison("allocate", "NOT_WRITEABLE", |o| o.preallocate = true, 0);
}

#[test]
fn a_panic_in_the_prefaulter_poisons() {
    panics_poison("prefault", "NOT_WRITEABLE", |_| {}, 0);
}

#[test]
fn a_panic_in_the_index_flush_poisons() {
    // 7 keys fill an index file: the next one rolls and hands the full
    // file to the index flush service.
    panics_poison("index_flush", "WRITE_INDEX_FILE_ERROR", |_| {}, 20);
}

#[test]
fn a_panic_in_the_clock_poisons() {
    panics_poison("clock", "NOT_WRITEABLE", |_| {}, 0);
}
