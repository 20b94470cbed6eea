//! Appending to the CommitLog: bad input refused without side effects,
//! delay conversion, transactions, put_batch, concurrent puts and the put lock.
#![allow(clippy::unwrap_used)] // a test: a failed unwrap fails it, with its message

use std::collections::HashMap;
use std::path::Path;

use _native::internals::commitlog::{now_ms, CommitLog};
use _native::internals::mapped_file::file_name;
use _native::internals::message;
use _native::internals::message::{find_property, SCHEDULE_TOPIC};
use _native::{sysflag, MessageSpec, PutOutcome, PutStatus, Refused};

mod common;
use common::log::*;

// ---------------------------------------------------------------------------
// 5. bad input

fn assert_rejected(cl: &CommitLog, dir: &Path, s: MessageSpec<'_>, status: PutStatus) {
    let before_max = cl.max_offset();
    let before_files = segment_files(dir);
    let before_table = cl.queue_offsets().entries();
    let o = cl.put(s).unwrap();
    assert_eq!(o.status, status, "{o:?}");
    let why = o.reason.clone().expect("a refusal says why");
    assert!(!why.is_empty());
    assert_eq!(o, PutOutcome::rejected(Refused::new(status, why)));
    assert_eq!(cl.max_offset(), before_max);
    assert_eq!(segment_files(dir), before_files);
    assert_eq!(cl.queue_offsets().entries(), before_table);
}

fn bad_inputs(cl: &CommitLog, dir: &Path) {
    let body = b"x".to_vec();
    for topic in ["../x", "a/b", "", "a b", "é", ".."] {
        assert_rejected(
            cl,
            dir,
            spec(topic, 0, &body, Vec::new()),
            PutStatus::MessageIllegal,
        );
    }
    let long = "t".repeat(128);
    assert_rejected(
        cl,
        dir,
        spec(&long, 0, &body, Vec::new()),
        PutStatus::MessageIllegal,
    );
    // Negative queue id.
    assert_rejected(
        cl,
        dir,
        spec("T", -1, &body, Vec::new()),
        PutStatus::MessageIllegal,
    );
    // Body larger than max_message_size.
    let big = vec![0u8; MAX_MESSAGE_SIZE + 1];
    assert_rejected(
        cl,
        dir,
        spec("T", 0, &big, Vec::new()),
        PutStatus::MessageIllegal,
    );
    // Properties over 32767 bytes: by chars first, then by bytes (docs/format.md §17.1).
    let ascii = props(&[("K", &"a".repeat(32_800))]);
    assert_rejected(
        cl,
        dir,
        spec("T", 0, &body, ascii),
        PutStatus::MessageIllegal,
    );
    let two_byte = props(&[("K", &"é".repeat(16_400))]);
    assert!(two_byte.len() > 32_767);
    assert_rejected(
        cl,
        dir,
        spec("T", 0, &body, two_byte),
        PutStatus::PropertiesSizeExceeded,
    );
    // 4-byte UTF-8 chars count as 2 UTF-16 units each: 16_400 units.
    let four_byte = props(&[("K", &"😀".repeat(8_200))]);
    assert_rejected(
        cl,
        dir,
        spec("T", 0, &body, four_byte),
        PutStatus::PropertiesSizeExceeded,
    );
    // 32_768 bytes that are exactly 32_768 ASCII chars: illegal.
    let just_over = props(&[("K", &"b".repeat(32_768 - 2))]);
    assert_eq!(just_over.len(), 32_768);
    assert_rejected(
        cl,
        dir,
        spec("T", 0, &body, just_over),
        PutStatus::MessageIllegal,
    );
    // A record that can never fit one file (len + 8 > file_size).
    let fs = cl.file_size();
    let too_big = vec![1u8; fs - 8 - v4_len("T", 0, 0) + 1];
    assert_eq!(v4_len("T", too_big.len(), 0) + 8, fs + 1);
    assert_rejected(
        cl,
        dir,
        spec("T", 0, &too_big, Vec::new()),
        PutStatus::MessageIllegal,
    );
}

