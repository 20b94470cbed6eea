//! Reloading a CommitLog: hundreds of messages read back after reopen, the
//! recovery scan stopping at torn or corrupt records, empty and expired logs.
#![allow(clippy::unwrap_used)] // a test: a failed unwrap fails it, with its message

use std::collections::HashMap;

use _native::internals::commitlog::{account_record, now_ms, CommitLog, QueueOffsetTable};
use _native::internals::mapped_file::file_name;
use _native::internals::message::{body_crc, find_property, MAGIC_V1};

mod common;
use common::log::*;

// ---------------------------------------------------------------------------
// 4. many messages, reload, recovery scan

struct Sent {
    wrote_offset: i64,
    wrote_bytes: i32,
    topic: String,
    queue_id: i32,
    queue_offset: i64,
    body: Vec<u8>,
    tags: String,
}

fn body_for(i: usize) -> Vec<u8> {
    let len = (i * 37) % 700;
    (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
}

fn put_many(cl: &CommitLog, count: usize) -> Vec<Sent> {
    let topics = ["TopicA", "TopicB", "%RETRY%group-1", "T_x|y"];
    let mut sent = Vec::new();
    for i in 0..count {
        let topic = topics[i % topics.len()];
        let queue_id = ((i / 4) % 3) as i32;
        let body = body_for(i);
        let tags = format!("tag{}", i % 5);
        let p = props(&[("TAGS", &tags), ("KEYS", &format!("k{i}"))]);
        let o = cl.put(spec(topic, queue_id, &body, p)).unwrap();
        ok(&o);
        sent.push(Sent {
            wrote_offset: o.wrote_offset,
            wrote_bytes: o.wrote_bytes,
            topic: topic.to_string(),
            queue_id,
            queue_offset: o.queue_offset,
            body,
            tags,
        });
    }
    sent
}

fn check_read_back(cl: &CommitLog, sent: &[Sent]) {
    for (i, s) in sent.iter().enumerate() {
        let (v, bytes) = read(cl, s.wrote_offset);
        assert_eq!(v.total_size, s.wrote_bytes as usize, "msg {i}");
        assert_eq!(v.physical_offset, s.wrote_offset, "msg {i}");
        assert_eq!(&bytes[v.body.clone()], &s.body[..], "msg {i}");
        assert_eq!(&bytes[v.topic.clone()], s.topic.as_bytes(), "msg {i}");
        assert_eq!(v.queue_id, s.queue_id, "msg {i}");
        assert_eq!(v.queue_offset, s.queue_offset, "msg {i}");
        assert_eq!(v.body_crc, body_crc(&s.body), "msg {i}");
        assert_eq!(v.store_host, store_v4(), "msg {i}");
        let p = &bytes[v.properties.clone()];
        assert_eq!(find_property(p, "TAGS"), Some(s.tags.as_bytes()), "msg {i}");
        assert_eq!(
            find_property(p, "KEYS"),
            Some(format!("k{i}").as_bytes()),
            "msg {i}"
        );
    }
}

#[test]
fn hundreds_of_messages_survive_reload() {
    const FILE: usize = 4096;
    let dir = tempfile::tempdir().unwrap();
    let cl = open(dir.path(), FILE);
    let before_put = now_ms();
    let sent = put_many(&cl, 500);
    let after_put = now_ms();

    // Offsets are increasing; records are contiguous inside a file and a
    // record that moves to the next file starts at that file's start.
    for w in sent.windows(2) {
        let end = w[0].wrote_offset + w[0].wrote_bytes as i64;
        let next = w[1].wrote_offset;
        if next != end {
            assert_eq!(next % FILE as i64, 0, "rolled record starts a file");
            assert!(next - end >= 8, "at least the blank header was left");
            assert_eq!(next, cl.roll_next_file(end as u64) as i64);
        }
        // No record crosses a file boundary and each leaves >= 8 bytes.
        let in_file = w[0].wrote_offset as usize % FILE;
        assert!(in_file + w[0].wrote_bytes as usize + 8 <= FILE);
    }
    // Queue offsets are dense per topic-queue.
    let mut counts: HashMap<(String, i32), i64> = HashMap::new();
    for s in &sent {
        let c = counts.entry((s.topic.clone(), s.queue_id)).or_default();
        assert_eq!(s.queue_offset, *c, "{}-{}", s.topic, s.queue_id);
        *c += 1;
    }
    let files = segment_files(dir.path());
    assert!(files.len() > 20, "{} files", files.len());
    for (i, f) in files.iter().enumerate() {
        assert_eq!(f, &file_name((i * FILE) as u64));
        assert_eq!(
            std::fs::metadata(dir.path().join(f)).unwrap().len(),
            FILE as u64
        );
    }
    check_read_back(&cl, &sent);
    for s in &sent {
        let (v, _) = read(&cl, s.wrote_offset);
        assert!(v.store_timestamp >= before_put && v.store_timestamp <= after_put);
    }
    let max_before = cl.max_offset();
    let last = sent.last().unwrap();
    assert_eq!(
        max_before,
        (last.wrote_offset + last.wrote_bytes as i64) as u64
    );
    let table_before = cl.queue_offsets().entries();
    assert_eq!(table_before.len(), counts.len());
    cl.flush_all().unwrap();
    drop(cl);

    // Wrong file sizes are refused, and do not touch the files.
    let snapshot: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(dir.path().join(f)).unwrap())
        .collect();
    assert!(CommitLog::load(config(dir.path(), FILE * 2), true).is_err());
    assert!(CommitLog::load(config(dir.path(), FILE / 2), true).is_err());
    assert!(CommitLog::load(config(dir.path(), FILE + 1), true).is_err());
    for (f, data) in files.iter().zip(&snapshot) {
        assert_eq!(&std::fs::read(dir.path().join(f)).unwrap(), data, "{f}");
    }

    // Reload and recover.
    let cl = open(dir.path(), FILE);
    let (table, offsets, rep) = rebuild(&cl);
    assert_eq!(rep.stop_reason, None);
    assert_eq!(rep.records, 500);
    assert_eq!(rep.end_offset, max_before);
    assert_eq!(rep.files_scanned, files.len());
    let expect_offsets: Vec<u64> = sent.iter().map(|s| s.wrote_offset as u64).collect();
    assert_eq!(offsets, expect_offsets);
    assert_eq!(table.entries(), table_before);
    cl.truncate_to(rep.end_offset).unwrap();
    assert_eq!(cl.max_offset(), max_before);
    cl.set_queue_offsets(table);
    check_read_back(&cl, &sent);
    assert!(cl.read_record(max_before).is_none());

    // Queue offsets continue densely; new records follow the old end.
    let mut keys: Vec<_> = counts.keys().cloned().collect();
    keys.sort();
    let mut prev_end = max_before as i64;
    for (topic, qid) in &keys {
        let body = b"after reload".to_vec();
        let o = cl
            .put(spec(topic, *qid, &body, props(&[("TAGS", "again")])))
            .unwrap();
        ok(&o);
        assert_eq!(
            o.queue_offset,
            counts[&(topic.clone(), *qid)],
            "{topic}-{qid}"
        );
        assert!(
            o.wrote_offset == prev_end
                || o.wrote_offset == cl.roll_next_file(prev_end as u64) as i64,
            "record at {} after end {prev_end}",
            o.wrote_offset
        );
        prev_end = o.wrote_offset + o.wrote_bytes as i64;
        let (v, bytes) = read(&cl, o.wrote_offset);
        assert_eq!(&bytes[v.body.clone()], &body[..]);
    }
    check_read_back(&cl, &sent);
}

