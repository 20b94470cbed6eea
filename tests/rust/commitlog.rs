//! Integration tests of the CommitLog record codec and the CommitLog itself
//! (SPEC "Golden record", §1.1–1.11, "Our choices").

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;

use _native::log::commitlog::{
    account_record, now_ms, CommitLog, CommitLogConfig, PutOutcome, PutStatus, QueueOffsetTable,
    Refused,
};
use _native::log::mapped_file::file_name;
use _native::log::message::{
    self, body_crc, decode_msg_id, encode_v1, find_property, offset_msg_id, parse_delay_levels,
    parse_record, sysflag, MessageSpec, Parsed, PropertiesBuilder, RecordView, BLANK_MAGIC,
    MAGIC_V1, MAGIC_V2, SCHEDULE_TOPIC,
};

// ---------------------------------------------------------------------------
// helpers

const GOLDEN_HEX: &str = concat!(
    "000000badaa320a769c865ed0000000300000000000000000000000700000000000004d2",
    "000000000000018bcfe568000a0000010000d4310000018bcfe5687bc0a8010200002a9f",
    "0000000000000000000000000000000e48656c6c6f20526f636b65744d5109546f706963",
    "5465737400484b455953016b31206b3202554e49515f4b45590130413030303030313030",
    "303031384234414143323038413445394634303030300257414954017472756502544147",
    "530154616741",
);

const DEFAULT_DELAY_LEVELS: &str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";
const MAX_MESSAGE_SIZE: usize = 4 * 1024 * 1024;