#[test]
fn bad_input_is_rejected_without_side_effects() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("commitlog");
    let file_size = 64 * 1024;
    let cl = open(&d, file_size);
    // On an empty log: nothing is created.
    bad_inputs(&cl, &d);
    assert_eq!(cl.max_offset(), 0);
    assert_eq!(cl.min_offset(), -1);
    assert!(segment_files(&d).is_empty(), "{:?}", segment_files(&d));

    // Limits themselves are accepted.
    let t127 = "t".repeat(127);
    let o = cl.put(spec(&t127, 0, b"x", Vec::new())).unwrap();
    ok(&o);
    let (v, bytes) = read(&cl, o.wrote_offset);
    assert_eq!(&bytes[v.topic.clone()], t127.as_bytes());
    let p32767 = props(&[("K", &"c".repeat(32_767 - 2))]);
    assert_eq!(p32767.len(), 32_767);
    let o = cl.put(spec("T", 0, b"y", p32767.clone())).unwrap();
    ok(&o);
    let (v, bytes) = read(&cl, o.wrote_offset);
    assert_eq!(&bytes[v.properties.clone()], &p32767[..]);
    assert_eq!(o.queue_offset, 0);

    // On a non-empty log: nothing changes either.
    bad_inputs(&cl, &d);
    assert_eq!(segment_files(&d), vec![file_name(0)]);

    // The largest record that fits a file (len + 8 == file_size) is written
    // alone in a new file.
    let fit = vec![2u8; file_size - 8 - v4_len("T", 0, 0)];
    let o = cl.put(spec("T", 0, &fit, Vec::new())).unwrap();
    ok(&o);
    assert_eq!(o.wrote_offset, file_size as i64);
    assert_eq!(o.wrote_bytes as usize + 8, file_size);
    assert_eq!(o.queue_offset, 1);
    let (v, bytes) = read(&cl, o.wrote_offset);
    assert_eq!(&bytes[v.body.clone()], &fit[..]);
}

#[test]
fn body_limit_follows_max_message_size() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), 8192);
    cfg.max_message_size = 1000;
    let cl = CommitLog::load(cfg, true).unwrap();
    let at_limit = vec![3u8; 1000];
    let over = vec![3u8; 1001];
    assert_rejected(
        &cl,
        dir.path(),
        spec("T", 0, &over, Vec::new()),
        PutStatus::MessageIllegal,
    );
    assert!(segment_files(dir.path()).is_empty());
    let o = cl.put(spec("T", 0, &at_limit, Vec::new())).unwrap();
    ok(&o);
    assert_eq!(o.wrote_bytes as usize, v4_len("T", 1000, 0));
}

// ---------------------------------------------------------------------------
// 6. delay conversion and transactions

fn delay_log(dir: &Path) -> CommitLog {
    open(dir, 64 * 1024)
}