#[test]
fn recovery_stops_at_a_torn_or_corrupt_record() {
    const FILE: usize = 4096;
    let dir = tempfile::tempdir().unwrap();
    let cl = open(dir.path(), FILE);
    let sent = put_many(&cl, 60);
    let max = cl.max_offset();
    cl.flush_all().unwrap();
    drop(cl);
    let last = sent.last().unwrap();
    let last_file = dir.path().join(file_name(max - max % FILE as u64));

    // A torn record after the real end: garbage with a valid magic.
    let mut data = std::fs::read(&last_file).unwrap();
    let at = (max % FILE as u64) as usize;
    data[at..at + 4].copy_from_slice(&500i32.to_be_bytes());
    data[at + 4..at + 8].copy_from_slice(&MAGIC_V1.to_be_bytes());
    data[at + 8..(at + 40).min(FILE)].fill(0x5A);
    std::fs::write(&last_file, &data).unwrap();

    let cl = open(dir.path(), FILE);
    let (table, offsets, rep) = rebuild(&cl);
    assert_eq!(rep.end_offset, max);
    assert_eq!(offsets.len(), 60);
    assert!(
        rep.stop_reason.is_some(),
        "non-zero bytes stop the scan with a reason"
    );
    cl.truncate_to(rep.end_offset).unwrap();
    cl.set_queue_offsets(table);
    cl.flush_all().unwrap();
    assert_eq!(cl.max_offset(), max);
    drop(cl);
    let data = std::fs::read(&last_file).unwrap();
    assert!(
        data[at..].iter().all(|&b| b == 0),
        "truncation zeroes the torn tail"
    );

    // A corrupted body in the last record: CRC check drops it.
    let mut data = std::fs::read(&last_file).unwrap();
    let rec_at = (last.wrote_offset as u64 % FILE as u64) as usize;
    assert!(!last.body.is_empty());
    let (v, _) = {
        let cl = open(dir.path(), FILE);
        read(&cl, last.wrote_offset)
    };
    data[rec_at + v.body.start] ^= 0xFF;
    std::fs::write(&last_file, &data).unwrap();
    let cl = open(dir.path(), FILE);
    let (table, _, rep) = rebuild(&cl);
    assert_eq!(rep.end_offset, last.wrote_offset as u64);
    assert_eq!(rep.records, 59);
    let (_, _, rep_nocrc) = {
        let mut t = QueueOffsetTable::default();
        let mut offs = Vec::new();
        let r = cl.scan(0, false, |off, v, rec| {
            offs.push(off);
            account_record(&mut t, v, rec);
        });
        (t, offs, r)
    };
    assert_eq!(rep_nocrc.end_offset, max);
    cl.truncate_to(rep.end_offset).unwrap();
    cl.set_queue_offsets(table);
    assert_eq!(cl.max_offset(), last.wrote_offset as u64);
    assert!(cl.read_record(last.wrote_offset as u64).is_none());
    // The dropped message's queue offset is reused.
    let o = cl
        .put(spec(&last.topic, last.queue_id, b"replacement", Vec::new()))
        .unwrap();
    ok(&o);
    assert_eq!(o.wrote_offset, last.wrote_offset);
    assert_eq!(o.queue_offset, last.queue_offset);
}

