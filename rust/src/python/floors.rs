//! Measuring hooks: the per-message calls of the store with nothing behind
//! them (`_floor_put`, `_floor_put_batch`, `_floor_get_message`,
//! `_floor_query_message`, `_floor_get_arrow`).
//!
//! Each takes the arguments of the store's method of that name, with the
//! same signature and the same conversion (`_floor_put` places them by
//! position and keyword identity as `MessageStoreBase.put` does, with the
//! same fallback to PyO3's parser; the others take PyO3's typed arguments
//! of `args.rs`, as the real methods do), then returns `None`: what a call
//! of that shape costs before any store work. `benches/python/floors.py`
//! times them for the floor table of benches/RESULTS.md. They are not part
//! of the public API (underscored, not re-exported by `rocketstore`).

use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;

use super::args::{
    BeginTimestamp, EndTimestamp, Key, MaxMessages, MaxMsgNums, MaxNum, Offset, QueueId, TagList,
    Topic,
};
use super::fast_method::{
    add_function, doc_of, fallback, method_def, not_set_up, vectorcall_entry, MethodDef,
};
use super::put_keywords::intern_names;
use super::put_keywords::Placed;

/// The `_floor_put` PyO3 generated: every call the fast entry does not take.
static GENERATED_PUT: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
/// The method definition of the fast `_floor_put`.
static DEF_PUT: OnceLock<MethodDef> = OnceLock::new();

/// `put`'s arguments, placed and taken, and nothing done (the generated
/// parser of `_floor_put`: calls the fast entry cannot place).
#[pyfunction]
#[pyo3(name = "_floor_put", signature = (topic, body, queue_id=None, tags=None, keys=None, properties=None, delay_level=None, flag=None, born_timestamp=None, born_host=None, sys_flag=None, *, check=true), text_signature = "(topic, body, queue_id=0, tags=None, keys=None, properties=None, delay_level=0, flag=0, born_timestamp=None, born_host=None, sys_flag=0, *, check=True)")]
#[allow(clippy::too_many_arguments, unused_variables)] // put's signature, unused
fn floor_put(
    topic: &Bound<'_, PyAny>,
    body: &Bound<'_, PyAny>,
    queue_id: Option<&Bound<'_, PyAny>>,
    tags: Option<&Bound<'_, PyAny>>,
    keys: Option<&Bound<'_, PyAny>>,
    properties: Option<&Bound<'_, PyAny>>,
    delay_level: Option<&Bound<'_, PyAny>>,
    flag: Option<&Bound<'_, PyAny>>,
    born_timestamp: Option<&Bound<'_, PyAny>>,
    born_host: Option<&Bound<'_, PyAny>>,
    sys_flag: Option<&Bound<'_, PyAny>>,
    check: bool,
) {
}

vectorcall_entry! {
    /// The C entry point of `_floor_put`, around [`floor_put_parse`], as
    /// `put`'s is around its parser.
    floor_put_fast => floor_put_parse
}

/// `put`'s placement of the arguments, then `None`; a call it cannot place
/// goes to the generated function, as `put`'s goes to its generated method.
unsafe fn floor_put_parse(
    py: Python<'_>,
    _module: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: the vectorcall arguments of this call, as CPython gave them.
    let placed = unsafe { Placed::place(py, args, nargs, kwnames) };
    let taken = placed.as_ref().and_then(|p| {
        p.with_args(py, |put, check| {
            std::hint::black_box((&put.topic, &put.body, check));
        })
    });
    if taken.is_some() {
        return Ok(py.None().into_ptr());
    }
    let Some(generated) = GENERATED_PUT.get(py) else {
        return Err(not_set_up("_floor_put"));
    };
    // SAFETY: the vectorcall arguments of this call, unchanged.
    unsafe { fallback(py, generated.bind(py), None, args, nargs, kwnames) }
}

