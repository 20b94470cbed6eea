//! Every rule a put checks before anything is written, each with the
//! sentence its refusal carries (naming the field and the rule): a
//! message's topic, queue id, sys flag and compressed body; its tags, keys,
//! property names and values and `DELAY` level; the sizes (body,
//! properties, record); and what a batch may not hold. Single puts
//! (`CommitLog::prepare`), batches (`CommitLog::validate_batch`), Arrow
//! appends (which put through the single-put rules), the put fields
//! ([`super::MessageFields`], [`super::PropertiesBuilder`]) and recovery's
//! bound on a record's size ([`max_record_len`]) take their rules from here
//! only, so one violation reads the same whichever put finds it.
//!
//! Also the laxer read rule a stored topic must follow, and which topics
//! are system topics.

use super::{
    sysflag, END_FILE_MIN_BLANK_LENGTH, MAX_PROPERTIES_LEN, MAX_TOPIC_LEN, NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR, PROP_CRC_NAME, SCHEDULE_TOPIC, SYSTEM_TOPIC_PREFIX,
};

/// A broken put rule, with the status RocketMQ gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleBroken {
    /// `MESSAGE_ILLEGAL`, because of the sentence.
    Illegal(String),
    /// `PROPERTIES_SIZE_EXCEEDED`, because of the sentence.
    PropertiesSizeExceeded(String),
}

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
        && topic.bytes().all(|b| TOPIC_BYTES[usize::from(b)])
}

/// The bytes a topic may hold (letters, digits, `%`, `|`, `_`, `-`), as a
/// table: one load per byte of every put's topic.
static TOPIC_BYTES: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-');
        i += 1;
    }
    t
};

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

/// Why `queue_id` cannot be put to, or `None` if it can.
pub fn queue_id_problem(queue_id: i32) -> Option<String> {
    (queue_id < 0).then(|| format!("queue_id must be >= 0, got {queue_id}"))
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

/// The first byte of `s` that separates properties in a record, if any.
fn separator_in(s: &str) -> Option<u8> {
    s.bytes()
        .find(|&b| b == NAME_VALUE_SEPARATOR || b == PROPERTY_SEPARATOR)
}

/// Why the `tags` of a put cannot be stored, or `None`: empty tags (give
/// none instead), or tags holding a separator byte.
pub fn tags_problem(tags: &str) -> Option<String> {
    if tags.is_empty() {
        return Some("tags must not be empty (give tags=None for a message without tags)".into());
    }
    separator_in(tags).map(|_| {
        format!(
            "tags {tags:?} contain a control character 0x01 or 0x02, which separates \
             properties in a record"
        )
    })
}

/// Why one key of a put cannot be stored, or `None` (an empty key is
/// skipped, not refused): keys are stored space-separated in `KEYS`, so a
/// key may hold no space, nor a separator byte.
pub fn key_problem(key: &str) -> Option<String> {
    // One pass for the usual key, which holds none of the three bytes.
    if !key
        .bytes()
        .any(|b| matches!(b, b' ' | NAME_VALUE_SEPARATOR | PROPERTY_SEPARATOR))
    {
        return None;
    }
    if key.contains(' ') {
        return Some(format!(
            "key {key:?} contains a space; keys are stored space-separated, so a key \
             cannot hold one"
        ));
    }
    separator_in(key).map(|_| {
        format!(
            "key {key:?} contains a control character 0x01 or 0x02, which separates \
             properties in a record"
        )
    })
}

/// Why the property `name=value` cannot be stored, or `None`.
pub fn property_problem(name: &str, value: &str) -> Option<String> {
    if name.is_empty() {
        return Some("property names must not be empty".into());
    }
    if name.as_bytes() == PROP_CRC_NAME {
        return Some(prop_crc_given());
    }
    if let Some(b) = separator_in(name) {
        return Some(format!(
            "property name {name:?} contains the control character {b:#04x}, which separates \
             properties in a record"
        ));
    }
    if value.is_empty() {
        return Some(format!("property {name:?} has an empty value"));
    }
    if let Some(b) = separator_in(value) {
        return Some(format!(
            "property {name:?} has a value containing the control character {b:#04x}, which \
             separates properties in a record"
        ));
    }
    None
}

/// The refusal of properties that carry the store's own property CRC.
pub fn prop_crc_given() -> String {
    "property name \"__CRC32#\" is the store's own (the record's property CRC); \
     it cannot be set"
        .into()
}

/// The delay level a `DELAY` property's value asks for (0 or less: not
/// delayed), or why it is refused: a level is a whole number.
pub fn delay_level(value: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| {
            format!(
                "property DELAY must be a whole number (a delay level), not {:?}",
                String::from_utf8_lossy(value)
            )
        })
}

