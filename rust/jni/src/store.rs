//! Opening a store read-only (through the process's cache), and what the
//! connector's planning asks of it (the same engine calls the Python source's planning makes).

use std::sync::Arc;

use engine::{Nulls, Store, StoreError, COLUMNS};
use jni::objects::{JClass, JIntArray, JLongArray, JObject, JObjectArray, JString};
use jni::sys::{jboolean, jint, jlong, jlongArray, jobjectArray, jstring};
use jni::JNIEnv;

use crate::handles::{self, Entry};
use crate::{cache, guard, Error, Result};

/// A Java string argument (null refused).
pub fn string(env: &mut JNIEnv<'_>, s: &JString<'_>, what: &str) -> Result<String> {
    if s.is_null() {
        return Err(Error::Arg(format!("{what} is null")));
    }
    Ok(env.get_string(s)?.into())
}

/// A Java `String[]` argument (`None` for null; a null element refused).
pub fn strings(
    env: &mut JNIEnv<'_>,
    a: &JObjectArray<'_>,
    what: &str,
) -> Result<Option<Vec<String>>> {
    if a.is_null() {
        return Ok(None);
    }
    let n = env.get_array_length(a)?;
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n {
        let o = env.get_object_array_element(a, i)?;
        out.push(string(env, &JString::from(o), what)?);
    }
    Ok(Some(out))
}

/// A Java `long[]` argument (null: empty).
pub fn longs(env: &mut JNIEnv<'_>, a: &JLongArray<'_>) -> Result<Vec<i64>> {
    if a.is_null() {
        return Ok(Vec::new());
    }
    let mut v = vec![0i64; env.get_array_length(a)? as usize];
    env.get_long_array_region(a, 0, &mut v)?;
    Ok(v)
}

/// A Java `int[]` argument (null: empty).
pub fn ints(env: &mut JNIEnv<'_>, a: &JIntArray<'_>) -> Result<Vec<i32>> {
    if a.is_null() {
        return Ok(Vec::new());
    }
    let mut v = vec![0i32; env.get_array_length(a)? as usize];
    env.get_int_array_region(a, 0, &mut v)?;
    Ok(v)
}

/// A `long[]` for Java.
pub fn long_array(env: &mut JNIEnv<'_>, v: &[i64]) -> Result<jlongArray> {
    let a = env.new_long_array(len32(v.len())?)?;
    env.set_long_array_region(&a, 0, v)?;
    Ok(a.into_raw())
}

fn len32(n: usize) -> Result<i32> {
    i32::try_from(n).map_err(|_| Error::Arg(format!("{n} elements are too many for Java")))
}

/// A `String[]` for Java.
pub fn string_array(env: &mut JNIEnv<'_>, v: &[String]) -> Result<jobjectArray> {
    let a = env.new_object_array(len32(v.len())?, "java/lang/String", JObject::null())?;
    for (i, s) in v.iter().enumerate() {
        let js = env.new_string(s)?;
        env.set_object_array_element(&a, len32(i)?, js)?;
    }
    Ok(a.into_raw())
}

/// The read schema's registry, one line per column: name, Arrow type,
/// `never`/`absent` (nulls), pushdown (`values`, `range` or `-`), tab-separated.
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_columns<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
) -> jstring {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let text: Vec<String> = COLUMNS
            .iter()
            .map(|c| {
                format!(
                    "{}\t{}\t{}\t{}",
                    c.name,
                    c.ty.arrow_name(),
                    if c.nulls == Nulls::Never {
                        "never"
                    } else {
                        "absent"
                    },
                    c.pushdown.name().unwrap_or("-")
                )
            })
            .collect();
        Ok(env.new_string(text.join("\n"))?.into_raw())
    })
}

/// Opens (and recovers) the store at `path` with StoreConfig `fields`
/// ([`crate::fields`]): read-only, or as its single writer.
pub fn open_store(path: String, fields: Vec<(String, String)>, read_only: bool) -> Result<Store> {
    let o = crate::fields::open_options(&path, &fields, read_only)?;
    let s = Store::open(o.opts)?;
    s.recover(o.check_crc, o.skip)?;
    Ok(s)
}

