//! `MessageStoreBase.get_message` and `MessageStoreBase.query_message`: a
//! pull and a key lookup in one native call.
//!
//! Both reads are defined in Python (`rocketstore._store_reads`: the
//! docstrings, the group rule, tag expressions, `datetime` bounds, every
//! argument form, the unknown-topic warning). Written there, each call paid
//! a Python frame (about 1,300 instructions for a lookup, a sixth of it)
//! and the `_n` property before the native call, and PyO3's argument
//! parsing and second type check of `self` in it. The methods here are the
//! Python functions' fast paths ([`fast_method`]): the usual call (its
//! arguments by position, no tag filter, int bounds) is the engine store's
//! read, called directly, with the same warning when the topic or queue is
//! unknown; any other call (keywords, a tag filter given as a string,
//! `datetime` bounds, a store not attached) goes to the Python function,
//! unchanged.
//!
//! `rocketstore.store` installs them when it is imported
//! ([`install_read_methods`]), handing over the Python functions, whose
//! docstrings the methods carry.

use std::sync::OnceLock;

use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyInt, PyList, PyString};

use crate::queue::reader::GetStatus;

use super::fast_method::{self, call_full, split_args, vectorcall_entry, MethodDef};
use super::store_base::PyStoreBase;

/// The Python functions defining the reads: every call a fast path does
/// not take.
static GET_FULL: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
static QUERY_FULL: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
/// The method definitions of the fast paths (live as long as the class).
static GET_DEF: OnceLock<MethodDef> = OnceLock::new();
static QUERY_DEF: OnceLock<MethodDef> = OnceLock::new();

/// The reads' parameters after `self`, as the Python functions have them.
const GET_SIGNATURE: &str = "($self, group, topic, queue_id, offset, max_msg_nums=32, tags=None)";
const QUERY_SIGNATURE: &str =
    "($self, topic, key, max_num=32, begin_timestamp=0, end_timestamp=None)";

/// Makes `MessageStoreBase.get_message` and `.query_message` the fast
/// paths of `get_message` and `query_message` (the Python functions
/// defining them), with their docstrings.
#[pyfunction]
#[pyo3(name = "_install_read_methods")]
pub fn install_read_methods(
    py: Python<'_>,
    get_message: Bound<'_, PyAny>,
    query_message: Bound<'_, PyAny>,
) -> PyResult<()> {
    let cls = py.get_type::<PyStoreBase>();
    let doc = |f: &Bound<'_, PyAny>| -> PyResult<String> {
        py.import("inspect")?
            .call_method1("cleandoc", (f.getattr(intern!(py, "__doc__"))?,))?
            .extract()
    };
    let (get_doc, query_doc) = (doc(&get_message)?, doc(&query_message)?);
    let _ = GET_FULL.set(py, get_message.unbind());
    let _ = QUERY_FULL.set(py, query_message.unbind());
    fast_method::install(
        &cls,
        c"get_message",
        GET_SIGNATURE,
        &get_doc,
        get_fast,
        &GET_DEF,
    )?;
    fast_method::install(
        &cls,
        c"query_message",
        QUERY_SIGNATURE,
        &query_doc,
        query_fast,
        &QUERY_DEF,
    )
}

/// The most positional arguments a fast path takes.
const MAX_ARGS: usize = 6;

/// A read's fast path: takes `(py, self, positional arguments)` and returns
/// the result, or `None` for a call it does not take.
type Fast = for<'py> fn(
    Python<'py>,
    &Bound<'py, PyStoreBase>,
    &[Borrowed<'_, 'py, PyAny>],
) -> PyResult<Option<Bound<'py, PyAny>>>;

/// The call to `fast` when it takes it (positional arguments only, between
/// `min` and `max` of them), else to `full`.
///
/// # Safety
/// `slf`, `args`, `nargs` and `kwnames` are a method vectorcall's.
unsafe fn dispatch(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    (args, nargs, kwnames): (
        *const *mut ffi::PyObject,
        ffi::Py_ssize_t,
        *mut ffi::PyObject,
    ),
    (min, max): (usize, usize),
    fast: Fast,
    full: &GILOnceCell<Py<PyAny>>,
) -> PyResult<*mut ffi::PyObject> {
    let npos = nargs.max(0) as usize;
    // SAFETY: the vectorcall's own arguments.
    let (given, nkw) = unsafe { split_args(args, npos, kwnames) };
    if nkw == 0 && (min..=max).contains(&npos) {
        // SAFETY: `slf` is an instance of the method's class (or a
        // subclass): CPython's method descriptor checked its type before
        // calling, so it is not checked again.
        let this = unsafe { Borrowed::from_ptr(py, slf) };
        // SAFETY: as above, `slf` is a `PyStoreBase` (or a subclass).
        let this = unsafe { this.downcast_unchecked::<PyStoreBase>() };
        // The arguments as objects, on the stack (`self` fills the unused
        // places; only the first `npos` are handed on).
        // SAFETY: `slf` is live for the call.
        let mut objs = [unsafe { Borrowed::from_ptr(py, slf) }; MAX_ARGS];
        for (slot, &p) in objs.iter_mut().zip(given) {
            // SAFETY: every pointer is a live object borrowed for the call.
            *slot = unsafe { Borrowed::from_ptr(py, p) };
        }
        if let Some(r) = fast(py, this, objs.get(..npos).unwrap_or_default())? {
            return Ok(r.into_ptr());
        }
    }
    let Some(full) = full.get(py) else {
        return Err(PyRuntimeError::new_err(
            "MessageStoreBase's reads are not set up",
        ));
    };
    call_full(py, full.bind(py), Some(slf), given, npos, kwnames)
}