#[test]
fn delayed_message_goes_to_schedule_topic() {
    let dir = tempfile::tempdir().unwrap();
    let cl = delay_log(dir.path());
    let body = b"later".to_vec();
    let o = cl
        .put(spec("T", 5, &body, props(&[("TAGS", "x"), ("DELAY", "3")])))
        .unwrap();
    ok(&o);
    assert_eq!(o.queue_offset, 0);
    let (v, bytes) = read(&cl, o.wrote_offset);
    assert_eq!(&bytes[v.topic.clone()], SCHEDULE_TOPIC.as_bytes());
    assert_eq!(v.queue_id, 2);
    assert_eq!(&bytes[v.body.clone()], &body[..]);
    let p = &bytes[v.properties.clone()];
    assert_eq!(find_property(p, "DELAY"), Some(&b"3"[..]));
    assert_eq!(find_property(p, "TAGS"), Some(&b"x"[..]));
    assert_eq!(find_property(p, "REAL_TOPIC"), Some(&b"T"[..]));
    assert_eq!(find_property(p, "REAL_QID"), Some(&b"5"[..]));
    assert_eq!(
        p,
        &b"TAGS\x01x\x02DELAY\x013\x02REAL_TOPIC\x01T\x02REAL_QID\x015"[..]
    );
    assert_eq!(
        o.wrote_bytes as usize,
        v4_len(SCHEDULE_TOPIC, body.len(), p.len())
    );
    assert_eq!(cl.next_queue_offset(SCHEDULE_TOPIC, 2), 1);
    assert_eq!(cl.next_queue_offset("T", 5), 0);

    // Second one on the same level continues that queue.
    let o = cl
        .put(spec("U", 0, &body, props(&[("DELAY", "3")])))
        .unwrap();
    ok(&o);
    assert_eq!(o.queue_offset, 1);

    // Levels above the maximum clamp to the last level (18 levels -> queue 17).
    let o = cl
        .put(spec("T", 1, &body, props(&[("DELAY", "99")])))
        .unwrap();
    ok(&o);
    let (v, bytes) = read(&cl, o.wrote_offset);
    assert_eq!(&bytes[v.topic.clone()], SCHEDULE_TOPIC.as_bytes());
    assert_eq!(v.queue_id, 17);
    let p = &bytes[v.properties.clone()];
    assert_eq!(find_property(p, "REAL_TOPIC"), Some(&b"T"[..]));
    assert_eq!(find_property(p, "REAL_QID"), Some(&b"1"[..]));
    assert_eq!(cl.next_queue_offset(SCHEDULE_TOPIC, 17), 1);

    // Level 18 exactly, level 1.
    for (lvl, q) in [("18", 17), ("1", 0)] {
        let o = cl
            .put(spec("T", 0, &body, props(&[("DELAY", lvl)])))
            .unwrap();
        ok(&o);
        assert_eq!(read(&cl, o.wrote_offset).0.queue_id, q);
    }

    // DELAY=0 is not a delay.
    let o = cl
        .put(spec("T", 5, &body, props(&[("DELAY", "0")])))
        .unwrap();
    ok(&o);
    let (v, bytes) = read(&cl, o.wrote_offset);
    assert_eq!(&bytes[v.topic.clone()], b"T");
    assert_eq!(v.queue_id, 5);
    assert_eq!(
        find_property(&bytes[v.properties.clone()], "REAL_TOPIC"),
        None
    );

    // A COMMIT transaction message is converted too.
    let mut s = spec("T", 4, &body, props(&[("DELAY", "2")]));
    s.sys_flag = sysflag::TRANSACTION_COMMIT;
    let o = cl.put(s).unwrap();
    ok(&o);
    let (v, bytes) = read(&cl, o.wrote_offset);
    assert_eq!(&bytes[v.topic.clone()], SCHEDULE_TOPIC.as_bytes());
    assert_eq!(v.queue_id, 1);
    assert_eq!(
        v.sys_flag & sysflag::TRANSACTION_TYPE_MASK,
        sysflag::TRANSACTION_COMMIT
    );
}

#[test]
fn delay_clamp_rewrites_delay_property() {
    let dir = tempfile::tempdir().unwrap();
    let cl = delay_log(dir.path());
    let o = cl
        .put(spec("T", 1, b"b", props(&[("DELAY", "99")])))
        .unwrap();
    ok(&o);
    let (v, bytes) = read(&cl, o.wrote_offset);
    assert_eq!(
        find_property(&bytes[v.properties.clone()], "DELAY"),
        Some(&b"18"[..])
    );
}

#[test]
fn delay_conversion_replaces_existing_real_topic() {
    // A message that was delayed before (e.g. a consumer send-back of a
    // scheduled message) still carries REAL_TOPIC/REAL_QID.
    let dir = tempfile::tempdir().unwrap();
    let cl = delay_log(dir.path());
    let p = props(&[("REAL_TOPIC", "Old"), ("REAL_QID", "9"), ("DELAY", "3")]);
    let o = cl.put(spec("%RETRY%g", 0, b"b", p)).unwrap();
    ok(&o);
    let (v, bytes) = read(&cl, o.wrote_offset);
    let p = &bytes[v.properties.clone()];
    assert_eq!(find_property(p, "REAL_TOPIC"), Some(&b"%RETRY%g"[..]));
    assert_eq!(find_property(p, "REAL_QID"), Some(&b"0"[..]));
    let n = message::iter_properties(p)
        .filter(|(k, _)| *k == b"REAL_TOPIC")
        .count();
    assert_eq!(n, 1, "one REAL_TOPIC entry");
}

