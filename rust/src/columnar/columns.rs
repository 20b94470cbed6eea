//! The read schema's registry ([`COLUMNS`]: one row per column) and
//! [`Projection`]: which columns a read decodes, in which order.
//!
//! Each column is declared once, in the `read_columns!` list below: its
//! [`Column`] variant, name, Arrow type, whether a row can hold a null, and
//! how the Spark format's filter pushdown answers filters on it. The
//! schema, the projection's names, the binding's `READ_COLUMNS` and from it
//! the Spark schema and the pushdown's column facts all read that list;
//! [`BatchBuilder`](super::BatchBuilder) decodes each column.
//!
//! A projection is the ordered list of the columns a read returns. The
//! decoder consults it per column: a column that is not asked for costs
//! nothing beyond the record's header parse and CRC checks (every read checks
//! those); in particular the property bytes are parsed only when `properties`,
//! `tags` or `keys` is asked for, and the body is copied (and inflated) only
//! when `body` is.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

use super::{keys_item, map_type};

/// The Arrow type of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// UTF-8 string.
    Utf8,
    /// 32-bit integer.
    Int32,
    /// 64-bit integer.
    Int64,
    /// Bytes.
    Binary,
    /// Microseconds since the epoch, UTC (Spark's `timestamp`).
    TimestampUtc,
    /// A list of strings (items named `element`, as Spark names them).
    StringList,
    /// A map of strings to strings.
    StringMap,
}

impl ColumnType {
    /// The Arrow type.
    pub fn data_type(self) -> DataType {
        match self {
            ColumnType::Utf8 => DataType::Utf8,
            ColumnType::Int32 => DataType::Int32,
            ColumnType::Int64 => DataType::Int64,
            ColumnType::Binary => DataType::Binary,
            ColumnType::TimestampUtc => {
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
            }
            ColumnType::StringList => DataType::List(Arc::new(keys_item())),
            ColumnType::StringMap => map_type(),
        }
    }

    /// The type as Arrow's Python library spells it (`str` of a
    /// `pyarrow.DataType`): the spelling the docs and the Python side use.
    pub fn arrow_name(self) -> &'static str {
        match self {
            ColumnType::Utf8 => "string",
            ColumnType::Int32 => "int32",
            ColumnType::Int64 => "int64",
            ColumnType::Binary => "binary",
            ColumnType::TimestampUtc => "timestamp[us, tz=UTC]",
            ColumnType::StringList => "list<element: string>",
            ColumnType::StringMap => "map<string, string>",
        }
    }
}

/// Whether a row can hold a null in a column. (The schema declares every
/// column nullable all the same: that is the Arrow schema Spark derives from
/// its DDL schema, and Spark takes batches of exactly its schema.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nulls {
    /// No row holds a null (`IS NOT NULL` holds for every row).
    Never,
    /// A row holds a null when its record lacks the value (`tags`: no
    /// `TAGS` property).
    WhenAbsent,
}

/// How the Spark format's filter pushdown answers filters on a column with
/// the store's own indexes (the rest Spark evaluates on the rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushdown {
    /// Not pushed down.
    No,
    /// `=`, `<=>` and `IN` on values: only the queues, tag hash codes or
    /// records those values name are read.
    Values,
    /// Comparisons: inclusive bounds narrowing the offsets read.
    Range,
}

impl Pushdown {
    /// Its name on the Python side (`None` for [`Pushdown::No`]).
    pub fn name(self) -> Option<&'static str> {
        match self {
            Pushdown::No => None,
            Pushdown::Values => Some("values"),
            Pushdown::Range => Some("range"),
        }
    }
}

/// One column of the read schema: everything the engine and the Python
/// side know of it but its decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnSpec {
    /// The column.
    pub column: Column,
    /// Its name in the schema.
    pub name: &'static str,
    /// Its Arrow type.
    pub ty: ColumnType,
    /// Whether a row can hold a null.
    pub nulls: Nulls,
    /// How filters on it are pushed down.
    pub pushdown: Pushdown,
}

