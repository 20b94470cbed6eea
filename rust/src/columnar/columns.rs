//! [`Column`] and [`Projection`]: which columns a read decodes, in which
//! order.
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

/// One column of the decoded-message schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Column {
    /// `topic` (string).
    Topic,
    /// `queue_id` (int32).
    QueueId,
    /// `queue_offset` (int64).
    QueueOffset,
    /// `commit_log_offset` (int64).
    CommitLogOffset,
    /// `msg_id` (string, the offset message id).
    MsgId,
    /// `tags` (string, the `TAGS` property).
    Tags,
    /// `keys` (list of strings, the `KEYS` property split at spaces).
    Keys,
    /// `properties` (map of strings).
    Properties,
    /// `body` (binary, inflated when stored compressed).
    Body,
    /// `body_crc` (int32).
    BodyCrc,
    /// `flag` (int32).
    Flag,
    /// `sys_flag` (int32).
    SysFlag,
    /// `born_timestamp` (timestamp, µs, UTC).
    BornTimestamp,
    /// `born_host` (string).
    BornHost,
    /// `store_timestamp` (timestamp, µs, UTC).
    StoreTimestamp,
    /// `store_host` (string).
    StoreHost,
    /// `reconsume_times` (int32).
    ReconsumeTimes,
    /// `store` (string): the name of the store the row came from.
    Store,
}

impl Column {
    /// Every column, in the schema's order (`store` last).
    pub const ALL: [Column; 18] = [
        Column::Topic,
        Column::QueueId,
        Column::QueueOffset,
        Column::CommitLogOffset,
        Column::MsgId,
        Column::Tags,
        Column::Keys,
        Column::Properties,
        Column::Body,
        Column::BodyCrc,
        Column::Flag,
        Column::SysFlag,
        Column::BornTimestamp,
        Column::BornHost,
        Column::StoreTimestamp,
        Column::StoreHost,
        Column::ReconsumeTimes,
        Column::Store,
    ];

    /// The column's name in the schema.
    pub fn name(self) -> &'static str {
        match self {
            Column::Topic => "topic",
            Column::QueueId => "queue_id",
            Column::QueueOffset => "queue_offset",
            Column::CommitLogOffset => "commit_log_offset",
            Column::MsgId => "msg_id",
            Column::Tags => "tags",
            Column::Keys => "keys",
            Column::Properties => "properties",
            Column::Body => "body",
            Column::BodyCrc => "body_crc",
            Column::Flag => "flag",
            Column::SysFlag => "sys_flag",
            Column::BornTimestamp => "born_timestamp",
            Column::BornHost => "born_host",
            Column::StoreTimestamp => "store_timestamp",
            Column::StoreHost => "store_host",
            Column::ReconsumeTimes => "reconsume_times",
            Column::Store => "store",
        }
    }

    /// The column named `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Column> {
        Column::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The column's Arrow type.
    pub fn data_type(self) -> DataType {
        let ts = || DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        match self {
            Column::Topic
            | Column::MsgId
            | Column::Tags
            | Column::BornHost
            | Column::StoreHost
            | Column::Store => DataType::Utf8,
            Column::QueueId
            | Column::BodyCrc
            | Column::Flag
            | Column::SysFlag
            | Column::ReconsumeTimes => DataType::Int32,
            Column::QueueOffset | Column::CommitLogOffset => DataType::Int64,
            Column::Keys => DataType::List(Arc::new(keys_item())),
            Column::Properties => map_type(),
            Column::Body => DataType::Binary,
            Column::BornTimestamp | Column::StoreTimestamp => ts(),
        }
    }

    /// The column's Arrow field (every column is nullable).
    pub fn field(self) -> Field {
        Field::new(self.name(), self.data_type(), true)
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

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
    Column::ALL
        .iter()
        .map(|c| c.name())
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
        let n = if with_store { 18 } else { 17 };
        let columns: Vec<Column> = Column::ALL.iter().take(n).copied().collect();
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
        for c in Column::ALL {
            assert_eq!(Column::from_name(c.name()), Some(c));
        }
        assert_eq!(Projection::all(true).columns(), &Column::ALL);
        assert_eq!(Projection::all(false).columns(), &Column::ALL[..17]);
        assert!(Projection::all(false).needs_properties());
        assert!(!Projection::all(false).contains(Column::Store));
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
        assert!(msg.ends_with("reconsume_times, store"), "{msg}");
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
