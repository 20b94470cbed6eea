//! The engine's batch put of bodies to one queue (`Store::put_bodies`, what
//! `MessageStore.put_batch` calls) and the refusal of a message whose fields
//! broke a put rule (`Store::refused`): properties built by the engine's
//! field rules, all or nothing, an illegal message reported after the
//! store's state and before its running flags, and the reason of a batch
//! not wholly written.
#![allow(clippy::unwrap_used)] // a test: a failed unwrap fails it, with its message

use std::path::Path;

use _native::internals::message::find_property;
use _native::{
    BatchProperties, MessageFields, MessageSpec, PutStatus, Refused, Store, StoreError,
    StoreOptions,
};

mod common;

/// Serialises the tests of this target in fault-injection builds, where
/// one of them arms a (process-wide) fail point.
#[cfg(feature = "failpoints")]
fn serial() -> common::Points {
    common::Points::take()
}
/// Nothing to serialise without fail points.
#[cfg(not(feature = "failpoints"))]
struct Serial;
#[cfg(not(feature = "failpoints"))]
fn serial() -> Serial {
    Serial
}

fn started(dir: &Path) -> Store {
    Store::open_running(StoreOptions {
        commit_log_file_size: Some(64 << 10),
        consume_queue_file_size: Some(20 * 100),
        max_hash_slot_num: 10,
        max_index_num: 40,
        ..StoreOptions::at(dir)
    })
    .unwrap()
}

/// Batch properties for messages given as `(tags, keys)`.
fn props(messages: &[(Option<&str>, &[&str])]) -> BatchProperties {
    let mut batch = BatchProperties::new();
    for (tags, keys) in messages {
        batch
            .message(*tags, !keys.is_empty(), |m: &mut MessageFields<'_, '_>| {
                for k in *keys {
                    m.key(k);
                }
                Ok::<(), StoreError>(())
            })
            .unwrap();
    }
    batch
}

#[test]
fn a_batch_is_written_in_order_with_each_messages_properties() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let store = started(dir.path());
    let bodies: [&[u8]; 3] = [b"a", b"bb", b"ccc"];
    let p = props(&[(Some("t0"), &["k0"]), (None, &[]), (Some("t2"), &[])]);
    let out = store
        .put_bodies("T", 1, &bodies, &p, true)
        .unwrap()
        .unwrap();
    assert_eq!(out.status, PutStatus::PutOk);
    assert_eq!(
        (out.count, out.first_queue_offset, out.reason),
        (3, 0, None)
    );
    assert_eq!(out.offsets.len(), 3);
    for (i, off) in out.offsets.iter().enumerate() {
        let (view, raw) = store.look_message_by_offset(*off as u64).unwrap().unwrap();
        assert_eq!(&raw[view.body.clone()], bodies[i]);
        assert_eq!((view.queue_id, view.queue_offset), (1, i as i64));
        let stored = &raw[view.properties.clone()];
        let tags = find_property(stored, "TAGS");
        assert_eq!(tags, [Some(&b"t0"[..]), None, Some(&b"t2"[..])][i]);
        assert_eq!(find_property(stored, "KEYS").is_some(), i == 0);
    }
    store.drain_dispatch().unwrap();
    assert_eq!(store.max_offset_in_queue("T", 1).unwrap(), 3);
    store.shutdown().unwrap();
}

#[test]
fn an_illegal_message_refuses_the_whole_batch() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let store = started(dir.path());
    let end = store.commitlog().max_offset();
    let bodies: [&[u8]; 3] = [b"a", b"b", b"c"];
    let p = props(&[(None, &["ok"]), (None, &["two words"]), (Some(""), &[])]);
    let refused = store
        .put_bodies("T", 0, &bodies, &p, false)
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.status, PutStatus::MessageIllegal);
    assert!(
        refused
            .reason
            .starts_with("message 1: key \"two words\" contains a space"),
        "{}",
        refused.reason
    );
    assert_eq!(store.commitlog().max_offset(), end);
    // The message's own refusal comes before the running flags...
    store.poison("a service failed".into());
    let refused = store
        .put_bodies("T", 0, &bodies, &p, false)
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.status, PutStatus::MessageIllegal);
    let one = store.refused(Refused::illegal("bad")).unwrap();
    assert_eq!(
        (one.status, one.reason.as_deref()),
        (PutStatus::MessageIllegal, Some("bad"))
    );
    // ...while a legal batch gets the running state's refusal.
    let fine = props(&[(None, &[]), (None, &[]), (None, &[])]);
    let refused = store
        .put_bodies("T", 0, &bodies, &fine, false)
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.status, PutStatus::ServiceNotAvailable);
    assert_eq!(store.commitlog().max_offset(), end);
    // A closed store is an error, before any rule.
    store.shutdown().unwrap();
    assert!(matches!(
        store.put_bodies("T", 0, &bodies, &p, false),
        Err(StoreError::Closed)
    ));
    assert!(matches!(
        store.refused(Refused::illegal("bad")),
        Err(StoreError::Closed)
    ));
}

