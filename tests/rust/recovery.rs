//! Store-level recovery: each test fails if its behaviour breaks.
//!
//! Opening changes nothing on disk (a crashed store with short newest files
//! and index files newer than the index checkpoint); normal recovery keeps
//! everything; abnormal recovery re-dispatches to the queues and the index;
//! a torn tail is cut and zeroed; stale index files are rebuilt; steps out
//! of order, and puts and reads before recovery, are refused.
#![allow(clippy::unwrap_used)] // a test: a failed unwrap fails it, with its message

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use _native::internals::mapped_file::file_name;
use _native::internals::mapped_file::list_segment_files;
use _native::{
    ConsumerOffsetTable, FlushConfig, FlushDiskType, MessageSpec, PutOutcome, PutStatus,
    RecoveryMode, RecoveryStep, Result, Store, StoreError, StoreOptions,
};

const FILE: usize = 8 << 10;

fn options(dir: &Path) -> StoreOptions {
    StoreOptions {
        commit_log_file_size: Some(FILE),
        consume_queue_file_size: Some(20 * 50),
        max_message_size: 4 << 10,
        delay_levels: vec![1000],
        max_hash_slot_num: 10,
        max_index_num: 40,
        flush: FlushConfig {
            flush_disk_type: FlushDiskType::SyncFlush,
            ..FlushConfig::default()
        },
        ..StoreOptions::at(dir)
    }
}

fn started(dir: &Path) -> Store {
    Store::open_running(options(dir)).unwrap()
}

fn put(store: &Store, i: usize) -> PutOutcome {
    let spec = MessageSpec::new("T", (i % 3) as i32, format!("message {i}").into_bytes())
        .with_properties(format!("KEYS\u{1}key{i}").into_bytes())
        .born_at(1_700_000_000_000);
    let p = store.prepare(spec).unwrap().unwrap();
    let out = store.put_prepared(&p).unwrap();
    assert_eq!(out.status, PutStatus::PutOk);
    out
}

/// A store of `n` messages over several CommitLog files, left as a
/// writer killed after its puts were flushed leaves it (the abort file
/// stays). Returns the CommitLog end.
fn crashed_store(dir: &Path, n: usize) -> u64 {
    let s = started(dir);
    for i in 0..n {
        put(&s, i);
    }
    s.flush().unwrap();
    let end = s.commitlog().max_offset();
    s.abandon();
    assert!(dir.join("abort").exists());
    end
}

/// Every message is back: in its queue at its offset, and by key.
fn assert_all_readable(s: &Store, n: usize) {
    for q in 0..3 {
        let want = (0..n).filter(|i| i % 3 == q).count();
        let cq = s.consume_queues().get("T", q as i32).unwrap();
        assert_eq!(cq.max_offset_in_queue(), want as i64, "queue {q}");
        let got = s.get_message("T", q as i32, 0, want + 1, None).unwrap();
        assert_eq!(got.messages.len(), want.min(32), "queue {q}");
    }
    for i in 0..n {
        let hits = s
            .query_message("T", &format!("key{i}"), 32, 0, i64::MAX)
            .unwrap();
        assert_eq!(hits.len(), 1, "key{i}");
    }
}

/// Names, sizes, mtimes and contents of every file under `dir`.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, SystemTime, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = std::fs::metadata(&p).unwrap();
            if md.is_dir() {
                todo.push(p);
            } else {
                let bytes = std::fs::read(&p).unwrap();
                out.insert(p, (md.len(), md.modified().unwrap(), bytes));
            }
        }
    }
    out
}

/// Sets the checkpoint's index timestamp to 0: every index file is then
/// newer than the index checkpoint.
fn zero_index_checkpoint(dir: &Path) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("checkpoint"))
        .unwrap();
    f.write_all_at(&0i64.to_be_bytes(), 16).unwrap();
}

/// Cuts the newest file of `dir` to `len` bytes (a crash while it was made).
fn cut_newest(dir: &Path, len: u64) -> PathBuf {
    let newest = list_segment_files(dir).unwrap().pop().unwrap().1;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap()
        .set_len(len)
        .unwrap();
    newest
}

