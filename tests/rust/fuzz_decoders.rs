//! Property tests of every on-disk decoder (one fuzz target per
//! structure): arbitrary bytes never panic, and encode → decode is the
//! identity for CommitLog records, ConsumeQueue units, index headers and
//! index entries, and the checkpoint.
#![allow(clippy::unwrap_used)] // a test: a failed unwrap fails it, with its message

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use proptest::prelude::*;

use _native::internals::checkpoint::{Checkpoint, CheckpointData, CHECKPOINT_FILE_SIZE};
use _native::internals::index::{IndexEntry, IndexHeader, INDEX_HEADER_SIZE};
use _native::internals::message::{
    body_crc, encode_v1, find_property, iter_properties, parse_record, parse_record_frame,
    prop_crc_extra, prop_crc_ok, record_len, NotARecord, Parsed, PropertiesBuilder, RecordFrame,
    RecordRef, StoreStamp, MAGIC_V1,
};
use _native::internals::queue::{CqUnit, CQ_UNIT_SIZE};
use _native::{sysflag, MessageSpec};

/// The frame parse (what a read checks before it decodes a field) finds
/// what the full parse finds, and a record's fields read from its bytes
/// through the frame are the full parse's.
fn frame_agrees_with_full_parse(buf: &[u8], crc: bool) -> Result<(), TestCaseError> {
    match (parse_record(buf, crc), parse_record_frame(buf, crc)) {
        (Parsed::Record(v), Ok(f)) => {
            prop_assert_eq!(f, RecordFrame::of(&v));
            let rec = &buf[..v.total_size];
            prop_assert_eq!(f.view(rec), Some(v.clone()));
            let r = RecordRef::new(rec, f);
            prop_assert_eq!(r.body(), &rec[v.body.clone()]);
            prop_assert_eq!(r.topic(), &rec[v.topic.clone()]);
            prop_assert_eq!(r.properties(), &rec[v.properties.clone()]);
            prop_assert_eq!(
                (r.queue_id(), r.queue_offset()),
                (Some(v.queue_id), Some(v.queue_offset))
            );
            prop_assert_eq!(r.physical_offset(), Some(v.physical_offset));
            prop_assert_eq!((r.body_crc(), r.flag()), (Some(v.body_crc), Some(v.flag)));
            prop_assert_eq!(r.sys_flag(), v.sys_flag);
            prop_assert_eq!(r.born_timestamp(), Some(v.born_timestamp));
            prop_assert_eq!(
                (r.born_host(), r.store_host()),
                (Some(v.born_host), Some(v.store_host))
            );
            prop_assert_eq!(r.store_timestamp(), Some(v.store_timestamp));
            prop_assert_eq!(r.reconsume_times(), Some(v.reconsume_times));
            prop_assert_eq!(
                r.prepared_transaction_offset(),
                Some(v.prepared_transaction_offset)
            );
        }
        (Parsed::Blank, Err(NotARecord::Blank)) => {}
        (Parsed::End { reason }, Err(NotARecord::End(why))) => prop_assert_eq!(reason, why),
        (full, frame) => prop_assert!(false, "full parse {:?}, frame parse {:?}", full, frame),
    }
    Ok(())
}

fn host() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port)),
        (any::<[u8; 16]>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), port)),
    ]
}

/// Legal topics: 1..=127 bytes of `[%|a-zA-Z0-9_-]`.
fn topic() -> impl Strategy<Value = String> {
    "[%|a-zA-Z0-9_-]{1,127}"
}

/// Properties as the producer API builds them: names and values non-empty,
/// without 0x01/0x02.
fn properties() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec(("[^\u{1}\u{2}]{1,12}", "[^\u{1}\u{2}]{1,40}"), 0..8)
}

