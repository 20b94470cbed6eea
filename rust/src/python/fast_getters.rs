//! Attribute reads of the put results without PyO3's second type check.
//!
//! CPython's getset descriptor checks the type of the object before it
//! calls its getter (`descr_check`). The getter PyO3 generates checks it
//! again, looking the class's type object up, and for a class whose methods
//! may sit in several modules (the `multiple-pymethods` build) that lookup
//! boxes an iterator over them: an allocation and a free per attribute
//! read, about 150 instructions of the ~360 a `result.status` cost. A put
//! returns a result whose status is read every time, so [`install`]
//! replaces the getters of `PutResult` and `BatchPutResult` by descriptors
//! whose getter reads the object without the second check, calling the
//! same Rust method (name and docstring kept). The generated getters stay
//! the one definition of each attribute: [`fast_getter!`] names them.

use std::ffi::{CStr, CString};
use std::os::raw::c_void;
use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;

use super::types::{PyBatchPutResult, PyPutResult};

/// One getter to install: the attribute's name and the C getter that reads
/// it without the second type check.
pub struct FastGetter {
    /// The attribute (a getter PyO3 generated for the class).
    pub name: &'static CStr,
    /// Reads the attribute of an object the descriptor has type-checked.
    pub get: ffi::getter,
}

/// A [`FastGetter`] for attribute `$name` of class `$ty`, read by
/// `|this: &$ty, py| -> impl IntoPyObject` (the class's own getter
/// method; `?` raises). The C getter runs in [`call`] (panics caught,
/// errors raised).
macro_rules! fast_getter {
    ($ty:ty, $name:literal, |$this:pat_param, $py:pat_param| $read:expr) => {{
        unsafe extern "C" fn get(
            slf: *mut ffi::PyObject,
            _closure: *mut c_void,
        ) -> *mut ffi::PyObject {
            unsafe fn body(
                py: Python<'_>,
                slf: *mut ffi::PyObject,
            ) -> PyResult<*mut ffi::PyObject> {
                use pyo3::IntoPyObjectExt;
                // SAFETY: the object lives for this call (borrowed).
                let obj = unsafe { pyo3::Borrowed::from_ptr(py, slf) };
                // SAFETY: CPython's getset descriptor calls its getter only
                // with an instance of the class it was made for (it checks
                // the type first).
                let this = unsafe { obj.downcast_unchecked::<$ty>() };
                let value = {
                    let $this: &$ty = this.get();
                    let $py: Python<'_> = py;
                    $read
                };
                Ok(value.into_bound_py_any(py)?.into_ptr())
            }
            // SAFETY: called by CPython, holding the GIL, with a live object.
            unsafe { call(slf, body) }
        }
        FastGetter { name: $name, get }
    }};
}