// ---------------------------------------------------------------------------
// empty, damaged and expired logs

#[test]
fn empty_log_scans_to_zero() {
    let dir = tempfile::tempdir().unwrap();
    let cl = open(dir.path(), 4096);
    let (table, offsets, rep) = rebuild(&cl);
    assert_eq!(rep.end_offset, 0);
    assert_eq!(rep.records, 0);
    assert!(offsets.is_empty());
    assert!(table.entries().is_empty());
    assert_eq!(cl.max_offset(), 0);
    assert_eq!(cl.min_offset(), -1);
    assert!(cl.read_record(0).is_none());
}

#[test]
fn corruption_in_an_earlier_file_drops_later_files() {
    const FILE: usize = 4096;
    let dir = tempfile::tempdir().unwrap();
    let cl = open(dir.path(), FILE);
    let sent = put_many(&cl, 200);
    cl.flush_all().unwrap();
    drop(cl);
    let files_before = segment_files(dir.path());
    assert!(files_before.len() > 6);
    // Corrupt the body of the 3rd record of file 3.
    let in_file3: Vec<&Sent> = sent
        .iter()
        .filter(|s| s.wrote_offset as usize / FILE == 3)
        .collect();
    let victim = in_file3
        .iter()
        .find(|s| s.wrote_offset as usize % FILE > 0 && !s.body.is_empty())
        .unwrap();
    let path = dir.path().join(file_name(3 * FILE as u64));
    let mut data = std::fs::read(&path).unwrap();
    let at = victim.wrote_offset as usize % FILE;
    let body_at = at + 88; // IPv4 hosts: body after the 4-byte body length at 84
    data[body_at] ^= 0x01;
    std::fs::write(&path, &data).unwrap();

    let cl = open(dir.path(), FILE);
    let (table, offsets, rep) = rebuild(&cl);
    assert_eq!(rep.end_offset, victim.wrote_offset as u64);
    let kept: Vec<&Sent> = sent
        .iter()
        .filter(|s| s.wrote_offset < victim.wrote_offset)
        .collect();
    assert_eq!(offsets.len(), kept.len());
    assert!(rep.stop_reason.is_some());
    cl.truncate_to(rep.end_offset).unwrap();
    cl.set_queue_offsets(table);
    assert_eq!(cl.max_offset(), victim.wrote_offset as u64);
    assert_eq!(
        segment_files(dir.path()),
        files_before[..4].to_vec(),
        "files after the cut are deleted"
    );
    let data = std::fs::read(&path).unwrap();
    assert_eq!(data.len(), FILE);
    assert!(data[at..].iter().all(|&b| b == 0), "cut bytes are zeroed");
    check_read_back(&cl, &sent[..kept.len()]);
    for s in &sent[kept.len()..] {
        assert!(cl.read_record(s.wrote_offset as u64).is_none());
    }
    // The victim's queue offset is the next one of its queue.
    let o = cl
        .put(spec(&victim.topic, victim.queue_id, b"again", Vec::new()))
        .unwrap();
    ok(&o);
    assert_eq!(o.wrote_offset, victim.wrote_offset);
    assert_eq!(o.queue_offset, victim.queue_offset);
}

