//! A read-only store that sees a queue unit before it has adopted the
//! CommitLog segment the unit points into (the writer rolled a segment and
//! dispatched in between) must not take the message for a removed one.
#![allow(clippy::unwrap_used)] // a test: a failed unwrap fails it, with its message

use std::path::Path;

use _native::{FlushConfig, GetStatus, MessageSpec, Store, StoreOptions};

const FILE: usize = 4096;

fn open(dir: &Path, read_only: bool) -> Store {
    let opts = StoreOptions {
        root: dir.to_path_buf(),
        commit_log_dir: dir.join("commitlog"),
        commit_log_file_size: Some(FILE),
        consume_queue_file_size: Some(20 * 1000),
        max_message_size: 1 << 20,
        store_host: "127.0.0.1:10911".parse().unwrap(),
        delay_levels: vec![1000],
        read_only,
        message_index_enable: false,
        max_hash_slot_num: 100,
        max_index_num: 400,
        max_msgs_num_batch: 64,
        max_transfer_bytes_in_memory: 256 << 10,
        max_transfer_count_in_memory: 1000,
        max_transfer_bytes_in_disk: 256 << 10,
        max_transfer_count_in_disk: 1000,
        access_message_in_memory_max_ratio: 40,
        message_index_safe: true,
        transient_store_pool_enable: false,
        transient_store_pool_size: 1,
        flush: FlushConfig::default(),
        preallocate: false,
        ..StoreOptions::default()
    };
    let s = Store::open(opts).unwrap();
    s.recover(true, false).unwrap();
    s
}

fn put(store: &Store, i: usize) {
    let body = format!("m{i};").repeat(40);
    let spec = MessageSpec::new("F", 0, body.into_bytes()).born_at(1_700_000_000_000);
    let p = store.prepare(spec).unwrap().unwrap();
    store.put_prepared(&p).unwrap();
}

#[test]
fn unit_of_a_segment_not_adopted_yet_is_not_a_removed_message() {
    let dir = tempfile::tempdir().unwrap();
    let writer = open(dir.path(), false);
    for i in 0..5 {
        put(&writer, i);
    }
    writer.drain_dispatch().unwrap();
    let reader = open(dir.path(), true);
    assert_eq!(reader.commitlog().queue().len(), 1);
    // The writer rolls several segments and dispatches them.
    for i in 5..60 {
        put(&writer, i);
    }
    writer.drain_dispatch().unwrap();
    assert!(writer.commitlog().queue().len() > 3);
    // The reader sees the new units first (its CommitLog has not followed).
    reader
        .consume_queues()
        .refresh(reader.commitlog().min_offset(), None)
        .unwrap();
    assert_eq!(reader.commitlog().queue().len(), 1);

    let mut offset = 0;
    let mut served = Vec::new();
    for _ in 0..100 {
        let r = reader.get_message("F", 0, offset, 1000, None).unwrap();
        assert!(
            matches!(r.status, GetStatus::Found | GetStatus::OffsetOverflowOne),
            "{:?} at {offset}",
            r.status
        );
        served.extend(r.messages.iter().map(|(v, _)| v.queue_offset));
        if r.status == GetStatus::OffsetOverflowOne {
            break;
        }
        offset = r.next_begin_offset;
    }
    assert_eq!(served, (0..60).collect::<Vec<i64>>());
    writer.shutdown().unwrap();
    reader.shutdown().unwrap();
}