/// Runs a getter's `body` for CPython: its value, or null with the error
/// (or the panic, as a `PanicException`) raised. PyO3's own trampoline
/// also counts the GIL in a thread-local and settles reference counts
/// other threads deferred (~80 instructions a read). A getter needs
/// neither: the deferred counts are settled at the next PyO3 call, and an
/// object a getter drops with the count at zero is deferred the same way
/// (released a little later, never leaked).
///
/// # Safety
///
/// The caller holds the GIL (CPython calls a getter with it held).
#[inline]
unsafe fn call(
    slf: *mut ffi::PyObject,
    body: unsafe fn(Python<'_>, *mut ffi::PyObject) -> PyResult<*mut ffi::PyObject>,
) -> *mut ffi::PyObject {
    // SAFETY: the caller holds the GIL, for the whole call.
    let py = unsafe { Python::assume_gil_acquired() };
    // SAFETY: `body`'s contract is this function's (GIL held, live object).
    let out = std::panic::catch_unwind(|| unsafe { body(py, slf) });
    let err = match out {
        Ok(Ok(value)) => return value,
        Ok(Err(e)) => e,
        Err(_) => pyo3::panic::PanicException::new_err("a result attribute's getter panicked"),
    };
    err.restore(py);
    std::ptr::null_mut()
}

/// The getters of `PutResult`.
fn put_result_getters() -> [FastGetter; 8] {
    type R = PyPutResult;
    [
        fast_getter!(R, c"status", |r, py| r.status(py)?),
        fast_getter!(R, c"ok", |r, _| r.ok()),
        fast_getter!(R, c"wrote_offset", |r, _| r.wrote_offset()),
        fast_getter!(R, c"wrote_bytes", |r, _| r.wrote_bytes()),
        fast_getter!(R, c"queue_offset", |r, _| r.queue_offset()),
        fast_getter!(R, c"store_timestamp", |r, _| r.store_timestamp()),
        fast_getter!(R, c"msg_id", |r, _| r.msg_id()),
        fast_getter!(R, c"reason", |r, _| r.reason()),
    ]
}

/// The getters of `BatchPutResult`.
fn batch_result_getters() -> [FastGetter; 9] {
    type R = PyBatchPutResult;
    [
        fast_getter!(R, c"status", |r, py| r.status(py)?),
        fast_getter!(R, c"ok", |r, _| r.ok()),
        fast_getter!(R, c"reason", |r, _| r.reason()),
        fast_getter!(R, c"wrote_offset", |r, _| r.wrote_offset()),
        fast_getter!(R, c"queue_offset", |r, _| r.queue_offset()),
        fast_getter!(R, c"count", |r, _| r.count()),
        fast_getter!(R, c"wrote_bytes", |r, _| r.wrote_bytes()),
        fast_getter!(R, c"store_timestamp", |r, _| r.store_timestamp()),
        fast_getter!(R, c"offsets", |r, py| r.offsets(py)),
    ]
}

/// The getset definitions handed to CPython, with the docstrings they
/// point to: made once, never dropped (a descriptor keeps a pointer to its
/// definition for the life of the class).
struct Defs {
    defs: Vec<ffi::PyGetSetDef>,
    _docs: Vec<CString>,
}

// SAFETY: written once, before it is shared, and only read afterwards; its
// pointers are to static names and the owned docstrings.
unsafe impl Send for Defs {}
// SAFETY: as above: read-only after construction.
unsafe impl Sync for Defs {}

static PUT_RESULT: OnceLock<Defs> = OnceLock::new();
static BATCH_RESULT: OnceLock<Defs> = OnceLock::new();

/// Replaces the getters of `PutResult` and `BatchPutResult` (module set-up,
/// once, after the classes are added).
pub fn install(py: Python<'_>) -> PyResult<()> {
    replace(
        py,
        &py.get_type::<PyPutResult>(),
        &PUT_RESULT,
        &put_result_getters(),
    )?;
    replace(
        py,
        &py.get_type::<PyBatchPutResult>(),
        &BATCH_RESULT,
        &batch_result_getters(),
    )
}

/// Sets each getter of `getters` on `cls` in place of the one PyO3 made,
/// with its docstring.
fn replace(
    py: Python<'_>,
    cls: &Bound<'_, PyType>,
    cell: &'static OnceLock<Defs>,
    getters: &[FastGetter],
) -> PyResult<()> {
    let dict = cls.getattr("__dict__")?;
    let mut docs = Vec::with_capacity(getters.len());
    for g in getters {
        let generated = dict.get_item(g.name.to_str()?)?;
        let doc: Option<String> = generated.getattr("__doc__")?.extract()?;
        docs.push(
            CString::new(doc.unwrap_or_default())
                .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?,
        );
    }
    let made = cell.get_or_init(|| Defs {
        defs: getters
            .iter()
            .zip(&docs)
            .map(|(g, doc)| ffi::PyGetSetDef {
                name: g.name.as_ptr(),
                get: Some(g.get),
                set: None,
                doc: if doc.is_empty() {
                    std::ptr::null()
                } else {
                    doc.as_ptr()
                },
                closure: std::ptr::null_mut(),
            })
            .collect(),
        _docs: docs,
    });
    for def in &made.defs {
        // SAFETY: `cls` is a live type object; `def` is 'static (a
        // OnceLock never dropped), as CPython requires of a definition.
        let descr = unsafe {
            Bound::from_owned_ptr_or_err(
                py,
                ffi::PyDescr_NewGetSet(cls.as_ptr().cast(), std::ptr::from_ref(def).cast_mut()),
            )?
        };
        // SAFETY: `def.name` is one of the static names above.
        let name = unsafe { CStr::from_ptr(def.name) };
        cls.setattr(name.to_str()?, descr)?;
    }
    Ok(())
}
