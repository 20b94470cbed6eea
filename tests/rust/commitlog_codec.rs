//! The CommitLog record codec: the golden record, V1/V2 parsing, CRC and
//! length checks, short and blank buffers, IPv6 hosts (docs/format.md).
#![allow(clippy::unwrap_used)] // a test: a failed unwrap fails it, with its message

use _native::internals::commitlog::CommitLog;
use _native::internals::message;
use _native::internals::message::{
    body_crc, encode_v1, find_property, parse_record, Parsed, StoreStamp, BLANK_MAGIC, MAGIC_V1,
    MAGIC_V2,
};
use _native::{decode_msg_id, offset_msg_id, sysflag, PutStatus};

mod common;
use common::log::*;

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
        crc,
        &StoreStamp {
            sys_flag: 0,
            store_host: &store_v4(),
            queue_offset: 7,
            phy_offset: 1234,
            store_timestamp: 1_700_000_000_123,
            prop_crc: false,
        },
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
    let rec = build_v2(&V2Fields {
        topic: &topic,
        body: &body,
        props: &p,
        queue_id: 11,
        queue_offset: 42,
        phy: 4096,
        born_ts: 1_000,
        store_ts: 2_000,
    });
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
