//! PyO3 bindings (`rocketstore._native`). Private: the public API is the
//! Python package, which wraps these classes.
//!
//! A binding converts arguments and results, and refuses in Python's words
//! an argument that does not convert. A conversion has rules of its own,
//! one per kind of argument (`args.rs`), the same on every call: a queue
//! id is an int in `0..=2**31-1`, a count (`get_message`'s
//! `max_msg_nums`, `query_message`'s `max_num`, `read_arrow`'s
//! `batch_size`) an int above 0, and a `bool` is never an int. What a call
//! does, and every rule of the store, is the engine's
//! (`crate::store::Store` and below). This module owns the conversions,
//! the GIL and panic guards, and the one mapping of engine errors to Python
//! exceptions.
//!
//! # Files
//!
//! - `mod.rs`: the module's functions and constants.
//! - `args.rs`: the kinds of arguments (typed: `Topic`, `QueueId`,
//!   `Offset`, the counts, `TagList`, ...), one rule each, with errors in
//!   Python's words.
//! - `put_args.rs`: the put signature (written once, as a macro), the one
//!   parser of the put fields, and a `put_batch`'s bodies and items.
//! - `store.rs`: `NativeStore`, its constructor, recovery steps and shared
//!   helpers; `store_put.rs`, `store_read.rs`, `store_admin.rs`: its puts,
//!   reads, and running state and services (a `#[pymethods]` block each);
//!   `store_arrow.rs`: its pulls as Arrow batches (`get_arrow`);
//!   `store_ha.rs`: its replication (start, stop, port, status);
//!   `store_ha_offsets.rs`: its offsets sync (listener, publish, fetch).
//! - `store_base.rs`: `MessageStoreBase`, the native base class of
//!   `rocketstore.MessageStore` (its per-message methods);
//!   `put_keywords.rs`: its `put`, keyword arguments matched by identity
//!   (the generated parser for every other call);
//!   `store_base_reads.rs`: its `get_message` and `query_message`, the
//!   Python definitions' fast paths; `fast_method.rs`: how such methods
//!   (and objects made per call) are made.
//! - `floors.rs`: measuring hooks, the per-message calls' signatures with
//!   nothing behind them (`_floor_put`, ...; benches/python/floors.py).
//! - `types.rs`: `Message`, `PutResult`, `BatchPutResult`;
//!   `message_ext.rs`: `MessageExt`, its fields decoded from the record's
//!   bytes when read; `getset.rs`: the attributes of `MessageExt` and of
//!   the put results as C-level getters (no second type check of `self`).
//! - `results.rs`, `recovery.rs`: typed results of service calls and of the
//!   recovery steps; `verify.rs`: the whole-store checks.
//! - `retention.rs`: `RetentionPolicy`, the retention steps of
//!   `NativeStore` and their results.
//! - `arrow.rs`: Arrow streams in and out (the PyCapsule interface);
//!   `columns.rs`: `READ_COLUMNS`, the read schema's columns.
//! - `config.rs`: `StoreConfig` read into the engine's options.
//! - `errors.rs`: engine errors as Python exceptions (the one place).
//! - `gil.rs`: releasing the GIL, stopping panics; `logbridge.rs`: Rust
//!   log records to Python `logging`.
//! - `locks.rs`: `FileLock`, the engine's file lock for the consumer
//!   offsets file and the consumer groups.
//! - `groups.rs`: `GroupMember`, a consumer group member (docs/format.md
//!   §13.2).

pub mod args;
pub mod arrow;
pub mod columns;
pub mod config;
pub mod errors;
pub mod fast_method;
pub mod floors;
pub mod getset;
pub mod gil;
pub mod groups;
pub mod locks;
pub mod logbridge;
pub mod message_ext;
pub mod put_args;
pub mod put_keywords;
pub mod recovery;
pub mod results;
pub mod retention;
pub mod store;
pub mod store_admin;
pub mod store_arrow;
pub mod store_base;
pub mod store_base_reads;
pub mod store_ha;
pub mod store_ha_offsets;
pub mod store_put;
pub mod store_read;
pub mod types;
pub mod verify;

use pyo3::prelude::*;

use crate::log::message;

/// Java `String.hashCode` of `s` (over UTF-16 code units).
#[pyfunction]
fn java_string_hash(s: args::HashedText<'_>) -> PyResult<i32> {
    Ok(message::java_string_hash(s.get()?))
}

/// Consume-queue tag code of a TAGS string (0 for None or empty).
#[pyfunction]
#[pyo3(signature = (tags))]
fn tags_code(tags: Option<args::TagsText<'_>>) -> PyResult<i64> {
    Ok(message::tags_code(
        tags.as_ref().map(|t| t.get()).transpose()?,
    ))
}

