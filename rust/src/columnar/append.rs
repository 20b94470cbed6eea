//! Appending Arrow record batches (`MessageStore.put_arrow`): each row of a
//! batch with columns `topic, body` and optional `queue_id, tags, keys,
//! properties` is one message, put with the batch's other rows under one
//! lock hold ([`Store::put_batch`]).
//!
//! Row rules: a row is put as a put given its `topic`, `body`, `queue_id`,
//! `properties`, `tags` and `keys` would be, by the same put rules
//! (`log/message/rules.rs`), so a row breaking one gets the status and
//! reason that put gets. A null topic or body, and a tags or keys column
//! given with a `TAGS` or `KEYS` property in the same row, also make the
//! row `MESSAGE_ILLEGAL`; a null queue id is queue 0; null tags, keys,
//! properties, key items and property values are absent. The extra
//! properties of the append come after each row's own. A column of the
//! wrong type is a [`ColumnError`].

use std::borrow::Cow;

use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use arrow_array::{Array, BinaryArray, Int32Array, ListArray, MapArray, RecordBatch, StringArray};

use crate::error::StoreError;
use crate::log::commitlog::{PutStatus, Refused};
use crate::log::message::{
    props, topic_problem, MessageFields, MessageSpec, PropertiesBuilder, PropertyError,
    DEFAULT_BORN_HOST,
};
use crate::store::Store;

/// A column of an appended batch that is missing or has the wrong type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnError {
    /// The column's name.
    pub name: &'static str,
    /// What it must be (`present`, `a string`, `a map<string,string>`, ...).
    pub want: &'static str,
}

impl std::fmt::Display for ColumnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "column {} must be {}", self.name, self.want)
    }
}

/// Why an append of a batch stopped: the store's error, or a column.
#[derive(Debug)]
pub enum AppendError {
    /// The store failed or refused the call (closed, read-only, I/O).
    Store(StoreError),
    /// A column is missing or has the wrong type.
    Column(ColumnError),
}

impl From<StoreError> for AppendError {
    fn from(e: StoreError) -> Self {
        AppendError::Store(e)
    }
}

impl From<ColumnError> for AppendError {
    fn from(e: ColumnError) -> Self {
        AppendError::Column(e)
    }
}

fn bad(name: &'static str, want: &'static str) -> ColumnError {
    ColumnError { name, want }
}

/// The columns of an appended batch, typed.
pub struct AppendColumns<'a> {
    topic: &'a StringArray,
    body: &'a BinaryArray,
    queue_id: Option<&'a Int32Array>,
    tags: Option<&'a StringArray>,
    keys: Option<&'a ListArray>,
    properties: Option<&'a MapArray>,
}

/// The optional column `name` as `T`, if the batch has it.
fn optional<'a, T>(
    batch: &'a RecordBatch,
    name: &'static str,
    want: &'static str,
    cast: impl FnOnce(&'a dyn Array) -> Option<&'a T>,
) -> Result<Option<&'a T>, ColumnError> {
    match batch.column_by_name(name) {
        Some(c) => cast(c.as_ref()).map(Some).ok_or_else(|| bad(name, want)),
        None => Ok(None),
    }
}

impl<'a> AppendColumns<'a> {
    /// The columns of `batch`: `topic` (string) and `body` (binary) must be
    /// there; `queue_id` (int32), `tags` (string), `keys` (list of string)
    /// and `properties` (map of string to string) may be.
    pub fn of(batch: &'a RecordBatch) -> Result<Self, ColumnError> {
        let topic = batch
            .column_by_name("topic")
            .ok_or_else(|| bad("topic", "present"))?
            .as_string_opt::<i32>()
            .ok_or_else(|| bad("topic", "a string"))?;
        let body = batch
            .column_by_name("body")
            .ok_or_else(|| bad("body", "present"))?
            .as_binary_opt::<i32>()
            .ok_or_else(|| bad("body", "binary"))?;
        Ok(Self {
            topic,
            body,
            queue_id: optional(batch, "queue_id", "an int", |c| {
                c.as_primitive_opt::<Int32Type>()
            })?,
            tags: optional(batch, "tags", "a string", |c| c.as_string_opt::<i32>())?,
            keys: optional(batch, "keys", "an array<string>", |c| {
                c.as_list_opt::<i32>()
            })?,
            properties: optional(batch, "properties", "a map<string,string>", |c| {
                c.as_map_opt()
            })?,
        })
    }

