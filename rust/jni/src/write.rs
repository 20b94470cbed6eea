//! The connector's writes: a writable open, the rows a commit appends
//! (checked first, then put, through the engine's Arrow append: the same
//! rules and code as the Python sink's `check_arrow`/`put_arrow`), and the
//! count of messages a job already appended (its tag property).
//!
//! Java hands rows over in the connector's row encoding (big-endian, as
//! `java.io.DataOutputStream` writes it), one record per row:
//!
//! ```text
//! topic  str          str   = i32 length (-1: null), then UTF-8 bytes
//! body   bytes        bytes = i32 length (-1: null), then the bytes
//! queue  i32 flag (0: null, 1: present), then i32 queue id
//! tags   str
//! keys   i32 count (-1: null), then one str per key
//! props  i32 count (-1: null), then str name, str value per property
//! ```
//!
//! Every column is always there: a null queue id, tags, keys or
//! properties is what an absent column is to the append.

use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, Int32Builder, ListBuilder, MapBuilder, StringBuilder};
use arrow_array::{Array, ArrayRef, Int64Array, MapArray, RecordBatch, StringArray};
use engine::{ArrowReadRequest, Projection, RowFilter, Store};
use jni::objects::{JByteArray, JClass, JObjectArray, JString};
use jni::sys::{jboolean, jlong, jlongArray, jobjectArray};
use jni::JNIEnv;

use crate::handles;
use crate::store::{long_array, string, string_array};
use crate::writer::pairs;
use crate::{guard, Error, Result};

struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len());
        let end =
            end.ok_or_else(|| Error::Arg(format!("row encoding cut short at byte {}", self.at)))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn i32(&mut self) -> Result<i32> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn len(&mut self) -> Result<Option<usize>> {
        match self.i32()? {
            -1 => Ok(None),
            n if n >= 0 => Ok(Some(n as usize)),
            n => Err(Error::Arg(format!("row encoding: bad length {n}"))),
        }
    }

    fn bytes(&mut self) -> Result<Option<&'a [u8]>> {
        self.len()?.map(|n| self.take(n)).transpose()
    }

    fn str(&mut self) -> Result<Option<&'a str>> {
        self.bytes()?
            .map(|b| {
                std::str::from_utf8(b)
                    .map_err(|_| Error::Arg("row encoding: a string is not UTF-8".into()))
            })
            .transpose()
    }
}

/// The rows of `buf` (the row encoding) as a batch of the write columns.
pub fn decode_rows(buf: &[u8]) -> Result<RecordBatch> {
    let mut c = Cursor { buf, at: 0 };
    let mut topic = StringBuilder::new();
    let mut body = BinaryBuilder::new();
    let mut queue = Int32Builder::new();
    let mut tags = StringBuilder::new();
    let mut keys = ListBuilder::new(StringBuilder::new());
    let mut props = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
    while c.at < buf.len() {
        topic.append_option(c.str()?);
        body.append_option(c.bytes()?);
        let q = c.take(1)?[0];
        let id = c.i32()?;
        queue.append_option((q != 0).then_some(id));
        tags.append_option(c.str()?);
        match c.len()? {
            None => keys.append(false),
            Some(n) => {
                for _ in 0..n {
                    keys.values().append_option(c.str()?);
                }
                keys.append(true);
            }
        }
        match c.len()? {
            None => props.append(false).map_err(|e| Error::Arg(e.to_string()))?,
            Some(n) => {
                for _ in 0..n {
                    let k = c
                        .str()?
                        .ok_or_else(|| Error::Arg("row encoding: a null property name".into()))?;
                    props.keys().append_value(k);
                    props.values().append_option(c.str()?);
                }
                props.append(true).map_err(|e| Error::Arg(e.to_string()))?;
            }
        }
    }
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("topic", Arc::new(topic.finish())),
        ("body", Arc::new(body.finish())),
        ("queue_id", Arc::new(queue.finish())),
        ("tags", Arc::new(tags.finish())),
        ("keys", Arc::new(keys.finish())),
        ("properties", Arc::new(props.finish())),
    ];
    RecordBatch::try_from_iter(cols).map_err(|e| Error::Arg(e.to_string()))
}

/// What checking or appending rows did: rows appended, and the first row
/// refused (its index in the job's rows, put status, reason), if any.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Rows written (0 for a check).
    pub appended: u64,
    /// The first refused row: index, put status, reason.
    pub refused: Option<(u64, u8, String)>,
}