#[test]
fn prepared_and_rollback_transactions_do_not_take_queue_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let cl = delay_log(dir.path());
    let body = b"tx".to_vec();
    let o = cl.put(spec("T", 5, &body, Vec::new())).unwrap();
    ok(&o);
    assert_eq!(o.queue_offset, 0);
    let o = cl.put(spec("T", 5, &body, Vec::new())).unwrap();
    assert_eq!(o.queue_offset, 1);

    // PREPARED with a DELAY: not converted, queue offset 0, table unchanged.
    let mut s = spec("T", 5, &body, props(&[("DELAY", "3")]));
    s.sys_flag = sysflag::TRANSACTION_PREPARED;
    let prep = cl.put(s).unwrap();
    ok(&prep);
    assert_eq!(prep.queue_offset, 0);
    let (v, bytes) = read(&cl, prep.wrote_offset);
    assert_eq!(&bytes[v.topic.clone()], b"T");
    assert_eq!(v.queue_id, 5);
    assert_eq!(v.queue_offset, 0);
    assert_eq!(
        v.sys_flag & sysflag::TRANSACTION_TYPE_MASK,
        sysflag::TRANSACTION_PREPARED
    );
    let p = &bytes[v.properties.clone()];
    assert_eq!(find_property(p, "DELAY"), Some(&b"3"[..]));
    assert_eq!(find_property(p, "REAL_TOPIC"), None);
    assert_eq!(cl.next_queue_offset("T", 5), 2);
    assert_eq!(cl.next_queue_offset(SCHEDULE_TOPIC, 2), 0);

    // ROLLBACK: same.
    let mut s = spec("T", 5, &body, Vec::new());
    s.sys_flag = sysflag::TRANSACTION_ROLLBACK;
    let rb = cl.put(s).unwrap();
    ok(&rb);
    assert_eq!(rb.queue_offset, 0);
    assert_eq!(cl.next_queue_offset("T", 5), 2);

    // COMMIT counts.
    let mut s = spec("T", 5, &body, Vec::new());
    s.sys_flag = sysflag::TRANSACTION_COMMIT;
    let c = cl.put(s).unwrap();
    assert_eq!(c.queue_offset, 2);
    let n = cl.put(spec("T", 5, &body, Vec::new())).unwrap();
    assert_eq!(n.queue_offset, 3);

    // Rebuilding the table from the log ignores PREPARED/ROLLBACK too.
    let max = cl.max_offset();
    drop(cl);
    let cl = delay_log(dir.path());
    let (table, offsets, rep) = rebuild(&cl);
    assert_eq!(rep.end_offset, max);
    assert_eq!(offsets.len(), 6);
    assert_eq!(table.get("T", 5), 4);
    assert_eq!(table.entries(), vec![("T".to_string(), 5, 4)]);
}

// ---------------------------------------------------------------------------
// 7. put_batch

#[test]
fn put_batch_assigns_consecutive_offsets_and_one_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let cl = open(dir.path(), 64 * 1024);
    // Something before the batch, so offsets do not start at 0.
    ok(&cl.put(spec("B", 1, b"first", Vec::new())).unwrap());

    let bodies: Vec<Vec<u8>> = (0..5).map(|i| vec![b'0' + i as u8; 10 + i]).collect();
    let big = vec![0u8; MAX_MESSAGE_SIZE + 1];
    let mut specs: Vec<MessageSpec<'_>> = bodies
        .iter()
        .map(|b| spec("B", 1, b, props(&[("TAGS", "batch")])))
        .collect();
    specs.insert(2, spec("B", 1, &big, Vec::new()));
    specs.insert(4, spec("a/b", 1, b"bad topic", Vec::new()));
    let before = now_ms();
    let out = cl.put_batch(specs.into_iter().map(Ok)).unwrap();
    let after = now_ms();
    assert_eq!(out.len(), 7);
    for (i, words) in [(2, "max_message_size"), (4, "topic \"a/b\"")] {
        assert_eq!(out[i].status, PutStatus::MessageIllegal);
        assert_eq!(out[i].wrote_offset, -1);
        let why = out[i].reason.as_deref().unwrap_or_default();
        assert!(why.contains(words), "{why}");
    }
    let written: Vec<&PutOutcome> = out
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 2 && *i != 4)
        .map(|(_, o)| o)
        .collect();
    assert_eq!(written.len(), 5);
    let ts = written[0].store_timestamp;
    assert!(ts >= before && ts <= after);
    let mut expect_off = written[0].wrote_offset;
    for (i, (o, body)) in written.iter().zip(&bodies).enumerate() {
        ok(o);
        assert_eq!(o.queue_offset, 1 + i as i64, "consecutive queue offsets");
        assert_eq!(o.store_timestamp, ts, "one store timestamp");
        assert_eq!(o.wrote_offset, expect_off, "contiguous records");
        expect_off += o.wrote_bytes as i64;
        let (v, bytes) = read(&cl, o.wrote_offset);
        assert_eq!(&bytes[v.body.clone()], &body[..]);
        assert_eq!(v.store_timestamp, ts);
        assert_eq!(v.queue_offset, 1 + i as i64);
    }
    assert_eq!(cl.max_offset() as i64, expect_off);
    assert_eq!(cl.next_queue_offset("B", 1), 6);

    // A batch across a file boundary still gets consecutive offsets.
    let dir2 = tempfile::tempdir().unwrap();
    let l = v4_len("B", 100, 0);
    let cl2 = open(dir2.path(), 3 * l + 8 + l / 2);
    let bodies: Vec<Vec<u8>> = (0..8).map(|i| vec![i as u8; 100]).collect();
    let out = cl2
        .put_batch(bodies.iter().map(|b| Ok(spec("B", 0, b, Vec::new()))))
        .unwrap();
    for (i, o) in out.iter().enumerate() {
        ok(o);
        assert_eq!(o.queue_offset, i as i64);
        assert_eq!(o.store_timestamp, out[0].store_timestamp);
        let (v, bytes) = read(&cl2, o.wrote_offset);
        assert_eq!(&bytes[v.body.clone()], &bodies[i][..]);
    }
    assert!(segment_files(dir2.path()).len() >= 2);
}

