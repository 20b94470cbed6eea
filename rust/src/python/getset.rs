//! Attributes of per-message classes as C-level getters that skip PyO3's
//! second type check.
//!
//! A `#[getter]` PyO3 generates checks the type of `self` before it runs,
//! and with the `multiple-pymethods` build that check looks the class's
//! type object up through a boxed iterator over its method blocks: an
//! allocation and a free, about 220 instructions, on every attribute read
//! (`m.body` of every message of a pull). CPython's getset descriptor has
//! already checked the type before it calls the getter (`descr_check`), so
//! the getters here take `self` as that check left it. [`install`] puts one
//! descriptor per [`Getter`] into the class's dictionary (name, docstring
//! and value as a `#[getter]` would give them); PyO3's trampoline still
//! runs around each one (GIL count, panics caught, errors raised).

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

/// The C getter of every descriptor [`install`] makes: `closure` is its
/// [`Getter`].
unsafe extern "C" fn get<T>(slf: *mut ffi::PyObject, closure: *mut c_void) -> *mut ffi::PyObject
where
    T: PyClass<Frozen = True> + Sync,
{
    // SAFETY: called by CPython's getset descriptor with the instance and
    // the closure `install` set; the trampoline takes two object pointers
    // and hands them on unchanged (the closure is never used as an object).
    unsafe { pyo3::impl_::trampoline::binaryfunc(slf, closure.cast(), call::<T>) }
}

/// Runs the getter `closure` on `slf`.
unsafe fn call<T>(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    closure: *mut ffi::PyObject,
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