/// The StoreConfig fields of an open: `keys`/`values` paired.
pub fn fields(
    env: &mut JNIEnv<'_>,
    keys: &JObjectArray<'_>,
    values: &JObjectArray<'_>,
) -> Result<Vec<(String, String)>> {
    let k = strings(env, keys, "an option name")?.unwrap_or_default();
    let v = strings(env, values, "an option value")?.unwrap_or_default();
    if k.len() != v.len() {
        return Err(Error::Arg(
            "option names and values differ in number".into(),
        ));
    }
    Ok(k.into_iter().zip(v).collect())
}

/// Opens the store at `path` read-only (and recovers it as a read-only
/// open does), or takes the process's open of it ([`crate::cache`]);
/// `keys`/`values`: StoreConfig fields by name. Returns its handle.
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_open<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    path: JString<'l>,
    keys: JObjectArray<'l>,
    values: JObjectArray<'l>,
) -> jlong {
    guard(&mut env, 0, |env| {
        let path = string(env, &path, "path")?;
        let f = fields(env, &keys, &values)?;
        // Bad options fail here, before the cache is asked.
        crate::fields::open_options(&path, &f, true)?;
        let s = cache::acquire(&path, &f, || open_store(path.clone(), f.clone(), true))?;
        Ok(handles::insert(Entry::Store(s)))
    })
}

/// Sets how long an unused read-only store stays open for the next read
/// (ms; 0: every open is a new store): [`cache::configure`].
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_cacheConfigure<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    idle_ms: jlong,
) {
    guard(&mut env, (), |_| {
        let ms = u64::try_from(idle_ms)
            .map_err(|_| Error::Arg(format!("idle time {idle_ms} ms < 0")))?;
        cache::configure(ms);
        Ok(())
    })
}

/// `[opens, reuses, reopened, closed idle, cached]` of read-only opens
/// ([`cache::stats`]).
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_cacheStats<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
) -> jlongArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        long_array(env, &cache::stats())
    })
}

/// Closes a handle of any kind (a store is shut down once neither a
/// reader nor the cache holds it; a writer at once). Closing an unknown handle does nothing (a close may come twice:
/// from a task's end and its listener).
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_close<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    handle: jlong,
) {
    guard(&mut env, (), |_| {
        match handles::remove(handle) {
            // The last user of a store no longer cached shuts it down.
            Some(Entry::Store(s)) if Arc::strong_count(&s) == 1 => s.shutdown()?,
            Some(Entry::Writer(w)) => w.close()?,
            _ => {}
        }
        Ok(())
    })
}

/// Read-only stores: follows the writer (new files, records and queue
/// units, as `Store::refresh`); true when new messages became visible. A
/// streaming read's driver keeps its stores open between triggers.
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_refresh<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    store: jlong,
) -> jboolean {
    guard(&mut env, 0, |_| {
        Ok(handles::store(store)?.refresh()? as jboolean)
    })
}

/// How many native objects are open (stores, readers, batches).
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_openHandles<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
) -> jlong {
    guard(&mut env, 0, |_| Ok(handles::count() as i64))
}

/// Every topic with a queue, sorted (system topics included).
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_topics<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    store: jlong,
) -> jobjectArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let s = handles::store(store)?;
        s.check_open()?;
        string_array(env, &s.consume_queues().topics())
    })
}

/// True for `SCHEDULE_TOPIC_XXXX` and `RMQ_SYS_*`.
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_isSystemTopic<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    topic: JString<'l>,
) -> jboolean {
    guard(&mut env, 0, |env| {
        let t = string(env, &topic, "topic")?;
        Ok(engine::is_system_topic(t.as_bytes()) as jboolean)
    })
}

/// Queue ids of `topic`, sorted.
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_queueIds<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    store: jlong,
    topic: JString<'l>,
) -> jlongArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let s = handles::store(store)?;
        let t = string(env, &topic, "topic")?;
        s.check_read_topic(&t)?;
        s.check_open()?;
        let ids: Vec<i64> = s
            .consume_queues()
            .queue_ids(&t)
            .into_iter()
            .map(i64::from)
            .collect();
        long_array(env, &ids)
    })
}

