//! The properties string: `name 0x01 value 0x02` pairs (RocketMQ's
//! `messageProperties2String`), parsed, looked up and built (the builder
//! refuses what the put rules of `rules.rs` refuse).
//!
//! ```text
//!  KEYS \x01 k1 k2 \x02 TAGS \x01 t \x02 ...
//! ```

use super::{
    key_problem, property_problem, props, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, PROP_CRC_NAME,
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

/// Why a property could not be added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropertyError {
    /// Name or value empty, or containing a separator byte.
    Illegal(String),
}

/// Builds a serialized properties string, validating names and values.
#[derive(Debug, Default, Clone)]
pub struct PropertiesBuilder {
    buf: Vec<u8>,
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

    /// Starts the next message's properties after what was built so far.
    pub fn next_message(&mut self) {
        self.start = self.buf.len();
    }

    /// Bytes built so far (every message's).
    pub fn len(&self) -> usize {
        self.buf.len()
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
            self.buf.push(b' ');
        } else {
            if self.buf.len() > self.start {
                self.buf.push(PROPERTY_SEPARATOR);
            }
            self.buf.extend_from_slice(props::KEYS.as_bytes());
            self.buf.push(NAME_VALUE_SEPARATOR);
            *started = true;
        }
        self.buf.extend_from_slice(k.as_bytes());
        Ok(())
    }

    /// Appends `name=value`, unless it breaks [`property_problem`] (the
    /// error names the property and the rule).
    pub fn push(&mut self, name: &str, value: &str) -> Result<(), PropertyError> {
        if let Some(why) = property_problem(name, value) {
            return Err(PropertyError::Illegal(why));
        }
        if self.buf.len() > self.start {
            self.buf.push(PROPERTY_SEPARATOR);
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(NAME_VALUE_SEPARATOR);
        self.buf.extend_from_slice(value.as_bytes());
        Ok(())
    }

    /// Appends a pair taken from an already-parsed properties string.
    pub fn push_pair_raw(&mut self, name: &[u8], value: &[u8]) {
        if self.buf.len() > self.start {
            self.buf.push(PROPERTY_SEPARATOR);
        }
        self.buf.extend_from_slice(name);
        self.buf.push(NAME_VALUE_SEPARATOR);
        self.buf.extend_from_slice(value);
    }

    /// The serialized properties built so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// True when nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The serialized properties.
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}
