//! The consumer offset table as the engine takes it: RocketMQ's
//! `ConsumerOffsetManager.offsetTable` (docs/format.md §13), entries keyed
//! by [`OffsetKey`] (a topic and a group), per queue the next offset to
//! consume.
//!
//! The Python package reads and writes `config/consumerOffset.json` and
//! hands the engine the table's rows `(topic, group, queue id, offset)`;
//! the engine flushes the CommitLog below the committed offsets before
//! they are persisted ([`Store::flush_for_offsets`](crate::store::Store::flush_for_offsets),
//! §15.4) and finds, at recovery, the offsets above their queue's end
//! ([`Store::clamp_consumer_offsets`](crate::store::Store::clamp_consumer_offsets),
//! §15.3). No key text crosses the line: the file's key, topic and group
//! joined by [`TOPIC_GROUP_SEPARATOR`], is spelled and split by the Python
//! offset table (`rocketstore.offset_table`), which takes the separator from
//! here; a topic never holds it, so a key splits at its first one.

use std::collections::BTreeMap;
use std::fmt;

use crate::error::{Result, StoreError};

/// RocketMQ's `TOPIC_GROUP_SEPARATOR`: the file's key is
/// `<topic>@<group>`.
pub const TOPIC_GROUP_SEPARATOR: char = '@';

/// A consumer group on a topic: one key of the offset table.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OffsetKey {
    topic: String,
    group: String,
}

impl OffsetKey {
    /// The key of `group` on `topic`.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] when `topic` holds the separator
    /// (the key would split elsewhere).
    pub fn new(topic: impl Into<String>, group: impl Into<String>) -> Result<Self> {
        let topic = topic.into();
        if topic.contains(TOPIC_GROUP_SEPARATOR) {
            return Err(StoreError::InvalidArgument(format!(
                "topic must not contain '{TOPIC_GROUP_SEPARATOR}': {topic:?}"
            )));
        }
        Ok(Self {
            topic,
            group: group.into(),
        })
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The consumer group.
    pub fn group(&self) -> &str {
        &self.group
    }
}

/// The file's key, `<topic>@<group>`.
impl fmt::Display for OffsetKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{TOPIC_GROUP_SEPARATOR}{}", self.topic, self.group)
    }
}

/// Committed consumer offsets: per [`OffsetKey`], queue id -> the next
/// offset to consume. Iterated in key and queue order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerOffsetTable {
    entries: BTreeMap<OffsetKey, BTreeMap<i32, i64>>,
}

/// One entry as it crosses into the engine: `(topic, group, queue id, offset)`.
pub type OffsetRow = (String, String, i32, i64);

impl ConsumerOffsetTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The table of `rows` (a later row of the same queue wins).
    ///
    /// # Errors
    /// As [`OffsetKey::new`].
    pub fn from_rows(rows: impl IntoIterator<Item = OffsetRow>) -> Result<Self> {
        let mut table = Self::new();
        for (topic, group, queue_id, offset) in rows {
            table.set(OffsetKey::new(topic, group)?, queue_id, offset);
        }
        Ok(table)
    }

    /// Sets the next offset of `key`'s queue `queue_id`.
    pub fn set(&mut self, key: OffsetKey, queue_id: i32, offset: i64) {
        self.entries
            .entry(key)
            .or_default()
            .insert(queue_id, offset);
    }

    /// The committed next offset of `key`'s queue, if any.
    pub fn get(&self, key: &OffsetKey, queue_id: i32) -> Option<i64> {
        self.entries.get(key)?.get(&queue_id).copied()
    }

    /// Every entry: `(key, queue id, next offset)`.
    pub fn iter(&self) -> impl Iterator<Item = (&OffsetKey, i32, i64)> + '_ {
        self.entries
            .iter()
            .flat_map(|(key, queues)| queues.iter().map(move |(&q, &off)| (key, q, off)))
    }

    /// Number of entries (queues of every key).
    pub fn len(&self) -> usize {
        self.entries.values().map(BTreeMap::len).sum()
    }

    /// True without entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_the_topic_and_group_joined() {
        let key = OffsetKey::new("orders", "group@eu").unwrap();
        assert_eq!(key.to_string(), "orders@group@eu");
        assert_eq!((key.topic(), key.group()), ("orders", "group@eu"));
    }

    #[test]
    fn a_topic_with_the_separator_is_refused() {
        let e = OffsetKey::new("a@b", "g").unwrap_err();
        assert!(matches!(e, StoreError::InvalidArgument(_)), "{e}");
        assert!(e.to_string().contains("\"a@b\""), "{e}");
        let rows = vec![("a@b".to_owned(), "g".to_owned(), 0, 1)];
        assert!(ConsumerOffsetTable::from_rows(rows).is_err());
    }

    #[test]
    fn rows_become_entries_in_key_and_queue_order() {
        let rows = [
            ("T", "g", 1, 7),
            ("S", "g", 0, 3),
            ("T", "g", 0, 5),
            ("T", "g", 1, 9),
        ]
        .map(|(t, g, q, o)| (t.to_owned(), g.to_owned(), q, o));
        let table = ConsumerOffsetTable::from_rows(rows).unwrap();
        let got: Vec<_> = table
            .iter()
            .map(|(k, q, o)| (k.to_string(), q, o))
            .collect();
        assert_eq!(
            got,
            [
                ("S@g".to_owned(), 0, 3),
                ("T@g".to_owned(), 0, 5),
                ("T@g".to_owned(), 1, 9)
            ]
        );
        assert_eq!(table.len(), 3);
        let key = OffsetKey::new("T", "g").unwrap();
        assert_eq!(table.get(&key, 1), Some(9));
        assert_eq!(table.get(&key, 2), None);
        assert!(ConsumerOffsetTable::new().is_empty());
    }
}