    /// Row `i` as a message born at `born_timestamp`, with the `extra`
    /// properties after its own, or why the row is refused.
    pub fn row(
        &self,
        i: usize,
        born_timestamp: i64,
        extra: &[(String, String)],
    ) -> Result<Result<MessageSpec<'a>, Refused>, ColumnError> {
        if self.topic.is_null(i) || self.body.is_null(i) {
            return Ok(Err(Refused::illegal("topic and body must not be null")));
        }
        let topic = self.topic.value(i);
        if let Some(why) = topic_problem(topic) {
            return Ok(Err(Refused::illegal(why)));
        }
        let properties = match self.row_properties(i, extra)? {
            Ok(p) => p,
            Err(why) => return Ok(Err(Refused::illegal(why))),
        };
        let queue_id = self
            .queue_id
            .map_or(0, |q| if q.is_null(i) { 0 } else { q.value(i) });
        Ok(Ok(MessageSpec {
            topic: Cow::Borrowed(topic),
            queue_id,
            flag: 0,
            sys_flag: 0,
            born_timestamp,
            born_host: DEFAULT_BORN_HOST,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: Cow::Borrowed(self.body.value(i)),
            properties: Cow::Owned(properties),
        }))
    }

    /// Row `i`'s serialized properties, or the first rule they break: its
    /// `properties` map, `tags` and `keys` go through the put fields' rules
    /// (those of a put given `properties=`, `tags=` and `keys=`), then the
    /// `extra` properties follow. A `tags` or `keys` column given with the
    /// property of the same meaning breaks the row's own rule (a row cannot
    /// raise, as a put given both does).
    fn row_properties(
        &self,
        i: usize,
        extra: &[(String, String)],
    ) -> Result<Result<Vec<u8>, String>, ColumnError> {
        let entries = self
            .properties
            .filter(|m| m.is_valid(i))
            .map(|m| m.value(i));
        let pairs = match &entries {
            Some(e) => match (
                e.column(0).as_string_opt::<i32>(),
                e.column(1).as_string_opt::<i32>(),
            ) {
                (Some(ks), Some(vs)) => Some((ks, vs)),
                _ => return Err(bad("properties", "a map<string,string>")),
            },
            None => None,
        };
        let key_list = self.keys.filter(|l| l.is_valid(i)).map(|l| l.value(i));
        let keys = match &key_list {
            Some(v) => Some(
                v.as_string_opt::<i32>()
                    .ok_or_else(|| bad("keys", "an array<string>"))?,
            ),
            None => None,
        };
        let tags = self.tags.filter(|t| t.is_valid(i)).map(|t| t.value(i));
        let named = |name: &str| {
            pairs.is_some_and(|(ks, vs)| {
                (0..ks.len()).any(|j| !vs.is_null(j) && ks.value(j) == name)
            })
        };
        let has_keys = keys.is_some_and(|k| k.iter().flatten().any(|k| !k.is_empty()));
        for (given, name) in [(tags.is_some(), props::TAGS), (has_keys, props::KEYS)] {
            if given && named(name) {
                return Ok(Err(format!(
                    "give a {} column or a {name} property, not both",
                    name.to_lowercase()
                )));
            }
        }
        let mut b = PropertiesBuilder::new();
        let mut m = MessageFields::new(&mut b, tags, has_keys, 0);
        if let Some((ks, vs)) = pairs {
            for j in (0..ks.len()).filter(|&j| !vs.is_null(j)) {
                // No clash is left (checked above): this only notes a rule.
                if let Err(e) = m.property(ks.value(j), vs.value(j)) {
                    return Ok(Err(e.to_string()));
                }
            }
        }
        for k in keys.into_iter().flatten().flatten() {
            m.key(k);
        }
        let mut problem = match m.finish() {
            Ok(why) => why,
            Err(e) => Some(e.to_string()),
        };
        for (k, v) in extra {
            if let Err(PropertyError::Illegal(why)) = b.push(k, v) {
                problem.get_or_insert(why);
            }
        }
        Ok(match problem {
            Some(why) => Err(why),
            None => Ok(b.finish()),
        })
    }
}

/// Every row of `batch` as a message (see [`AppendColumns::row`]).
pub fn specs_of_batch<'a>(
    batch: &'a RecordBatch,
    born_timestamp: i64,
    extra: &[(String, String)],
) -> Result<Vec<Result<MessageSpec<'a>, Refused>>, ColumnError> {
    let columns = AppendColumns::of(batch)?;
    (0..batch.num_rows())
        .map(|i| columns.row(i, born_timestamp, extra))
        .collect()
}