fn hex_decode(s: &str) -> Vec<u8> {
    assert_eq!(s.len() % 2, 0);
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn born_v4() -> SocketAddr {
    addr("10.0.0.1:54321")
}

fn store_v4() -> SocketAddr {
    addr("192.168.1.2:10911")
}

fn props(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut b = PropertiesBuilder::new();
    for (k, v) in pairs {
        b.push(k, v).unwrap();
    }
    b.finish()
}

fn spec<'a>(topic: &'a str, queue_id: i32, body: &'a [u8], properties: Vec<u8>) -> MessageSpec<'a> {
    MessageSpec {
        born_host: born_v4(),
        ..MessageSpec::new(topic, queue_id, body)
            .with_properties(properties)
            .born_at(1_700_000_000_000)
    }
}

fn config(dir: &Path, file_size: usize) -> CommitLogConfig {
    CommitLogConfig {
        dir: dir.to_path_buf(),
        file_size,
        max_message_size: MAX_MESSAGE_SIZE,
        store_host: store_v4(),
        delay_levels: parse_delay_levels(DEFAULT_DELAY_LEVELS).unwrap(),
        // Records exactly as RocketMQ 4.9.8 writes them: the geometry tests
        // here count their bytes (the property CRC has its own tests).
        prop_crc: false,
    }
}

fn open(dir: &Path, file_size: usize) -> CommitLog {
    CommitLog::load(config(dir, file_size), true).unwrap()
}

fn record(buf: &[u8], check_crc: bool) -> RecordView {
    match parse_record(buf, check_crc) {
        Parsed::Record(v) => v,
        other => panic!("expected a record, got {other:?}"),
    }
}

fn assert_end(p: Parsed) {
    assert!(matches!(p, Parsed::End { .. }), "expected End, got {p:?}");
}

/// Reads back the record at `phy`, panicking if there is none.
fn read(cl: &CommitLog, phy: i64) -> (RecordView, Vec<u8>) {
    cl.read_record(phy as u64)
        .unwrap_or_else(|| panic!("no record at {phy}"))
}

fn segment_files(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn ok(o: &PutOutcome) {
    assert_eq!(o.status, PutStatus::PutOk, "{o:?}");
}

/// The record length the engine must use for a message with IPv4 hosts.
fn v4_len(topic: &str, body: usize, props: usize) -> usize {
    91 + body + topic.len() + props
}

fn golden_spec() -> (MessageSpec<'static>, Vec<u8>) {
    let mut b = PropertiesBuilder::new();
    b.push("KEYS", "k1 k2").unwrap();
    b.push("UNIQ_KEY", "0A000001000018B4AAC208A4E9F40000")
        .unwrap();
    b.push("WAIT", "true").unwrap();
    b.push("TAGS", "TagA").unwrap();
    let properties = b.finish();
    let s = MessageSpec {
        born_host: born_v4(),
        ..MessageSpec::new("TopicTest", 3, b"Hello RocketMQ")
            .with_properties(properties.clone())
            .born_at(1_700_000_000_000)
    };
    (s, properties)
}

fn golden_bytes() -> Vec<u8> {
    hex_decode(GOLDEN_HEX)
}

/// Builds a V2 record by hand (magic DAA320AB, 2-byte topic length), IPv4 hosts.
#[allow(clippy::too_many_arguments)]
fn build_v2(
    topic: &[u8],
    body: &[u8],
    props: &[u8],
    queue_id: i32,
    queue_offset: i64,
    phy: i64,
    born_ts: i64,
    store_ts: i64,
) -> Vec<u8> {
    let mut v = Vec::new();
    let total = 92 + body.len() + topic.len() + props.len();
    v.extend_from_slice(&(total as i32).to_be_bytes());
    v.extend_from_slice(&[0xDA, 0xA3, 0x20, 0xAB]);
    v.extend_from_slice(&body_crc(body).to_be_bytes());
    v.extend_from_slice(&queue_id.to_be_bytes());
    v.extend_from_slice(&7i32.to_be_bytes()); // flag
    v.extend_from_slice(&queue_offset.to_be_bytes());
    v.extend_from_slice(&phy.to_be_bytes());
    v.extend_from_slice(&0i32.to_be_bytes()); // sysflag
    v.extend_from_slice(&born_ts.to_be_bytes());
    v.extend_from_slice(&[10, 0, 0, 1]);
    v.extend_from_slice(&54321i32.to_be_bytes());
    v.extend_from_slice(&store_ts.to_be_bytes());
    v.extend_from_slice(&[192, 168, 1, 2]);
    v.extend_from_slice(&10911i32.to_be_bytes());
    v.extend_from_slice(&2i32.to_be_bytes()); // reconsume times
    v.extend_from_slice(&99i64.to_be_bytes()); // prepared tx offset
    v.extend_from_slice(&(body.len() as i32).to_be_bytes());
    v.extend_from_slice(body);
    v.extend_from_slice(&(topic.len() as i16).to_be_bytes());
    v.extend_from_slice(topic);
    v.extend_from_slice(&(props.len() as i16).to_be_bytes());
    v.extend_from_slice(props);
    assert_eq!(v.len(), total);
    v
}

// ---------------------------------------------------------------------------
// 1. golden record and parser

#[test]
fn golden_record_encodes_to_spec_bytes() {
    let (s, _) = golden_spec();
    let crc = body_crc(&s.body);
    assert_eq!(crc, 1_774_740_973);
    let len = message::record_len(
        s.body.len(),
        s.topic.len(),
        s.properties.len(),
        &s.born_host,
        &store_v4(),
    );
    assert_eq!(len, 186);
    let mut buf = vec![0xEEu8; 300];
    let n = encode_v1(
        &mut buf,
        &s,
        0,
        crc,
        &store_v4(),
        7,
        1234,
        1_700_000_000_123,
        false,
    );
    assert_eq!(n, 186);
    let golden = golden_bytes();
    assert_eq!(golden.len(), 186);
    assert_eq!(message::to_hex_upper(&buf[..n]), GOLDEN_HEX.to_uppercase());
    assert_eq!(&buf[..n], &golden[..]);
    assert!(buf[n..].iter().all(|&b| b == 0xEE), "wrote past the record");
}

#[test]
fn golden_record_decodes_every_field() {
    let golden = golden_bytes();
    let (_, properties) = golden_spec();
    for check_crc in [true, false] {
        let v = record(&golden, check_crc);
        assert_eq!(v.total_size, 186);
        assert_eq!(v.magic, MAGIC_V1);
        assert_eq!(v.body_crc, 1_774_740_973);
        assert_eq!(v.queue_id, 3);
        assert_eq!(v.flag, 0);
        assert_eq!(v.queue_offset, 7);
        assert_eq!(v.physical_offset, 1234);
        assert_eq!(v.sys_flag, 0);
        assert_eq!(v.born_timestamp, 1_700_000_000_000);
        assert_eq!(v.born_host, born_v4());
        assert_eq!(v.store_timestamp, 1_700_000_000_123);
        assert_eq!(v.store_host, store_v4());
        assert_eq!(v.reconsume_times, 0);
        assert_eq!(v.prepared_transaction_offset, 0);
        assert_eq!(v.body, 88..102);
        assert_eq!(&golden[v.body.clone()], b"Hello RocketMQ");
        assert_eq!(v.topic, 103..112);
        assert_eq!(&golden[v.topic.clone()], b"TopicTest");
        assert_eq!(v.properties, 114..186);
        assert_eq!(&golden[v.properties.clone()], &properties[..]);
        let p = &golden[v.properties.clone()];
        assert_eq!(find_property(p, "KEYS"), Some(&b"k1 k2"[..]));
        assert_eq!(
            find_property(p, "UNIQ_KEY"),
            Some(&b"0A000001000018B4AAC208A4E9F40000"[..])
        );
        assert_eq!(find_property(p, "WAIT"), Some(&b"true"[..]));
        assert_eq!(find_property(p, "TAGS"), Some(&b"TagA"[..]));
        assert_eq!(
            offset_msg_id(&v.store_host, v.physical_offset),
            "C0A8010200002A9F00000000000004D2"
        );
    }
    // Trailing bytes after the record do not matter.
    let mut longer = golden.clone();
    longer.extend_from_slice(&[0u8; 50]);
    assert_eq!(record(&longer, true).total_size, 186);
    assert_eq!(
        decode_msg_id("C0A8010200002A9F00000000000004D2"),
        Some((store_v4(), 1234))
    );
}

#[test]
fn v2_record_parses() {
    // The golden record re-framed as V2: 2-byte topic length, total + 1.
    let golden = golden_bytes();
    let mut v2 = Vec::new();
    v2.extend_from_slice(&187i32.to_be_bytes());
    v2.extend_from_slice(&MAGIC_V2.to_be_bytes());
    v2.extend_from_slice(&golden[8..102]);
    v2.extend_from_slice(&[0x00, 0x09]);
    v2.extend_from_slice(&golden[103..]);
    assert_eq!(v2.len(), 187);
    let v = record(&v2, true);
    assert_eq!(v.total_size, 187);
    assert_eq!(v.magic, MAGIC_V2);
    assert_eq!(v.queue_id, 3);
    assert_eq!(v.queue_offset, 7);
    assert_eq!(v.physical_offset, 1234);
    assert_eq!(v.store_timestamp, 1_700_000_000_123);
    assert_eq!(v.store_host, store_v4());
    assert_eq!(&v2[v.body.clone()], b"Hello RocketMQ");
    assert_eq!(v.topic, 104..113);
    assert_eq!(&v2[v.topic.clone()], b"TopicTest");
    assert_eq!(v.properties, 115..187);
    assert_eq!(&v2[v.properties.clone()], &golden[114..186]);

    // The reason V2 exists: a topic longer than 127 bytes.
    let topic = vec![b'x'; 200];
    let body = b"payload-of-v2".to_vec();
    let p = props(&[("TAGS", "v2tag")]);
    let rec = build_v2(&topic, &body, &p, 11, 42, 4096, 1_000, 2_000);
    let v = record(&rec, true);
    assert_eq!(v.magic, MAGIC_V2);
    assert_eq!(v.total_size, rec.len());
    assert_eq!(v.queue_id, 11);
    assert_eq!(v.flag, 7);
    assert_eq!(v.queue_offset, 42);
    assert_eq!(v.physical_offset, 4096);
    assert_eq!(v.born_timestamp, 1_000);
    assert_eq!(v.store_timestamp, 2_000);
    assert_eq!(v.born_host, born_v4());
    assert_eq!(v.store_host, store_v4());
    assert_eq!(v.reconsume_times, 2);
    assert_eq!(v.prepared_transaction_offset, 99);
    assert_eq!(&rec[v.body.clone()], &body[..]);
    assert_eq!(&rec[v.topic.clone()], &topic[..]);
    assert_eq!(&rec[v.properties.clone()], &p[..]);

    // A V1 record of that shape would need a 200 in a signed byte: invalid.
    let mut as_v1 = rec.clone();
    as_v1[4..8].copy_from_slice(&MAGIC_V1.to_be_bytes());
    assert_end(parse_record(&as_v1, false));
}

#[test]
fn corrupted_crc_is_rejected_only_when_checked() {
    let golden = golden_bytes();
    // Flip a body byte.
    let mut bad_body = golden.clone();
    bad_body[90] ^= 0x20;
    assert_end(parse_record(&bad_body, true));
    let v = record(&bad_body, false);
    assert_eq!(v.body_crc, 1_774_740_973);
    assert_eq!(&bad_body[v.body.clone()], b"HeLlo RocketMQ");
    // Flip the CRC field itself.
    let mut bad_crc = golden.clone();
    bad_crc[11] ^= 1;
    assert_end(parse_record(&bad_crc, true));
    assert_eq!(record(&bad_crc, false).body_crc, 1_774_740_972);
}

#[test]
fn total_size_must_equal_field_lengths() {
    let golden = golden_bytes();
    // Total one larger than the fields (buffer long enough to hold it).
    let mut big = golden.clone();
    big.push(0);
    big[0..4].copy_from_slice(&187i32.to_be_bytes());
    assert_end(parse_record(&big, false));
    // Total one smaller.
    let mut small = golden.clone();
    small[0..4].copy_from_slice(&185i32.to_be_bytes());
    assert_end(parse_record(&small, false));
    // Total larger than the buffer.
    let mut huge = golden.clone();
    huge[0..4].copy_from_slice(&10_000i32.to_be_bytes());
    assert_end(parse_record(&huge, false));
    // Negative / zero totals.
    for t in [0i32, -1, i32::MIN] {
        let mut b = golden.clone();
        b[0..4].copy_from_slice(&t.to_be_bytes());
        assert_end(parse_record(&b, false));
    }
    // Body length that disagrees with the total.
    let mut body_len = golden.clone();
    body_len[84..88].copy_from_slice(&15i32.to_be_bytes());
    assert_end(parse_record(&body_len, false));
    let mut neg_body = golden.clone();
    neg_body[84..88].copy_from_slice(&(-1i32).to_be_bytes());
    assert_end(parse_record(&neg_body, false));
    // Property length that disagrees with the total.
    let mut prop_len = golden.clone();
    prop_len[112..114].copy_from_slice(&71i16.to_be_bytes());
    assert_end(parse_record(&prop_len, false));
    // Torn record: the buffer ends inside it.
    assert_end(parse_record(&golden[..185], false));
    assert_end(parse_record(&golden[..100], false));
    // IPv6 store flag on an IPv4 record shifts every field: invalid.
    let mut v6flag = golden.clone();
    v6flag[39] = sysflag::STOREHOST_V6 as u8;
    assert_end(parse_record(&v6flag, false));
    // Unknown magic.
    let mut magic = golden.clone();
    magic[7] = 0xA8;
    assert_end(parse_record(&magic, false));
}

#[test]
fn short_zero_and_blank_buffers() {
    assert_end(parse_record(&[], true));
    let golden = golden_bytes();
    for n in 1..8 {
        assert_end(parse_record(&golden[..n], true));
    }
    assert_end(parse_record(&[0u8; 8], true));
    assert_end(parse_record(&[0u8; 4096], false));
    // Blank header: [int remaining][CBD43194].
    let mut blank = Vec::new();
    blank.extend_from_slice(&1000i32.to_be_bytes());
    blank.extend_from_slice(&[0xCB, 0xD4, 0x31, 0x94]);
    assert_eq!(BLANK_MAGIC.to_be_bytes(), [0xCB, 0xD4, 0x31, 0x94]);
    assert_eq!(parse_record(&blank, true), Parsed::Blank);
    blank.extend_from_slice(&[0u8; 992]);
    assert_eq!(parse_record(&blank, false), Parsed::Blank);
    let mut enc = [0u8; 8];
    message::encode_blank(&mut enc, 1000);
    assert_eq!(&enc[..], &blank[..8]);
}

// ---------------------------------------------------------------------------
// 2. IPv6

#[test]
fn ipv6_hosts_set_flags_and_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let store6 = addr("[2001:db8::2]:10911");
    let born6 = addr("[2001:db8::1]:40000");
    let mut cfg = config(dir.path(), 64 * 1024);
    cfg.store_host = store6;
    let cl = CommitLog::load(cfg, true).unwrap();
    let p = props(&[("TAGS", "v6")]);
    let body = b"ipv6 body";

    // Both hosts IPv6.
    let mut s = spec("T6", 1, body, p.clone());
    s.born_host = born6;
    let o = cl.put(s).unwrap();
    ok(&o);
    let expect = 91 + 12 + 12 + body.len() + 2 + p.len();
    assert_eq!(o.wrote_bytes as usize, expect);
    let (v, bytes) = read(&cl, o.wrote_offset);
    assert_eq!(bytes.len(), expect);
    assert_eq!(v.total_size, expect);
    assert_eq!(
        v.sys_flag & (sysflag::BORNHOST_V6 | sysflag::STOREHOST_V6),
        0x30
    );
    assert_eq!(v.born_host, born6);
    assert_eq!(v.store_host, store6);
    assert_eq!(&bytes[v.body.clone()], body);
    assert_eq!(&bytes[v.topic.clone()], b"T6");
    assert_eq!(
        &bytes[48..64],
        &"2001:db8::1"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets()
    );
    assert_eq!(&bytes[64..68], &40000i32.to_be_bytes());
    let id = offset_msg_id(&v.store_host, v.physical_offset);
    assert_eq!(id.len(), 56);
    assert!(id.starts_with("20010DB8000000000000000000000002"), "{id}");
    assert_eq!(decode_msg_id(&id), Some((store6, o.wrote_offset)));

    // IPv4 born host, IPv6 store host. The V6 bits are the store's to set
    // (from the hosts): a caller setting one is refused, naming the bit.
    let mut s = spec("T6", 1, body, p.clone());
    s.sys_flag = sysflag::BORNHOST_V6;
    let refused = cl.put(s).unwrap();
    assert_eq!(refused.status, PutStatus::MessageIllegal);
    assert!(refused
        .reason
        .as_deref()
        .unwrap_or_default()
        .contains("0x10"));
    let s = spec("T6", 1, body, p.clone());
    let o2 = cl.put(s).unwrap();
    ok(&o2);
    assert_eq!(o2.wrote_offset, o.wrote_offset + expect as i64);
    assert_eq!(o2.wrote_bytes as usize, expect - 12);
    let (v, _) = read(&cl, o2.wrote_offset);
    assert_eq!(
        v.sys_flag & (sysflag::BORNHOST_V6 | sysflag::STOREHOST_V6),
        sysflag::STOREHOST_V6
    );
    assert_eq!(v.born_host, born_v4());
    assert_eq!(v.store_host, store6);
    assert_eq!(v.queue_offset, 1);

    // IPv6 born host with an IPv4 store host.
    let dir4 = tempfile::tempdir().unwrap();
    let cl4 = open(dir4.path(), 64 * 1024);
    let mut s = spec("T6", 0, body, p.clone());
    s.born_host = born6;
    s.sys_flag = sysflag::STOREHOST_V6; // the store's to set: refused
    let refused = cl4.put(s.clone()).unwrap();
    assert_eq!(refused.status, PutStatus::MessageIllegal);
    assert!(refused
        .reason
        .as_deref()
        .unwrap_or_default()
        .contains("0x20"));
    s.sys_flag = 0;
    let o = cl4.put(s).unwrap();
    ok(&o);
    assert_eq!(o.wrote_bytes as usize, expect - 12);
    let (v, _) = read(&cl4, o.wrote_offset);
    assert_eq!(
        v.sys_flag & (sysflag::BORNHOST_V6 | sysflag::STOREHOST_V6),
        sysflag::BORNHOST_V6
    );
    assert_eq!(v.born_host, born6);
    assert_eq!(v.store_host, store_v4());
    assert_eq!(offset_msg_id(&v.store_host, v.physical_offset).len(), 32);
}

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

fn rebuild(
    cl: &CommitLog,
) -> (
    QueueOffsetTable,
    Vec<u64>,
    _native::log::commitlog::ScanReport,
) {
    let mut table = QueueOffsetTable::default();
    let mut offsets = Vec::new();
    let rep = cl.scan(0, true, |off, v, rec| {
        offsets.push(off);
        account_record(&mut table, v, rec);
    });
    (table, offsets, rep)
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
    // Properties over 32767 bytes: by chars first, then by bytes (SPEC 1.10).
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
// more recovery and concurrency

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
