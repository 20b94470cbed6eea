//! CommitLog record codec (docs/format.md §3).
//!
//! ```text
//!  off  size  field                     off  size  field
//!    0    4   TOTALSIZE                  48  8|20  BORNHOST (ip + port int)
//!    4    4   MAGICCODE  DAA320A7 (V1)    ..    8   STORETIMESTAMP
//!    8    4   BODYCRC (crc32 & 0x7FFFFFFF) ..  8|20  STOREHOSTADDRESS
//!   12    4   QUEUEID                     ..    4   RECONSUMETIMES
//!   16    4   FLAG                        ..    8   PREPARED TX OFFSET
//!   20    8   QUEUEOFFSET                 ..  4+n   BODYLEN + BODY
//!   28    8   PHYSICALOFFSET              ..  1+t   TOPICLEN (V1; 2 bytes in V2) + TOPIC
//!   36    4   SYSFLAG                     ..  2+p   PROPLEN + PROPERTIES
//!   40    8   BORNTIMESTAMP
//! ```
//! All integers big-endian. We write V1 and read V1 and V2. A blank record
//! (`[int size][int CBD43194]`) marks the unused tail of a full file.
//!
//! # Files
//!
//! - `mod.rs`: the format's constants (magics, field positions, sys flags,
//!   property names) and the hashes and checksum a record carries.
//! - `rules.rs`: every put rule with its refusal's sentence (topic, queue
//!   id, sys flag, compressed body, tags, keys, properties, `DELAY`, the
//!   body, properties and record sizes, what a batch may not hold), the
//!   laxer read rule for topics, and which topics are system topics.
//! - `encode.rs`: [`MessageSpec`] and the V1 encoder (records, blanks).
//! - `decode.rs`: the checked decoders ([`parse_record`], the validity rule,
//!   resynchronising after damage).
//! - `properties.rs`: the properties string (parse, look up, build).
//! - `props_buf.rs`: where it is built (a `Vec`, or one put's inline
//!   buffer).
//! - `record_ref.rs`: a checked record's fields read where they lie, on
//!   access ([`RecordRef`]).
//! - `fields.rs`: a put's tags, keys, properties and delay level as a
//!   message's properties (one message, or a batch's).
//! - `msg_id.rs`: message ids (store host and offset).
//! - `prop_crc.rs`: RocketMQ 5.x's property CRC (`__CRC32#`).
//! - `delay.rs`: the delay-level grammar.

mod decode;
mod delay;
mod encode;
mod fields;
mod msg_id;
mod prop_crc;
mod properties;
mod props_buf;
mod record_ref;
mod rules;

pub use decode::{
    find_next_valid_record, parse_record, parse_record_frame, parse_valid_record,
    record_prop_crc_ok, valid_record_size_with, NotARecord, Parsed, RecordCrc, RecordFrame,
    RecordView,
};
pub use delay::{delay_level_table, parse_delay_levels};
pub use encode::{
    encode_blank, encode_v1, encode_v1_crc_of_copy, record_len, spec_record_len, MessageSpec,
    StoreStamp, DEFAULT_BORN_HOST,
};
pub use fields::{BatchProperties, MessageFields};
pub use msg_id::{decode_msg_id, offset_msg_id, to_hex_upper};
pub use prop_crc::{
    has_prop_crc_trailer, is_prop_crc_trailer, prop_crc_digits, prop_crc_extra, prop_crc_ok,
    strip_prop_crc, PROP_CRC_LEN, PROP_CRC_MISMATCH, PROP_CRC_NAME,
};
pub use properties::{
    find_properties, find_property, iter_properties, scan_for_put, PropertiesBuilder, PropertyError,
};
pub use props_buf::{InlineProps, PropsBuf};
pub use record_ref::RecordRef;
pub use rules::{
    batch_delay_problem, body_size_problem, compressed_body_problem, delay_level,
    is_readable_topic, is_readable_topic_bytes, is_system_topic, is_valid_topic, key_problem,
    max_record_len, prop_crc_given, properties_size_problem, property_problem, queue_id_problem,
    record_size_problem, sys_flag_problem, tags_problem, topic_problem, RuleBroken,
    MAX_TOPIC_LEN_V2,
};

