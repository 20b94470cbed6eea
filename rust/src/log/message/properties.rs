//! The properties string: `name 0x01 value 0x02` pairs (RocketMQ's
//! `messageProperties2String`), parsed, looked up and built (the builder
//! refuses what the put rules of `rules.rs` refuse).
//!
//! ```text
//!  KEYS \x01 k1 k2 \x02 TAGS \x01 t \x02 ...
//! ```

use super::{
    key_problem, property_problem, props, PropsBuf, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR,
    PROP_CRC_NAME,
};

/// Iterates `(name, value)` pairs of a serialized properties string, skipping
/// malformed segments exactly as RocketMQ's parser does, and the property
/// CRC `__CRC32#` (record metadata the store checks, never a message's
/// property: readers do not show it and copies do not carry it over).
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
pub fn iter_properties(props: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    props.split(|&b| b == PROPERTY_SEPARATOR).filter_map(|seg| {
        if seg.len() < 3 {
            return None;
        }
        let i = seg.iter().position(|&b| b == NAME_VALUE_SEPARATOR)?;
        if i == 0 || i >= seg.len() - 1 {
            return None;
        }
        let name = seg.get(..i)?;
        if name == PROP_CRC_NAME {
            return None;
        }
        Some((name, seg.get(i + 1..)?))
    })
}

/// The value of property `name`, if present.
pub fn find_property<'p>(props: &'p [u8], name: &str) -> Option<&'p [u8]> {
    iter_properties(props)
        .find(|(k, _)| *k == name.as_bytes())
        .map(|(_, v)| v)
}

/// What a put reads of a message's properties before it writes them,
/// found in one pass: the value of `DELAY` (the one [`find_property`]
/// finds) and whether a `__CRC32#` property is among them (what
/// `strip_prop_crc` removes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutScan<'p> {
    /// The value of the first `DELAY` property.
    pub delay: Option<&'p [u8]>,
    /// A pair named `__CRC32#` is present.
    pub prop_crc: bool,
}

/// Scans `props` for a put (see [`PutScan`]): only the start of each pair
/// is read, the separators found with `memchr` (a byte-by-byte split was
/// ~180 instructions of a put with a tag and a key).
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline]
pub fn scan_for_put(props: &[u8]) -> PutScan<'_> {
    let mut scan = PutScan {
        delay: None,
        prop_crc: false,
    };
    let mut rest = Some(props);
    while let Some(r) = rest {
        let (seg, next) = match find_byte(r, PROPERTY_SEPARATOR) {
            Some(i) => (r.get(..i).unwrap_or_default(), r.get(i + 1..)),
            None => (r, None),
        };
        rest = next;
        // A name is what precedes the first 0x01 of its pair: a pair named
        // DELAY starts with `DELAY 0x01` (a value must follow, as
        // `iter_properties` requires).
        if scan.delay.is_none() {
            scan.delay = seg
                .strip_prefix(props::DELAY.as_bytes())
                .and_then(|r| r.strip_prefix(&[NAME_VALUE_SEPARATOR]))
                .filter(|v| !v.is_empty());
        }
        if seg.starts_with(PROP_CRC_NAME)
            && seg.get(PROP_CRC_NAME.len()) == Some(&NAME_VALUE_SEPARATOR)
        {
            scan.prop_crc = true;
        }
    }
    scan
}

/// The index of the first `b` in `hay` (libc's `memchr`, vectorised).
#[inline]
fn find_byte(hay: &[u8], b: u8) -> Option<usize> {
    // SAFETY: `hay` is a live slice of `hay.len()` bytes; memchr reads no
    // further and returns null or a pointer into it.
    let p = unsafe { libc::memchr(hay.as_ptr().cast(), i32::from(b), hay.len()) };
    (!p.is_null()).then(|| p as usize - hay.as_ptr() as usize)
}

/// Why a property could not be added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropertyError {
    /// Name or value empty, or containing a separator byte.
    Illegal(String),
}

/// Builds a serialized properties string, validating names and values.
#[derive(Debug, Default, Clone)]
pub struct PropertiesBuilder<B: PropsBuf = Vec<u8>> {
    buf: B,
    /// Where the current message's properties start (several messages'
    /// properties can be built back to back in one buffer).
    start: usize,
}

impl PropertiesBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty builder with room for `n` bytes.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            buf: Vec::with_capacity(n),
            start: 0,
        }
    }
}

impl<B: PropsBuf> PropertiesBuilder<B> {
    /// Starts the next message's properties after what was built so far.
    pub fn next_message(&mut self) {
        self.start = self.buf.as_ref().len();
    }

