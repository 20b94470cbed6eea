//! The put fields' rules: how a put's `tags`, `keys`, `properties` and
//! `delay_level` become a message's properties string (docs/format.md
//! §17.1), which values make the message illegal (MESSAGE_ILLEGAL, with a
//! reason naming the field and the rule) and which contradictions are the
//! caller's mistake (an invalid argument: nothing is put). The rules
//! themselves, with their sentences, are in `rules.rs`.
//!
//! Every put builds its properties here: one message given as arguments, a
//! `Message`, and every message of a batch of bodies ([`BatchProperties`],
//! whose reasons name the message's index). The properties come first, in
//! the caller's order, then `TAGS`, `KEYS` (space-separated) and `DELAY`.

use super::{props, tags_problem, InlineProps, PropertiesBuilder, PropertyError, PropsBuf};
use crate::error::{Result, StoreError};

/// One message's put fields being turned into its properties: feed it the
/// `properties` pairs ([`MessageFields::property`]), then the keys
/// ([`MessageFields::key`]); the tags and the delay level given when it was
/// made are added after the properties. `B` is where the bytes go (see
/// [`PropsBuf`]).
pub struct MessageFields<'b, 't, B: PropsBuf = Vec<u8>> {
    b: &'b mut PropertiesBuilder<B>,
    /// The `tags` argument, until it is added after the properties.
    tags: Option<&'t str>,
    tags_given: bool,
    keys_given: bool,
    delay_level: i32,
    keys_started: bool,
    /// The first rule a value broke (the message is illegal).
    illegal: Option<String>,
}

impl<'b, 't, B: PropsBuf> MessageFields<'b, 't, B> {
    /// Starts the next message's properties in `b`. `tags` is the `tags`
    /// argument (None when not given), `keys_given` whether a `keys`
    /// argument was given, `delay_level` the `delay_level` argument (0: none).
    pub fn new(
        b: &'b mut PropertiesBuilder<B>,
        tags: Option<&'t str>,
        keys_given: bool,
        delay_level: i32,
    ) -> Self {
        b.next_message();
        Self {
            b,
            tags,
            tags_given: tags.is_some(),
            keys_given,
            delay_level,
            keys_started: false,
            illegal: None,
        }
    }

    fn note(&mut self, r: std::result::Result<(), PropertyError>) {
        if let Err(PropertyError::Illegal(m)) = r {
            self.illegal.get_or_insert(m);
        }
    }

    /// Adds one pair of the `properties` argument. A `TAGS`, `KEYS` or
    /// `DELAY` property given with the argument of the same meaning is a
    /// contradiction (`InvalidArgument`); an empty name or value, or one
    /// holding a separator byte, makes the message illegal.
    pub fn property(&mut self, name: &str, value: &str) -> Result<()> {
        let clash = if self.tags_given && name == props::TAGS {
            Some("tags= or a TAGS property")
        } else if self.keys_given && name == props::KEYS {
            Some("keys= or a KEYS property")
        } else if self.delay_level != 0 && name == props::DELAY {
            Some("delay_level= or a DELAY property")
        } else {
            None
        };
        if let Some(which) = clash {
            return Err(StoreError::InvalidArgument(format!(
                "give {which}, not both"
            )));
        }
        let r = self.b.push(name, value);
        self.note(r);
        Ok(())
    }

    /// Adds the `tags` argument (once, after the properties): tags breaking
    /// [`tags_problem`] make the message illegal.
    fn add_tags(&mut self) {
        let Some(t) = self.tags.take() else { return };
        match tags_problem(t) {
            Some(why) => {
                self.illegal.get_or_insert(why);
            }
            // Tags that pass `tags_problem` pass `property_problem` (not
            // empty, no separator byte), and TAGS is a legal name.
            None => self.b.push_pair_raw(props::TAGS.as_bytes(), t.as_bytes()),
        }
    }

    /// Adds one key of the `keys` argument (after the properties): empty
    /// keys are skipped; a key with a space or a separator byte makes the
    /// message illegal.
    pub fn key(&mut self, k: &str) {
        self.add_tags();
        let r = self.b.push_key(k, &mut self.keys_started);
        self.note(r);
    }