/// An append's error as an entry point's.
pub fn append_error(e: engine::AppendError) -> Error {
    match e {
        engine::AppendError::Store(e) => Error::from(e),
        engine::AppendError::Column(c) => Error::Arg(c.to_string()),
    }
}

/// Checks the rows of `batch`, whose first row is row `first_row` of the
/// job, against every put rule with the `extra` properties, writing
/// nothing: the first row a put would refuse, if any.
pub fn check_rows(
    store: &Store,
    batch: &RecordBatch,
    first_row: u64,
    extra: &[(String, String)],
) -> Result<Outcome> {
    store.check_open_writer()?;
    let r = store
        .check_arrow_batch(batch, first_row, extra)
        .map_err(append_error)?;
    Ok(Outcome {
        appended: 0,
        refused: r.map(|r| (r.row, r.status as u8, r.reason)),
    })
}

/// How many messages from CommitLog offset `since` on carry property
/// `prop` = `tag` (system topics included), and the CommitLog offset of
/// the first of them (`None`: none).
pub fn count_tagged(
    store: &Arc<Store>,
    prop: &str,
    tag: &str,
    since: i64,
) -> Result<(u64, Option<i64>)> {
    let cols = ["properties".to_string(), "commit_log_offset".to_string()];
    let projection = Projection::of(&cols).map_err(|e| Error::Arg(e.to_string()))?;
    let (reader, _stats) = store.arrow_reader(ArrowReadRequest {
        filter: RowFilter {
            include_system: true,
            ..RowFilter::default()
        },
        projection: Some(projection),
        ..ArrowReadRequest::of(Vec::new(), vec![(since.max(0), i64::MAX)])
    })?;
    let (mut n, mut first) = (0u64, None);
    for b in reader {
        let b = b.map_err(|e| Error::Arg(format!("reading properties: {e}")))?;
        let (Some(m), Some(offsets)) = (
            b.column_by_name("properties")
                .and_then(|c| c.as_any().downcast_ref::<MapArray>()),
            b.column_by_name("commit_log_offset")
                .and_then(|c| c.as_any().downcast_ref::<Int64Array>()),
        ) else {
            return Err(Error::Arg(
                "properties is not a map, or commit_log_offset not int64".into(),
            ));
        };
        for i in 0..m.len() {
            if !m.is_null(i) && carries(&m.value(i), prop, tag)? {
                n += 1;
                first = first.or(Some(offsets.value(i)));
            }
        }
    }
    Ok((n, first))
}

/// True when the last entry named `prop` of a properties map is `tag` (a
/// map lookup's "last", as the Python sink's count).
fn carries(entry: &arrow_array::StructArray, prop: &str, tag: &str) -> Result<bool> {
    let keys = entry.column(0).as_any().downcast_ref::<StringArray>();
    let vals = entry.column(1).as_any().downcast_ref::<StringArray>();
    let (Some(keys), Some(vals)) = (keys, vals) else {
        return Err(Error::Arg("properties is not a map of strings".into()));
    };
    let hit = (0..keys.len())
        .rev()
        .find(|&j| keys.is_valid(j) && keys.value(j) == prop);
    Ok(hit.is_some_and(|j| vals.is_valid(j) && vals.value(j) == tag))
}

/// Checks (`checkOnly`) or appends rows (the row encoding) to a writer's
/// store, the first being row `firstRow` of the job, each with the
/// `extra` properties (name, value, ...). Returns {appended, refused row
/// (-1: none), put status, reason}.
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_appendRows<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    store: jlong,
    rows: JByteArray<'l>,
    first_row: jlong,
    extra: JObjectArray<'l>,
    check_only: jboolean,
) -> jobjectArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let s = handles::store(store)?;
        if rows.is_null() {
            return Err(Error::Arg("rows is null".into()));
        }
        let buf = env.convert_byte_array(&rows)?;
        let extra = pairs(env, &extra)?;
        let first = u64::try_from(first_row)
            .map_err(|_| Error::Arg(format!("firstRow {first_row} < 0")))?;
        let batch = decode_rows(&buf)?;
        let o = if check_only != 0 {
            check_rows(&s, &batch, first, &extra)?
        } else {
            handles::writer(store)?.append(&batch, first, &extra)?
        };
        let (row, status, why) = match o.refused {
            Some((r, st, why)) => (r.to_string(), st.to_string(), why),
            None => ("-1".into(), "0".into(), String::new()),
        };
        string_array(env, &[o.appended.to_string(), row, status, why])
    })
}

