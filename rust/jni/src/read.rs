//! Columnar readers: the engine's Arrow reader of a store's ranges
//! ([`engine::Store::arrow_reader`], the one the Python source reads
//! through), its batches registered for Java to wrap.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arrow_array::RecordBatchReader;
use engine::{ArrowReadRequest, Projection, ReadStats, RowFilter, Store, TagFilter};
use jni::objects::{JClass, JIntArray, JLongArray, JObjectArray, JString};
use jni::sys::{jint, jlong, jlongArray};
use jni::JNIEnv;

use crate::handles::{self, Entry};
use crate::store::{ints, long_array, longs, string, strings};
use crate::{export, guard, Error, Result};

/// One read: the engine's batch reader and its counters. It holds its
/// store, so the store stays open (and its segments mapped) while it reads.
pub struct Reader {
    batches: Box<dyn RecordBatchReader + Send>,
    stats: Arc<ReadStats>,
    /// Nanoseconds in the engine's batch reader (decoding) and in
    /// registering its batches for Java (the hand-off's native half).
    decode_ns: u64,
    export_ns: u64,
    _store: Arc<Store>,
}

/// The ranges and rules of one read, as Java hands them.
struct Args {
    q_topics: Vec<String>,
    q_ids: Vec<i32>,
    q_bounds: Vec<i64>,
    cl_bounds: Vec<i64>,
    filter: RowFilter,
    batch_rows: i32,
    store_name: Option<String>,
    columns: Option<Vec<String>>,
}

fn start(store: Arc<Store>, a: Args) -> Result<Reader> {
    if a.q_topics.len() != a.q_ids.len() || a.q_bounds.len() != 2 * a.q_ids.len() {
        return Err(Error::Arg(
            "queue ranges: topics, ids and bounds differ in number".into(),
        ));
    }
    if a.cl_bounds.len() % 2 != 0 {
        return Err(Error::Arg(
            "CommitLog ranges: an odd number of bounds".into(),
        ));
    }
    if a.batch_rows <= 0 {
        return Err(Error::Arg(format!(
            "batch size must be > 0, got {}",
            a.batch_rows
        )));
    }
    let projection = a
        .columns
        .map(|c| Projection::of(&c))
        .transpose()
        .map_err(|e| Error::Arg(e.to_string()))?;
    let mut queues = Vec::with_capacity(a.q_ids.len());
    for (i, (t, q)) in a.q_topics.into_iter().zip(a.q_ids).enumerate() {
        store.check_read_topic(&t)?;
        queues.push((t, q, a.q_bounds[2 * i], a.q_bounds[2 * i + 1]));
    }
    let cl = a.cl_bounds.chunks(2).map(|c| (c[0], c[1])).collect();
    let (batches, stats) = store.arrow_reader(ArrowReadRequest {
        filter: a.filter,
        batch_rows: a.batch_rows as usize,
        projection,
        store_name: a.store_name,
        threads: 1,
        ..ArrowReadRequest::of(queues, cl)
    })?;
    Ok(Reader {
        batches,
        stats,
        decode_ns: 0,
        export_ns: 0,
        _store: store,
    })
}

/// Starts a read of `store`: queue ranges `(qTopics[i], qIds[i],
/// qBounds[2i], qBounds[2i+1])`, then CommitLog ranges `clBounds` (pairs);
/// rows kept by the filter (`topics` and `tags` null: no condition; store
/// times inclusive, ms); `columns` null: every column. Returns the reader's handle.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_openReader<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    store: jlong,
    q_topics: JObjectArray<'l>,
    q_ids: JIntArray<'l>,
    q_bounds: JLongArray<'l>,
    cl_bounds: JLongArray<'l>,
    topics: JObjectArray<'l>,
    flags: jint,
    min_time: jlong,
    max_time: jlong,
    tags: JObjectArray<'l>,
    batch_rows: jint,
    store_name: JString<'l>,
    columns: JObjectArray<'l>,
) -> jlong {
    guard(&mut env, 0, |env| {
        let s = handles::store(store)?;
        let filter = RowFilter {
            topics: strings(env, &topics, "a topic")?
                .map(|t| t.into_iter().map(String::into_bytes).collect()),
            include_system: flags & 1 != 0,
            include_uncommitted: flags & 2 != 0,
            min_store_timestamp: (min_time != i64::MIN).then_some(min_time),
            max_store_timestamp: (max_time != i64::MAX).then_some(max_time),
            tags: strings(env, &tags, "a tag")?.map(|t| TagFilter::exact(&t)),
        };
        let args = Args {
            q_topics: strings(env, &q_topics, "a topic")?.unwrap_or_default(),
            q_ids: ints(env, &q_ids)?,
            q_bounds: longs(env, &q_bounds)?,
            cl_bounds: longs(env, &cl_bounds)?,
            filter,
            batch_rows,
            store_name: if store_name.is_null() {
                None
            } else {
                Some(string(env, &store_name, "store name")?)
            },
            columns: strings(env, &columns, "a column")?,
        };
        let r = start(s, args)?;
        Ok(handles::insert(Entry::Reader(Arc::new(Mutex::new(r)))))
    })
}

/// The reader's next batch, registered: `[handle, rows, nodes, (length,
/// nulls)*, buffers, (address, length)*]` (see [`export::describe`]); null
/// at the end. The buffers stay valid until the batch's handle is closed.
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_nextBatch<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    reader: jlong,
) -> jlongArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let r = handles::reader(reader)?;
        let t = Instant::now();
        let next = {
            let mut r = r.lock().unwrap_or_else(|p| p.into_inner());
            let next = r.batches.next();
            r.decode_ns += elapsed_ns(t);
            next
        };
        let Some(batch) = next else {
            return Ok(std::ptr::null_mut());
        };
        let t = Instant::now();
        let batch = batch.map_err(|e| {
            Error::Store(engine::StoreError::io(
                "decode a batch",
                std::io::Error::other(e.to_string()),
            ))
        })?;
        let layout = export::describe(&batch)?;
        let h = handles::insert(Entry::Batch(Arc::new(batch)));
        let mut out = Vec::with_capacity(layout.len() + 1);
        out.push(h);
        out.extend(layout);
        let a = long_array(env, &out);
        r.lock().unwrap_or_else(|p| p.into_inner()).export_ns += elapsed_ns(t);
        a
    })
}

fn elapsed_ns(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The reader's counters: `[decoded, rows, filtered, damaged, lost,
/// decode_ns, export_ns]` (the last two: nanoseconds in the engine's batch
/// reader, and in registering its batches for Java).
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_readStats<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    reader: jlong,
) -> jlongArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let r = handles::reader(reader)?;
        let (s, ns) = {
            let r = r.lock().unwrap_or_else(|p| p.into_inner());
            (r.stats.clone(), [r.decode_ns, r.export_ns])
        };
        let c = [
            &s.decoded,
            &s.rows,
            &s.filtered,
            &s.skipped_corrupt,
            &s.lost,
        ]
        .map(|c| c.load(Ordering::Relaxed) as i64);
        let v: Vec<i64> = c
            .into_iter()
            .chain(ns.map(|n| i64::try_from(n).unwrap_or(i64::MAX)))
            .collect();
        long_array(env, &v)
    })
}