/// `put_batch`'s arguments converted as `MessageStoreBase.put_batch`
/// converts them, and nothing done.
#[pyfunction]
#[pyo3(name = "_floor_put_batch", signature = (topic, bodies, queue_id=None, *, keys=None, tags=None, properties=None, return_offsets=false, check=true), text_signature = "(topic, bodies, queue_id=0, *, keys=None, tags=None, properties=None, return_offsets=False, check=True)")]
#[allow(clippy::too_many_arguments, unused_variables)] // put_batch's signature
fn floor_put_batch(
    topic: Topic<'_>,
    bodies: &Bound<'_, PyAny>,
    queue_id: Option<QueueId<'_>>,
    keys: Option<Bound<'_, PyAny>>,
    tags: Option<Bound<'_, PyAny>>,
    properties: Option<Bound<'_, PyAny>>,
    return_offsets: bool,
    check: bool,
) -> PyResult<()> {
    let queue_id = queue_id.map_or(Ok(0), |q| q.get())?;
    std::hint::black_box((topic.get()?, queue_id));
    Ok(())
}

/// `get_message`'s arguments converted as `NativeStore.get_message`
/// converts them, and nothing done.
#[pyfunction]
#[pyo3(name = "_floor_get_message", signature = (topic, queue_id, offset, max_msg_nums=None, tags=None), text_signature = "(topic, queue_id, offset, max_msg_nums=32, tags=None)")]
fn floor_get_message(
    topic: Topic<'_>,
    queue_id: QueueId<'_>,
    offset: Offset<'_>,
    max_msg_nums: Option<MaxMsgNums<'_>>,
    tags: Option<TagList<'_>>,
) -> PyResult<()> {
    let max = max_msg_nums.map(|m| m.get()).transpose()?;
    let tags = tags.map(|t| t.get()).transpose()?;
    std::hint::black_box((topic.get()?, queue_id.get()?, offset.get()?, max, tags));
    Ok(())
}

/// `query_message`'s arguments converted as `NativeStore.query_message`
/// converts them, and nothing done.
#[pyfunction]
#[pyo3(name = "_floor_query_message", signature = (topic, key, max_num=None, begin_timestamp=None, end_timestamp=None), text_signature = "(topic, key, max_num=32, begin_timestamp=0, end_timestamp=None)")]
fn floor_query_message(
    topic: Topic<'_>,
    key: Key<'_>,
    max_num: Option<MaxNum<'_>>,
    begin_timestamp: Option<BeginTimestamp<'_>>,
    end_timestamp: Option<EndTimestamp<'_>>,
) -> PyResult<()> {
    let (topic, key) = (topic.get()?, key.get()?);
    let max_num = max_num.map_or(Ok(32), |m| m.get())?;
    let begin = begin_timestamp.map_or(Ok(0), |t| t.get())?;
    let end = end_timestamp.map(|t| t.get()).transpose()?;
    std::hint::black_box((topic, key, max_num, begin, end));
    Ok(())
}

/// `get_arrow`'s arguments converted as `NativeStore.get_arrow` converts
/// them, and nothing done.
#[pyfunction]
#[pyo3(name = "_floor_get_arrow", signature = (topic, queue_id, offset, max_msgs, tags=None, columns=None, zero_copy=false))]
#[allow(clippy::too_many_arguments)] // one per Python argument
fn floor_get_arrow(
    topic: Topic<'_>,
    queue_id: QueueId<'_>,
    offset: Offset<'_>,
    max_msgs: MaxMessages<'_>,
    tags: Option<TagList<'_>>,
    columns: Option<Vec<String>>,
    zero_copy: bool,
) -> PyResult<()> {
    let tags = tags.map(|t| t.get()).transpose()?;
    let at = (
        topic.get()?,
        queue_id.get()?,
        offset.get()?,
        max_msgs.get()?,
    );
    let projection = super::store_arrow::projection_arg(columns)?;
    std::hint::black_box((at, tags, projection, zero_copy));
    Ok(())
}

/// Adds the hooks to the module (`_floor_put` with its fast entry).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let generated = wrap_pyfunction!(floor_put, m)?;
    let doc = doc_of("_floor_put", generated.as_any())?;
    intern_names(py);
    let _ = GENERATED_PUT.set(py, generated.into_any().unbind());
    add_function(
        m,
        c"_floor_put",
        method_def(&DEF_PUT, c"_floor_put", doc, floor_put_fast),
    )?;
    m.add_function(wrap_pyfunction!(floor_put_batch, m)?)?;
    m.add_function(wrap_pyfunction!(floor_get_message, m)?)?;
    m.add_function(wrap_pyfunction!(floor_query_message, m)?)?;
    m.add_function(wrap_pyfunction!(floor_get_arrow, m)?)?;
    Ok(())
}