// ---------------------------------------------------------------------------
// concurrency

#[test]
fn concurrent_puts_are_serialised() {
    const FILE: usize = 4096;
    const THREADS: usize = 8;
    const PER: usize = 100;
    let dir = tempfile::tempdir().unwrap();
    let cl = open(dir.path(), FILE);
    let results: Vec<Vec<(PutOutcome, Vec<u8>, i32)>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let cl = &cl;
                sc.spawn(move || {
                    (0..PER)
                        .map(|i| {
                            let body: Vec<u8> =
                                format!("t{t}-m{i}-{}", "z".repeat(i * 3 % 200)).into_bytes();
                            let qid = (i % 2) as i32;
                            let o = cl.put(spec("Conc", qid, &body, Vec::new())).unwrap();
                            (o, body, qid)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<&(PutOutcome, Vec<u8>, i32)> = results.iter().flatten().collect();
    assert_eq!(all.len(), THREADS * PER);
    all.sort_by_key(|(o, _, _)| o.wrote_offset);
    for w in all.windows(2) {
        let end = w[0].0.wrote_offset + w[0].0.wrote_bytes as i64;
        assert!(w[1].0.wrote_offset >= end, "records overlap");
    }
    let mut per_q: HashMap<i32, Vec<i64>> = HashMap::new();
    for (o, body, qid) in &all {
        ok(o);
        let (v, bytes) = read(&cl, o.wrote_offset);
        assert_eq!(&bytes[v.body.clone()], &body[..]);
        assert_eq!(v.queue_offset, o.queue_offset);
        assert_eq!(v.queue_id, *qid);
        per_q.entry(*qid).or_default().push(o.queue_offset);
    }
    // Queue offsets follow the physical order and are dense.
    for (qid, offs) in per_q {
        let n = offs.len() as i64;
        assert_eq!(offs, (0..n).collect::<Vec<_>>(), "queue {qid}");
        assert_eq!(cl.next_queue_offset("Conc", qid), n);
    }
}

#[test]
fn put_lock_held_past_the_busy_timeout_is_os_page_cache_busy() {
    let dir = tempfile::tempdir().unwrap();
    let cl = std::sync::Arc::new(open(dir.path(), 4096));
    cl.set_busy_timeout_ms(50);
    ok(&cl.put(spec("t", 0, b"before", Vec::new())).unwrap());
    let holder = {
        let cl = cl.clone();
        std::thread::spawn(move || cl.hold_put_lock_for(std::time::Duration::from_millis(600)))
    };
    std::thread::sleep(std::time::Duration::from_millis(250));
    let out = cl.put(spec("t", 0, b"busy", Vec::new())).unwrap();
    assert_eq!(out.status, PutStatus::OsPageCacheBusy, "{:?}", out.reason);
    assert!(out
        .reason
        .as_deref()
        .unwrap()
        .contains("os_page_cache_busy_time_out_mills"));
    let batch = cl
        .put_batch([Ok(spec("t", 0, b"busy", Vec::new()))])
        .unwrap();
    assert_eq!(batch[0].status, PutStatus::OsPageCacheBusy);
    holder.join().unwrap();
    // Free again: puts go through, and nothing was written for the refused ones.
    let out = cl.put(spec("t", 0, b"after", Vec::new())).unwrap();
    ok(&out);
    assert_eq!(out.queue_offset, 1);
}
