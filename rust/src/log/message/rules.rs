//! The rules a put checks before anything is written (topic, sys flag,
//! compressed body), the laxer read rule a stored topic must follow, and
//! which topics are system topics.

use super::{sysflag, MAX_TOPIC_LEN, SCHEDULE_TOPIC, SYSTEM_TOPIC_PREFIX};

/// True for RocketMQ's system topics, which readers leave out unless asked
/// for: `SCHEDULE_TOPIC_XXXX` and `RMQ_SYS_*` (docs/spark.md).
pub fn is_system_topic(topic: &[u8]) -> bool {
    topic == SCHEDULE_TOPIC.as_bytes() || topic.starts_with(SYSTEM_TOPIC_PREFIX.as_bytes())
}

/// True if `topic` is a legal topic name: 1..=127 bytes of `[%|a-zA-Z0-9_-]`.
#[inline]
pub fn is_valid_topic(topic: &str) -> bool {
    !topic.is_empty()
        && topic.len() <= MAX_TOPIC_LEN
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'))
}

/// Why `topic` fails the put rule of [`is_valid_topic`], or `None` if it is
/// legal. The sentence names the field and the rule (RocketMQ's
/// `TopicValidator`: dots, spaces and slashes are refused).
pub fn topic_problem(topic: &str) -> Option<String> {
    if is_valid_topic(topic) {
        return None;
    }
    if topic.is_empty() {
        return Some("topic must not be empty".into());
    }
    if topic.len() > MAX_TOPIC_LEN {
        return Some(format!(
            "topic is {} bytes long; at most {MAX_TOPIC_LEN} are allowed",
            topic.len()
        ));
    }
    let bad = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '%' | '|' | '_' | '-')))
        .unwrap_or('?');
    Some(format!(
        "topic {topic:?} contains {bad:?}; a topic may use only letters, digits and % | _ -"
    ))
}

/// Why `sys_flag` may not be given by a producer, or `None` if it may.
///
/// Accepted: the compressed bit (0x1; the body must then inflate, checked
/// by the put), multi-tags (0x2) and the transaction type (0x4, 0x8, 0xC).
/// Refused: the host-format bits 0x10 and 0x20, which the store derives from
/// `born_host` and the store host, and every bit from 0x40 up (compression
/// types and bits RocketMQ 4.9.8 does not define).
pub fn sys_flag_problem(sys_flag: i32) -> Option<String> {
    if sys_flag & sysflag::BORNHOST_V6 != 0 {
        return Some(
            "sys_flag bit 0x10 (born host is IPv6) is set by the store from born_host; \
             leave it 0"
                .into(),
        );
    }
    if sys_flag & sysflag::STOREHOST_V6 != 0 {
        return Some(
            "sys_flag bit 0x20 (store host is IPv6) is set by the store from its store_host; \
             leave it 0"
                .into(),
        );
    }
    let high = (sys_flag as u32) & !0x3F;
    if high != 0 {
        let bit = 1u32 << high.trailing_zeros();
        return Some(format!(
            "sys_flag bit {bit:#x} is not accepted; a producer may set only 0x1 (compressed), \
             0x2 (multi-tags) and the transaction type bits 0x4/0x8"
        ));
    }
    None
}

/// Why a body flagged as compressed (sysFlag bit 0x1) cannot be stored, or
/// `None` if it inflates as a zlib stream (what readers will do with it).
/// The inflated bytes are discarded as they are produced.
pub fn compressed_body_problem(body: &[u8]) -> Option<String> {
    let mut dec = flate2::read::ZlibDecoder::new(body);
    match std::io::copy(&mut dec, &mut std::io::sink()) {
        Ok(_) if dec.total_in() as usize == body.len() => None,
        Ok(_) => Some(format!(
            "sys_flag bit 0x1 (compressed) is set but the body has {} bytes after its zlib \
             stream",
            body.len() - dec.total_in() as usize
        )),
        Err(e) => Some(format!(
            "sys_flag bit 0x1 (compressed) is set but the body does not inflate as zlib ({e})"
        )),
    }
}

/// Longest topic a V2 record can carry (signed 2-byte length).
pub const MAX_TOPIC_LEN_V2: usize = i16::MAX as usize;

/// The topic *read* rule (what a stored record may carry; laxer than the
/// put rule of [`is_valid_topic`]): non-empty UTF-8 of at most `max_len`
/// bytes (127 for V1 records, 32,767 for V2), without `/` or NUL, and not
/// `.` or `..` — so it is always a single, harmless directory name.
#[inline]
pub fn is_readable_topic_bytes(topic: &[u8], max_len: usize) -> bool {
    !topic.is_empty()
        && topic.len() <= max_len
        && topic != b"."
        && topic != b".."
        && !topic.iter().any(|&b| b == b'/' || b == 0)
        && (topic.is_ascii() || std::str::from_utf8(topic).is_ok())
}

/// [`is_readable_topic_bytes`] with the V2 length limit: every topic some
/// stored record may carry, the rule the read APIs accept.
#[inline]
pub fn is_readable_topic(topic: &str) -> bool {
    is_readable_topic_bytes(topic.as_bytes(), MAX_TOPIC_LEN_V2)
}