/// Why a message whose `DELAY` property has `value` cannot be in a batch,
/// or `None`: like RocketMQ's batches, no delayed message (it would leave
/// the batch's queue for `SCHEDULE_TOPIC_XXXX`); the value follows
/// [`delay_level`]'s rule. A batch's properties are written as given, so
/// they cannot carry the store's property CRC either ([`prop_crc_given`]).
pub fn batch_delay_problem(value: &[u8]) -> Option<String> {
    match delay_level(value) {
        Err(why) => Some(why),
        Ok(level) if level > 0 => Some("delayed messages cannot be put in a batch".into()),
        Ok(_) => None,
    }
}

/// Why a body of `len` bytes is too large, or `None`.
pub fn body_size_problem(len: usize, max_message_size: usize) -> Option<String> {
    (len > max_message_size)
        .then(|| format!("body is {len} bytes, over max_message_size ({max_message_size} bytes)"))
}

/// Why `properties` are too long to store, or `None`: `stored` is the
/// length written, with the store's property CRC if any. RocketMQ checks
/// the Java char count first (MESSAGE_ILLEGAL), then bytes
/// (PROPERTIES_SIZE_EXCEEDED).
#[inline]
pub fn properties_size_problem(properties: &[u8], stored: usize) -> Option<RuleBroken> {
    if stored > MAX_PROPERTIES_LEN {
        Some(properties_too_long(properties, stored))
    } else {
        None
    }
}

#[cold]
fn properties_too_long(properties: &[u8], stored: usize) -> RuleBroken {
    let len = properties.len();
    let chars = String::from_utf8_lossy(properties).encode_utf16().count();
    let crc_note = if stored > len {
        format!("; {stored} bytes with the store's property CRC")
    } else {
        String::new()
    };
    let why = format!(
        "properties (tags, keys and properties together) take {len} bytes \
         ({chars} characters{crc_note}); at most {MAX_PROPERTIES_LEN} are allowed"
    );
    if chars > MAX_PROPERTIES_LEN {
        RuleBroken::Illegal(why)
    } else {
        RuleBroken::PropertiesSizeExceeded(why)
    }
}

/// Bytes a record may take beyond `max_message_size` (its topic,
/// properties and fixed fields), as RocketMQ allows.
const RECORD_ALLOWANCE: usize = 64 * 1024;

/// The largest record a store with `max_message_size` writes: a record
/// over it is refused by a put, and recovery checks a consume-queue unit
/// over it against its record (an earlier configuration may have allowed
/// it).
#[inline]
pub fn max_record_len(max_message_size: usize) -> usize {
    max_message_size.saturating_add(RECORD_ALLOWANCE)
}

/// Why a record of `len` bytes cannot be written, or `None`: over
/// [`max_record_len`], or larger than a CommitLog segment of `file_size`
/// bytes holds (with the blank that ends it).
pub fn record_size_problem(
    len: usize,
    max_message_size: usize,
    file_size: usize,
) -> Option<String> {
    let max = max_record_len(max_message_size);
    if len > max {
        return Some(format!(
            "the record would take {len} bytes, over max_message_size + 64 KiB ({max} bytes)"
        ));
    }
    if len + END_FILE_MIN_BLANK_LENGTH > file_size {
        return Some(format!(
            "the record would take {len} bytes, but a CommitLog segment of {file_size} bytes \
             holds at most {} (mapped_file_size_commit_log)",
            file_size.saturating_sub(END_FILE_MIN_BLANK_LENGTH)
        ));
    }
    None
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
