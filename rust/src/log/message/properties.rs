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
///
/// A segment (the bytes between two `\x02`) is a pair when it holds at
/// least three bytes and its first `\x01` is neither its first nor its
/// last byte: the name is what comes before that `\x01`, the value what
/// comes after it.
#[inline]
pub fn iter_properties(props: &[u8]) -> Properties<'_> {
    Properties {
        rest: props,
        done: false,
    }
}

/// The iterator of [`iter_properties`]: the separators are found a word
/// at a time ([`find_byte`]), every lookup of a record's property (tags,
/// keys, a key query's check) scans with it.
#[derive(Debug, Clone)]
pub struct Properties<'p> {
    /// What follows the segments returned so far.
    rest: &'p [u8],
    /// The last segment was returned.
    done: bool,
}

impl<'p> Iterator for Properties<'p> {
    type Item = (&'p [u8], &'p [u8]);

    #[deny(clippy::indexing_slicing, clippy::unwrap_used)]
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let seg = match find_byte(self.rest, PROPERTY_SEPARATOR) {
                Some(i) => {
                    let (seg, rest) = self.rest.split_at_checked(i)?;
                    self.rest = rest.get(1..)?;
                    seg
                }
                None => {
                    self.done = true;
                    self.rest
                }
            };
            if seg.len() < 3 {
                continue;
            }
            let Some(i) = find_byte(seg, NAME_VALUE_SEPARATOR) else {
                continue;
            };
            if i == 0 || i >= seg.len() - 1 {
                continue;
            }
            let (Some(name), Some(value)) = (seg.get(..i), seg.get(i + 1..)) else {
                continue;
            };
            if name == PROP_CRC_NAME {
                continue;
            }
            return Some((name, value));
        }
        None
    }
}

/// Where the first byte `b` of `hay` is: eight bytes at a time (a byte
/// equal to `b` is a zero byte of the word XOR `b` repeated; the lowest
/// zero byte is found exactly), the last few one by one.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline]
fn find_byte(hay: &[u8], b: u8) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let pattern = LO * u64::from(b);
    let mut words = hay.chunks_exact(8);
    let mut at = 0;
    for word in words.by_ref() {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        let x = u64::from_le_bytes(w) ^ pattern;
        let zero = x.wrapping_sub(LO) & !x & HI;
        if zero != 0 {
            return Some(at + (zero.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&c| c == b)
        .map(|i| at + i)
}

/// The value of the pair named `name` in the segment `seg` (the bytes
/// between two `\x02`), as [`iter_properties`] reads it: `name`, `\x01`,
/// then a value of at least one byte. `name` holds no `\x01` and is not
/// empty (the caller checks).
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline(always)]
fn pair_value<'p>(seg: &'p [u8], name: &[u8]) -> Option<&'p [u8]> {
    let rest = seg.strip_prefix(name)?;
    match rest.split_first() {
        Some((&NAME_VALUE_SEPARATOR, value)) if !value.is_empty() => Some(value),
        _ => None,
    }
}

/// True when [`iter_properties`] can return a pair named `name`: not
/// empty, no `\x01` or `\x02` in it, not the property CRC.
#[inline(always)]
fn pair_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name != PROP_CRC_NAME
        && !name
            .iter()
            .any(|&b| b == NAME_VALUE_SEPARATOR || b == PROPERTY_SEPARATOR)
}

/// Calls `f` with each segment of `props` (the bytes between two `\x02`),
/// in order, until it returns true.
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline(always)]
fn each_segment<'p>(props: &'p [u8], mut f: impl FnMut(&'p [u8]) -> bool) {
    let mut rest = props;
    loop {
        let (seg, next) = match find_byte(rest, PROPERTY_SEPARATOR) {
            Some(i) => match rest.split_at_checked(i) {
                Some((seg, tail)) => (seg, tail.get(1..)),
                None => return,
            },
            None => (rest, None),
        };
        if f(seg) {
            return;
        }
        match next {
            Some(n) => rest = n,
            None => return,
        }
    }
}

/// The value of property `name`, if present: the first pair
/// [`iter_properties`] returns with that name. Each segment is compared
/// with `name` where it starts (no search for its `\x01`).
#[inline]
pub fn find_property<'p>(props: &'p [u8], name: &str) -> Option<&'p [u8]> {
    let name = name.as_bytes();
    if !pair_name(name) {
        return None;
    }
    let mut found = None;
    each_segment(props, |seg| {
        found = pair_value(seg, name);
        found.is_some()
    });
    found
}