#[test]
fn opening_changes_nothing_but_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    crashed_store(root, 300);
    // A crash while the newest CommitLog and queue files were made,
    // and index files newer than the index checkpoint.
    let cl = root.join("commitlog");
    let files = list_segment_files(&cl).unwrap();
    let (last_from, _) = files.last().unwrap();
    let short_cl = cl.join(file_name(last_from + FILE as u64));
    std::fs::write(&short_cl, b"").unwrap();
    let short_cq = cut_newest(&root.join("consumequeue/T/0"), 100);
    zero_index_checkpoint(root);
    assert!(std::fs::read_dir(root.join("index")).unwrap().count() > 1);
    let before = snapshot(root);
    // Mtimes of a second open would differ if anything were written.
    std::thread::sleep(std::time::Duration::from_millis(20));

    let s = Store::open(options(root)).unwrap();
    assert_eq!(s.recovery_mode(), RecoveryMode::Abnormal);
    assert_eq!(s.recovery_step(), RecoveryStep::Opened);
    assert_eq!(snapshot(root), before, "opening changed the store");
    drop(s);
    assert_eq!(
        snapshot(root),
        before,
        "dropping an unrecovered store changed it"
    );

    // The steps then repair what opening found.
    let s = Store::open(options(root)).unwrap();
    let sizes = s.check_file_sizes().unwrap();
    assert_eq!(
        sizes.short_files_extended,
        vec![short_cl.clone(), short_cq.clone()]
    );
    assert_eq!(std::fs::metadata(&short_cl).unwrap().len(), FILE as u64);
    assert_eq!(std::fs::metadata(&short_cq).unwrap().len(), 20 * 50);
    s.shutdown().unwrap();
}

#[test]
fn normal_recovery_scans_the_last_files_and_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let s = started(dir.path());
    for i in 0..300 {
        put(&s, i);
    }
    let end = s.commitlog().max_offset();
    s.shutdown().unwrap();
    assert!(!dir.path().join("abort").exists());
    let files = list_segment_files(&dir.path().join("commitlog"))
        .unwrap()
        .len();
    assert!(files > 3);

    let s = Store::open(options(dir.path())).unwrap();
    assert_eq!(s.recovery_mode(), RecoveryMode::Normal);
    let r = s.recover(true, false).unwrap();
    assert_eq!(r.mode, RecoveryMode::Normal);
    assert_eq!(r.files_scanned, 3);
    assert_eq!(r.end_offset, end);
    assert_eq!(r.bytes_truncated, 0);
    assert_eq!(r.redispatched_records, 0);
    assert!(r.index_files_destroyed.is_empty());
    assert!(r.short_files_extended.is_empty());
    assert_eq!(s.checkpoint().durable_mark().unwrap().durable_offset, end);
    assert_all_readable(&s, 300);
    s.shutdown().unwrap();
}

#[test]
fn abnormal_recovery_redispatches_to_queues_and_index() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let end = crashed_store(root, 300);
    // The queues and the index lost their pages in the crash.
    std::fs::remove_dir_all(root.join("consumequeue")).unwrap();
    std::fs::remove_dir_all(root.join("index")).unwrap();

    let s = Store::open(options(root)).unwrap();
    assert_eq!(s.recovery_mode(), RecoveryMode::Abnormal);
    s.check_file_sizes().unwrap();
    s.judge_damage(false).unwrap();
    let scan = s.scan_commit_log_abnormally(true).unwrap();
    assert_eq!(scan.end_offset, end);
    s.recover_consume_queues().unwrap();
    s.rebuild_queue_holes().unwrap();
    s.truncate().unwrap();
    s.rebuild_index().unwrap();
    let re = s.redispatch().unwrap();
    // Every record the abnormal scan accepted went to the queues and
    // the index again.
    assert!(scan.records_scanned > 0);
    assert_eq!(re.records, scan.records_scanned);
    s.clamp_consumer_offsets(&ConsumerOffsetTable::new())
        .unwrap();
    s.rebuild_queue_offset_table().unwrap();
    let r = s.recovery_report().unwrap();
    assert_eq!(r.mode, RecoveryMode::Abnormal);
    assert!(r.redispatched_records >= re.records);
    assert_all_readable(&s, 300);
    s.shutdown().unwrap();
}