fn cfg() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cfg())]

    #[test]
    fn parse_record_never_panics(buf in prop::collection::vec(any::<u8>(), 0..512), crc in any::<bool>()) {
        let _ = parse_record(&buf, crc);
    }

    /// Arbitrary bytes behind a plausible header reach the deeper checks.
    #[test]
    fn parse_record_with_magic_never_panics(
        total in 0i32..600,
        v2 in any::<bool>(),
        sys_flag in any::<i32>(),
        rest in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut buf = Vec::with_capacity(8 + rest.len());
        buf.extend_from_slice(&total.to_be_bytes());
        let magic: u32 = if v2 { 0xDAA3_20AB } else { 0xDAA3_20A7 };
        buf.extend_from_slice(&magic.to_be_bytes());
        buf.extend_from_slice(&rest);
        if buf.len() >= 40 {
            buf[36..40].copy_from_slice(&sys_flag.to_be_bytes());
        }
        if let Parsed::Record(v) = parse_record(&buf, false) {
            prop_assert!(v.total_size <= buf.len());
            prop_assert!(v.properties.end == v.total_size);
        }
        for crc in [false, true] {
            frame_agrees_with_full_parse(&buf, crc)?;
        }
    }

    #[test]
    fn record_round_trip(
        topic in topic(),
        body in prop::collection::vec(any::<u8>(), 0..2048),
        props in properties(),
        queue_id in any::<i32>(),
        flag in any::<i32>(),
        tx in prop::sample::select(vec![0i32, 0x4, 0x8, 0xC]),
        born_ts in any::<i64>(),
        store_ts in any::<i64>(),
        born in host(),
        store in host(),
        reconsume in any::<i32>(),
        prepared in any::<i64>(),
        queue_offset in any::<i64>(),
        phy in any::<i64>(),
        with_crc in any::<bool>(),
    ) {
        let mut b = PropertiesBuilder::new();
        for (k, v) in &props {
            b.push(k, v).unwrap();
        }
        let props_bytes = b.finish();
        prop_assume!(props_bytes.len() <= i16::MAX as usize);
        let mut sys_flag = tx;
        if born.is_ipv6() {
            sys_flag |= sysflag::BORNHOST_V6;
        }
        if store.is_ipv6() {
            sys_flag |= sysflag::STOREHOST_V6;
        }
        let spec = MessageSpec {
            topic: Cow::Borrowed(&topic),
            queue_id,
            flag,
            sys_flag,
            born_timestamp: born_ts,
            born_host: born,
            reconsume_times: reconsume,
            prepared_transaction_offset: prepared,
            body: Cow::Borrowed(&body),
            properties: Cow::Borrowed(&props_bytes),
        };
        let extra = if with_crc { prop_crc_extra(&props_bytes) } else { 0 };
        prop_assume!(props_bytes.len() + extra <= i16::MAX as usize);
        let len = record_len(body.len(), topic.len(), props_bytes.len() + extra, &born, &store);
        let mut buf = vec![0u8; len + 16];
        let crc = body_crc(&body);
        let stamp = StoreStamp {
            sys_flag,
            store_host: &store,
            queue_offset,
            phy_offset: phy,
            store_timestamp: store_ts,
            prop_crc: with_crc,
        };
        let n = encode_v1(&mut buf, &spec, crc, &stamp);
        prop_assert_eq!(n, len);
        // Trailing bytes after the record do not matter.
        let Parsed::Record(v) = parse_record(&buf, true) else {
            return Err(TestCaseError::fail(format!("{:?}", parse_record(&buf, true))));
        };
        frame_agrees_with_full_parse(&buf, true)?;
        prop_assert_eq!(v.total_size, len);
        prop_assert_eq!(v.magic, MAGIC_V1);
        prop_assert_eq!(v.body_crc, crc);
        prop_assert_eq!(v.queue_id, queue_id);
        prop_assert_eq!(v.flag, flag);
        prop_assert_eq!(v.queue_offset, queue_offset);
        prop_assert_eq!(v.physical_offset, phy);
        prop_assert_eq!(v.sys_flag, sys_flag);
        prop_assert_eq!(v.born_timestamp, born_ts);
        prop_assert_eq!(v.born_host, born);
        prop_assert_eq!(v.store_timestamp, store_ts);
        prop_assert_eq!(v.store_host, store);
        prop_assert_eq!(v.reconsume_times, reconsume);
        prop_assert_eq!(v.prepared_transaction_offset, prepared);
        prop_assert_eq!(&buf[v.body.clone()], &body[..]);
        prop_assert_eq!(&buf[v.topic.clone()], topic.as_bytes());
        let stored_props = &buf[v.properties.clone()];
        prop_assert_eq!(&stored_props[..props_bytes.len()], &props_bytes[..]);
        prop_assert_eq!(stored_props.len(), props_bytes.len() + extra);
        prop_assert_eq!(prop_crc_ok(&buf[..len], &v.properties), with_crc);
        if with_crc {
            // Any changed byte of the properties is caught.
            for at in v.properties.clone() {
                let mut bad = buf[..len].to_vec();
                bad[at] ^= 0x20;
                prop_assert!(!prop_crc_ok(&bad, &v.properties), "byte {} not caught", at);
            }
        }
        let parsed: Vec<(Vec<u8>, Vec<u8>)> = iter_properties(stored_props)
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect();
        let expected: Vec<(Vec<u8>, Vec<u8>)> = props
            .iter()
            .map(|(k, v)| (k.clone().into_bytes(), v.clone().into_bytes()))
            .collect();
        prop_assert_eq!(parsed, expected);
        if let Some((k, val)) = props.first() {
            // The first occurrence of a name wins.
            prop_assert_eq!(find_property(stored_props, k), Some(val.as_bytes()));
        }
        // A record cut short is never accepted.
        prop_assert!(!matches!(parse_record(&buf[..len - 1], false), Parsed::Record(_)));
        // A flipped body byte fails the CRC check.
        if !body.is_empty() {
            let mut bad = buf.clone();
            let at = v.body.start;
            bad[at] ^= 0x55;
            prop_assert!(!matches!(parse_record(&bad, true), Parsed::Record(_)));
        }
    }

    #[test]
    fn cq_unit_decode_never_panics(buf in prop::collection::vec(any::<u8>(), 0..64)) {
        let u = CqUnit::decode(&buf);
        prop_assert_eq!(u.is_some(), buf.len() >= CQ_UNIT_SIZE);
        if let Some(u) = u {
            prop_assert_eq!(&u.encode()[..], &buf[..CQ_UNIT_SIZE]);
            let _ = (u.is_valid(), u.is_pre_blank(), u.end_phy_offset());
        }
    }

    #[test]
    fn cq_unit_round_trip(phy in any::<i64>(), size in any::<i32>(), tags in any::<i64>()) {
        let u = CqUnit { phy_offset: phy, size, tags_code: tags };
        prop_assert_eq!(CqUnit::decode(&u.encode()), Some(u));
    }

    #[test]
    fn index_header_decode_never_panics(buf in prop::collection::vec(any::<u8>(), 0..96)) {
        let h = IndexHeader::decode(&buf);
        prop_assert_eq!(h.is_some(), buf.len() >= INDEX_HEADER_SIZE);
        if let Some(h) = h {
            prop_assert_eq!(&h.encode()[..], &buf[..INDEX_HEADER_SIZE]);
        }
        let _ = IndexEntry::decode(&buf);
    }

    #[test]
    fn index_header_round_trip(
        bt in any::<i64>(), et in any::<i64>(), bp in any::<i64>(), ep in any::<i64>(),
        slots in any::<i32>(), count in any::<i32>(),
    ) {
        let h = IndexHeader {
            begin_timestamp: bt,
            end_timestamp: et,
            begin_phy_offset: bp,
            end_phy_offset: ep,
            hash_slot_count: slots,
            index_count: count,
        };
        prop_assert_eq!(IndexHeader::decode(&h.encode()), Some(h));
    }

    #[test]
    fn index_entry_round_trip(kh in any::<i32>(), phy in any::<i64>(), td in any::<i32>(), prev in any::<i32>()) {
        let e = IndexEntry { key_hash: kh, phy_offset: phy, time_diff: td, prev_index: prev };
        prop_assert_eq!(IndexEntry::decode(&e.encode()), Some(e));
    }

    #[test]
    fn checkpoint_decode_never_panics(buf in prop::collection::vec(any::<u8>(), 0..64)) {
        let d = Checkpoint::decode(&buf);
        prop_assert_eq!(d.is_some(), buf.len() >= 24);
        if let Some(d) = d {
            prop_assert_eq!(&d.encode()[..24], &buf[..24]);
            prop_assert!(d.min_timestamp() >= 0);
            prop_assert!(d.min_timestamp_index() <= d.min_timestamp());
        }
    }

    #[test]
    fn checkpoint_round_trip(p in any::<i64>(), l in any::<i64>(), i in any::<i64>()) {
        let d = CheckpointData { physic_msg_timestamp: p, logics_msg_timestamp: l, index_msg_timestamp: i };
        let file = d.encode_file();
        prop_assert_eq!(file.len(), CHECKPOINT_FILE_SIZE);
        prop_assert!(file[24..].iter().all(|&b| b == 0));
        prop_assert_eq!(Checkpoint::decode(&file), Some(d));
    }
}
