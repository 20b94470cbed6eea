//! Opening a store read-only, and what the connector's planning asks of
//! it (the same engine calls the Python source's planning makes).

use std::sync::Arc;

use engine::{Nulls, Store, StoreError, StoreOptions, COLUMNS};
use jni::objects::{JClass, JIntArray, JLongArray, JObject, JObjectArray, JString};
use jni::sys::{jboolean, jint, jlong, jlongArray, jobjectArray, jstring};
use jni::JNIEnv;

use crate::handles::{self, Entry};
use crate::{guard, Error, Result};

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

fn parse<T: std::str::FromStr>(k: &str, v: &str) -> Result<T> {
    v.trim()
        .parse()
        .map_err(|_| Error::Arg(format!("option {k}={v:?}: not a valid value")))
}

/// The store fields a read-only open uses (StoreConfig names).
pub const STORE_FIELDS: &[&str] = &[
    "mapped_file_size_commit_log",
    "mapped_file_size_consume_queue",
    "commit_log_dir",
    "check_crc_on_recover",
    "on_corruption",
    "message_index_enable",
    "max_hash_slot_num",
    "max_index_num",
];

/// `k`=`v`, an integer in `[low, high]`: StoreConfig's range for the field,
/// refused in StoreConfig's words (`note` says why the range is what it is).
fn int_in(k: &str, v: &str, low: usize, high: usize, note: &str) -> Result<usize> {
    let n: i64 = parse(k, v)?;
    match usize::try_from(n) {
        Ok(u) if (low..=high).contains(&u) => Ok(u),
        _ => Err(Error::Arg(
            format!("{k}={n}: must be in [{low}, {high}] {note}")
                .trim_end()
                .to_owned(),
        )),
    }
}

/// The largest segment or file size a store takes (a Java int).
const I32_MAX: usize = i32::MAX as usize;

/// A CommitLog segment size StoreConfig accepts.
fn commit_log_size(k: &str, v: &str) -> Result<usize> {
    use engine::internals::message::{END_FILE_MIN_BLANK_LENGTH, FIXED_OVERHEAD_V4};
    let note = format!(
        "(a minimal {FIXED_OVERHEAD_V4}-byte record plus the \
         {END_FILE_MIN_BLANK_LENGTH}-byte blank must fit)"
    );
    int_in(
        k,
        v,
        FIXED_OVERHEAD_V4 + END_FILE_MIN_BLANK_LENGTH,
        I32_MAX,
        &note,
    )
}

/// A ConsumeQueue file size StoreConfig accepts, rounded up to whole units
/// as it rounds it.
fn consume_queue_size(k: &str, v: &str) -> Result<usize> {
    use engine::internals::queue::CQ_UNIT_SIZE;
    let n = int_in(k, v, 1, I32_MAX, "")?;
    let rounded = n.div_ceil(CQ_UNIT_SIZE) * CQ_UNIT_SIZE;
    if rounded > I32_MAX {
        return Err(Error::Arg(format!(
            "{k}={n}: rounds up to {rounded}, above {I32_MAX}"
        )));
    }
    Ok(rounded)
}

/// The index geometry StoreConfig accepts: an IndexFile's size is a Java int.
fn check_index_geometry(o: &StoreOptions) -> Result<()> {
    use engine::internals::index::{
        index_file_size, HASH_SLOT_SIZE, INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE,
    };
    let (slots, num) = (o.max_hash_slot_num, o.max_index_num);
    if index_file_size(slots, num).is_some_and(|n| n <= I32_MAX) {
        return Ok(());
    }
    let size = [
        (1, INDEX_HEADER_SIZE),
        (slots, HASH_SLOT_SIZE),
        (num, INDEX_ENTRY_SIZE),
    ]
    .iter()
    .map(|&(n, unit)| n as u128 * unit as u128)
    .sum::<u128>();
    Err(Error::Arg(format!(
        "max_hash_slot_num={slots}, max_index_num={num}: IndexFile size {size} exceeds \
         {I32_MAX} bytes"
    )))
}