/// `crc32(data) & 0x7FFFFFFF`, the CommitLog body CRC.
#[pyfunction]
fn body_crc(data: &Bound<'_, PyAny>) -> PyResult<i32> {
    Ok(message::body_crc(args::body_arg(data)?.as_bytes()))
}

/// Bytes the CommitLog record of `message` takes when a store with STOREHOST
/// `store_host` (None: the default, an IPv4 address) writes it, with the
/// property CRC when `prop_crc`: the encoder's own length (docs/format.md §3).
/// A message the put would refuse is a ValueError naming why.
#[pyfunction]
#[pyo3(signature = (message, store_host=None, prop_crc=true))]
fn record_size(
    py: Python<'_>,
    message: &Bound<'_, types::PyMessage>,
    store_host: Option<&Bound<'_, PyAny>>,
    prop_crc: bool,
) -> PyResult<usize> {
    let store_host = match store_host.filter(|h| !h.is_none()) {
        Some(h) => args::parse_host(h, "store_host")?,
        None => crate::store::StoreOptions::default().store_host,
    };
    let spec = message
        .get()
        .spec(py, 0)
        .map_err(|r| pyo3::exceptions::PyValueError::new_err(r.reason))?;
    Ok(message::spec_record_len(&spec, &store_host, prop_crc))
}

/// Arms (errno > 0) or disarms (0) a fault-injection point: "msync",
/// "create_file", "map_new_file", "cq_put", "flush_hold" (a stalled disk:
/// nothing is flushed while armed), "reserve", "mlock", "create_cq_file",
/// "create_index_file", "allocate_file" (making a new file of that kind
/// fails), or a pause point
/// ("pause_cq_flush", "pause_commitlog_flush", "pause_index_flush": a flush
/// is held between picking a file and syncing it while armed;
/// "pause_dispatch_step": a dispatch step is held after reading the bytes
/// it parses). For tests. Returns
/// False for an unknown name. Only in builds with the `failpoints` feature.
#[cfg(feature = "failpoints")]
#[pyfunction]
#[pyo3(name = "_set_fail_point")]
fn set_fail_point(name: &str, errno: i32) -> bool {
    crate::failpoint::set(name, errno)
}

/// How many threads the pause point `name` holds now (see
/// `_set_fail_point`). For tests; only in builds with the `failpoints` feature.
#[cfg(feature = "failpoints")]
#[pyfunction]
#[pyo3(name = "_fail_point_waiting")]
fn fail_point_waiting(name: &str) -> usize {
    crate::failpoint::waiting(name)
}

/// Every kind of engine error, by name. For tests; only in builds with the
/// `failpoints` feature.
#[cfg(feature = "failpoints")]
#[pyfunction]
#[pyo3(name = "_error_kinds")]
fn error_kinds() -> Vec<&'static str> {
    crate::error::ERROR_KINDS.to_vec()
}

/// Raises the Python exception an engine error of kind `kind` (one of
/// `_error_kinds()`) becomes, through the same conversion every engine call
/// uses. For tests; only in builds with the `failpoints` feature.
#[cfg(feature = "failpoints")]
#[pyfunction]
#[pyo3(name = "_raise_store_error")]
fn raise_store_error(kind: &str) -> PyResult<()> {
    match crate::error::StoreError::sample(kind) {
        Some(e) => Err(e.into()),
        None => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "unknown error kind {kind:?}"
        ))),
    }
}

/// Called at interpreter exit (by `atexit`, before finalization): from now
/// on blocking waits return at once and no thread takes the GIL back after
/// an engine call (see `gil`). Returns how many threads are still inside
/// engine calls.
#[pyfunction]
#[pyo3(name = "_begin_exit")]
fn begin_exit(py: Python<'_>) -> usize {
    gil::begin_exit(py)
}

/// Threads currently inside engine calls with the GIL released.
#[pyfunction]
#[pyo3(name = "_threads_in_engine")]
fn threads_in_engine() -> usize {
    gil::IN_ENGINE.load(std::sync::atomic::Ordering::Acquire)
}

/// The delay levels of a `message_delay_level` string, in ms (level 1
/// first): the engine's grammar, so the config and the engine agree.
#[pyfunction]
fn parse_delay_levels(text: args::Text<'_>) -> PyResult<Vec<i64>> {
    let text = text.get()?;
    crate::log::message::delay_level_table(text).map_err(pyo3::exceptions::PyValueError::new_err)
}