#[test]
fn a_read_only_store_refuses_an_illegal_batch_as_read_only() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    started(dir.path()).shutdown().unwrap();
    let store = Store::open(StoreOptions {
        read_only: true,
        commit_log_file_size: Some(64 << 10),
        consume_queue_file_size: Some(20 * 100),
        max_hash_slot_num: 10,
        max_index_num: 40,
        ..StoreOptions::at(dir.path())
    })
    .unwrap();
    store.recover(true, false).unwrap();
    let p = props(&[(Some(""), &[])]);
    let r = store.put_bodies("T", 0, &[b"x"], &p, false);
    assert!(matches!(r, Err(StoreError::ReadOnly)), "{r:?}");
    assert!(matches!(
        store.refused(Refused::illegal("bad")),
        Err(StoreError::ReadOnly)
    ));
}

#[cfg(feature = "failpoints")]
#[test]
fn a_batch_whose_next_file_cannot_be_made_writes_nothing() {
    let points = serial();
    let dir = tempfile::tempdir().unwrap();
    let store = started(dir.path());
    // The first file exists before the disk "fills".
    let one = props(&[(None, &[])]);
    let first = store
        .put_bodies("T", 0, &[b"x"], &one, false)
        .unwrap()
        .unwrap();
    assert_eq!(first.status, PutStatus::PutOk);
    let end = store.commitlog().max_offset();
    // 64 KiB files: 100 bodies of 1,000 bytes need a second file.
    let body = vec![b'x'; 1000];
    let bodies: Vec<&[u8]> = (0..100).map(|_| &body[..]).collect();
    points.arm("create_file", libc::ENOSPC);
    for _ in 0..2 {
        let out = store
            .put_bodies("T", 0, &bodies, &BatchProperties::new(), false)
            .unwrap()
            .unwrap();
        // All or nothing: the file was to be made before the first byte.
        assert_eq!(
            (
                out.status,
                out.count,
                out.first_queue_offset,
                out.first_offset
            ),
            (PutStatus::CreateMappedFileFailed, 0, -1, -1)
        );
        let reason = out.reason.unwrap();
        assert!(reason.contains("No space left"), "{reason}");
        assert!(
            reason.ends_with("(0 of 100 messages were written)"),
            "{reason}"
        );
        assert_eq!(store.commitlog().max_offset(), end);
        // The counters hold exactly what was stored: the first message.
        assert_eq!(store.commitlog().put_counts(), (1, first.bytes));
    }
    points.arm("create_file", 0);
    let out = store
        .put_bodies("T", 0, &bodies, &BatchProperties::new(), false)
        .unwrap()
        .unwrap();
    assert_eq!(
        (out.status, out.count, out.first_queue_offset),
        (PutStatus::PutOk, 100, 1)
    );
    assert_eq!(out.first_offset, end as i64);
    assert_eq!(
        store.commitlog().put_counts(),
        (101, first.bytes + out.bytes)
    );
    drop(points);
    store.shutdown().unwrap();
}

#[test]
fn runtime_stats_count_what_was_stored_and_pulled() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let store = started(dir.path());
    let mut bytes = 0u64;
    for i in 0..4 {
        let spec = MessageSpec::new("S", i % 2, b"single").born_at(1_700_000_000_000);
        let p = store.prepare(spec).unwrap().unwrap();
        let r = match store.try_put_fast(&p) {
            Some(r) => r.unwrap(),
            None => store.put_prepared(&p).unwrap(),
        };
        assert_eq!(r.status, PutStatus::PutOk);
        bytes += r.wrote_bytes as u64;
    }
    let bodies: [&[u8]; 3] = [b"a", b"bb", b"ccc"];
    let fine = props(&[(None, &[]), (None, &[]), (None, &[])]);
    let out = store
        .put_bodies("B", 0, &bodies, &fine, false)
        .unwrap()
        .unwrap();
    bytes += out.bytes;
    // A refused batch stores nothing and counts nothing.
    let bad = props(&[(None, &["ok"]), (None, &["two words"]), (None, &[])]);
    assert!(store
        .put_bodies("B", 0, &bodies, &bad, false)
        .unwrap()
        .is_err());
    assert_eq!(store.commitlog().put_counts(), (7, bytes));
    assert_eq!(store.commitlog().max_offset(), bytes);
    store.get_message("B", 0, 0, 32, None).unwrap();
    store.get_message("B", 0, 3, 32, None).unwrap();
    let s = store.runtime_stats().unwrap();
    assert_eq!((s.put_messages, s.put_bytes), (Some(7), Some(bytes)));
    assert_eq!((s.get_calls, s.get_misses, s.get_messages), (2, 1, 3));
    assert_eq!(s.dispatch_behind_bytes, 0);
    assert_eq!(s.max_phy_offset, bytes);
    let ends: Vec<_> = s
        .queues
        .iter()
        .map(|q| (q.topic.as_str(), q.queue_id, q.min_offset, q.max_offset))
        .collect();
    assert_eq!(ends, [("B", 0, 0, 3), ("S", 0, 0, 2), ("S", 1, 0, 2)]);
    store.shutdown().unwrap();
}