/// Flushes a writer's store (queues and index too); returns the flushed
/// CommitLog offset.
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_flush<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    store: jlong,
) -> jlong {
    guard(&mut env, 0, |_| Ok(handles::store(store)?.flush()? as i64))
}

/// `{count, first}`: how many messages from CommitLog offset `since` on
/// carry property `prop` = `tag`, and the CommitLog offset of the first
/// (-1: none).
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_countTagged<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    store: jlong,
    prop: JString<'l>,
    tag: JString<'l>,
    since: jlong,
) -> jlongArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let s = handles::store(store)?;
        let prop = string(env, &prop, "prop")?;
        let tag = string(env, &tag, "tag")?;
        let (n, first) = count_tagged(&s, &prop, &tag, since)?;
        long_array(env, &[n as i64, first.unwrap_or(-1)])
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn s(out: &mut Vec<u8>, v: Option<&str>) {
        b(out, v.map(str::as_bytes));
    }

    fn b(out: &mut Vec<u8>, v: Option<&[u8]>) {
        match v {
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(v) => {
                out.extend_from_slice(&(v.len() as i32).to_be_bytes());
                out.extend_from_slice(v);
            }
        }
    }

    fn row(out: &mut Vec<u8>, topic: Option<&str>, body: &[u8], q: Option<i32>, key: &str) {
        s(out, topic);
        b(out, Some(body));
        out.push(q.is_some() as u8);
        out.extend_from_slice(&q.unwrap_or(0).to_be_bytes());
        s(out, Some("TagA"));
        out.extend_from_slice(&1i32.to_be_bytes());
        s(out, Some(key));
        out.extend_from_slice(&1i32.to_be_bytes());
        s(out, Some("color"));
        s(out, Some("red"));
    }

    /// `n` rows of topic `T` in the row encoding, decoded.
    pub(crate) fn rows(n: i32) -> RecordBatch {
        let mut buf = Vec::new();
        for i in 0..n {
            row(&mut buf, Some("T"), b"body", Some(i % 2), "k");
        }
        decode_rows(&buf).expect("decode")
    }

    fn writer(dir: &std::path::Path) -> crate::writer::Writer {
        let p = dir.join("store").to_string_lossy().into_owned();
        crate::writer::Writer::open(p, Vec::new()).expect("open a writer")
    }

    #[test]
    fn rows_decode_with_every_column() {
        let mut buf = Vec::new();
        row(&mut buf, Some("T"), b"a", Some(2), "k1");
        row(&mut buf, Some("T"), b"bb", None, "k2");
        let batch = decode_rows(&buf).expect("decode");
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(batch.num_columns(), 6);
        assert!(batch.column(2).is_null(1));
        assert!(decode_rows(&buf[..buf.len() - 1]).is_err());
    }

    #[test]
    fn a_bad_row_is_found_before_anything_is_appended() {
        let dir = tempfile::tempdir().expect("tempdir");
        let w = writer(dir.path());
        let store = &w.store;
        let mut buf = Vec::new();
        row(&mut buf, Some("T"), b"a", Some(0), "k1");
        row(&mut buf, None, b"b", Some(0), "k2");
        let batch = decode_rows(&buf).expect("decode");
        let extra = vec![("JOB".to_string(), "j1".to_string())];
        let o = check_rows(store, &batch, 10, &extra).expect("check");
        assert_eq!(o.appended, 0);
        assert_eq!(o.refused.as_ref().map(|r| r.0), Some(11));
        assert_eq!(store.commitlog().max_offset(), 0);
        w.close().expect("close");
    }

    #[test]
    fn appended_rows_are_counted_by_their_tag() {
        let dir = tempfile::tempdir().expect("tempdir");
        let w = writer(dir.path());
        let store = &w.store;
        let batch = rows(3);
        let extra = vec![("JOB".to_string(), "j1".to_string())];
        assert_eq!(
            check_rows(store, &batch, 0, &extra).expect("check").refused,
            None
        );
        let o = w.append(&batch, 0, &extra).expect("append");
        assert_eq!(
            o,
            Outcome {
                appended: 3,
                refused: None
            }
        );
        store.flush().expect("flush");
        assert_eq!(
            count_tagged(store, "JOB", "j1", 0).expect("count"),
            (3, Some(0))
        );
        assert_eq!(
            count_tagged(store, "JOB", "j2", 0).expect("count"),
            (0, None)
        );
        let second = store.commitlog().max_offset() as i64 / 3;
        assert_eq!(
            count_tagged(store, "color", "red", second).expect("count"),
            (2, Some(second))
        );
        w.close().expect("close");
    }
}
