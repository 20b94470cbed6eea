//! The delayed-delivery engine step (`schedule::deliver_due`) on a real store:
//! due units are re-put into their real queue with the stored properties and
//! no second delay conversion; units not due stop the step.
#![allow(clippy::unwrap_used)] // a test: a failed unwrap fails it, with its message

use std::net::SocketAddr;
use std::path::Path;

use _native::internals::message::{find_property, prop_crc_ok, tags_code, PropertiesBuilder};
use _native::internals::schedule::deliver_due;
use _native::{props, FlushConfig, MessageSpec, PutStatus, Store, StoreOptions};

fn open(dir: &Path) -> Store {
    let opts = StoreOptions {
        root: dir.to_path_buf(),
        commit_log_dir: dir.join("commitlog"),
        commit_log_file_size: Some(64 * 1024),
        consume_queue_file_size: Some(20 * 100),
        max_message_size: 4096,
        store_host: "127.0.0.1:10911".parse().unwrap(),
        delay_levels: vec![1_000, 2_000],
        read_only: false,
        message_index_enable: false,
        max_hash_slot_num: 100,
        max_index_num: 400,
        max_msgs_num_batch: 64,
        max_transfer_bytes_in_memory: 1 << 20,
        max_transfer_count_in_memory: 32,
        max_transfer_bytes_in_disk: 1 << 20,
        max_transfer_count_in_disk: 32,
        access_message_in_memory_max_ratio: 40,
        message_index_safe: true,
        transient_store_pool_enable: false,
        transient_store_pool_size: 1,
        flush: FlushConfig::default(),
        ..StoreOptions::default()
    };
    let store = Store::open(opts).expect("open");
    store.recover(true, false).expect("recover");
    store
}

/// Puts a message to `topic`/`qid` with `DELAY=level`; returns its store time.
fn put_delayed(store: &Store, topic: &str, qid: i32, level: i32, uniq: &str) -> i64 {
    let mut b = PropertiesBuilder::new();
    b.push(props::TAGS, "TagA").unwrap();
    b.push(props::UNIQ_KEY, uniq).unwrap();
    b.push(props::DELAY, &level.to_string()).unwrap();
    let born: SocketAddr = "10.1.2.3:4567".parse().unwrap();
    let spec = MessageSpec {
        flag: 5,
        born_host: born,
        reconsume_times: 2,
        ..MessageSpec::new(topic.to_owned(), qid, format!("body-{uniq}").into_bytes())
            .with_properties(b.finish())
            .born_at(1_700_000_000_000)
    };
    let p = store.prepare(spec).unwrap().expect("accepted");
    let out = store.put_prepared(&p).unwrap();
    assert_eq!(out.status, PutStatus::PutOk);
    out.store_timestamp
}