/// Declares [`Column`] and [`COLUMNS`] from one list: variant `i` is row
/// `i`, so neither can leave the other behind.
macro_rules! read_columns {
    ($($(#[$doc:meta])* $variant:ident => $name:literal, $ty:ident, $nulls:ident, $push:ident;)+) => {
        /// One column of the decoded-message schema.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Column {
            $($(#[$doc])* $variant,)+
        }

        /// Every column of the read schema, in the schema's order (`store`
        /// last).
        pub const COLUMNS: &[ColumnSpec] = &[$(ColumnSpec {
            column: Column::$variant,
            name: $name,
            ty: ColumnType::$ty,
            nulls: Nulls::$nulls,
            pushdown: Pushdown::$push,
        },)+];
    };
}

read_columns! {
    /// `topic`.
    Topic => "topic", Utf8, Never, Values;
    /// `queue_id`.
    QueueId => "queue_id", Int32, Never, Values;
    /// `queue_offset`: the logical offset in its queue.
    QueueOffset => "queue_offset", Int64, Never, Range;
    /// `commit_log_offset`: the physical offset of its record.
    CommitLogOffset => "commit_log_offset", Int64, Never, Range;
    /// `msg_id`: the offset message id.
    MsgId => "msg_id", Utf8, Never, Values;
    /// `tags`: the `TAGS` property.
    Tags => "tags", Utf8, WhenAbsent, Values;
    /// `keys`: the `KEYS` property split at spaces (empty when absent).
    Keys => "keys", StringList, Never, No;
    /// `properties`: every property (empty when none).
    Properties => "properties", StringMap, Never, No;
    /// `body`: inflated when stored compressed.
    Body => "body", Binary, Never, No;
    /// `body_crc`.
    BodyCrc => "body_crc", Int32, Never, No;
    /// `flag`.
    Flag => "flag", Int32, Never, No;
    /// `sys_flag`.
    SysFlag => "sys_flag", Int32, Never, No;
    /// `born_timestamp`.
    BornTimestamp => "born_timestamp", TimestampUtc, Never, No;
    /// `born_host`: `ip:port` / `[ipv6]:port`.
    BornHost => "born_host", Utf8, Never, No;
    /// `store_timestamp`.
    StoreTimestamp => "store_timestamp", TimestampUtc, Never, Range;
    /// `store_host`: `ip:port` / `[ipv6]:port`.
    StoreHost => "store_host", Utf8, Never, No;
    /// `reconsume_times`.
    ReconsumeTimes => "reconsume_times", Int32, Never, No;
    /// `store`: the name of the store the row came from (reads of several
    /// stores only; stays last).
    Store => "store", Utf8, Never, No;
}

impl Column {
    /// The column's row of [`COLUMNS`].
    pub fn spec(self) -> &'static ColumnSpec {
        // Row `i` is variant `i` (one macro declares both).
        &COLUMNS[self as usize]
    }

    /// The column's name in the schema.
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// The column named `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Column> {
        COLUMNS.iter().find(|s| s.name == name).map(|s| s.column)
    }

    /// The column's Arrow type.
    pub fn data_type(self) -> DataType {
        self.spec().ty.data_type()
    }

    /// The column's Arrow field (every column is nullable, see [`Nulls`]).
    pub fn field(self) -> Field {
        Field::new(self.name(), self.data_type(), true)
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

// A `ColumnSet` holds one bit per column.
const _: () = assert!(COLUMNS.len() <= u32::BITS as usize);

/// Why a list of column names is not a projection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProjectionError {
    /// A name that is no column.
    #[error("no column named {name:?}; the columns: {}", valid_names())]
    Unknown {
        /// The name given.
        name: String,
    },
    /// A column named twice.
    #[error("column {0:?} is named twice")]
    Repeated(String),
    /// No column at all.
    #[error("no columns asked for; the columns: {}", valid_names())]
    Empty,
}

fn valid_names() -> String {
    COLUMNS
        .iter()
        .map(|s| s.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A set of columns (what the decoder consults per record; `Copy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ColumnSet(u32);

impl ColumnSet {
    /// True when `c` is in the set.
    #[inline]
    pub fn contains(self, c: Column) -> bool {
        self.0 & c.bit() != 0
    }

    /// True when a record's property bytes must be parsed: `properties`,
    /// `tags` or `keys` is in the set.
    #[inline]
    pub fn needs_properties(self) -> bool {
        self.0 & (Column::Properties.bit() | Column::Tags.bit() | Column::Keys.bit()) != 0
    }
}

/// The columns a read returns, in order (at least one, none twice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projection {
    columns: Vec<Column>,
    set: u32,
}

impl Projection {
    /// Every column of the schema, `store` last when `with_store`.
    pub fn all(with_store: bool) -> Self {
        let columns: Vec<Column> = COLUMNS
            .iter()
            .map(|s| s.column)
            .filter(|&c| with_store || c != Column::Store)
            .collect();
        let set = columns.iter().fold(0, |s, c| s | c.bit());
        Self { columns, set }
    }

    /// The columns named `names`, in that order.
    pub fn of<S: AsRef<str>>(names: &[S]) -> Result<Self, ProjectionError> {
        let mut cols = Vec::with_capacity(names.len());
        for n in names {
            let n = n.as_ref();
            cols.push(
                Column::from_name(n)
                    .ok_or_else(|| ProjectionError::Unknown { name: n.to_owned() })?,
            );
        }
        Self::from_columns(cols)
    }

    /// `columns` in that order.
    pub fn from_columns(
        columns: impl IntoIterator<Item = Column>,
    ) -> Result<Self, ProjectionError> {
        let mut out = Self {
            columns: Vec::new(),
            set: 0,
        };
        for c in columns {
            if out.contains(c) {
                return Err(ProjectionError::Repeated(c.name().to_owned()));
            }
            out.set |= c.bit();
            out.columns.push(c);
        }
        if out.columns.is_empty() {
            return Err(ProjectionError::Empty);
        }
        Ok(out)
    }

    /// The columns, in output order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// The returned columns as a set.
    #[inline]
    pub fn set(&self) -> ColumnSet {
        ColumnSet(self.set)
    }

    /// True when `c` is returned.
    #[inline]
    pub fn contains(&self, c: Column) -> bool {
        self.set().contains(c)
    }

    /// True when a record's property bytes must be parsed: `properties`,
    /// `tags` or `keys` is returned.
    #[inline]
    pub fn needs_properties(&self) -> bool {
        self.set().needs_properties()
    }

    /// The Arrow schema of the returned batches.
    pub fn schema(&self) -> SchemaRef {
        Arc::new(Schema::new(
            self.columns.iter().map(|c| c.field()).collect::<Vec<_>>(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_all_is_the_schema() {
        let all: Vec<Column> = COLUMNS.iter().map(|s| s.column).collect();
        for (i, s) in COLUMNS.iter().enumerate() {
            assert_eq!(s.column as usize, i);
            assert_eq!(s.column.spec(), s);
            assert_eq!(Column::from_name(s.name), Some(s.column));
            assert_eq!(s.column.field().data_type(), &s.ty.data_type());
        }
        assert_eq!(all.last(), Some(&Column::Store));
        assert_eq!(Projection::all(true).columns(), all.as_slice());
        assert_eq!(Projection::all(false).columns(), &all[..all.len() - 1]);
        assert!(Projection::all(false).needs_properties());
        assert!(!Projection::all(false).contains(Column::Store));
    }

    #[test]
    fn names_are_distinct_and_facts_spelled_for_python() {
        let mut names: Vec<_> = COLUMNS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), COLUMNS.len());
        assert_eq!(Pushdown::No.name(), None);
        assert_eq!(Column::StoreTimestamp.spec().pushdown.name(), Some("range"));
        assert_eq!(Column::Tags.spec().nulls, Nulls::WhenAbsent);
        assert_eq!(
            Column::BornTimestamp.spec().ty.arrow_name(),
            "timestamp[us, tz=UTC]"
        );
    }

    #[test]
    fn a_projection_keeps_its_order_and_knows_what_it_needs() {
        let p = Projection::of(&["body", "queue_offset", "topic"]).unwrap();
        assert_eq!(
            p.columns(),
            &[Column::Body, Column::QueueOffset, Column::Topic]
        );
        let names: Vec<_> = p
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["body", "queue_offset", "topic"]);
        assert!(!p.needs_properties());
        assert!(!p.contains(Column::MsgId));
        for one in ["tags", "keys", "properties"] {
            assert!(Projection::of(&["topic", one]).unwrap().needs_properties());
        }
    }

    #[test]
    fn bad_names_are_refused_with_the_valid_ones() {
        let e = Projection::of(&["topic", "bodyy"]).unwrap_err();
        assert_eq!(
            e,
            ProjectionError::Unknown {
                name: "bodyy".into()
            }
        );
        let msg = e.to_string();
        assert!(msg.contains("\"bodyy\"") && msg.contains("topic, queue_id, queue_offset"));
        assert!(msg.ends_with(", store"), "{msg}");
        assert_eq!(
            Projection::of(&["topic", "topic"]).unwrap_err(),
            ProjectionError::Repeated("topic".into())
        );
        assert_eq!(
            Projection::of::<&str>(&[]).unwrap_err(),
            ProjectionError::Empty
        );
    }
}