#[test]
fn log_whose_first_files_expired_still_loads() {
    const FILE: usize = 4096;
    let dir = tempfile::tempdir().unwrap();
    let cl = open(dir.path(), FILE);
    let sent = put_many(&cl, 120);
    let max = cl.max_offset();
    cl.flush_all().unwrap();
    drop(cl);
    std::fs::remove_file(dir.path().join(file_name(0))).unwrap();
    std::fs::remove_file(dir.path().join(file_name(FILE as u64))).unwrap();

    let cl = open(dir.path(), FILE);
    assert_eq!(cl.min_offset(), 2 * FILE as i64);
    let (table, offsets, rep) = rebuild(&cl);
    let remaining: Vec<&Sent> = sent
        .iter()
        .filter(|s| s.wrote_offset >= 2 * FILE as i64)
        .collect();
    assert_eq!(rep.end_offset, max);
    assert_eq!(offsets.len(), remaining.len());
    assert_eq!(offsets[0], 2 * FILE as u64, "a file starts with a record");
    cl.truncate_to(rep.end_offset).unwrap();
    cl.set_queue_offsets(table);
    for s in &sent {
        let r = cl.read_record(s.wrote_offset as u64);
        if s.wrote_offset < 2 * FILE as i64 {
            assert!(r.is_none());
        } else {
            let (v, bytes) = r.unwrap();
            assert_eq!(&bytes[v.body.clone()], &s.body[..]);
            assert_eq!(v.queue_offset, s.queue_offset);
        }
    }
    // The table is rebuilt from what is left: max queue offset + 1.
    let last_of_a = sent
        .iter()
        .rev()
        .find(|s| s.topic == "TopicA" && s.queue_id == 0)
        .unwrap();
    assert_eq!(
        cl.next_queue_offset("TopicA", 0),
        last_of_a.queue_offset + 1
    );
}
