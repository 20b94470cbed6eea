//! `MessageStoreBase.query_message`: a key lookup in one native call.
//!
//! The lookup is defined in Python (`rocketstore._store_reads.
//! query_message`: its docstring, `datetime` bounds, every argument form,
//! the unknown-topic warning). Written there, each lookup paid a Python
//! frame (about 1,300 instructions, a sixth of a lookup) before the native
//! call, and PyO3's argument parsing and second type check of `self` in
//! it. The method here is that function's fast path ([`fast_method`]): a
//! call with two to five positional arguments whose bounds are ints (or
//! `None` for the end) is the engine store's lookup, called directly, with
//! the same warning when nothing is found; any other call (keywords,
//! `datetime` bounds, a store not attached) goes to the Python function,
//! unchanged.
//!
//! `rocketstore.store` installs it when it is imported
//! ([`install_query_message`]), handing over the Python function, whose
//! docstring the method carries.

use std::sync::OnceLock;

use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyInt, PyList};

use super::fast_method::{self, call_full, split_args, MethodDef};
use super::store_base::PyStoreBase;

/// The Python function defining the lookup: every call the fast path does
/// not take.
static FULL: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
/// The method definition of the fast path (lives as long as the class).
static DEF: OnceLock<MethodDef> = OnceLock::new();

/// The lookup's parameters after `self`, as the Python function has them.
const SIGNATURE: &str = "($self, topic, key, max_num=32, begin_timestamp=0, end_timestamp=None)";

/// Makes `MessageStoreBase.query_message` the fast path of `full` (the
/// Python function defining the lookup), with its docstring.
#[pyfunction]
#[pyo3(name = "_install_query_message")]
pub fn install_query_message(py: Python<'_>, full: Bound<'_, PyAny>) -> PyResult<()> {
    let doc = full.getattr(intern!(py, "__doc__"))?;
    let doc: String = py
        .import("inspect")?
        .call_method1("cleandoc", (doc,))?
        .extract()?;
    let _ = FULL.set(py, full.unbind());
    fast_method::install(
        &py.get_type::<PyStoreBase>(),
        c"query_message",
        SIGNATURE,
        &doc,
        query_fast,
        &DEF,
    )
}

/// The C entry point: PyO3's trampoline (GIL pool, panics caught, errors
/// raised) around [`query_call`].
unsafe extern "C" fn query_fast(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: called by CPython with the vectorcall arguments of a
    // METH_FASTCALL | METH_KEYWORDS method, which the trampoline expects.
    unsafe {
        pyo3::impl_::trampoline::fastcall_with_keywords(slf, args, nargs, kwnames, query_call)
    }
}

/// The lookup when the call is a usual one, else the Python function.
unsafe fn query_call(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    let npos = nargs.max(0) as usize;
    // SAFETY: the vectorcall's own arguments.
    let (given, nkw) = unsafe { split_args(args, npos, kwnames) };
    if nkw == 0 && (2..=5).contains(&npos) {
        // SAFETY: `slf` is an instance of the method's class (or a
        // subclass): CPython's method descriptor checked its type before
        // calling, so it is not checked again.
        let this = unsafe { Borrowed::from_ptr(py, slf) };
        // SAFETY: as above, `slf` is a `PyStoreBase` (or a subclass).
        let this = unsafe { this.downcast_unchecked::<PyStoreBase>() };
        // SAFETY: every pointer is a live object borrowed for the call.
        let args: Vec<Borrowed<'_, '_, PyAny>> = given
            .iter()
            .map(|&p| unsafe { Borrowed::from_ptr(py, p) })
            .collect();
        if let Some(found) = lookup(py, this, &args)? {
            return Ok(found.into_ptr());
        }
    }
    let Some(full) = FULL.get(py) else {
        return Err(PyRuntimeError::new_err(
            "MessageStoreBase.query_message is not set up",
        ));
    };
    call_full(py, full.bind(py), slf, given, npos, kwnames)
}

/// The lookup of `args` (`topic, key[, max_num[, begin[, end]]]`), or
/// `None` when the call is not one the fast path takes: a bound that is not
/// an int (nor `None` for the end), or no engine store attached.
fn lookup<'py>(
    py: Python<'py>,
    this: &Bound<'py, PyStoreBase>,
    args: &[Borrowed<'_, 'py, PyAny>],
) -> PyResult<Option<Bound<'py, PyList>>> {
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
        // The warning names the caller's line: no Python frame lies
        // between it and `_warn_unknown` (the Python function passes 3).
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item(intern!(py, "stacklevel"), 2)?;
        this.call_method(intern!(py, "_warn_unknown"), (topic,), Some(&kwargs))?;
    }
    Ok(Some(found))
}
