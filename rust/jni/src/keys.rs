//! Keys in the part of the CommitLog the index does not cover: a scan of
//! those records (the `key` option's fallback, as the Python source's).

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::Array;
use engine::{ArrowReadRequest, Projection, RowFilter};
use jni::objects::{JClass, JObjectArray};
use jni::sys::{jint, jlong, jobjectArray};
use jni::JNIEnv;

use crate::handles;
use crate::store::{string_array, strings};
use crate::{guard, Error, Result};

fn scan(
    store: &std::sync::Arc<engine::Store>,
    from: i64,
    to: i64,
    topics: Vec<String>,
    keys: &HashSet<String>,
    flags: i32,
) -> Result<Vec<String>> {
    let projection = Projection::of(&["topic", "queue_id", "queue_offset", "keys"])
        .map_err(|e| Error::Arg(e.to_string()))?;
    let (reader, stats) = store.arrow_reader(ArrowReadRequest {
        filter: RowFilter {
            topics: Some(topics.into_iter().map(String::into_bytes).collect()),
            include_system: flags & 1 != 0,
            include_uncommitted: flags & 2 != 0,
            ..RowFilter::default()
        },
        projection: Some(projection),
        ..ArrowReadRequest::of(vec![], vec![(from, to)])
    })?;
    let mut out = vec![String::new()];
    for b in reader {
        let b = b.map_err(|e| Error::Arg(format!("decode: {e}")))?;
        let (t, q, o, k) = (
            b.column(0).as_string::<i32>(),
            b.column(1).as_primitive::<Int32Type>(),
            b.column(2).as_primitive::<Int64Type>(),
            b.column(3).as_list::<i32>(),
        );
        for i in 0..b.num_rows() {
            let ks = k.value(i);
            let ks = ks.as_string::<i32>();
            if (0..ks.len()).any(|j| ks.is_valid(j) && keys.contains(ks.value(j))) {
                out.push(format!("{}\t{}\t{}", q.value(i), o.value(i), t.value(i)));
            }
        }
    }
    let damaged = stats.skipped_corrupt.load(Ordering::Relaxed);
    if let Some(first) = out.first_mut() {
        *first = damaged.to_string();
    }
    Ok(out)
}

/// Scans CommitLog offsets `[from, to)` for the records of `topics` whose
/// keys hold one of `keys`: `[damaged, "queue_id\tqueue_offset\ttopic", ...]`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_keyScan<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    store: jlong,
    from: jlong,
    to: jlong,
    topics: JObjectArray<'l>,
    keys: JObjectArray<'l>,
    flags: jint,
) -> jobjectArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let s = handles::store(store)?;
        let topics =
            strings(env, &topics, "a topic")?.ok_or_else(|| Error::Arg("topics is null".into()))?;
        let keys: HashSet<String> = strings(env, &keys, "a key")?
            .ok_or_else(|| Error::Arg("keys is null".into()))?
            .into_iter()
            .collect();
        let out = scan(&s, from, to, topics, &keys, flags)?;
        string_array(env, &out)
    })
}
