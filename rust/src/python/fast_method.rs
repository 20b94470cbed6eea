//! Native methods that take the common call themselves and hand every
//! other one, unchanged, to the method's full definition.
//!
//! A method PyO3 generates parses its arguments by name and checks the type
//! of `self` again after CPython's method descriptor has (with this build
//! that check boxes an iterator: an allocation and a free per call); a
//! method written in Python costs a frame. For the calls made once per
//! message (a put, a key lookup) a method defined here places the usual
//! arguments by position, takes `self` as the descriptor checked it, and
//! calls the engine; any call it cannot take so goes to the full
//! definition ([`call_full`]): the method PyO3 generated, or the Python
//! function that defines the method (its docstring, every argument form,
//! every error).
//!
//! `MessageStoreBase.put` (`put_keywords.rs`), `get_message` and
//! `query_message` (`store_base_reads.rs`) are made so. Objects made once
//! per call or per message are made with their type object kept
//! ([`new_instance`]).

use std::ffi::{CStr, CString};
use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::impl_::pyclass::PyClassImpl;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyTuple, PyType};
use pyo3::PyClass;

/// A `PyMethodDef` with the docstring it points to.
pub struct MethodDef {
    def: ffi::PyMethodDef,
    _doc: CString,
}

// SAFETY: the definition is written once, before it is shared, and only
// read afterwards; its pointers are to static text and the owned `_doc`.
unsafe impl Send for MethodDef {}
// SAFETY: as above: read-only after construction.
unsafe impl Sync for MethodDef {}

/// The C entry point `$entry` of a `METH_FASTCALL | METH_KEYWORDS` method
/// or function: PyO3's trampoline (GIL pool, panics caught, errors raised)
/// around `$body`, an `unsafe fn(py, self_or_module, args, nargs, kwnames)
/// -> PyResult<*mut PyObject>`.
macro_rules! vectorcall_entry {
    ($(#[$doc:meta])* $entry:ident => $body:path) => {
        $(#[$doc])*
        unsafe extern "C" fn $entry(
            slf: *mut pyo3::ffi::PyObject,
            args: *const *mut pyo3::ffi::PyObject,
            nargs: pyo3::ffi::Py_ssize_t,
            kwnames: *mut pyo3::ffi::PyObject,
        ) -> *mut pyo3::ffi::PyObject {
            // SAFETY: called by CPython with the vectorcall arguments of a
            // METH_FASTCALL | METH_KEYWORDS entry, which the trampoline
            // expects.
            unsafe {
                pyo3::impl_::trampoline::fastcall_with_keywords(slf, args, nargs, kwnames, $body)
            }
        }
    };
}
pub(crate) use vectorcall_entry;

/// The docstring CPython reads a text signature from: `name`, then
/// `text_signature` (`"($self, ...)"`), then `doc`.
pub fn doc_with_signature(name: &str, text_signature: &str, doc: &str) -> PyResult<CString> {
    CString::new(format!("{name}{text_signature}\n--\n\n{doc}"))
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}

/// The docstring of a fast entry named `name` standing in for `generated`
/// (the function or method PyO3 made): its text signature and docstring,
/// so `help()` and `inspect` read them as before.
pub fn doc_of(name: &str, generated: &Bound<'_, PyAny>) -> PyResult<CString> {
    let doc: String = generated.getattr("__doc__")?.extract()?;
    let sig: String = generated.getattr("__text_signature__")?.extract()?;
    doc_with_signature(name, &sig, &doc)
}

/// The method definition of a fast entry, made once into `cell` (which
/// lives as long as the program, as CPython requires).
pub fn method_def(
    cell: &'static OnceLock<MethodDef>,
    name: &'static CStr,
    doc: CString,
    meth: ffi::PyCFunctionFastWithKeywords,
) -> &'static ffi::PyMethodDef {
    &cell
        .get_or_init(|| MethodDef {
            def: ffi::PyMethodDef {
                ml_name: name.as_ptr(),
                ml_meth: ffi::PyMethodDefPointer {
                    PyCFunctionFastWithKeywords: meth,
                },
                ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
                ml_doc: doc.as_ptr(),
            },
            _doc: doc,
        })
        .def
}

/// Sets the method `name` of `cls` to the definition `def`.
pub fn set_method(
    cls: &Bound<'_, PyType>,
    name: &'static CStr,
    def: &'static ffi::PyMethodDef,
) -> PyResult<()> {
    // SAFETY: `cls` is a live type object; `def` is 'static (a OnceLock in
    // a static, never dropped), as CPython requires of a method definition.
    let descr = unsafe {
        Bound::from_owned_ptr_or_err(
            cls.py(),
            ffi::PyDescr_NewMethod(cls.as_ptr().cast(), std::ptr::from_ref(def).cast_mut()),
        )?
    };
    cls.setattr(name.to_str()?, descr)
}

/// Adds the function `name` of module `m`, defined by `def`.
pub fn add_function(
    m: &Bound<'_, PyModule>,
    name: &'static CStr,
    def: &'static ffi::PyMethodDef,
) -> PyResult<()> {
    let module_name = m.name()?;
    // SAFETY: `def` is 'static (a OnceLock never dropped), as CPython
    // requires of a function's definition; `m` and its name are live.
    let f = unsafe {
        Bound::from_owned_ptr_or_err(
            m.py(),
            ffi::PyCFunction_NewEx(
                std::ptr::from_ref(def).cast_mut(),
                m.as_ptr(),
                module_name.as_ptr(),
            ),
        )?
    };
    m.add(name.to_str()?, f)
}

/// Sets the method `name` of `cls` to `meth` (a `METH_FASTCALL |
/// METH_KEYWORDS` function), with `text_signature` (`"($self, ...)"`) and
/// `doc`; `cell` keeps its definition for the life of the class.
pub fn install(
    cls: &Bound<'_, PyType>,
    name: &'static CStr,
    text_signature: &str,
    doc: &str,
    meth: ffi::PyCFunctionFastWithKeywords,
    cell: &'static OnceLock<MethodDef>,
) -> PyResult<()> {
    let full_doc = doc_with_signature(name.to_str()?, text_signature, doc)?;
    set_method(cls, name, method_def(cell, name, full_doc, meth))
}

/// The error of a fast entry whose full definition was never stored.
pub fn not_set_up(what: &str) -> PyErr {
    pyo3::exceptions::PyRuntimeError::new_err(format!("{what} is not set up"))
}

/// The positional arguments of a vectorcall (`npos` of them) and the
/// number of keyword arguments after them.
///
/// # Safety
/// `args` and `kwnames` are a vectorcall's: `args` holds `npos` positional
/// then `len(kwnames)` keyword values, all live for the call.
pub unsafe fn split_args<'a>(
    args: *const *mut ffi::PyObject,
    npos: usize,
    kwnames: *mut ffi::PyObject,
) -> (&'a [*mut ffi::PyObject], usize) {
    let nkw = if kwnames.is_null() {
        0
    } else {
        // SAFETY: a non-null kwnames is the tuple of keyword names.
        unsafe { ffi::PyTuple_Size(kwnames) }.max(0) as usize
    };
    if npos + nkw == 0 {
        return (&[], 0);
    }
    // SAFETY: `args` holds `npos + nkw` live borrowed objects.
    (unsafe { std::slice::from_raw_parts(args, npos + nkw) }, nkw)
}