/// One queue question, by `what`: 0 first offset, 1 end offset, 2 the
/// CommitLog offset at `arg` (0: none), 3 the store time at `arg` (-1:
/// none), 4 the offset stored nearest time `arg` (RocketMQ's rule).
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_queueAt<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    store: jlong,
    topic: JString<'l>,
    queue_id: jint,
    what: jint,
    arg: jlong,
) -> jlong {
    guard(&mut env, 0, |env| {
        let s = handles::store(store)?;
        let t = string(env, &topic, "topic")?;
        s.check_read_topic(&t)?;
        Ok(match what {
            0 => s.min_offset_in_queue(&t, queue_id)?,
            1 => s.max_offset_in_queue(&t, queue_id)?,
            2 => s.commit_log_offset_in_queue(&t, queue_id, arg)?,
            3 => s.message_store_timestamp(&t, queue_id, arg)?,
            4 => s.offset_in_queue_by_time(&t, queue_id, arg)?,
            _ => return Err(Error::Arg(format!("queueAt: no question {what}"))),
        })
    })
}

/// `[monotone (0/1), end, last]`: the queue's store times walked from
/// `from` after a time `prev` (`Store::queue_times_monotone`).
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_timesMonotone<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    store: jlong,
    topic: JString<'l>,
    queue_id: jint,
    from: jlong,
    prev: jlong,
) -> jlongArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let s = handles::store(store)?;
        let t = string(env, &topic, "topic")?;
        s.check_read_topic(&t)?;
        let (ok, end, last) = s.queue_times_monotone(&t, queue_id, from, prev)?;
        long_array(env, &[ok as i64, end, last])
    })
}

/// `[min, max, segment size]` of the CommitLog, then the index's coverage
/// `[begin, end)` (`-1, -1`: no usable index), then the flushed offset
/// (what is on disk of a writer's CommitLog).
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_commitLog<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    store: jlong,
) -> jlongArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let s = handles::store(store)?;
        s.check_open()?;
        let cl = s.commitlog();
        let max = i64::try_from(cl.max_offset()).unwrap_or(i64::MAX);
        let (a, b) = s.index_coverage().unwrap_or((-1, -1));
        let flushed = i64::try_from(cl.flushed_offset()).unwrap_or(i64::MAX);
        long_array(
            env,
            &[cl.min_offset(), max, cl.file_size() as i64, a, b, flushed],
        )
    })
}

/// `[damaged, queue_id, queue_offset, ...]` of the messages of `topic`
/// whose keys hold `key`, by the index; null when the index is unusable.
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_keyHits<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    store: jlong,
    topic: JString<'l>,
    key: JString<'l>,
) -> jlongArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let s = handles::store(store)?;
        let t = string(env, &topic, "topic")?;
        let k = string(env, &key, "key")?;
        let Some((hits, damaged)) = s.key_hits(&t, &k)? else {
            return Ok(std::ptr::null_mut());
        };
        let mut v = vec![damaged as i64];
        for (q, o) in hits {
            v.extend([i64::from(q), o]);
        }
        long_array(env, &v)
    })
}

/// The message an offset message id names: `[topic, queue_id,
/// queue_offset]`; null when none (or not an offset message id); empty
/// when its record is damaged.
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_messageById<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    store: jlong,
    id: JString<'l>,
) -> jobjectArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let s = handles::store(store)?;
        let id = string(env, &id, "msg_id")?;
        match s.look_message_by_id(&id) {
            Ok(Some((v, raw))) => {
                let topic = raw
                    .get(v.topic.clone())
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .unwrap_or_default();
                string_array(
                    env,
                    &[topic, v.queue_id.to_string(), v.queue_offset.to_string()],
                )
            }
            Ok(None) | Err(StoreError::InvalidArgument(_)) => Ok(std::ptr::null_mut()),
            Err(StoreError::Corrupted { .. }) => string_array(env, &[]),
            Err(e) => Err(e.into()),
        }
    })
}

/// Exercises the guard from Java's tests: `1` panics inside the engine's
/// library, which must reach Java as an `IllegalStateException`.
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_selfTest<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    what: jint,
) {
    guard(&mut env, (), |_| match what {
        1 => panic!("self test"),
        _ => Ok(()),
    })
}