/// A row an append refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedRow {
    /// Its index in the stream.
    pub row: u64,
    /// Its status.
    pub status: PutStatus,
    /// Why.
    pub reason: String,
}

/// Rows an append wrote that are not confirmed: stored here, but not yet
/// on disk (`FLUSH_DISK_TIMEOUT`, SYNC_FLUSH) or on a slave
/// (`FLUSH_SLAVE_TIMEOUT`, `SLAVE_NOT_AVAILABLE`, SYNC_MASTER, §21.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unconfirmed {
    /// The first such row, its status and why.
    pub first: RefusedRow,
    /// Its CommitLog offset.
    pub offset: u64,
}

/// What appending one batch of a stream did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchAppend {
    /// Rows written (confirmed or not).
    pub appended: u64,
    /// Rows put (written or refused by the put itself).
    pub rows: u64,
    /// The first refused row, if any: the append stops after this batch.
    pub refused: Option<RefusedRow>,
    /// The first row written but not confirmed, if any.
    pub unconfirmed: Option<Unconfirmed>,
    /// Appended without waiting: the end of the rows written that ask to
    /// wait (their `WAIT` property), for [`Store::wait_stored`].
    pub wait_end: Option<u64>,
}

/// True for a put status that means "stored here, not confirmed".
pub fn stored_unconfirmed(status: PutStatus) -> bool {
    matches!(
        status,
        PutStatus::FlushDiskTimeout | PutStatus::FlushSlaveTimeout | PutStatus::SlaveNotAvailable
    )
}

/// Appending a whole stream, batch by batch: while every row is
/// confirmed, each batch waits as a batch put does (for the disk under
/// SYNC_FLUSH, for a slave on a SYNC_MASTER), so the append keeps pace
/// with them; after the first row stored but not confirmed, the rest is
/// appended without waiting and [`ArrowAppend::finish`] waits once for all
/// of it (a stream never waits a timeout per batch).
#[derive(Debug, Default)]
pub struct ArrowAppend {
    /// Rows written (confirmed or not).
    pub appended: u64,
    /// Rows put so far: the index of the next row of the stream.
    pub rows: u64,
    /// The first refused row: the append stopped after its batch.
    pub refused: Option<RefusedRow>,
    /// The first row written but not confirmed, after [`ArrowAppend::finish`]
    /// with the status of the last wait.
    pub unconfirmed: Option<Unconfirmed>,
    wait_end: Option<u64>,
}

impl ArrowAppend {
    /// Appends the rows of `batch` (numbered on from the rows before) with
    /// the `extra` properties; false once a row was refused: the append
    /// stops there.
    pub fn batch(
        &mut self,
        store: &Store,
        batch: &RecordBatch,
        extra: &[(String, String)],
    ) -> Result<bool, AppendError> {
        let wait = self.unconfirmed.is_none();
        let done = store.append_arrow_batch(batch, self.rows, extra, wait)?;
        self.appended += done.appended;
        self.rows += done.rows;
        if self.unconfirmed.is_none() {
            self.unconfirmed = done.unconfirmed;
        }
        self.wait_end = self.wait_end.max(done.wait_end);
        if done.refused.is_some() {
            self.refused = done.refused;
            return Ok(false);
        }
        Ok(true)
    }

    /// Waits once for the rows appended without waiting, from the first
    /// unconfirmed row to the end ([`Store::wait_stored`]): `PUT_OK`
    /// confirms every row; otherwise [`ArrowAppend::unconfirmed`] takes the
    /// wait's status and reason.
    pub fn finish(&mut self, store: &Store) {
        if let (Some(u), Some(end)) = (self.unconfirmed.as_mut(), self.wait_end.take()) {
            match store.wait_stored(u.offset, end) {
                (PutStatus::PutOk, _) => self.unconfirmed = None,
                (status, why) => {
                    u.first.status = status;
                    u.first.reason = why.unwrap_or_default();
                }
            }
        }
    }
}

