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
    let full_doc = CString::new(format!("{}{text_signature}\n--\n\n{doc}", name.to_str()?))
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    let def = cell.get_or_init(|| MethodDef {
        def: ffi::PyMethodDef {
            ml_name: name.as_ptr(),
            ml_meth: ffi::PyMethodDefPointer {
                PyCFunctionFastWithKeywords: meth,
            },
            ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
            ml_doc: full_doc.as_ptr(),
        },
        _doc: full_doc,
    });
    // SAFETY: `cls` is a live type object; `def` is 'static (a OnceLock in
    // a static, never dropped), as CPython requires of a method definition.
    let descr = unsafe {
        Bound::from_owned_ptr_or_err(
            cls.py(),
            ffi::PyDescr_NewMethod(cls.as_ptr().cast(), std::ptr::from_ref(&def.def).cast_mut()),
        )?
    };
    cls.setattr(name.to_str()?, descr)
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

/// Calls `full(slf, *args, **kwargs)` with the vectorcall's arguments as
/// given (`given` from [`split_args`]: `npos` positional values, then one
/// value per name of `kwnames`).
#[cold]
#[inline(never)]
pub fn call_full(
    py: Python<'_>,
    full: &Bound<'_, PyAny>,
    slf: *mut ffi::PyObject,
    given: &[*mut ffi::PyObject],
    npos: usize,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: each pointer is a live object borrowed from our caller (and
    // `slf` the instance): a new reference is taken for the call.
    let obj = |p: *mut ffi::PyObject| unsafe { Borrowed::from_ptr(py, p) }.to_owned();
    let mut items: Vec<Bound<'_, PyAny>> = Vec::with_capacity(1 + npos);
    items.push(obj(slf));
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
