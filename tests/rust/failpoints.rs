//! Fault-injection tests of the engine's named fail points (built only with
//! `--features failpoints`; release wheels have no fail points).
//!
//! Each point must make its operation fail with the armed errno and leave
//! nothing behind on disk: no half-created file, no flushed position moved,
//! no ConsumeQueue unit written. Points are process-global, so the tests
//! hold one lock while a point is armed.
#![allow(clippy::unwrap_used)] // a test: a failed unwrap fails it, with its message

use std::net::SocketAddr;
use std::path::Path;

use _native::internals::commitlog::{CommitLog, CommitLogConfig};
use _native::internals::failpoint;
use _native::internals::mapped_file::{file_name, MappedFile};
use _native::internals::message::{parse_delay_levels, PropertiesBuilder};
use _native::internals::queue::ConsumeQueue;
use _native::{MessageSpec, PutStatus, StoreError};

mod common;
use common::Points;

fn errno_of(e: &StoreError) -> Option<i32> {
    match e {
        StoreError::Io { source, .. } => source.raw_os_error(),
        _ => None,
    }
}

fn commitlog(dir: &Path, file_size: usize) -> CommitLog {
    let cfg = CommitLogConfig {
        dir: dir.to_path_buf(),
        file_size,
        max_message_size: 4 << 20,
        store_host: "127.0.0.1:10911".parse::<SocketAddr>().unwrap(),
        delay_levels: parse_delay_levels("1s 5s").unwrap(),
        prop_crc: true,
    };
    CommitLog::load(cfg, true).unwrap()
}

fn spec(body: &[u8]) -> MessageSpec<'_> {
    let mut props = PropertiesBuilder::new();
    props.push("TAGS", "t").unwrap();
    MessageSpec {
        born_host: "10.0.0.1:5000".parse().unwrap(),
        ..MessageSpec::new("topic", 0, body)
            .with_properties(props.finish())
            .born_at(1_700_000_000_000)
    }
}

#[test]
fn points_are_named_and_disarm() {
    let p = Points::take();
    assert!(!failpoint::set("no_such_point", libc::EIO));
    for name in failpoint::POINTS {
        assert!(failpoint::check(name).is_ok(), "{name} armed after clear");
        p.arm(name, libc::EIO);
        let e = failpoint::check(name).expect_err("armed point must fail");
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        p.arm(name, 0);
        assert!(failpoint::check(name).is_ok(), "{name} still armed");
    }
}

#[test]
fn create_file_fails_and_leaves_no_file() {
    let p = Points::take();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file_name(0));
    p.arm("create_file", libc::ENOSPC);
    let Err(e) = MappedFile::create(&path, 0, 4096) else {
        panic!("create must fail while create_file is armed");
    };
    assert_eq!(errno_of(&e), Some(libc::ENOSPC), "{e}");
    assert!(!path.exists(), "a failed creation left {}", path.display());
    p.arm("create_file", 0);
    let f = MappedFile::create(&path, 0, 4096).unwrap();
    assert_eq!(std::fs::metadata(f.path()).unwrap().len(), 4096);
}

#[test]
fn create_file_refuses_the_put_and_takes_no_queue_offset() {
    let p = Points::take();
    let dir = tempfile::tempdir().unwrap();
    let cl = commitlog(dir.path(), 64 * 1024);
    p.arm("create_file", libc::ENOSPC);
    for _ in 0..2 {
        let out = cl.put(spec(b"refused")).unwrap();
        assert_eq!(out.status, PutStatus::CreateMappedFileFailed);
    }
    assert_eq!(cl.max_offset(), 0);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    p.arm("create_file", 0);
    let out = cl.put(spec(b"accepted")).unwrap();
    assert_eq!(out.status, PutStatus::PutOk);
    assert_eq!((out.wrote_offset, out.queue_offset), (0, 0));
    assert_eq!(cl.read_record(0).unwrap().0.queue_offset, 0);
}

#[test]
fn msync_fails_the_flush_and_keeps_the_flushed_position() {
    let p = Points::take();
    let dir = tempfile::tempdir().unwrap();
    let f = MappedFile::create(&dir.path().join(file_name(0)), 0, 8192).unwrap();
    f.append(|buf, _| {
        buf[..100].fill(7);
        (100, ())
    })
    .unwrap();
    p.arm("msync", libc::EIO);
    let e = f.flush(0).expect_err("flush must fail");
    assert_eq!(errno_of(&e), Some(libc::EIO), "{e}");
    assert!(e.to_string().contains("msync"), "{e}");
    assert_eq!(
        f.flushed_position(),
        0,
        "a failed flush moved the flushed position"
    );
    let e = f.sync_all().expect_err("sync_all must fail");
    assert_eq!(errno_of(&e), Some(libc::EIO), "{e}");
    p.arm("msync", 0);
    assert_eq!(f.flush(0).unwrap(), 100);
    f.sync_all().unwrap();
}