/// Warns through `MessageStore._warn_unknown` (with `queue_id` when
/// given). The warning names the caller's line: no Python frame lies
/// between it and `_warn_unknown` (the Python functions pass 3).
fn warn_unknown(
    py: Python<'_>,
    this: &Bound<'_, PyStoreBase>,
    topic: &Borrowed<'_, '_, PyAny>,
    queue_id: Option<&Borrowed<'_, '_, PyAny>>,
) -> PyResult<()> {
    let kwargs = PyDict::new(py);
    kwargs.set_item(intern!(py, "stacklevel"), 2)?;
    let qid = queue_id.map_or_else(|| py.None(), |q| (*q).to_owned().unbind());
    this.call_method(intern!(py, "_warn_unknown"), (topic, qid), Some(&kwargs))?;
    Ok(())
}

vectorcall_entry! {
    /// The C entry point of `get_message`, around [`get_call`].
    get_fast => get_call
}

/// `get_message`'s call: [`pull`] or the Python function.
unsafe fn get_call(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: the method's own vectorcall.
    unsafe { dispatch(py, slf, (args, nargs, kwnames), (4, 6), pull, &GET_FULL) }
}

/// The pull of `args` (`group, topic, queue_id, offset[, max_msg_nums[,
/// tags]]`), or `None` when the call is not one the fast path takes: a
/// group that is not a non-empty `str`, tags that are not `None` or a
/// `list`, or no engine store attached.
fn pull<'py>(
    py: Python<'py>,
    this: &Bound<'py, PyStoreBase>,
    args: &[Borrowed<'_, 'py, PyAny>],
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let [group, topic, queue_id, offset, rest @ ..] = args else {
        return Ok(None);
    };
    let group_ok = group
        .downcast_exact::<PyString>()
        .is_ok_and(|g| g.to_str().is_ok_and(|g| !g.is_empty()));
    let tags = rest.get(1).filter(|t| !t.is_none());
    if !group_ok || !tags.map_or(true, |t| t.is_exact_instance_of::<PyList>()) {
        return Ok(None);
    }
    let Ok(engine) = this.get().engine(py) else {
        return Ok(None);
    };
    let r = engine.get().get_message(
        py,
        topic.extract()?,
        queue_id.extract()?,
        offset.extract()?,
        rest.first().map(|o| o.extract()).transpose()?,
        tags.map(|o| o.extract()).transpose()?,
    )?;
    if r.get().engine_status() == GetStatus::NoMessageInQueue {
        warn_unknown(py, this, topic, Some(queue_id))?;
    }
    Ok(Some(r.into_any()))
}

vectorcall_entry! {
    /// The C entry point of `query_message`, around [`query_call`].
    query_fast => query_call
}

/// `query_message`'s call: [`lookup`] or the Python function.
unsafe fn query_call(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: the method's own vectorcall.
    unsafe { dispatch(py, slf, (args, nargs, kwnames), (2, 5), lookup, &QUERY_FULL) }
}

/// The lookup of `args` (`topic, key[, max_num[, begin[, end]]]`), or
/// `None` when the call is not one the fast path takes: a bound that is not
/// an int (nor `None` for the end), or no engine store attached.
fn lookup<'py>(
    py: Python<'py>,
    this: &Bound<'py, PyStoreBase>,
    args: &[Borrowed<'_, 'py, PyAny>],
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let int = |i: usize| {
        args.get(i)
            .map_or(true, |o| o.is_exact_instance_of::<PyInt>())
    };
    let end = args.get(4).filter(|o| !o.is_none());
    if !int(2) || !int(3) || !end.map_or(true, |o| o.is_exact_instance_of::<PyInt>()) {
        return Ok(None);
    }
    let Ok(engine) = this.get().engine(py) else {
        return Ok(None);
    };
    let [topic, key, ..] = args else {
        return Ok(None);
    };
    let found = engine.get().query_message(
        py,
        topic.extract()?,
        key.extract()?,
        args.get(2).map(|o| o.extract()).transpose()?,
        args.get(3).map(|o| o.extract()).transpose()?,
        end.map(|o| o.extract()).transpose()?,
    )?;
    if found.is_empty() {
        warn_unknown(py, this, topic, None)?;
    }
    Ok(Some(found.into_any()))
}