/// Opens (and recovers) the store at `path` with StoreConfig `fields`:
/// read-only, or as its single writer. Values are checked against the
/// ranges StoreConfig checks (the Python source refuses the same ones).
pub fn open_store(path: String, fields: Vec<(String, String)>, read_only: bool) -> Result<Store> {
    let mut o = StoreOptions {
        read_only,
        ..StoreOptions::at(&path)
    };
    let (mut check_crc, mut skip) = (true, false);
    for (k, v) in &fields {
        match k.as_str() {
            "mapped_file_size_commit_log" => o.commit_log_file_size = Some(commit_log_size(k, v)?),
            "mapped_file_size_consume_queue" => {
                o.consume_queue_file_size = Some(consume_queue_size(k, v)?)
            }
            "commit_log_dir" => o.commit_log_dir = v.into(),
            "check_crc_on_recover" => check_crc = parse(k, &v.to_lowercase())?,
            "on_corruption" => {
                skip = match v.as_str() {
                    "skip" => true,
                    "refuse" => false,
                    _ => {
                        return Err(Error::Arg(format!(
                            "option on_corruption={v:?}: must be \"refuse\" or \"skip\""
                        )))
                    }
                }
            }
            "message_index_enable" => o.message_index_enable = parse(k, &v.to_lowercase())?,
            "max_hash_slot_num" => o.max_hash_slot_num = int_in(k, v, 1, I32_MAX, "")?,
            "max_index_num" => o.max_index_num = int_in(k, v, 1, I32_MAX, "")?,
            _ => {
                return Err(Error::Arg(format!(
                    "option {k}: not a store field the JVM connector reads (it reads {})",
                    STORE_FIELDS.join(", ")
                )))
            }
        }
    }
    check_index_geometry(&o)?;
    let s = Store::open(o)?;
    s.recover(check_crc, skip)?;
    Ok(s)
}

/// Opens the store at `path` read-only (and recovers it as a read-only
/// open does); `keys`/`values`: StoreConfig fields by name. Returns its handle.
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_open<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    path: JString<'l>,
    keys: JObjectArray<'l>,
    values: JObjectArray<'l>,
) -> jlong {
    guard(&mut env, 0, |env| {
        open_handle(env, &path, &keys, &values, true)
    })
}

/// Opens the store at `path` with the StoreConfig fields `keys`/`values`
/// (read-only or as its writer) and returns its handle: the body of the
/// `open` and `openWriter` entries.
pub fn open_handle(
    env: &mut JNIEnv<'_>,
    path: &JString<'_>,
    keys: &JObjectArray<'_>,
    values: &JObjectArray<'_>,
    read_only: bool,
) -> Result<jlong> {
    let path = string(env, path, "path")?;
    let k = strings(env, keys, "an option name")?.unwrap_or_default();
    let v = strings(env, values, "an option value")?.unwrap_or_default();
    if k.len() != v.len() {
        return Err(Error::Arg(
            "option names and values differ in number".into(),
        ));
    }
    let s = open_store(path, k.into_iter().zip(v).collect(), read_only)?;
    Ok(handles::insert(Entry::Store(Arc::new(s))))
}

/// Closes a handle of any kind (a store is shut down once no reader uses
/// it). Closing an unknown handle does nothing (a close may come twice:
/// from a task's end and its listener).
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_close<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    handle: jlong,
) {
    guard(&mut env, (), |_| {
        if let Some(Entry::Store(s)) = handles::remove(handle) {
            if Arc::strong_count(&s) == 1 {
                s.shutdown()?;
            }
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
/// `[begin, end)` (`-1, -1`: no usable index).
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
        long_array(env, &[cl.min_offset(), max, cl.file_size() as i64, a, b])
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