    /// Ends the message: adds the tags (if no key did) and the delay level.
    /// `Ok(Some(reason))`: the message is illegal; a negative delay level is
    /// an `InvalidArgument`.
    pub fn finish(mut self) -> Result<Option<String>> {
        self.add_tags();
        if self.delay_level < 0 {
            return Err(StoreError::InvalidArgument(format!(
                "delay_level must be >= 0, got {}",
                self.delay_level
            )));
        }
        if self.delay_level > 0 {
            // A positive number's digits: a legal value of a legal name.
            let level = self.delay_level.to_string();
            self.b
                .push_pair_raw(props::DELAY.as_bytes(), level.as_bytes());
        }
        Ok(self.illegal)
    }
}

impl<'t> MessageFields<'_, 't, InlineProps> {
    /// Builds one message's properties, in place (no allocation unless
    /// they are long): `fill` feeds the `properties` pairs and the keys.
    /// `Ok(Err(reason))`: the message is illegal; `Err`: the fields
    /// contradict each other (or `fill` failed).
    pub fn build<E: From<StoreError>>(
        tags: Option<&'t str>,
        keys_given: bool,
        delay_level: i32,
        fill: impl FnOnce(&mut MessageFields<'_, 't, InlineProps>) -> std::result::Result<(), E>,
    ) -> std::result::Result<std::result::Result<InlineProps, String>, E> {
        let mut b = PropertiesBuilder::<InlineProps>::default();
        let mut m = MessageFields::new(&mut b, tags, keys_given, delay_level);
        fill(&mut m)?;
        Ok(match m.finish()? {
            Some(why) => Err(why),
            None => Ok(b.finish()),
        })
    }
}

/// The properties of a batch's messages, built back to back in one buffer
/// (see [`crate::log::commitlog::BatchInput`]), with the first illegal
/// message's reason (`message {index}: {reason}`), which refuses the batch.
#[derive(Debug, Default)]
pub struct BatchProperties {
    b: PropertiesBuilder,
    ends: Vec<usize>,
    illegal: Option<String>,
}

impl BatchProperties {
    /// No message yet (a batch whose messages have no properties stays so).
    pub fn new() -> Self {
        Self::default()
    }

    /// No message yet, with room for `n` messages of about `bytes_each`
    /// bytes of properties (no reallocation while a batch is built).
    pub fn with_capacity(n: usize, bytes_each: usize) -> Self {
        Self {
            b: PropertiesBuilder::with_capacity(n.saturating_mul(bytes_each)),
            ends: Vec::with_capacity(n),
            illegal: None,
        }
    }

    /// Adds the next message's properties: `fill` feeds its `properties`
    /// pairs and keys (see [`MessageFields::build`]). A batch puts no delayed
    /// message, so there is no delay level.
    pub fn message<'t, E: From<StoreError>>(
        &mut self,
        tags: Option<&'t str>,
        keys_given: bool,
        fill: impl FnOnce(&mut MessageFields<'_, 't>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let index = self.ends.len();
        let mut m = MessageFields::new(&mut self.b, tags, keys_given, 0);
        fill(&mut m)?;
        if let Some(why) = m.finish()? {
            self.illegal
                .get_or_insert_with(|| format!("message {index}: {why}"));
        }
        self.ends.push(self.b.len());
        Ok(())
    }

    /// Why the batch is refused (its first illegal message), if it is.
    pub fn illegal(&self) -> Option<&str> {
        self.illegal.as_deref()
    }

    /// Every message's properties, concatenated.
    pub fn bytes(&self) -> &[u8] {
        self.b.as_bytes()
    }

