//! Rolling to the next CommitLog file: the END_OF_FILE blank, the exact
//! fits at the end of a file, and the blank region that is not a record.
#![allow(clippy::unwrap_used)] // a test: a failed unwrap fails it, with its message

use _native::internals::mapped_file::file_name;
use _native::internals::message::{parse_record, Parsed, BLANK_MAGIC};
use _native::MessageSpec;

mod common;
use common::log::*;

// ---------------------------------------------------------------------------
// 3. end-of-file blanks

const TOPIC3: &str = "EdgeTopic";

fn edge_msg(body: &[u8]) -> MessageSpec<'_> {
    spec(TOPIC3, 0, body, props(&[("TAGS", "edge")]))
}

fn edge_len(body: &[u8]) -> usize {
    v4_len(TOPIC3, body.len(), props(&[("TAGS", "edge")]).len())
}

#[test]
fn record_fits_when_exactly_eight_bytes_remain() {
    let body = [b'e'; 100];
    let l = edge_len(&body);
    let n = 3;
    let file_size = n * l + l + 8;
    let dir = tempfile::tempdir().unwrap();
    let cl = open(dir.path(), file_size);
    for i in 0..n {
        let o = cl.put(edge_msg(&body)).unwrap();
        ok(&o);
        assert_eq!(o.wrote_offset, (i * l) as i64);
        assert_eq!(o.wrote_bytes as usize, l);
        assert_eq!(o.queue_offset, i as i64);
    }
    // Exactly L + 8 bytes remain: the record goes in, leaving 8 free bytes.
    let o = cl.put(edge_msg(&body)).unwrap();
    ok(&o);
    assert_eq!(o.wrote_offset, (n * l) as i64);
    assert_eq!(o.queue_offset, n as i64);
    assert_eq!(cl.max_offset(), (file_size - 8) as u64);
    assert_eq!(segment_files(dir.path()), vec![file_name(0)]);

    // The next one goes to the next file behind an 8-byte blank.
    let o = cl.put(edge_msg(&body)).unwrap();
    ok(&o);
    assert_eq!(o.wrote_offset, file_size as i64);
    assert_eq!(o.queue_offset, n as i64 + 1);
    assert_eq!(cl.max_offset(), (file_size + l) as u64);
    assert_eq!(
        segment_files(dir.path()),
        vec![file_name(0), file_name(file_size as u64)]
    );
    let first = cl.file_for(0).unwrap();
    assert!(first.is_full());
    let raw = first.raw();
    assert_eq!(&raw[file_size - 8..file_size - 4], &8i32.to_be_bytes());
    assert_eq!(&raw[file_size - 4..], &BLANK_MAGIC.to_be_bytes());
    assert_eq!(parse_record(&raw[file_size - 8..], true), Parsed::Blank);
    // ... and the data on disk agrees.
    cl.flush_all().unwrap();
    let disk = std::fs::read(dir.path().join(file_name(0))).unwrap();
    assert_eq!(disk.len(), file_size);
    assert_eq!(&disk[file_size - 8..], &raw[file_size - 8..]);
    let (v, _) = read(&cl, (n * l) as i64);
    assert_eq!(v.queue_offset, n as i64);
    let (v, _) = read(&cl, file_size as i64);
    assert_eq!(v.queue_offset, n as i64 + 1);
    assert_eq!(v.physical_offset, file_size as i64);
}

#[test]
fn record_rolls_when_only_l_plus_7_remain() {
    let body = [b'f'; 37];
    let l = edge_len(&body);
    let n = 4;
    let file_size = n * l + l + 7;
    let dir = tempfile::tempdir().unwrap();
    let cl = open(dir.path(), file_size);
    for i in 0..n {
        let o = cl.put(edge_msg(&body)).unwrap();
        ok(&o);
        assert_eq!(o.wrote_offset, (i * l) as i64);
    }
    assert_eq!(cl.max_offset(), (n * l) as u64);
    let o = cl.put(edge_msg(&body)).unwrap();
    ok(&o);
    assert_eq!(o.wrote_offset, file_size as i64, "next file's start");
    assert_eq!(
        o.queue_offset, n as i64,
        "queue offsets continue across files"
    );
    assert_eq!(cl.max_offset(), (file_size + l) as u64);
    let first = cl.file_for(0).unwrap();
    assert!(first.is_full());
    assert_eq!(first.wrote_position(), file_size);
    let raw = first.raw();
    let at = n * l;
    assert_eq!(&raw[at..at + 4], &((l + 7) as i32).to_be_bytes());
    assert_eq!(&raw[at + 4..at + 8], &[0xCB, 0xD4, 0x31, 0x94]);
    assert!(
        raw[at + 8..].iter().all(|&b| b == 0),
        "the rest of the old file stays zero"
    );
    // More messages keep counting in the new file.
    for i in 1..=3 {
        let o = cl.put(edge_msg(&body)).unwrap();
        ok(&o);
        assert_eq!(o.queue_offset, (n + i) as i64);
        assert_eq!(o.wrote_offset, (file_size + i * l) as i64);
    }
    assert_eq!(cl.next_queue_offset(TOPIC3, 0), (n + 4) as i64);

    // A scan walks over the blank into the second file.
    let mut seen = Vec::new();
    let rep = cl.scan(0, true, |off, v, _| seen.push((off, v.queue_offset)));
    assert_eq!(rep.records as usize, n + 4);
    assert_eq!(rep.end_offset, cl.max_offset());
    assert_eq!(rep.stop_reason, None);
    let expect: Vec<_> = (0..n)
        .map(|i| ((i * l) as u64, i as i64))
        .chain((0..4).map(|i| ((file_size + i * l) as u64, (n + i) as i64)))
        .collect();
    assert_eq!(seen, expect);
}

#[test]
fn first_record_of_a_fresh_log_goes_to_offset_zero_even_if_it_nearly_fills_the_file() {
    // L + 8 == file_size: fits exactly once per file.
    let file_size = 4096;
    let body = vec![b'g'; file_size - 8 - edge_len(b"")];
    assert_eq!(edge_len(&body) + 8, file_size);
    let dir = tempfile::tempdir().unwrap();
    let cl = open(dir.path(), file_size);
    let a = cl.put(edge_msg(&body)).unwrap();
    ok(&a);
    assert_eq!(a.wrote_offset, 0);
    let b = cl.put(edge_msg(&body)).unwrap();
    ok(&b);
    assert_eq!(b.wrote_offset, file_size as i64);
    assert_eq!(b.queue_offset, 1);
    let raw = cl.file_for(0).unwrap().raw().to_vec();
    assert_eq!(&raw[file_size - 8..file_size - 4], &8i32.to_be_bytes());
    assert_eq!(&raw[file_size - 4..], &BLANK_MAGIC.to_be_bytes());
}

#[test]
fn blank_region_is_not_a_record() {
    let body = [b'h'; 50];
    let l = edge_len(&body);
    let file_size = 2 * l + 20;
    let dir = tempfile::tempdir().unwrap();
    let cl = open(dir.path(), file_size);
    for _ in 0..3 {
        ok(&cl.put(edge_msg(&body)).unwrap());
    }
    // The blank sits at 2L; reading there (or inside it) finds no record.
    assert!(cl.read_record(2 * l as u64).is_none());
    assert!(cl.read_record(2 * l as u64 + 10).is_none());
    assert!(cl.read_record(1).is_none(), "not a record start");
    assert!(cl.read_record(file_size as u64).is_some());
}
