//! `MessageStoreBase.put` with its keywords matched by identity.
//!
//! PyO3's argument parser matches each keyword argument by text: it asks
//! CPython for the name's UTF-8 and compares it with every parameter name in
//! turn (`memcmp` per candidate), about 250 instructions per keyword, so
//! `put(t, b, q, tags=..., keys=...)` cost ~500 instructions more than the
//! same values given by position. Keyword names written in source code are
//! interned strings, so the same match can be made by pointer against the
//! interned parameter names: this method does that, and hands every other
//! call (a name not interned, an unknown or repeated argument, a `check`
//! that is not a bool, too many or too few arguments) unchanged to the
//! method PyO3 generated, which parses and raises exactly as before.
//!
//! [`install`] replaces `put` in the class's dictionary with this method
//! (same name, docstring and text signature) and keeps the generated one
//! as the fallback (`fast_method.rs` makes the method and hands it the
//! calls it does not take). The put itself is the same call either way
//! ([`PyStoreBase::put_args`]).

use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::PyString;

use super::fast_method::{self, call_full, split_args, MethodDef};
use super::put_args::PutArgs;
use super::store_base::PyStoreBase;

/// The put parameters in signature order, then the keyword-only `check`.
const NAMES: [&str; 12] = [
    "topic",
    "body",
    "queue_id",
    "tags",
    "keys",
    "properties",
    "delay_level",
    "flag",
    "born_timestamp",
    "born_host",
    "sys_flag",
    "check",
];
/// How many of [`NAMES`] may be given by position.
const POSITIONAL: usize = 11;
/// The index of `check` in [`NAMES`].
const CHECK: usize = 11;

/// The interned parameter names.
static INTERNED: GILOnceCell<Vec<Py<PyString>>> = GILOnceCell::new();
/// The method PyO3 generated: every call the fast path does not take.
static GENERATED: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
/// The method definition of the fast `put` (lives as long as the class).
static DEF: OnceLock<MethodDef> = OnceLock::new();

/// Replaces `MessageStoreBase.put` by the identity-matching method (module
/// set-up, once).
pub fn install(py: Python<'_>, cls: &Bound<'_, pyo3::types::PyType>) -> PyResult<()> {
    let generated = cls.getattr("__dict__")?.get_item("put")?;
    let doc: String = generated.getattr("__doc__")?.extract()?;
    let sig: String = generated.getattr("__text_signature__")?.extract()?;
    INTERNED.get_or_init(py, || {
        NAMES
            .iter()
            .map(|n| PyString::intern(py, n).unbind())
            .collect()
    });
    let _ = GENERATED.set(py, generated.unbind());
    fast_method::install(cls, c"put", &sig, &doc, put_fast, &DEF)
}

/// The C entry point: PyO3's trampoline (GIL pool, panics caught, errors
/// raised) around [`put_parse`].
unsafe extern "C" fn put_fast(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: called by CPython with the vectorcall arguments of a
    // METH_FASTCALL | METH_KEYWORDS method, which the trampoline expects.
    unsafe { pyo3::impl_::trampoline::fastcall_with_keywords(slf, args, nargs, kwnames, put_parse) }
}

/// Places the arguments by position and by keyword identity, then puts; any
/// call it cannot place goes to the generated method.
unsafe fn put_parse(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    let npos = nargs.max(0) as usize;
    let nkw = if kwnames.is_null() {
        0
    } else {
        // SAFETY: a non-null kwnames is the tuple of keyword names (vectorcall).
        unsafe { ffi::PyTuple_Size(kwnames) }.max(0) as usize
    };
    let mut slots: [*mut ffi::PyObject; NAMES.len()] = [std::ptr::null_mut(); NAMES.len()];
    let placed = npos <= POSITIONAL
        && npos + nkw > 0
        && INTERNED.get(py).is_some_and(|names| {
            // SAFETY: `args` holds `npos + nkw` live borrowed objects.
            let given = unsafe { std::slice::from_raw_parts(args, npos + nkw) };
            slots[..npos].copy_from_slice(&given[..npos]);
            (0..nkw).all(|i| {
                // SAFETY: `i` < the tuple's size; the item is borrowed.
                let name = unsafe { ffi::PyTuple_GetItem(kwnames, i as ffi::Py_ssize_t) };
                // Keywords usually follow the signature's order right after
                // the positional ones: that parameter is tried first, then
                // every one not given by position (one given both ways is
                // the fallback's error to raise).
                let guess = npos + i;
                let j = if names.get(guess).is_some_and(|n| n.as_ptr() == name) {
                    guess
                } else {
                    match names[npos..].iter().position(|n| n.as_ptr() == name) {
                        Some(j) => npos + j,
                        None => return false,
                    }
                };
                if !slots[j].is_null() {
                    return false;
                }
                slots[j] = given[npos + i];
                true
            })
        });
    let check = match slots[CHECK] {
        p if p.is_null() => Some(true),
        // SAFETY: reading the address of the `True` singleton.
        p if p == unsafe { ffi::Py_True() } => Some(true),
        // SAFETY: reading the address of the `False` singleton.
        p if p == unsafe { ffi::Py_False() } => Some(false),
        _ => None,
    };
    match check {
        Some(check) if placed && !slots[0].is_null() && !slots[1].is_null() => {
            // SAFETY: every non-null slot is a live object borrowed from
            // the caller for the duration of this call.
            let b: [Option<Borrowed<'_, '_, PyAny>>; POSITIONAL] =
                std::array::from_fn(|i| unsafe { Borrowed::from_ptr_or_opt(py, slots[i]) });
            let (Some(topic), Some(body)) = (b[0].as_deref(), b[1].as_deref()) else {
                return fallback(py, slf, args, npos, kwnames);
            };
            let put = PutArgs {
                topic,
                body,
                queue_id: b[2].as_deref(),
                tags: b[3].as_deref(),
                keys: b[4].as_deref(),
                properties: b[5].as_deref(),
                delay_level: b[6].as_deref(),
                flag: b[7].as_deref(),
                born_timestamp: b[8].as_deref(),
                born_host: b[9].as_deref(),
                sys_flag: b[10].as_deref(),
            };
            // SAFETY: `slf` is an instance of the method's class (or a
            // subclass): CPython's method descriptor checks the type of
            // `self` before it calls the method, so it is not checked again
            // (a subclass's check walks its MRO on every put).
            let this = unsafe { Borrowed::from_ptr(py, slf) };
            // SAFETY: as above, `slf` is a `PyStoreBase` (or a subclass).
            let this = unsafe { this.downcast_unchecked::<PyStoreBase>() };
            Ok(this.get().put_args(py, put, check)?.into_ptr())
        }
        _ => fallback(py, slf, args, npos, kwnames),
    }
}

/// The call as given, to the generated method (its own parsing and errors).
#[cold]
#[inline(never)]
fn fallback(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    npos: usize,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    let Some(generated) = GENERATED.get(py) else {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "MessageStoreBase.put is not set up",
        ));
    };
    // SAFETY: the vectorcall's own arguments (`npos` positional, then one
    // per keyword name).
    let (given, _) = unsafe { split_args(args, npos, kwnames) };
    call_full(py, generated.bind(py), slf, given, npos, kwnames)
}