#[test]
fn torn_tail_is_cut_and_zeroed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let end = crashed_store(root, 100);
    // A put torn by the crash: garbage past the flushed end.
    let last = list_segment_files(&root.join("commitlog"))
        .unwrap()
        .pop()
        .unwrap();
    let at = end - last.0;
    assert!(at + 64 <= FILE as u64);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&last.1)
        .unwrap();
    f.write_all_at(&[0xAB; 64], at).unwrap();
    drop(f);

    let s = Store::open(options(root)).unwrap();
    let r = s.recover(true, false).unwrap();
    assert_eq!(r.end_offset, end);
    // The garbage, and whatever else the cut zeroed past the end.
    assert!(r.bytes_truncated >= 64, "{}", r.bytes_truncated);
    assert!(r.stop_reason.is_some());
    s.shutdown().unwrap();
    let bytes = std::fs::read(&last.1).unwrap();
    assert!(
        bytes[at as usize..].iter().all(|&b| b == 0),
        "the torn tail was not zeroed"
    );
    let s = started(root);
    assert_eq!(s.commitlog().max_offset(), end);
    assert_all_readable(&s, 100);
    s.shutdown().unwrap();
}

#[test]
fn index_files_newer_than_the_checkpoint_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    crashed_store(root, 300);
    zero_index_checkpoint(root);
    let index_files: Vec<PathBuf> = std::fs::read_dir(root.join("index"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(index_files.len() > 1);

    let s = Store::open(options(root)).unwrap();
    s.check_file_sizes().unwrap();
    s.judge_damage(false).unwrap();
    s.scan_commit_log_abnormally(true).unwrap();
    s.recover_consume_queues().unwrap();
    s.rebuild_queue_holes().unwrap();
    s.truncate().unwrap();
    let ix = s.rebuild_index().unwrap();
    let mut destroyed = ix.files_destroyed.clone();
    destroyed.sort();
    let mut all = index_files.clone();
    all.sort();
    assert_eq!(
        destroyed, all,
        "every index file was newer than the checkpoint"
    );
    assert_eq!(ix.redispatch_from, Some(0));
    s.redispatch().unwrap();
    s.clamp_consumer_offsets(&ConsumerOffsetTable::new())
        .unwrap();
    s.rebuild_queue_offset_table().unwrap();
    let r = s.recovery_report().unwrap();
    assert_eq!(r.index_redispatch_from, Some(0));
    assert_eq!(r.index_files_destroyed.len(), index_files.len());
    // The rebuilt index finds every key.
    assert_all_readable(&s, 300);
    s.shutdown().unwrap();
}

#[test]
fn steps_out_of_order_and_use_before_recovery_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    started(dir.path()).shutdown().unwrap();
    let s = Store::open(options(dir.path())).unwrap();
    let order = |r: Result<()>| match r {
        Err(StoreError::RecoveryOrder(m)) => m,
        other => panic!("expected a recovery-order error, got {other:?}"),
    };
    // A later step first, a put, a read: all refused.
    let m = order(s.truncate().map(|_| ()));
    assert!(m.contains("next step is check_file_sizes"), "{m}");
    let spec = MessageSpec::new("T", 0, b"x");
    order(s.prepare(spec).map(|_| ()));
    order(s.get_message("T", 0, 0, 1, None).map(|_| ()));
    s.check_file_sizes().unwrap();
    // A step twice, and the scan of the wrong mode.
    order(s.check_file_sizes().map(|_| ()));
    s.judge_damage(false).unwrap();
    order(s.scan_commit_log_abnormally(true).map(|_| ()));
    s.scan_commit_log_normally(true).unwrap();
    order(s.recovery_report().map(|_| ()));
    s.recover_consume_queues().unwrap();
    s.rebuild_queue_holes().unwrap();
    s.truncate().unwrap();
    s.rebuild_index().unwrap();
    s.redispatch().unwrap();
    s.clamp_consumer_offsets(&ConsumerOffsetTable::new())
        .unwrap();
    assert!(!s.is_recovered());
    s.rebuild_queue_offset_table().unwrap();
    assert!(s.is_recovered());
    let m = order(s.check_file_sizes().map(|_| ()));
    assert!(m.contains("after recovery finished"), "{m}");
    s.recovery_report().unwrap();
    s.start_flush().unwrap();
    put(&s, 0);
    s.shutdown().unwrap();
}