    /// Bytes built so far (every message's).
    pub fn len(&self) -> usize {
        self.buf.as_ref().len()
    }

    /// Appends the separator before a pair, unless the pair is the current
    /// message's first.
    #[inline]
    fn separate(&mut self) {
        if self.buf.as_ref().len() > self.start {
            self.buf.push_byte(PROPERTY_SEPARATOR);
        }
    }

    /// Appends one key to the current message's `KEYS` property (`started`
    /// tracks whether the property was begun). Empty keys are skipped; a key
    /// breaking [`key_problem`] is illegal.
    pub fn push_key(&mut self, k: &str, started: &mut bool) -> Result<(), PropertyError> {
        if k.is_empty() {
            return Ok(());
        }
        if let Some(why) = key_problem(k) {
            return Err(PropertyError::Illegal(why));
        }
        if *started {
            self.buf.push_byte(b' ');
        } else {
            self.separate();
            self.buf.push_bytes(props::KEYS.as_bytes());
            self.buf.push_byte(NAME_VALUE_SEPARATOR);
            *started = true;
        }
        self.buf.push_bytes(k.as_bytes());
        Ok(())
    }

    /// Appends `name=value`, unless it breaks [`property_problem`] (the
    /// error names the property and the rule).
    pub fn push(&mut self, name: &str, value: &str) -> Result<(), PropertyError> {
        if let Some(why) = property_problem(name, value) {
            return Err(PropertyError::Illegal(why));
        }
        self.push_pair_raw(name.as_bytes(), value.as_bytes());
        Ok(())
    }

    /// Appends a pair taken from an already-parsed properties string, or
    /// one whose name and value are known to follow [`property_problem`]'s
    /// rules (the store's own names with a checked value).
    #[inline]
    pub fn push_pair_raw(&mut self, name: &[u8], value: &[u8]) {
        self.separate();
        self.buf.push_bytes(name);
        self.buf.push_byte(NAME_VALUE_SEPARATOR);
        self.buf.push_bytes(value);
    }

    /// The serialized properties built so far.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// True when nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.buf.as_ref().is_empty()
    }

    /// The serialized properties.
    pub fn finish(self) -> B {
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::message::strip_prop_crc;
    use proptest::prelude::*;

    /// Properties strings made of the pieces that matter to a put's scan.
    fn props_strategy() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just(b"DELAY".to_vec()),
            Just(b"__CRC32#".to_vec()),
            Just(b"TAGS".to_vec()),
            Just(vec![NAME_VALUE_SEPARATOR]),
            Just(vec![PROPERTY_SEPARATOR]),
            Just(b"3".to_vec()),
            Just(b"x".to_vec()),
            Just(b"DELAYX".to_vec()),
        ];
        proptest::collection::vec(piece, 0..12).prop_map(|v| v.concat())
    }

    proptest! {
        /// The one-pass scan finds what `find_property` and the CRC strip
        /// find: the same DELAY value, and a `__CRC32#` pair exactly when
        /// stripping changes the properties.
        #[test]
        fn scan_for_put_agrees_with_the_lookups(p in props_strategy()) {
            let scan = scan_for_put(&p);
            prop_assert_eq!(scan.delay, find_property(&p, props::DELAY));
            prop_assert_eq!(scan.prop_crc, strip_prop_crc(&p) != p);
        }
    }

    #[test]
    fn scan_for_put_examples() {
        let s = scan_for_put(b"TAGS\x01t\x02DELAY\x013\x02__CRC32#\x010000000001\x02");
        assert_eq!(s.delay, Some(&b"3"[..]));
        assert!(s.prop_crc);
        let s = scan_for_put(b"DELAY\x01\x02DELAY\x014\x02X\x01__CRC32#");
        assert_eq!(s.delay, Some(&b"4"[..]), "an empty value is skipped");
        assert!(!s.prop_crc, "a value is no name");
        assert_eq!(
            scan_for_put(b""),
            PutScan {
                delay: None,
                prop_crc: false
            }
        );
    }

    #[test]
    fn builders_in_place_and_on_the_heap_agree() {
        let mut v = PropertiesBuilder::new();
        let mut i = PropertiesBuilder::<crate::log::message::InlineProps>::default();
        let long = "k".repeat(200);
        for (n, val) in [("A", "1"), ("B", long.as_str()), ("C", "3")] {
            v.push(n, val).unwrap();
            i.push(n, val).unwrap();
        }
        let (mut sv, mut si) = (false, false);
        v.push_key("key", &mut sv).unwrap();
        i.push_key("key", &mut si).unwrap();
        assert_eq!(v.as_bytes(), i.as_bytes());
        assert_eq!(v.finish(), i.finish().into_vec());
    }
}