/// The values of the properties `names`, in one pass over `props`: each
/// what [`find_property`] returns for it.
#[inline]
pub fn find_properties<'p, const N: usize>(
    props: &'p [u8],
    names: [&str; N],
) -> [Option<&'p [u8]>; N] {
    let mut out = [None; N];
    let mut left = 0;
    for (slot, name) in out.iter_mut().zip(names) {
        if pair_name(name.as_bytes()) {
            left += 1;
        } else {
            // Never found: marked found, so the scan does not wait for it.
            *slot = Some(&[][..]);
        }
    }
    if left > 0 {
        each_segment(props, |seg| {
            for (slot, name) in out.iter_mut().zip(names) {
                if slot.is_none() {
                    if let Some(v) = pair_value(seg, name.as_bytes()) {
                        *slot = Some(v);
                        left -= 1;
                    }
                }
            }
            left == 0
        });
    }
    for (slot, name) in out.iter_mut().zip(names) {
        if !pair_name(name.as_bytes()) {
            *slot = None;
        }
    }
    out
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

/// Scans `props` for a put (see [`PutScan`]) in one pass over its
/// segments, found as every other lookup finds them ([`find_byte`], a
/// word at a time): the `DELAY` pair is the one [`find_property`] returns
/// (a segment that starts with its name and `\x01`, with a value), and a
/// segment starting `__CRC32#` `\x01` is a property CRC, whatever follows
/// (what `strip_prop_crc` drops).
#[deny(clippy::indexing_slicing, clippy::unwrap_used)]
#[inline]
pub fn scan_for_put(props: &[u8]) -> PutScan<'_> {
    let mut scan = PutScan {
        delay: None,
        prop_crc: false,
    };
    each_segment(props, |seg| {
        if scan.delay.is_none() {
            scan.delay = pair_value(seg, props::DELAY.as_bytes());
        }
        if !scan.prop_crc {
            scan.prop_crc = seg
                .strip_prefix(PROP_CRC_NAME)
                .is_some_and(|r| r.first() == Some(&NAME_VALUE_SEPARATOR));
        }
        false
    });
    scan
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
    use proptest::prelude::*;

    use super::*;
    use crate::log::message::strip_prop_crc;

    /// RocketMQ's parse as it was written before [`Properties`]: the rule
    /// the iterator must keep.
    fn reference(props: &[u8]) -> Vec<(&[u8], &[u8])> {
        props
            .split(|&b| b == PROPERTY_SEPARATOR)
            .filter_map(|seg| {
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
            .collect()
    }

    /// Strings of separators, a few name letters and the CRC's name.
    fn props_bytes() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just(vec![NAME_VALUE_SEPARATOR]),
            Just(b"KEYSK".to_vec()),
            Just(vec![PROPERTY_SEPARATOR]),
            Just(b"K".to_vec()),
            Just(b"KEYS".to_vec()),
            Just(b"v w".to_vec()),
            Just(PROP_CRC_NAME.to_vec()),
            any::<u8>().prop_map(|b| vec![b]),
        ];
        prop::collection::vec(piece, 0..40).prop_map(|p| p.concat())
    }

    proptest! {
        #[test]
        fn pairs_are_the_reference_parse(p in props_bytes()) {
            let pairs = reference(&p);
            prop_assert_eq!(iter_properties(&p).collect::<Vec<_>>(), pairs.clone());
            let first = |name: &str| {
                pairs.iter().find(|(k, _)| *k == name.as_bytes()).map(|(_, v)| *v)
            };
            for name in ["KEYS", "K", "__CRC32#", "", "v w", "K\x01", "KEYSK", "\x02K"] {
                prop_assert_eq!(find_property(&p, name), first(name), "{:?}", name);
            }
            let [keys, k, crc, empty] = find_properties(&p, ["KEYS", "K", "__CRC32#", ""]);
            prop_assert_eq!((keys, k), (first("KEYS"), first("K")));
            prop_assert_eq!((crc, empty), (None, None));
        }

        #[test]
        fn find_byte_is_position(h in prop::collection::vec(0u8..4, 0..40), b in 0u8..4) {
            prop_assert_eq!(find_byte(&h, b), h.iter().position(|&c| c == b));
        }
    }

    #[test]
    fn known_strings() {
        let p = b"TAGS\x01TagA\x02KEYS\x01K0 K1\x02__CRC32#\x015583020001\x02";
        assert_eq!(
            iter_properties(p).collect::<Vec<_>>(),
            [(&b"TAGS"[..], &b"TagA"[..]), (b"KEYS", b"K0 K1")]
        );
        assert_eq!(
            find_properties(p, ["UNIQ_KEY", "KEYS"]),
            [None, Some(&b"K0 K1"[..])]
        );
        assert_eq!(iter_properties(b"").count(), 0);
        assert_eq!(iter_properties(b"\x01a\x02b\x01\x02cc").count(), 0);
    }

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