impl Store {
    /// Checks the rows of `batch`, whose first row is row `first_row` of the
    /// stream, against every put rule without writing anything: each row
    /// goes through [`AppendColumns::row`] and then the put's own validation
    /// ([`crate::log::commitlog::CommitLog::prepare`]: queue id, sizes,
    /// `DELAY`), exactly as [`Store::append_arrow_batch`] would put it with
    /// the same `extra` properties. Returns the first row a put would
    /// refuse, if any. What the put decides from the store's state (closed,
    /// read-only: an error here too; poisoned, busy, a disk that fills) is
    /// not a row's rule and is not predicted.
    pub fn check_arrow_batch(
        &self,
        batch: &RecordBatch,
        first_row: u64,
        extra: &[(String, String)],
    ) -> Result<Option<RefusedRow>, AppendError> {
        self.check_open_writer()?;
        let specs = specs_of_batch(batch, self.commitlog().clock_ms(), extra)?;
        for (i, spec) in specs.into_iter().enumerate() {
            if let Err(r) = spec.and_then(|s| self.commitlog().prepare(s).map(drop)) {
                return Ok(Some(RefusedRow {
                    row: first_row + i as u64,
                    status: r.status,
                    reason: r.reason,
                }));
            }
        }
        Ok(None)
    }