/// Magic of a V1 record (1-byte topic length).
pub const MAGIC_V1: i32 = 0xDAA3_20A7_u32 as i32;
/// Magic of a V2 record (2-byte topic length, RocketMQ 5.x).
pub const MAGIC_V2: i32 = 0xDAA3_20AB_u32 as i32;
/// Magic of the end-of-file blank.
pub const BLANK_MAGIC: i32 = 0xCBD4_3194_u32 as i32;
/// Bytes every full file keeps for the end-of-file blank header.
pub const END_FILE_MIN_BLANK_LENGTH: usize = 8;
/// Fixed record overhead with IPv4 born and store hosts.
pub const FIXED_OVERHEAD_V4: usize = 91;
/// Largest properties string in bytes (signed short length).
pub const MAX_PROPERTIES_LEN: usize = i16::MAX as usize;
/// Largest V1 topic in bytes (signed byte length).
pub const MAX_TOPIC_LEN: usize = i8::MAX as usize;
/// Separator between a property name and its value.
pub const NAME_VALUE_SEPARATOR: u8 = 1;
/// Separator between two properties.
pub const PROPERTY_SEPARATOR: u8 = 2;
/// Topic that delayed messages are parked in.
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";
/// Prefix of RocketMQ's system topics (`RMQ_SYS_TRACE_TOPIC`, ...).
pub const SYSTEM_TOPIC_PREFIX: &str = "RMQ_SYS_";
/// RocketMQ's half-message topic (prepared transactions).
pub const TRANS_HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";

/// Field positions shared by every record (all of them named, read here or
/// not).
#[allow(dead_code)]
pub mod pos {
    /// TOTALSIZE.
    pub const TOTAL_SIZE: usize = 0;
    /// MAGICCODE.
    pub const MAGIC: usize = 4;
    /// BODYCRC.
    pub const BODY_CRC: usize = 8;
    /// QUEUEID.
    pub const QUEUE_ID: usize = 12;
    /// FLAG.
    pub const FLAG: usize = 16;
    /// QUEUEOFFSET.
    pub const QUEUE_OFFSET: usize = 20;
    /// PHYSICALOFFSET.
    pub const PHYSICAL_OFFSET: usize = 28;
    /// SYSFLAG.
    pub const SYS_FLAG: usize = 36;
    /// BORNTIMESTAMP.
    pub const BORN_TIMESTAMP: usize = 40;
    /// BORNHOST.
    pub const BORN_HOST: usize = 48;
}

/// `MessageSysFlag` bits (docs/format.md §5).
pub mod sysflag {
    /// The body is compressed.
    pub const COMPRESSED: i32 = 0x1;
    /// The TAGS property holds several tags.
    pub const MULTI_TAGS: i32 = 0x2;
    /// The transaction-type bits.
    pub const TRANSACTION_TYPE_MASK: i32 = 0xC;
    /// Not a transactional message.
    pub const TRANSACTION_NOT: i32 = 0x0;
    /// A prepared (half) transactional message.
    pub const TRANSACTION_PREPARED: i32 = 0x4;
    /// A committed transactional message.
    pub const TRANSACTION_COMMIT: i32 = 0x8;
    /// A rolled-back transactional message.
    pub const TRANSACTION_ROLLBACK: i32 = 0xC;
    /// BORNHOST is IPv6 (20 bytes).
    pub const BORNHOST_V6: i32 = 0x10;
    /// STOREHOSTADDRESS is IPv6 (20 bytes).
    pub const STOREHOST_V6: i32 = 0x20;
    /// The compression-type bits (8..10).
    pub const COMPRESSION_TYPE_MASK: i32 = 0x700;
}

/// Well-known property names used by the store.
pub mod props {
    /// Keys, separated by spaces (indexed).
    pub const KEYS: &str = "KEYS";
    /// Tags (the consume queue keeps their hash).
    pub const TAGS: &str = "TAGS";
    /// Whether the put waits for the disk under SYNC_FLUSH.
    pub const WAIT: &str = "WAIT";
    /// Delay level.
    pub const DELAY: &str = "DELAY";
    /// A delayed message's real topic.
    pub const REAL_TOPIC: &str = "REAL_TOPIC";
    /// A delayed message's real queue id.
    pub const REAL_QID: &str = "REAL_QID";
    /// The producer's unique message id (indexed).
    pub const UNIQ_KEY: &str = "UNIQ_KEY";
}