    /// End of each message's properties in [`BatchProperties::bytes`]
    /// (empty when no message was added).
    pub fn ends(&self) -> &[usize] {
        &self.ends
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::message::iter_properties;

    fn pairs(raw: &[u8]) -> Vec<(String, String)> {
        iter_properties(raw)
            .map(|(k, v)| {
                (
                    String::from_utf8_lossy(k).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect()
    }

    fn build(
        tags: Option<&str>,
        keys: &[&str],
        properties: &[(&str, &str)],
        delay: i32,
    ) -> Result<std::result::Result<Vec<u8>, String>> {
        MessageFields::build(tags, !keys.is_empty(), delay, |m| {
            for (k, v) in properties {
                m.property(k, v)?;
            }
            for k in keys {
                m.key(k);
            }
            Ok::<(), StoreError>(())
        })
        .map(|r| r.map(InlineProps::into_vec))
    }

    #[test]
    fn properties_then_tags_keys_and_delay() {
        let raw = build(Some("t"), &["a", "", "b"], &[("X", "1")], 3)
            .unwrap()
            .unwrap();
        assert_eq!(
            pairs(&raw),
            [("X", "1"), ("TAGS", "t"), ("KEYS", "a b"), ("DELAY", "3")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        assert_eq!(build(None, &[], &[], 0).unwrap().unwrap(), b"");
    }

    #[test]
    fn an_argument_and_its_property_contradict() {
        for (tags, keys, prop, delay, want) in [
            (
                Some("t"),
                &[][..],
                "TAGS",
                0,
                "give tags= or a TAGS property, not both",
            ),
            (
                None,
                &["k"][..],
                "KEYS",
                0,
                "give keys= or a KEYS property, not both",
            ),
            (
                None,
                &[][..],
                "DELAY",
                2,
                "give delay_level= or a DELAY property, not both",
            ),
        ] {
            match build(tags, keys, &[(prop, "v")], delay) {
                Err(StoreError::InvalidArgument(m)) => assert_eq!(m, want),
                other => panic!("{prop}: {other:?}"),
            }
        }
        // Without the argument, the property is just a property.
        assert!(build(None, &[], &[("TAGS", "t")], 0).unwrap().is_ok());
    }

    #[test]
    fn a_negative_delay_level_is_an_invalid_argument() {
        match build(None, &[], &[], -1) {
            Err(StoreError::InvalidArgument(m)) => {
                assert_eq!(m, "delay_level must be >= 0, got -1")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn illegal_values_name_the_first_broken_rule() {
        let why = |r: Result<std::result::Result<Vec<u8>, String>>| r.unwrap().unwrap_err();
        assert_eq!(
            why(build(Some(""), &[], &[], 0)),
            "tags must not be empty (give tags=None for a message without tags)"
        );
        assert!(why(build(Some("a\u{1}b"), &[], &[], 0)).starts_with("tags \"a\\u{1}b\" contain"));
        assert!(why(build(None, &["a b"], &[], 0)).contains("contains a space"));
        assert!(why(build(None, &[], &[("", "v")], 0)).contains("names must not be empty"));
        // The first rule broken wins: a property before the tags.
        assert_eq!(
            why(build(Some(""), &[], &[("X", "")], 0)),
            "property \"X\" has an empty value"
        );
        // Tags before keys.
        assert!(why(build(Some(""), &["a b"], &[], 0)).starts_with("tags must not be empty"));
    }

    #[test]
    fn a_batch_keeps_each_messages_properties_and_the_first_illegal_index() {
        let mut batch = BatchProperties::new();
        for (tags, key) in [
            (None, ""),
            (Some("t1"), "k1"),
            (Some(""), ""),
            (Some("x\u{2}"), ""),
        ] {
            batch
                .message(tags, !key.is_empty(), |m| {
                    if !key.is_empty() {
                        m.key(key);
                    }
                    Ok::<(), StoreError>(())
                })
                .unwrap();
        }
        let ends = batch.ends().to_vec();
        assert_eq!(ends.len(), 4);
        assert_eq!(ends[0], 0);
        assert_eq!(
            pairs(&batch.bytes()[ends[0]..ends[1]]),
            [("TAGS", "t1"), ("KEYS", "k1")].map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        assert_eq!(
            batch.illegal(),
            Some("message 2: tags must not be empty (give tags=None for a message without tags)")
        );
        // A contradiction stops at once.
        let mut batch = BatchProperties::new();
        let r = batch.message(Some("t"), false, |m| m.property("TAGS", "u"));
        assert!(matches!(r, Err(StoreError::InvalidArgument(_))));
    }
}
