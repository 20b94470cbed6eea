//! Attributes of per-message and per-put classes as C-level getters that
//! skip PyO3's second type check and its trampoline.
//!
//! A `#[getter]` PyO3 generates checks the type of `self` before it runs,
//! and with the `multiple-pymethods` build that check looks the class's
//! type object up through a boxed iterator over its method blocks: an
//! allocation and a free, about 220 instructions, on every attribute read
//! (`m.body` of every message of a pull, `r.status` of every put).
//! CPython's getset descriptor has already checked the type before it
//! calls the getter (`descr_check`), so the getters here take `self` as
//! that check left it. [`install`] puts one descriptor per [`Getter`] into
//! the class's dictionary (name, docstring and value as a `#[getter]`
//! would give them). The getter runs in a wrapper of its own ([`get`]),
//! not PyO3's trampoline: see there.
//!
//! `MessageExt` (`message_ext.rs`), `PutResult` and `BatchPutResult`
//! (`types.rs`) read their attributes so.

use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;
use pyo3::types::PyType;
use pyo3::PyClass;

/// One attribute: its name, its docstring and how it is read.
pub struct Getter<T: 'static> {
    /// The attribute's name.
    pub name: &'static CStr,
    /// Its docstring.
    pub doc: &'static CStr,
    /// Reads it from an instance.
    pub get: for<'py> fn(&T, Python<'py>) -> PyResult<Bound<'py, PyAny>>,
}

/// A [`Getter`] named `$name` with docstring `$doc`, reading `$get`.
macro_rules! getter {
    ($name:literal, $doc:literal, $get:expr) => {
        $crate::python::getset::Getter {
            name: $name,
            doc: $doc,
            get: $get,
        }
    };
}
pub(crate) use getter;

/// The `PyGetSetDef`s of one class, kept for as long as the class lives
/// (CPython keeps pointers to them in the descriptors).
pub struct GetSetDefs(Vec<ffi::PyGetSetDef>);

// SAFETY: the definitions are written once, before they are shared, and
// only read afterwards; their pointers are to static names, docstrings and
// getters.
unsafe impl Send for GetSetDefs {}
// SAFETY: as above: read-only after construction.
unsafe impl Sync for GetSetDefs {}

/// Puts a descriptor for each of `getters` into the dictionary of `cls`,
/// the type object of `T` (module set-up, once); `defs` keeps their
/// definitions.
pub fn install<T>(
    cls: &Bound<'_, PyType>,
    getters: &'static [Getter<T>],
    defs: &'static OnceLock<GetSetDefs>,
) -> PyResult<()>
where
    T: PyClass<Frozen = True> + Sync,
{
    let defs = defs.get_or_init(|| {
        GetSetDefs(
            getters
                .iter()
                .map(|g| ffi::PyGetSetDef {
                    name: g.name.as_ptr(),
                    get: Some(get::<T>),
                    set: None,
                    doc: g.doc.as_ptr(),
                    closure: std::ptr::from_ref(g).cast_mut().cast::<c_void>(),
                })
                .collect(),
        )
    });
    for (def, g) in defs.0.iter().zip(getters) {
        // SAFETY: `cls` is a live type object; `def` lives as long as the
        // process (a OnceLock in a static), as CPython requires.
        let descr = unsafe {
            Bound::from_owned_ptr_or_err(
                cls.py(),
                ffi::PyDescr_NewGetSet(cls.as_ptr().cast(), std::ptr::from_ref(def).cast_mut()),
            )?
        };
        cls.setattr(g.name.to_str()?, descr)?;
    }
    Ok(())
}

/// The C getter of every descriptor [`install`] makes (`closure` is its
/// [`Getter`]): the value, or null with the error (or the panic, as a
/// `PanicException`) raised. PyO3's own trampoline also counts the GIL in
/// a thread-local and settles reference counts other threads deferred
/// (~80 instructions a read). A getter needs neither: the deferred counts
/// are settled at the next PyO3 call, and an object a getter drops with
/// the count at zero is deferred the same way (released a little later,
/// never leaked).
unsafe extern "C" fn get<T>(slf: *mut ffi::PyObject, closure: *mut c_void) -> *mut ffi::PyObject
where
    T: PyClass<Frozen = True> + Sync,
{
    // SAFETY: CPython calls a getter holding the GIL, for the whole call.
    let py = unsafe { Python::assume_gil_acquired() };
    // SAFETY: called by CPython's getset descriptor with the instance and
    // the closure `install` set.
    let out = std::panic::catch_unwind(|| unsafe { call::<T>(py, slf, closure) });
    let err = match out {
        Ok(Ok(value)) => return value,
        Ok(Err(e)) => e,
        Err(_) => pyo3::panic::PanicException::new_err("an attribute's getter panicked"),
    };
    err.restore(py);
    std::ptr::null_mut()
}

/// Runs the getter `closure` on `slf`.
///
/// # Safety
///
/// `closure` is the `&'static Getter<T>` [`install`] stored, `slf` an
/// instance of the class the descriptor was made for, borrowed for the
/// call.
#[inline]
unsafe fn call<T>(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    closure: *mut c_void,
) -> PyResult<*mut ffi::PyObject>
where
    T: PyClass<Frozen = True> + Sync,
{
    // SAFETY: `closure` is the `&'static Getter<T>` `install` stored.
    let g = unsafe { &*closure.cast::<Getter<T>>() };
    // SAFETY: CPython's descriptor checked that `slf` is an instance of
    // the class the descriptor was made for (`descr_check`), the class of
    // `T`, before calling the getter; `slf` is borrowed for the call.
    let this = unsafe { Borrowed::from_ptr(py, slf) };
    // SAFETY: as above, `slf` is a `T`.
    let this = unsafe { this.downcast_unchecked::<T>() };
    (g.get)(this.get(), py).map(Bound::into_ptr)
}