/// Java's `String.hashCode` over UTF-16 code units.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

/// CQ tagsCode of a TAGS string: the Java hash sign-extended; 0 when absent.
pub fn tags_code(tags: Option<&str>) -> i64 {
    match tags {
        Some(t) if !t.is_empty() => java_string_hash(t) as i64,
        _ => 0,
    }
}

/// `crc32(body) & 0x7FFFFFFF`, as RocketMQ's `UtilAll.crc32`.
#[inline]
pub fn body_crc(body: &[u8]) -> i32 {
    (crc32(body) & 0x7FFF_FFFF) as i32
}

/// A fresh CRC-32 hasher: a clone of one made once, so the CPU feature
/// check that `crc32fast::Hasher::new` (and `crc32fast::hash`) runs on
/// every call runs once per process.
#[inline]
pub fn crc_hasher() -> crc32fast::Hasher {
    static FIRST: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
    FIRST.get_or_init(crc32fast::Hasher::new).clone()
}

/// `crc32fast::hash(bytes)` through [`crc_hasher`].
#[inline]
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut h = crc_hasher();
    h.update(bytes);
    h.finalize()
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::decode::{properties_well_formed, valid_record_size, NotARecord};
    use super::prop_crc::parse_prop_crc_digits;
    use super::*;

    #[test]
    fn cloned_hasher_matches_crc32fast() {
        for data in [&b""[..], b"body", &[0xA5; 4099][..]] {
            assert_eq!(crc32(data), crc32fast::hash(data));
            assert_eq!(crc32(data), crc32(data), "the clone starts fresh");
        }
        assert_eq!(body_crc(b"123456789"), 0xCBF4_3926_u32 as i32 & 0x7FFF_FFFF);
    }

    #[test]
    fn java_hash_matches_known_values() {
        assert_eq!(java_string_hash("TagA"), 2598919);
        assert_eq!(java_string_hash("TAG1"), 2567159);
        assert_eq!(java_string_hash("中文"), 646394);
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(tags_code(Some("polygenelubricants")), -2147483648i64);
        // a character outside the BMP hashes as its two UTF-16 surrogates
        assert_eq!(java_string_hash("😀"), 0xD83Di32 * 31 + 0xDE00);
        assert_eq!(tags_code(None), 0);
        assert_eq!(tags_code(Some("")), 0);
        assert_eq!(java_string_hash("Aa"), java_string_hash("BB"));
    }

    #[test]
    fn topic_validation() {
        assert!(is_valid_topic("TopicTest"));
        assert!(is_valid_topic("%RETRY%g-1|x_y"));
        assert!(!is_valid_topic(""));
        assert!(!is_valid_topic("../x"));
        assert!(!is_valid_topic("a/b"));
        assert!(!is_valid_topic("a b"));
        assert!(is_valid_topic(&"a".repeat(127)));
        assert!(!is_valid_topic(&"a".repeat(128)));
    }

    #[test]
    fn topic_read_rule() {
        assert!(is_readable_topic("TopicTest"));
        assert!(is_readable_topic("a b"));
        assert!(is_readable_topic("中文"));
        assert!(is_readable_topic(&"t".repeat(200)));
        assert!(!is_readable_topic(""));
        assert!(!is_readable_topic("."));
        assert!(!is_readable_topic(".."));
        assert!(!is_readable_topic("../x"));
        assert!(!is_readable_topic("a/b"));
        assert!(!is_readable_topic("a\0b"));
        assert!(is_readable_topic_bytes(&[b'a'; 127], MAX_TOPIC_LEN));
        assert!(!is_readable_topic_bytes(&[b'a'; 128], MAX_TOPIC_LEN));
        assert!(is_readable_topic_bytes(&[b'a'; 32767], MAX_TOPIC_LEN_V2));
        assert!(!is_readable_topic_bytes(&[0xff, 0xfe], MAX_TOPIC_LEN_V2));
    }

    #[test]
    fn properties_must_be_pairs() {
        assert!(properties_well_formed(b""));
        assert!(properties_well_formed(b"A\x011"));
        assert!(properties_well_formed(b"A\x011\x02B\x01two"));
        assert!(properties_well_formed(
            b"A\x01\x02__CRC32#\x011234567890\x02"
        ));
        assert!(!properties_well_formed(&[0u8; 11]));
        assert!(!properties_well_formed(b"A"));
        assert!(!properties_well_formed(b"\x01x"));
        assert!(!properties_well_formed(b"A\x011\x02\x02B\x012"));
        assert!(!properties_well_formed(b"\x02"));
        assert!(!properties_well_formed(b"A\0\x011"));
    }

    fn record_at(phy: i64, topic: &str, queue_id: i32, props: &[u8]) -> Vec<u8> {
        let spec = MessageSpec {
            born_host: "127.0.0.1:1".parse().unwrap(),
            ..MessageSpec::new(topic, queue_id, b"body")
                .with_properties(props)
                .born_at(1)
        };
        let store: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let len = record_len(4, topic.len(), props.len(), &spec.born_host, &store);
        let mut buf = vec![0u8; len];
        encode_v1(
            &mut buf,
            &spec,
            body_crc(b"body"),
            &StoreStamp {
                sys_flag: 0,
                store_host: &store,
                queue_offset: 0,
                phy_offset: phy,
                store_timestamp: 2,
                prop_crc: false,
            },
        );
        buf
    }

    #[test]
    fn record_validity_rule() {
        let ok = record_at(500, "T", 1, b"K\x01v");
        assert!(matches!(
            parse_valid_record(&ok, 500, true),
            Parsed::Record(_)
        ));
        assert!(matches!(
            parse_valid_record(&ok, 501, true),
            Parsed::End { .. }
        ));
        let bad_qid = record_at(500, "T", -5, b"");
        assert!(matches!(parse_record(&bad_qid, true), Parsed::Record(_)));
        assert!(matches!(
            parse_valid_record(&bad_qid, 500, true),
            Parsed::End { .. }
        ));
        let bad_props = record_at(500, "T", 1, &[0u8; 5]);
        assert!(matches!(
            parse_valid_record(&bad_props, 500, true),
            Parsed::End { .. }
        ));
        let bad_topic = record_at(500, "a/b", 1, b"");
        assert!(matches!(
            parse_valid_record(&bad_topic, 500, true),
            Parsed::End { .. }
        ));
        // Garbage, zeros, then the record: found where it starts.
        let mut data = vec![0x55u8; 37];
        data.extend_from_slice(&[0u8; 1000]);
        let at = data.len();
        data.extend_from_slice(&record_at(10_000 + at as i64, "T", 1, b""));
        data.extend_from_slice(&[0u8; 100]);
        assert_eq!(find_next_valid_record(&data, 1, 10_000, true), Some(at));
        assert_eq!(find_next_valid_record(&data, 1, 10_001, true), None);
    }

    /// `valid_record_size` (recovery's scan) judges every record exactly as
    /// `parse_valid_record` does: same acceptance, same size, same reason.
    #[test]
    fn valid_record_size_agrees_with_parse_valid_record() {
        let mut records = vec![
            record_at(500, "T", 1, b"K\x01v"),
            record_at(500, "T", -5, b""),
            record_at(500, "T", 1, &[0u8; 5]),
            record_at(500, "a/b", 1, b""),
            record_at(500, "tópico", 1, b"A\x011\x02"),
        ];
        // A record with IPv6 hosts, and one with a V2 magic (2-byte topic length).
        let mut v6 = record_at(500, "T", 1, b"");
        let spec = MessageSpec {
            born_host: "[::1]:1".parse().unwrap(),
            ..MessageSpec::new("T6", 2, b"body").born_at(1)
        };
        let store: SocketAddr = "[::2]:2".parse().unwrap();
        v6.resize(record_len(4, 2, 0, &spec.born_host, &store), 0);
        let flags = sysflag::BORNHOST_V6 | sysflag::STOREHOST_V6;
        encode_v1(
            &mut v6,
            &spec,
            body_crc(b"body"),
            &StoreStamp {
                sys_flag: flags,
                store_host: &store,
                queue_offset: 0,
                phy_offset: 500,
                store_timestamp: 2,
                prop_crc: false,
            },
        );
        assert!(matches!(
            parse_valid_record(&v6, 500, true),
            Parsed::Record(_)
        ));
        records.push(v6);
        let mut v2 = record_at(500, "T", 1, b"");
        v2[4..8].copy_from_slice(&MAGIC_V2.to_be_bytes());
        records.push(v2);
        let check = |buf: &[u8], phy: u64, crc: bool| {
            let want = match parse_valid_record(buf, phy, crc) {
                Parsed::Record(v) => Ok(v.total_size),
                other => Err(other),
            };
            let got = valid_record_size(buf, phy, crc).map_err(Parsed::from);
            assert_eq!(got, want, "{buf:?} at {phy}");
        };
        let mut accepted = 0;
        for rec in &records {
            for crc in [true, false] {
                check(rec, 500, crc);
                check(rec, 501, crc);
                accepted += usize::from(valid_record_size(rec, 500, crc).is_ok());
                for k in 0..rec.len() {
                    check(&rec[..k], 500, crc);
                    for x in [0x01u8, 0x80, 0xff] {
                        let mut m = rec.clone();
                        m[k] ^= x;
                        check(&m, 500, crc);
                    }
                }
            }
        }
        assert_eq!(
            accepted,
            2 * 3,
            "ok, non-ASCII topic and IPv6 records are valid"
        );
    }

    /// The digit parse as written before it took eight digits at a time.
    fn parse_digits_one_by_one(d: &[u8]) -> Option<u32> {
        if d.len() != 10 {
            return None;
        }
        let mut v = 0u64;
        for &c in d.iter().rev() {
            if !c.is_ascii_digit() {
                return None;
            }
            v = v * 10 + u64::from(c - b'0');
        }
        u32::try_from(v).ok().filter(|&v| v <= 0x7FFF_FFFF)
    }

    proptest::proptest! {
        #[test]
        fn prop_crc_digits_parse_back(v in 0u32..=0x7FFF_FFFF) {
            proptest::prop_assert_eq!(parse_prop_crc_digits(&prop_crc_digits(v)), Some(v));
        }

        #[test]
        fn prop_crc_digit_parse_is_the_one_by_one_parse(
            d in proptest::collection::vec(
                proptest::prop_oneof![b'0'..=b'9', proptest::prelude::any::<u8>()],
                9..12,
            ),
        ) {
            proptest::prop_assert_eq!(parse_prop_crc_digits(&d), parse_digits_one_by_one(&d));
        }
    }

    /// The digits by hand: least significant first, zero-padded after.
    #[test]
    fn prop_crc_digits_are_least_significant_first() {
        assert_eq!(&prop_crc_digits(1_234_567_890), b"0987654321");
        assert_eq!(&prop_crc_digits(7), b"7000000000");
        assert_eq!(&prop_crc_digits(0), b"0000000000");
        assert_eq!(&prop_crc_digits(0x7FFF_FFFF), b"7463847412");
        assert_eq!(parse_prop_crc_digits(b"0987654321"), Some(1_234_567_890));
        assert_eq!(parse_prop_crc_digits(b"7000000000"), Some(7));
        assert_eq!(parse_prop_crc_digits(b"8463847412"), None, "over 31 bits");
        assert_eq!(parse_prop_crc_digits(b"09876543x1"), None);
        assert_eq!(parse_prop_crc_digits(b"098765432"), None);
        assert_eq!(parse_prop_crc_digits(b"09876543210"), None);
        assert_eq!(parse_prop_crc_digits(b"0000000000"), Some(0));
        assert_eq!(parse_prop_crc_digits(b"7463847412"), Some(2_147_483_647));
        assert_eq!(parse_prop_crc_digits(b"8463847412"), None, "2^31");
        assert_eq!(parse_prop_crc_digits(b"9999999999"), None);
        // A byte just outside the digits, in each place.
        for i in 0..10 {
            for bad in [b'/', b':', b'0' + 0x80, 0x3F, 0x20, 0x00] {
                let mut d = *b"1234567890";
                d[i] = bad;
                assert_eq!(parse_prop_crc_digits(&d), None, "{i} {bad:#x}");
            }
        }
    }

    fn record_with_crc(props: &[u8]) -> Vec<u8> {
        let spec = MessageSpec::new("T", 1, &b"body"[..])
            .with_properties(props)
            .born_at(1);
        let store: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let plen = props.len() + prop_crc_extra(props);
        let len = record_len(4, 1, plen, &spec.born_host, &store);
        let mut buf = vec![0u8; len];
        let n = encode_v1(
            &mut buf,
            &spec,
            body_crc(b"body"),
            &StoreStamp {
                sys_flag: 0,
                store_host: &store,
                queue_offset: 3,
                phy_offset: 500,
                store_timestamp: 2,
                prop_crc: true,
            },
        );
        assert_eq!(n, len);
        buf
    }

    /// The shape a writer with the property leaves, whatever its value;
    /// a record without it (a RocketMQ 4.9 writer's) has none.
    #[test]
    fn prop_crc_trailer_shape() {
        let rec = record_with_crc(b"A\x011");
        let v = match parse_record(&rec, false) {
            Parsed::Record(v) => v,
            other => panic!("{other:?}"),
        };
        assert!(has_prop_crc_trailer(&rec, &v.properties));
        assert!(is_prop_crc_trailer(&rec[rec.len() - PROP_CRC_LEN..]));
        let mut wrong_value = rec.clone();
        let n = wrong_value.len();
        wrong_value[n - 2] = b'9' - (wrong_value[n - 2] - b'0');
        assert!(has_prop_crc_trailer(&wrong_value, &v.properties));
        for at in [n - 20, n - 12, n - 11, n - 1] {
            let mut m = rec.clone();
            m[at] ^= 0x40;
            assert!(!has_prop_crc_trailer(&m, &v.properties), "byte {at}");
        }
        assert!(!is_prop_crc_trailer(&rec[rec.len() - PROP_CRC_LEN - 1..]));
        assert!(!has_prop_crc_trailer(&rec, &(v.properties.start..n - 1)));
    }

    #[test]
    fn prop_crc_layout_and_check() {
        for (props, before) in [
            (&b""[..], &b""[..]),
            (b"A\x011", b"A\x011\x02"),
            (b"A\x011\x02", b"A\x011\x02"),
        ] {
            let rec = record_with_crc(props);
            let v = match parse_valid_record(&rec, 500, true) {
                Parsed::Record(v) => v,
                other => panic!("{other:?}"),
            };
            let p = &rec[v.properties.clone()];
            assert_eq!(
                p.len(),
                before.len() + PROP_CRC_LEN,
                "length includes the 20 bytes"
            );
            assert_eq!(&p[..before.len()], before);
            let t = &p[before.len()..];
            assert_eq!(&t[..9], b"__CRC32#\x01");
            assert_eq!(t[19], PROPERTY_SEPARATOR);
            let want = crc32fast::hash(&rec[..rec.len() - 20]) & 0x7FFF_FFFF;
            assert_eq!(t[9..19], prop_crc_digits(want));
            assert!(prop_crc_ok(&rec, &v.properties));
            // Readers do not see it.
            assert!(iter_properties(p).all(|(k, _)| k != b"__CRC32#"));
            // Any 1..4 bytes changed anywhere but the TOTALSIZE is caught.
            for at in 4..rec.len() {
                for n in 1..=4usize.min(rec.len() - at) {
                    let mut m = rec.clone();
                    for b in &mut m[at..at + n] {
                        *b ^= 0x5A;
                    }
                    let ok = match parse_record(&m, false) {
                        Parsed::Record(v) => prop_crc_ok(&m, &v.properties),
                        _ => false,
                    };
                    assert!(!ok, "change at {at}+{n} not caught");
                }
            }
        }
        // Without the property, or a short one: not ok.
        let plain = record_at(500, "T", 1, b"K\x01v");
        let Parsed::Record(v) = parse_record(&plain, true) else {
            panic!()
        };
        assert!(!prop_crc_ok(&plain, &v.properties));
    }

    /// The property-CRC check alone (a record in a range written with it)
    /// refuses every body the body CRC refuses, and names the property CRC.
    #[test]
    fn prop_check_stands_for_both_crcs() {
        let rec = record_with_crc(b"A\x011");
        assert_eq!(
            valid_record_size_with(&rec, 500, RecordCrc::Prop),
            Ok(rec.len())
        );
        let Parsed::Record(v) = parse_valid_record(&rec, 500, true) else {
            panic!()
        };
        for at in v.body.clone() {
            let mut m = rec.clone();
            m[at] ^= 0x01;
            assert_eq!(
                valid_record_size_with(&m, 500, RecordCrc::Prop),
                Err(NotARecord::End(PROP_CRC_MISMATCH))
            );
            assert_eq!(
                valid_record_size_with(&m, 500, RecordCrc::Body),
                Err(NotARecord::End("body CRC mismatch"))
            );
            assert_eq!(
                valid_record_size_with(&m, 500, RecordCrc::None),
                Ok(rec.len())
            );
        }
        // A record without the property fails the property check.
        let plain = record_at(500, "T", 1, b"K\x01v");
        assert_eq!(
            valid_record_size_with(&plain, 500, RecordCrc::Prop),
            Err(NotARecord::End(PROP_CRC_MISMATCH))
        );
    }

    #[test]
    fn msg_id_round_trip() {
        let h: SocketAddr = "192.168.1.2:10911".parse().unwrap();
        let id = offset_msg_id(&h, 1234);
        assert_eq!(id, "C0A8010200002A9F00000000000004D2");
        assert_eq!(decode_msg_id(&id), Some((h, 1234)));
        let h6: SocketAddr = "[2001:db8::1]:10911".parse().unwrap();
        let id6 = offset_msg_id(&h6, 99);
        assert_eq!(id6.len(), 56);
        assert_eq!(decode_msg_id(&id6), Some((h6, 99)));
        assert_eq!(decode_msg_id("zz"), None);
    }

    #[test]
    fn properties_parse_like_rocketmq() {
        let raw = b"A\x011\x02\x02B\x01\x02\x01x\x02C\x01three";
        let v: Vec<_> = iter_properties(raw).collect();
        assert_eq!(v, vec![(&b"A"[..], &b"1"[..]), (&b"C"[..], &b"three"[..])]);
        let mut b = PropertiesBuilder::new();
        b.push("K", "v").unwrap();
        b.push("L", "w w").unwrap();
        assert_eq!(b.finish(), b"K\x01v\x02L\x01w w");
        assert!(PropertiesBuilder::new().push("", "v").is_err());
        assert!(PropertiesBuilder::new().push("k", "a\x02b").is_err());
    }

    #[test]
    fn system_topics() {
        assert!(is_system_topic(b"SCHEDULE_TOPIC_XXXX"));
        assert!(is_system_topic(b"RMQ_SYS_TRACE_TOPIC"));
        assert!(is_system_topic(TRANS_HALF_TOPIC.as_bytes()));
        assert!(!is_system_topic(b"SCHEDULE_TOPIC_XXXX2"));
        assert!(!is_system_topic(b"orders"));
        assert!(!is_system_topic(b"%RETRY%g"));
    }

    #[test]
    fn delay_levels() {
        let v = parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
            .unwrap();
        assert_eq!(v.len(), 18);
        assert_eq!(v[0], 1000);
        assert_eq!(v[17], 7_200_000);
        assert_eq!(parse_delay_levels("1x"), None);
        assert_eq!(parse_delay_levels(""), None);
        assert_eq!(parse_delay_levels("0s"), None);
        // ASCII digits only: no sign, no other scripts' digits.
        assert_eq!(parse_delay_levels("+5s"), None);
        assert_eq!(parse_delay_levels("\u{0663}s"), None);
        assert_eq!(parse_delay_levels("5"), None);
        assert_eq!(parse_delay_levels("s"), None);
        assert_eq!(parse_delay_levels("5é"), None);
        assert_eq!(
            parse_delay_levels("2d").as_deref(),
            Some(&[172_800_000][..])
        );
        assert_eq!(
            delay_level_table("1s 99999999999999999999s"),
            Err("level \"99999999999999999999s\" is too long".to_owned())
        );
        assert_eq!(
            delay_level_table("9999999999999999d"),
            Err("level \"9999999999999999d\" is too long".to_owned())
        );
        assert_eq!(
            delay_level_table(" "),
            Err("must name at least one level".to_owned())
        );
    }
}