/// Calls `full(*args, **kwargs)`, with `slf` first when it is a method's
/// instance, with the vectorcall's arguments as given (`given` from
/// [`split_args`]: `npos` positional values, then one value per name of
/// `kwnames`).
#[cold]
#[inline(never)]
pub fn call_full(
    py: Python<'_>,
    full: &Bound<'_, PyAny>,
    slf: Option<*mut ffi::PyObject>,
    given: &[*mut ffi::PyObject],
    npos: usize,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: each pointer is a live object borrowed from our caller (and
    // `slf` the instance): a new reference is taken for the call.
    let obj = |p: *mut ffi::PyObject| unsafe { Borrowed::from_ptr(py, p) }.to_owned();
    let mut items: Vec<Bound<'_, PyAny>> = Vec::with_capacity(1 + npos);
    items.extend(slf.map(obj));
    items.extend(given.iter().take(npos).map(|&p| obj(p)));
    let positional = PyTuple::new(py, items)?;
    let kwargs = PyDict::new(py);
    if !kwnames.is_null() {
        // SAFETY: a non-null kwnames is the call's tuple of keyword names.
        let names = unsafe { Borrowed::from_ptr(py, kwnames) };
        for (name, &value) in names.try_iter()?.zip(given.iter().skip(npos)) {
            kwargs.set_item(name?, obj(value))?;
        }
    }
    Ok(full.call(positional, Some(&kwargs))?.into_ptr())
}

/// [`call_full`] with a vectorcall's arguments as CPython gave them.
///
/// # Safety
/// `args`, `nargs` and `kwnames` are a vectorcall's, live for the call;
/// `slf`, when given, is the live instance of a method.
pub unsafe fn fallback(
    py: Python<'_>,
    full: &Bound<'_, PyAny>,
    slf: Option<*mut ffi::PyObject>,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    let npos = nargs.max(0) as usize;
    // SAFETY: the vectorcall's own arguments.
    let (given, _) = unsafe { split_args(args, npos, kwnames) };
    call_full(py, full, slf, given, npos, kwnames)
}

/// A new object of class `T` holding `value`, its type object kept in
/// `tp` after the first call. PyO3's `Bound::new` looks the class's type
/// object up on every call, and for a class whose methods sit in several
/// modules that lookup boxes an iterator over them (an allocation and a
/// free per object).
pub fn new_instance<'py, T: PyClass + PyClassImpl<BaseType = PyAny>>(
    py: Python<'py>,
    value: T,
    tp: &'static GILOnceCell<Py<PyType>>,
) -> PyResult<Bound<'py, T>> {
    use pyo3::impl_::pyclass_init::PyObjectInit;
    let tp = tp.get_or_init(py, || py.get_type::<T>().unbind());
    let init = PyClassInitializer::from(value);
    // SAFETY: `tp` is the type object of `T` (kept alive by the cell), the
    // subtype `into_new_object` requires; the pointer it returns is a new,
    // owned reference to an object of that class.
    unsafe {
        let obj = init.into_new_object(py, tp.as_ptr().cast())?;
        Ok(Bound::from_owned_ptr(py, obj).downcast_into_unchecked())
    }
}