/// True for RocketMQ's system topics (`SCHEDULE_TOPIC_XXXX`, `RMQ_SYS_*`),
/// which scans leave out unless asked for: the engine's rule.
#[pyfunction]
fn is_system_topic(topic: args::Topic<'_>) -> PyResult<bool> {
    let topic = topic.get()?;
    Ok(crate::log::message::is_system_topic(topic.as_bytes()))
}

/// Bytes of an index file with this geometry (header, slots, entries);
/// `None` when it exceeds what a Java int can address.
#[pyfunction]
fn index_file_size(max_hash_slot_num: usize, max_index_num: usize) -> Option<usize> {
    crate::index::index_file::index_file_size(max_hash_slot_num, max_index_num)
        .filter(|&n| n <= i32::MAX as usize)
}

/// The store's folder and file names (`crate::paths`, their one owner).
fn add_path_names(m: &Bound<'_, PyModule>) -> PyResult<()> {
    use crate::paths;
    m.add("COMMIT_LOG_DIR", paths::COMMIT_LOG_DIR)?;
    m.add("CONSUME_QUEUE_DIR", paths::CONSUME_QUEUE_DIR)?;
    m.add("CONSUME_QUEUE_EXT_DIR", paths::CONSUME_QUEUE_EXT_DIR)?;
    m.add("INDEX_DIR", paths::INDEX_DIR)?;
    m.add("CHECKPOINT_FILE", paths::CHECKPOINT_FILE)?;
    m.add("ABORT_FILE", paths::ABORT_FILE)?;
    m.add("LOCK_FILE", paths::LOCK_FILE)?;
    m.add("CONFIG_DIR", paths::CONFIG_DIR)?;
    m.add("CONSUMER_OFFSET_FILE", paths::CONSUMER_OFFSET_FILE)?;
    m.add("DELAY_OFFSET_FILE", paths::DELAY_OFFSET_FILE)?;
    m.add("TOPICS_FILE", paths::TOPICS_FILE)?;
    m.add("HA_DIR", paths::HA_DIR)?;
    m.add("PROMOTED_FILE", paths::PROMOTED_FILE)?;
    m.add("PROMOTE_REQUEST_FILE", paths::PROMOTE_REQUEST_FILE)?;
    m.add("PROMOTE_RESULT_FILE", paths::PROMOTE_RESULT_FILE)?;
    m.add("PROMOTE_TAIL_PREFIX", paths::PROMOTE_TAIL_PREFIX)?;
    m.add("REJOIN_CUT_PREFIX", paths::REJOIN_CUT_PREFIX)?;
    m.add("RESEED_PREFIX", paths::RESEED_PREFIX)?;
    m.add("HA_STATUS_FILE", paths::HA_STATUS_FILE)?;
    m.add("SUBSCRIPTION_GROUP_FILE", paths::SUBSCRIPTION_GROUP_FILE)?;
    m.add("TEMP_SUFFIX", paths::TEMP_SUFFIX)?;
    m.add("BACKUP_SUFFIX", paths::BACKUP_SUFFIX)?;
    m.add(
        "CONSUMER_OFFSET_LOCK_FILE",
        paths::CONSUMER_OFFSET_LOCK_FILE,
    )?;
    m.add("CONSUMER_LOCK_DIR", paths::CONSUMER_LOCK_DIR)?;
    m.add("CONSUMER_GROUPS_DIR", paths::CONSUMER_GROUPS_DIR)?;
    m.add("LOCK_SUFFIX", paths::LOCK_SUFFIX)?;
    m.add(
        "TOPIC_GROUP_SEPARATOR",
        crate::consumer_offsets::TOPIC_GROUP_SEPARATOR.to_string(),
    )?;
    m.add("STORE_ENTRIES", paths::STORE_ENTRIES.to_vec())?;
    Ok(())
}