#[test]
fn due_units_are_delivered_once_with_the_stored_properties() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let t0 = put_delayed(&store, "orders", 3, 1, "U0");
    let t1 = put_delayed(&store, "orders", 3, 1, "U1");
    store.drain_dispatch().unwrap();

    // Not due: nothing is put and the step says when the first one is.
    let s = deliver_due(&store, 1, 0, t0 + 999, 16).unwrap();
    assert_eq!((s.next_offset, s.delivered, s.due_at), (0, 0, t0 + 1000));
    assert!(store.consume_queues().get("orders", 3).is_none());

    // The first is due, the second not yet (unless stored in the same ms).
    let s = deliver_due(&store, 1, 0, t0 + 1000, 16).unwrap();
    let first = if t1 == t0 { 2 } else { 1 };
    assert_eq!(
        (s.next_offset, s.delivered, s.blocked.clone()),
        (first, first as u64, None)
    );
    assert!(s.end_offset > 0);

    let s = deliver_due(&store, 1, s.next_offset, t1 + 1000, 16).unwrap();
    assert_eq!(s.next_offset, 2);
    assert_eq!(s.due_at, -1);
    assert!(!s.more);
    // Nothing left: a step from the end does nothing.
    let again = deliver_due(&store, 1, 2, t1 + 10_000, 16).unwrap();
    assert_eq!((again.next_offset, again.delivered), (2, 0));

    store.drain_dispatch().unwrap();
    let parked = store
        .consume_queues()
        .get("SCHEDULE_TOPIC_XXXX", 0)
        .expect("parked queue");
    let real = store.consume_queues().get("orders", 3).expect("real queue");
    assert_eq!(real.max_offset_in_queue(), 2);
    for i in 0..2 {
        let pu = parked.unit_at(i).unwrap();
        let ru = real.unit_at(i).unwrap();
        // The real queue's tag code is the TAGS hash, not a deliver time.
        assert_eq!(ru.tags_code, tags_code(Some("TagA")));
        assert!(pu.tags_code >= t0 + 1000);
        let (pv, praw) = store.commitlog().read_record(pu.phy_offset as u64).unwrap();
        let (rv, rraw) = store.commitlog().read_record(ru.phy_offset as u64).unwrap();
        assert_eq!(&rraw[rv.topic.clone()], b"orders");
        assert_eq!(rv.queue_id, 3);
        // The stored properties, unchanged but for the property CRC: each
        // record carries its own, over its own bytes.
        let (rp, pp) = (&rraw[rv.properties.clone()], &praw[pv.properties.clone()]);
        assert_eq!(rp[..rp.len() - 20], pp[..pp.len() - 20]);
        assert!(prop_crc_ok(&rraw, &rv.properties) && prop_crc_ok(&praw, &pv.properties));
        assert_ne!(rp[rp.len() - 20..], pp[pp.len() - 20..]);
        assert_eq!(
            find_property(&rraw[rv.properties.clone()], props::DELAY),
            Some(&b"1"[..])
        );
        assert_eq!(&rraw[rv.body.clone()], &praw[pv.body.clone()]);
        assert_eq!(rv.body_crc, pv.body_crc);
        assert_eq!(
            (
                rv.flag,
                rv.sys_flag,
                rv.born_timestamp,
                rv.born_host,
                rv.reconsume_times
            ),
            (
                pv.flag,
                pv.sys_flag,
                pv.born_timestamp,
                pv.born_host,
                pv.reconsume_times
            )
        );
        assert!(rv.store_timestamp >= pv.store_timestamp);
    }
    store.shutdown().unwrap();
}

#[test]
fn batches_stop_at_the_limit_and_levels_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut last = 0;
    for i in 0..5 {
        last = put_delayed(&store, "bulk", 0, 2, &format!("B{i}"));
    }
    store.drain_dispatch().unwrap();
    let s = deliver_due(&store, 2, 0, last + 2_000, 2).unwrap();
    assert_eq!((s.next_offset, s.delivered, s.more), (2, 2, true));
    let s = deliver_due(&store, 2, 2, last + 2_000, 10).unwrap();
    assert_eq!((s.next_offset, s.delivered, s.more), (5, 3, false));
    // Level 1 has no queue: nothing to do, progress unchanged.
    let s = deliver_due(&store, 1, 0, last + 2_000, 10).unwrap();
    assert_eq!((s.next_offset, s.delivered), (0, 0));
    assert!(deliver_due(&store, 3, 0, last, 10).is_err());
    assert!(deliver_due(&store, 0, 0, last, 10).is_err());
    store.shutdown().unwrap();
}

#[test]
fn a_poisoned_store_blocks_delivery_and_keeps_progress() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let t = put_delayed(&store, "orders", 0, 1, "P");
    store.drain_dispatch().unwrap();
    store.poison("test".into());
    let s = deliver_due(&store, 1, 0, t + 5_000, 10).unwrap();
    assert_eq!((s.next_offset, s.delivered), (0, 0));
    assert!(s.blocked.unwrap().contains("not writeable"));
    assert!(store.flush_commit_log().is_err());
    let _ = store.shutdown();
}