#[test]
fn cq_put_fails_and_writes_no_unit() {
    let p = Points::take();
    let dir = tempfile::tempdir().unwrap();
    let cq = ConsumeQueue::load(dir.path(), "topic", 0, 20 * 10, true).unwrap();
    cq.recover().unwrap();
    assert!(cq.put(0, 100, 0, 0).unwrap());
    p.arm("cq_put", libc::EIO);
    let e = cq.put(100, 100, 0, 1).expect_err("the append must fail");
    assert_eq!(errno_of(&e), Some(libc::EIO), "{e}");
    assert_eq!(cq.max_offset_in_queue(), 1, "a failed append wrote a unit");
    p.arm("cq_put", 0);
    assert!(cq.put(100, 100, 0, 1).unwrap());
    assert_eq!(cq.max_offset_in_queue(), 2);
}

/// A put past the reserved chunk of a CommitLog file first reserves the next
/// chunk; when that fails (a full disk) the put fails with a status, writes
/// nothing and takes no queue offset, and puts resume once it succeeds.
#[test]
fn a_failed_reservation_refuses_the_put_and_writes_nothing() {
    let p = Points::take();
    let dir = tempfile::tempdir().unwrap();
    // Larger than one reservation chunk (64 MiB): the file is reserved lazily.
    let cl = commitlog(dir.path(), 128 << 20);
    let body = vec![5u8; 1 << 20];
    let mut n = 0i64;
    let file = loop {
        let out = cl.put(spec(&body)).unwrap();
        assert_eq!(out.status, PutStatus::PutOk);
        n += 1;
        let f = cl.queue().last_file().unwrap();
        // The next record (and a blank's 8 bytes) no longer fits the chunk.
        if f.reserved() - f.wrote_position() < out.wrote_bytes as usize + 8 {
            break f;
        }
    };
    let end = cl.max_offset();
    p.arm("reserve", libc::ENOSPC);
    for _ in 0..3 {
        let out = cl.put(spec(&body)).unwrap();
        assert_eq!(out.status, PutStatus::CreateMappedFileFailed, "{out:?}");
        assert!(out.reason.unwrap().contains("reserve"));
    }
    assert_eq!(cl.max_offset(), end);
    assert!(file.raw()[end as usize..]
        .iter()
        .take(4 << 20)
        .all(|&b| b == 0));
    p.arm("reserve", 0);
    let out = cl.put(spec(&body)).unwrap();
    assert_eq!(out.status, PutStatus::PutOk);
    assert_eq!((out.wrote_offset, out.queue_offset), (end as i64, n));
    assert!(file.reserved() > file.wrote_position());
}

#[test]
fn a_failed_index_flush_poisons_and_never_advances_the_index_checkpoint() {
    use _native::internals::checkpoint::Checkpoint;
    use _native::internals::index::IndexStore;
    use _native::internals::running::{Flag, RunningFlags};
    use std::sync::Arc;

    let p = Points::take();
    let dir = tempfile::tempdir().unwrap();
    let (index, _) = IndexStore::load(&dir.path().join("index"), 4, 4, true, 0).unwrap();
    let checkpoint = Arc::new(Checkpoint::load_or_create(&dir.path().join("checkpoint")).unwrap());
    let flags = Arc::new(RunningFlags::new());
    index.set_checkpoint(checkpoint.clone());
    index.set_running_flags(flags.clone());
    index.set_clock(Arc::new(|| 1_700_000_000_000));
    p.arm("index_msync", libc::EIO);
    // Four entries fill the first file; the fifth key rolls to a second one
    // and hands the full file to the flush.
    for i in 0..5 {
        index
            .build_index(
                "t",
                &[&format!("k{i}")],
                None,
                100 * i,
                1_700_000_000_000 + i,
                0,
            )
            .unwrap();
    }
    // Failed here, or already in the background flush service.
    let e = index.flush().expect_err("the full file's flush must fail");
    assert!(e.to_string().contains("msync "), "{e}");
    assert!(flags.is_set(Flag::FlushFailed) && !flags.is_writeable());
    let why = flags.poison_reason().unwrap();
    assert!(why.starts_with("index flush failed: msync "), "{why}");
    assert_eq!(
        checkpoint.index_msg_timestamp(),
        0,
        "advanced past a failed flush"
    );
    // The failure sticks: with the disk back, nothing claims the file is on disk.
    p.arm("index_msync", 0);
    let e = index
        .flush()
        .expect_err("a flush after a failed one must fail");
    assert!(matches!(e, StoreError::Poisoned(_)), "{e}");
    assert_eq!(checkpoint.index_msg_timestamp(), 0);
}
