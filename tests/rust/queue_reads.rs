//! RocketMQ's per-queue read calls on the engine's `Store`: offsets by
//! position and by time, store times, and the answers for unknown queues
//! and offsets (0 for offsets, -1 for times); the topic check of a read and
//! lookups by offset message id.
#![allow(clippy::unwrap_used)] // a test: a failed unwrap fails it, with its message

use std::path::Path;

use _native::{offset_msg_id, MessageSpec, PutStatus, Store, StoreError, StoreOptions};

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

/// Puts `n` messages to `T`/0 and returns `(commitlog offset, store time)`
/// of each, read back from the records.
fn put_some(store: &Store, n: usize) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    for i in 0..n {
        let spec =
            MessageSpec::new("T", 0, format!("m{i}").into_bytes()).born_at(1_700_000_000_000);
        let p = store.prepare(spec).unwrap().unwrap();
        let r = store.put_prepared(&p).unwrap();
        assert_eq!(r.status, PutStatus::PutOk);
        out.push((r.wrote_offset, r.store_timestamp));
        // Distinct store times, so lookups by time have one answer.
        std::thread::sleep(std::time::Duration::from_millis(3));
    }
    store.drain_dispatch().unwrap();
    out
}

#[test]
fn offsets_and_times_of_a_queue() {
    let dir = tempfile::tempdir().unwrap();
    let store = started(dir.path());
    let puts = put_some(&store, 5);
    assert_eq!(store.min_offset_in_queue("T", 0).unwrap(), 0);
    assert_eq!(store.max_offset_in_queue("T", 0).unwrap(), 5);
    for (i, (phy, ts)) in puts.iter().enumerate() {
        assert_eq!(
            store.commit_log_offset_in_queue("T", 0, i as i64).unwrap(),
            *phy
        );
        assert_eq!(
            store.message_store_timestamp("T", 0, i as i64).unwrap(),
            *ts
        );
        assert_eq!(
            store.offset_in_queue_by_time("T", 0, *ts).unwrap(),
            i as i64
        );
    }
    assert_eq!(store.earliest_message_time("T", 0).unwrap(), puts[0].1);
    // Before the first message: offset 0; after the last: the last one's.
    assert_eq!(store.offset_in_queue_by_time("T", 0, 0).unwrap(), 0);
    let last = puts[4].1;
    assert_eq!(
        store
            .offset_in_queue_by_time("T", 0, last + 60_000)
            .unwrap(),
        4
    );
    store.shutdown().unwrap();
}

#[test]
fn unknown_queues_and_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let store = started(dir.path());
    put_some(&store, 2);
    assert_eq!(store.max_offset_in_queue("T", 1).unwrap(), 0);
    assert_eq!(store.min_offset_in_queue("nope", 0).unwrap(), 0);
    assert_eq!(store.commit_log_offset_in_queue("T", 0, 2).unwrap(), 0);
    assert_eq!(store.commit_log_offset_in_queue("T", 0, -1).unwrap(), 0);
    assert_eq!(store.commit_log_offset_in_queue("T", 1, 0).unwrap(), 0);
    assert_eq!(store.message_store_timestamp("T", 0, 2).unwrap(), -1);
    assert_eq!(store.message_store_timestamp("T", 1, 0).unwrap(), -1);
    assert_eq!(store.earliest_message_time("T", 1).unwrap(), -1);
    assert_eq!(store.offset_in_queue_by_time("T", 1, 0).unwrap(), 0);
    store.shutdown().unwrap();
    assert!(
        store.max_offset_in_queue("T", 0).is_err(),
        "a closed store refuses reads"
    );
}

#[test]
fn a_read_refuses_a_topic_that_could_never_have_been_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = started(dir.path());
    put_some(&store, 1);
    store.check_read_topic("T").unwrap();
    store.check_read_topic("Unknown").unwrap();
    match store.check_read_topic("a.b") {
        Err(StoreError::InvalidArgument(m)) => {
            assert!(m.starts_with("topic \"a.b\" contains '.'"), "{m}");
            assert!(m.ends_with(", and the store holds no such topic"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    store.shutdown().unwrap();
    assert!(matches!(
        store.check_read_topic("a.b"),
        Err(StoreError::Closed)
    ));
}

#[test]
fn a_message_is_found_by_its_offset_message_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = started(dir.path());
    let puts = put_some(&store, 2);
    let host = store.options().store_host;
    let id = offset_msg_id(&host, puts[1].0);
    let (view, _) = store.look_message_by_id(&id).unwrap().unwrap();
    assert_eq!(view.physical_offset, puts[1].0);
    // The same offset on another store host, and an offset with no record.
    let other = offset_msg_id(&"10.0.0.1:10911".parse().unwrap(), puts[1].0);
    assert!(store.look_message_by_id(&other).unwrap().is_none());
    let past = offset_msg_id(&host, puts[1].0 + 1);
    assert!(store.look_message_by_id(&past).unwrap().is_none());
    match store.look_message_by_id("not an id") {
        Err(StoreError::InvalidArgument(m)) => assert_eq!(
            m,
            "\"not an id\" is not an offset message id (32 or 56 hex digits)"
        ),
        other => panic!("{other:?}"),
    }
    store.shutdown().unwrap();
}