    /// Appends the rows of `batch`, whose first row is row `first_row` of
    /// the stream, born now, with the `extra` properties. A row refused
    /// before writing (see [`AppendColumns::row`]) ends the append: only
    /// the rows before it are put. Rows the put refuses are reported too
    /// (the first refused row wins); rows after a refused one in the same
    /// batch may be written (they are counted). A row stored but not
    /// confirmed ([`stored_unconfirmed`]) is written and counted, and
    /// reported apart. `wait`: the batch waits as a batch put does;
    /// otherwise it waits for nothing and says where its rows end.
    pub fn append_arrow_batch(
        &self,
        batch: &RecordBatch,
        first_row: u64,
        extra: &[(String, String)],
        wait: bool,
    ) -> Result<BatchAppend, AppendError> {
        let mut specs = specs_of_batch(batch, self.commitlog().clock_ms(), extra)?;
        let mut refused = specs.iter().position(|s| s.is_err()).map(|i| {
            let (status, reason) = match &specs[i] {
                Err(r) => (r.status, r.reason.clone()),
                Ok(_) => (PutStatus::PutOk, String::new()),
            };
            RefusedRow {
                row: first_row + i as u64,
                status,
                reason,
            }
        });
        if let Some(r) = &refused {
            specs.truncate((r.row - first_row) as usize);
        }
        let (outs, asks_wait) = if wait {
            (self.put_batch(specs)?, false)
        } else {
            self.put_batch_unwaited(specs)?
        };
        let (mut appended, mut unconfirmed, mut end) = (0, None, None);
        for (i, o) in outs.iter().enumerate() {
            let row = first_row + i as u64;
            let written = o.status == PutStatus::PutOk || stored_unconfirmed(o.status);
            if written {
                appended += 1;
                end = Some((o.wrote_offset + i64::from(o.wrote_bytes)) as u64);
            }
            if written && o.status != PutStatus::PutOk && unconfirmed.is_none() {
                unconfirmed = Some(Unconfirmed {
                    first: RefusedRow {
                        row,
                        status: o.status,
                        reason: o.reason.clone().unwrap_or_default(),
                    },
                    offset: o.wrote_offset as u64,
                });
            } else if !written && refused.as_ref().map_or(true, |r| row < r.row) {
                let reason = o.reason.clone().unwrap_or_default();
                refused = Some(RefusedRow {
                    row,
                    status: o.status,
                    reason,
                });
            }
        }
        Ok(BatchAppend {
            appended,
            rows: outs.len() as u64,
            refused,
            unconfirmed,
            wait_end: end.filter(|_| asks_wait),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{ListBuilder, MapBuilder, StringBuilder};
    use arrow_array::{ArrayRef, BinaryArray, Int32Array, StringArray};

    use super::*;
    use crate::log::message::iter_properties;
    use crate::store::StoreOptions;

    /// A batch of rows `(topic, body, queue_id, tags, keys, properties)`.
    #[allow(clippy::type_complexity)]
    fn batch(
        rows: &[(
            Option<&str>,
            Option<&[u8]>,
            Option<i32>,
            Option<&str>,
            Option<&[&str]>,
            Option<&[(&str, &str)]>,
        )],
    ) -> RecordBatch {
        let topic: StringArray = rows.iter().map(|r| r.0).collect();
        let body: BinaryArray = rows.iter().map(|r| r.1).collect();
        let queue_id: Int32Array = rows.iter().map(|r| r.2).collect();
        let tags: StringArray = rows.iter().map(|r| r.3).collect();
        let mut keys = ListBuilder::new(StringBuilder::new());
        let mut props = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
        for r in rows {
            match r.4 {
                Some(ks) => {
                    for k in ks {
                        keys.values().append_value(k);
                    }
                    keys.append(true);
                }
                None => keys.append(false),
            }
            match r.5 {
                Some(ps) => {
                    for (k, v) in ps {
                        props.keys().append_value(k);
                        props.values().append_value(v);
                    }
                    props.append(true).unwrap();
                }
                None => props.append(false).unwrap(),
            }
        }
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("topic", Arc::new(topic)),
            ("body", Arc::new(body)),
            ("queue_id", Arc::new(queue_id)),
            ("tags", Arc::new(tags)),
            ("keys", Arc::new(keys.finish())),
            ("properties", Arc::new(props.finish())),
        ];
        RecordBatch::try_from_iter(columns).unwrap()
    }

    fn pairs(raw: &[u8]) -> Vec<(String, String)> {
        iter_properties(raw)
            .map(|(k, v)| {
                let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                (s(k), s(v))
            })
            .collect()
    }

    #[test]
    fn rows_become_messages_with_their_properties_then_the_extra_ones() {
        let b = batch(&[
            (
                Some("T"),
                Some(b"a"),
                Some(3),
                Some("t"),
                Some(&["k1", "k2"]),
                Some(&[("X", "1")]),
            ),
            (Some("T"), Some(b"b"), None, None, None, None),
        ]);
        let extra = [("E".to_owned(), "e".to_owned())];
        let specs = specs_of_batch(&b, 42, &extra).unwrap();
        let first = specs[0].as_ref().unwrap();
        assert_eq!(
            (&*first.topic, first.queue_id, &*first.body),
            ("T", 3, &b"a"[..])
        );
        assert_eq!(first.born_timestamp, 42);
        let want = [("X", "1"), ("TAGS", "t"), ("KEYS", "k1 k2"), ("E", "e")];
        assert_eq!(
            pairs(&first.properties),
            want.map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        let second = specs[1].as_ref().unwrap();
        assert_eq!(second.queue_id, 0);
        assert_eq!(
            pairs(&second.properties),
            [("E".to_owned(), "e".to_owned())]
        );
    }

    #[test]
    fn rows_breaking_a_rule_are_refused_with_the_reason() {
        let b = batch(&[
            (None, Some(b"a"), None, None, None, None),
            (Some("a b"), Some(b"a"), None, None, None, None),
            (
                Some("T"),
                Some(b"a"),
                None,
                Some("t"),
                None,
                Some(&[("TAGS", "u")]),
            ),
            (
                Some("T"),
                Some(b"a"),
                None,
                None,
                Some(&["k"]),
                Some(&[("KEYS", "u")]),
            ),
            (Some("T"), Some(b"a"), None, None, None, Some(&[("X", "")])),
        ]);
        let why: Vec<String> = specs_of_batch(&b, 0, &[])
            .unwrap()
            .into_iter()
            .map(|s| {
                let r = s.unwrap_err();
                assert_eq!(r.status, PutStatus::MessageIllegal);
                r.reason
            })
            .collect();
        assert_eq!(why[0], "topic and body must not be null");
        assert!(
            why[1].starts_with("topic \"a b\" contains ' '"),
            "{}",
            why[1]
        );
        assert_eq!(why[2], "give a tags column or a TAGS property, not both");
        assert_eq!(why[3], "give a keys column or a KEYS property, not both");
        assert_eq!(why[4], "property \"X\" has an empty value");
    }

    #[test]
    fn a_missing_or_mistyped_column_is_a_column_error() {
        let only_body = RecordBatch::try_from_iter(vec![(
            "body",
            Arc::new(BinaryArray::from(vec![&b"a"[..]])) as ArrayRef,
        )])
        .unwrap();
        let e = specs_of_batch(&only_body, 0, &[]).unwrap_err();
        assert_eq!(e.to_string(), "column topic must be present");
        let int_body = RecordBatch::try_from_iter(vec![
            ("topic", Arc::new(StringArray::from(vec!["T"])) as ArrayRef),
            ("body", Arc::new(Int32Array::from(vec![1])) as ArrayRef),
        ])
        .unwrap();
        let e = specs_of_batch(&int_body, 0, &[]).unwrap_err();
        assert_eq!(
            e,
            ColumnError {
                name: "body",
                want: "binary"
            }
        );
    }

    #[test]
    fn a_check_finds_what_the_append_refuses_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_running(StoreOptions {
            commit_log_file_size: Some(64 << 10),
            consume_queue_file_size: Some(20 * 100),
            max_hash_slot_num: 10,
            max_index_num: 40,
            ..StoreOptions::at(dir.path())
        })
        .unwrap();
        let big = vec![b'x'; 70 << 10];
        // Row rules (a null body) and the put's own (queue id, record size,
        // DELAY) alike; the extra properties are part of what is checked.
        let cases: Vec<(RecordBatch, u64, &str)> = vec![
            (
                batch(&[
                    (Some("T"), Some(b"a"), None, None, None, None),
                    (Some("T"), None, None, None, None, None),
                ]),
                1,
                "topic and body must not be null",
            ),
            (
                batch(&[(Some("T"), Some(b"a"), Some(-1), None, None, None)]),
                0,
                "queue_id must be >= 0, got -1",
            ),
            (
                batch(&[
                    (Some("T"), Some(b"a"), None, None, None, None),
                    (Some("T"), Some(b"b"), None, None, None, None),
                    (Some("T"), Some(&big), None, None, None, None),
                ]),
                2,
                "a CommitLog segment",
            ),
            (
                batch(&[(
                    Some("T"),
                    Some(b"a"),
                    None,
                    None,
                    None,
                    Some(&[("DELAY", "x")]),
                )]),
                0,
                "property DELAY must be a whole number",
            ),
        ];
        for (b, row, why) in cases {
            let before = store.commitlog().max_offset();
            let r = store.check_arrow_batch(&b, 10, &[]).unwrap().unwrap();
            assert_eq!(store.commitlog().max_offset(), before, "a check wrote");
            assert_eq!(r.row, 10 + row);
            assert!(r.reason.contains(why), "{} / {why}", r.reason);
            let put = store.append_arrow_batch(&b, 10, &[], true).unwrap();
            let refused = put.refused.unwrap();
            assert_eq!((refused.row, refused.reason), (r.row, r.reason));
        }
        let good = batch(&[(Some("T"), Some(b"a"), None, None, None, None)]);
        assert_eq!(store.check_arrow_batch(&good, 0, &[]).unwrap(), None);
        let bad_extra = [("E".to_owned(), String::new())];
        let r = store
            .check_arrow_batch(&good, 0, &bad_extra)
            .unwrap()
            .unwrap();
        assert_eq!(r.reason, "property \"E\" has an empty value");
        store.shutdown().unwrap();
        assert!(matches!(
            store.check_arrow_batch(&good, 0, &[]),
            Err(AppendError::Store(StoreError::Closed))
        ));
    }

    #[test]
    fn an_append_stops_at_the_first_refused_row() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_running(StoreOptions {
            commit_log_file_size: Some(64 << 10),
            consume_queue_file_size: Some(20 * 100),
            max_hash_slot_num: 10,
            max_index_num: 40,
            ..StoreOptions::at(dir.path())
        })
        .unwrap();
        let good = batch(&[
            (Some("T"), Some(b"a"), None, None, None, None),
            (Some("T"), Some(b"b"), None, None, None, None),
        ]);
        let done = store.append_arrow_batch(&good, 0, &[], true).unwrap();
        assert_eq!((done.appended, done.rows, done.refused), (2, 2, None));
        let bad = batch(&[
            (Some("T"), Some(b"c"), None, None, None, None),
            (None, Some(b"d"), None, None, None, None),
            (Some("T"), Some(b"e"), None, None, None, None),
        ]);
        let done = store.append_arrow_batch(&bad, 2, &[], true).unwrap();
        assert_eq!((done.appended, done.rows), (1, 1));
        let refused = done.refused.unwrap();
        assert_eq!(
            (refused.row, refused.status),
            (3, PutStatus::MessageIllegal)
        );
        store.drain_dispatch().unwrap();
        assert_eq!(store.max_offset_in_queue("T", 0).unwrap(), 3);
        // A closed store refuses the append.
        store.shutdown().unwrap();
        assert!(matches!(
            store.append_arrow_batch(&good, 0, &[], true),
            Err(AppendError::Store(StoreError::Closed))
        ));
    }
}