/// The format constants Python code needs (one definition: the engine's).
fn add_format_constants(m: &Bound<'_, PyModule>) -> PyResult<()> {
    use crate::index::index_file;
    use crate::log::message;
    use crate::queue::consume_queue;
    use crate::store;
    m.add("CQ_STORE_UNIT_SIZE", consume_queue::CQ_UNIT_SIZE)?;
    m.add("INDEX_HEADER_SIZE", index_file::INDEX_HEADER_SIZE)?;
    m.add("INDEX_HASH_SLOT_SIZE", index_file::HASH_SLOT_SIZE)?;
    m.add("INDEX_ENTRY_SIZE", index_file::INDEX_ENTRY_SIZE)?;
    m.add("MIN_RECORD_SIZE", message::FIXED_OVERHEAD_V4)?;
    m.add("MAGIC_V1", message::MAGIC_V1)?;
    m.add("MAGIC_V2", message::MAGIC_V2)?;
    m.add("BLANK_MAGIC", message::BLANK_MAGIC)?;
    m.add(
        "END_FILE_MIN_BLANK_LENGTH",
        message::END_FILE_MIN_BLANK_LENGTH,
    )?;
    m.add(
        "SEGMENT_NAME_DIGITS",
        crate::log::mapped_file::SEGMENT_NAME_DIGITS,
    )?;
    m.add(
        "DEFAULT_MAPPED_FILE_SIZE_COMMIT_LOG",
        store::DEFAULT_COMMIT_LOG_FILE_SIZE,
    )?;
    m.add(
        "DEFAULT_MAPPED_FILE_SIZE_CONSUME_QUEUE",
        consume_queue::DEFAULT_CQ_FILE_SIZE,
    )?;
    m.add(
        "DEFAULT_MESSAGE_DELAY_LEVEL",
        store::DEFAULT_MESSAGE_DELAY_LEVEL,
    )?;
    m.add("DEFAULT_HASH_SLOT_NUM", index_file::DEFAULT_HASH_SLOT_NUM)?;
    m.add("DEFAULT_INDEX_NUM", index_file::DEFAULT_INDEX_NUM)?;
    m.add("SCHEDULE_TOPIC", message::SCHEDULE_TOPIC)?;
    add_path_names(m)?;
    m.add_function(wrap_pyfunction!(parse_delay_levels, m)?)?;
    m.add_function(wrap_pyfunction!(is_system_topic, m)?)?;
    m.add_function(wrap_pyfunction!(index_file_size, m)?)?;
    m.add_function(wrap_pyfunction!(store_arrow::empty_arrow_batch, m)?)?;
    columns::add_read_columns(m)?;
    Ok(())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    add_format_constants(m)?;
    m.add_class::<store::PyStore>()?;
    m.add_class::<store_base::PyStoreBase>()?;
    put_keywords::install(m.py(), &m.py().get_type::<store_base::PyStoreBase>())?;
    m.add_class::<types::PyMessage>()?;
    m.add_class::<types::PyPutResult>()?;
    m.add_class::<types::PyBatchPutResult>()?;
    types::register_result_getters(m.py())?;
    message_ext::register(m)?;
    m.add_class::<store_read::PyGetResult>()?;
    m.add_class::<store_arrow::PyArrowPull>()?;
    m.add_class::<arrow::PyArrowStream>()?;
    m.add_class::<locks::PyFileLock>()?;
    m.add_class::<groups::PyGroupMember>()?;
    recovery::register(m)?;
    results::register(m)?;
    retention::register(m)?;
    m.add_function(wrap_pyfunction!(java_string_hash, m)?)?;
    m.add_function(wrap_pyfunction!(tags_code, m)?)?;
    m.add_function(wrap_pyfunction!(body_crc, m)?)?;
    m.add_function(wrap_pyfunction!(record_size, m)?)?;
    m.add_function(wrap_pyfunction!(config::default_options, m)?)?;
    m.add_function(wrap_pyfunction!(config::transient_pool_in_use, m)?)?;
    m.add_function(wrap_pyfunction!(types::engine_enums, m)?)?;
    m.add_function(wrap_pyfunction!(store_base_reads::install_read_methods, m)?)?;
    #[cfg(feature = "failpoints")]
    m.add_function(wrap_pyfunction!(set_fail_point, m)?)?;
    #[cfg(feature = "failpoints")]
    m.add_function(wrap_pyfunction!(fail_point_waiting, m)?)?;
    #[cfg(feature = "failpoints")]
    m.add_function(wrap_pyfunction!(error_kinds, m)?)?;
    #[cfg(feature = "failpoints")]
    m.add_function(wrap_pyfunction!(raise_store_error, m)?)?;
    m.add_function(wrap_pyfunction!(begin_exit, m)?)?;
    m.add_class::<verify::PyVerifyProgress>()?;
    m.add_class::<verify::PyVerifyReport>()?;
    m.add_function(wrap_pyfunction!(verify::verify_store, m)?)?;
    m.add_function(wrap_pyfunction!(verify::index_geometry, m)?)?;
    m.add_function(wrap_pyfunction!(verify::writer_running, m)?)?;
    m.add_function(wrap_pyfunction!(threads_in_engine, m)?)?;
    floors::register(m)?;
    gil::install_fork_handler();
    logbridge::install();
    m.add_function(wrap_pyfunction!(logbridge::drain_logs, m)?)?;
    m.add_function(wrap_pyfunction!(logbridge::set_log_level, m)?)?;
    Ok(())
}
