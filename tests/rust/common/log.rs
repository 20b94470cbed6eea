//! Records, hosts and CommitLogs for the CommitLog test targets
//! (`commitlog_*.rs`): the golden record of docs/format.md, a V2 record
//! built by hand, and a CommitLog in a temp dir with the default delay levels.

use std::net::SocketAddr;
use std::path::Path;

use _native::internals::commitlog::{
    account_record, CommitLog, CommitLogConfig, QueueOffsetTable, ScanReport,
};
use _native::internals::message::{
    body_crc, parse_delay_levels, parse_record, Parsed, PropertiesBuilder,
};
use _native::{MessageSpec, PutOutcome, PutStatus, RecordView, DEFAULT_MESSAGE_DELAY_LEVEL};

pub const GOLDEN_HEX: &str = concat!(
    "000000badaa320a769c865ed0000000300000000000000000000000700000000000004d2",
    "000000000000018bcfe568000a0000010000d4310000018bcfe5687bc0a8010200002a9f",
    "0000000000000000000000000000000e48656c6c6f20526f636b65744d5109546f706963",
    "5465737400484b455953016b31206b3202554e49515f4b45590130413030303030313030",
    "303031384234414143323038413445394634303030300257414954017472756502544147",
    "530154616741",
);

pub const MAX_MESSAGE_SIZE: usize = 4 * 1024 * 1024;

pub fn hex_decode(s: &str) -> Vec<u8> {
    assert_eq!(s.len() % 2, 0);
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

pub fn born_v4() -> SocketAddr {
    addr("10.0.0.1:54321")
}

pub fn store_v4() -> SocketAddr {
    addr("192.168.1.2:10911")
}

pub fn props(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut b = PropertiesBuilder::new();
    for (k, v) in pairs {
        b.push(k, v).unwrap();
    }
    b.finish()
}

pub fn spec<'a>(
    topic: &'a str,
    queue_id: i32,
    body: &'a [u8],
    properties: Vec<u8>,
) -> MessageSpec<'a> {
    MessageSpec {
        born_host: born_v4(),
        ..MessageSpec::new(topic, queue_id, body)
            .with_properties(properties)
            .born_at(1_700_000_000_000)
    }
}

pub fn config(dir: &Path, file_size: usize) -> CommitLogConfig {
    CommitLogConfig {
        dir: dir.to_path_buf(),
        file_size,
        max_message_size: MAX_MESSAGE_SIZE,
        store_host: store_v4(),
        delay_levels: parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL).unwrap(),
        // Records exactly as RocketMQ 4.9.8 writes them: the geometry tests
        // count their bytes (the property CRC has its own tests).
        prop_crc: false,
    }
}

pub fn open(dir: &Path, file_size: usize) -> CommitLog {
    CommitLog::load(config(dir, file_size), true).unwrap()
}

pub fn record(buf: &[u8], check_crc: bool) -> RecordView {
    match parse_record(buf, check_crc) {
        Parsed::Record(v) => v,
        other => panic!("expected a record, got {other:?}"),
    }
}

pub fn assert_end(p: Parsed) {
    assert!(matches!(p, Parsed::End { .. }), "expected End, got {p:?}");
}

/// Reads back the record at `phy`, panicking if there is none.
pub fn read(cl: &CommitLog, phy: i64) -> (RecordView, Vec<u8>) {
    cl.read_record(phy as u64)
        .unwrap_or_else(|| panic!("no record at {phy}"))
}

pub fn segment_files(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

pub fn ok(o: &PutOutcome) {
    assert_eq!(o.status, PutStatus::PutOk, "{o:?}");
}

/// The record length the engine must use for a message with IPv4 hosts.
pub fn v4_len(topic: &str, body: usize, props: usize) -> usize {
    91 + body + topic.len() + props
}

pub fn golden_spec() -> (MessageSpec<'static>, Vec<u8>) {
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

pub fn golden_bytes() -> Vec<u8> {
    hex_decode(GOLDEN_HEX)
}

/// The fields of a V2 record [`build_v2`] writes; the others are fixed
/// (flag 7, sys flag 0, IPv4 hosts, reconsume times 2, prepared offset 99).
pub struct V2Fields<'a> {
    pub topic: &'a [u8],
    pub body: &'a [u8],
    pub props: &'a [u8],
    pub queue_id: i32,
    pub queue_offset: i64,
    pub phy: i64,
    pub born_ts: i64,
    pub store_ts: i64,
}

/// Builds a V2 record by hand (magic DAA320AB, 2-byte topic length), IPv4 hosts.
pub fn build_v2(r: &V2Fields<'_>) -> Vec<u8> {
    let V2Fields {
        topic,
        body,
        props,
        queue_id,
        queue_offset,
        phy,
        born_ts,
        store_ts,
    } = *r;
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

/// Scans the whole log as recovery does: the queue offsets table, every
/// record's offset, and the scan report.
pub fn rebuild(cl: &CommitLog) -> (QueueOffsetTable, Vec<u64>, ScanReport) {
    let mut table = QueueOffsetTable::default();
    let mut offsets = Vec::new();
    let rep = cl.scan(0, true, |off, v, rec| {
        offsets.push(off);
        account_record(&mut table, v, rec);
    });
    (table, offsets, rep)
}
