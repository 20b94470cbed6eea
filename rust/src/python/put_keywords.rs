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
//! CPython passes a call site's keyword names as one tuple, a constant of
//! the calling code, on every call: the placement of the last few such
//! tuples is kept ([`KW_SITES`], each tuple held so that its address stays
//! its own), so a put in a loop places its keywords by one pointer
//! comparison instead of reading and matching each name again (what made
//! a keyword still cost ~100 instructions more than a position).
//!
//! [`install`] replaces `put` in the class's dictionary with this method
//! (same name, docstring and text signature) and keeps the generated one
//! as the fallback. The put itself is the same call either way
//! ([`PyStoreBase::put_args`]).

use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::{GILOnceCell, GILProtected};
use pyo3::types::{PyString, PyTuple};
use std::cell::RefCell;

use super::fast_method::{
    doc_of, fallback, method_def, not_set_up, set_method, vectorcall_entry, MethodDef,
};
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
    let doc = doc_of("put", &generated)?;
    intern_names(py);
    let _ = GENERATED.set(py, generated.unbind());
    set_method(cls, c"put", method_def(&DEF, c"put", doc, put_fast))
}

/// Interns the put parameter names (once).
pub(super) fn intern_names(py: Python<'_>) {
    INTERNED.get_or_init(py, || {
        NAMES
            .iter()
            .map(|n| PyString::intern(py, n).unbind())
            .collect()
    });
}

vectorcall_entry! {
    /// The C entry point of `put`, around [`put_parse`].
    put_fast => put_parse
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
    // SAFETY: the vectorcall arguments of this call, as CPython gave them.
    let placed = unsafe { Placed::place(py, args, nargs, kwnames) };
    let done = placed.as_ref().and_then(|p| {
        p.with_args(py, |put, check| {
            // SAFETY: `slf` is an instance of the method's class (or a
            // subclass): CPython's method descriptor checks the type of
            // `self` before it calls the method, so it is not checked again
            // (a subclass's check walks its MRO on every put).
            let this = unsafe { Borrowed::from_ptr(py, slf) };
            // SAFETY: as above, `slf` is a `PyStoreBase` (or a subclass).
            let this = unsafe { this.downcast_unchecked::<PyStoreBase>() };
            this.get().put_args(py, put, check)
        })
    });
    match done {
        Some(r) => Ok(r?.into_ptr()),
        None => {
            let Some(generated) = GENERATED.get(py) else {
                return Err(not_set_up("MessageStoreBase.put"));
            };
            // SAFETY: the vectorcall arguments of this call, unchanged.
            unsafe { fallback(py, generated.bind(py), Some(slf), args, nargs, kwnames) }
        }
    }
}

/// The put arguments of one vectorcall placed in signature order (absent:
/// null), and `check`.
pub(super) struct Placed {
    slots: [*mut ffi::PyObject; POSITIONAL],
    check: bool,
}

impl Placed {
    /// Places the arguments by position and by keyword identity; None for a
    /// call it cannot place so (the generated parser's to take).
    ///
    /// # Safety
    /// `args`, `nargs` and `kwnames` are the vectorcall arguments of the
    /// current call (`args` holds `nargs` positional values, then one per
    /// name in `kwnames`, a tuple or null), alive while the result is used.
    pub(super) unsafe fn place(
        py: Python<'_>,
        args: *const *mut ffi::PyObject,
        nargs: ffi::Py_ssize_t,
        kwnames: *mut ffi::PyObject,
    ) -> Option<Self> {
        let npos = nargs.max(0) as usize;
        if npos > POSITIONAL {
            return None;
        }
        let mut slots: [*mut ffi::PyObject; NAMES.len()] = [std::ptr::null_mut(); NAMES.len()];
        if kwnames.is_null() {
            if npos == 0 {
                return None;
            }
            // SAFETY: `args` holds `npos` live borrowed objects.
            let given = unsafe { std::slice::from_raw_parts(args, npos) };
            slots[..npos].copy_from_slice(given);
        } else {
            let sites = KW_SITES.get(py);
            let known = sites.try_borrow().ok().and_then(|s| s.find(kwnames, npos));
            let (len, to) = match known {
                Some(site) => site,
                // SAFETY: `kwnames` is this call's tuple of keyword names.
                None => unsafe { place_names(py, kwnames, npos) }?,
            };
            // SAFETY: `args` holds `npos + len` live borrowed objects.
            let given = unsafe { std::slice::from_raw_parts(args, npos + len) };
            slots[..npos].copy_from_slice(&given[..npos]);
            for (i, &j) in to[..len].iter().enumerate() {
                slots[usize::from(j)] = given[npos + i];
            }
            if known.is_none() {
                // SAFETY: `kwnames` is a live tuple (this call's).
                let names = unsafe { Borrowed::from_ptr(py, kwnames) };
                // SAFETY: as above: a tuple.
                let names = unsafe { names.downcast_unchecked::<PyTuple>() };
                let old = sites
                    .try_borrow_mut()
                    .ok()
                    .and_then(|mut s| s.remember(names.to_owned().unbind(), npos, len, to));
                drop(old);
            }
        }
        let check = match slots[CHECK] {
            p if p.is_null() => true,
            // SAFETY: reading the address of the `True` singleton.
            p if p == unsafe { ffi::Py_True() } => true,
            // SAFETY: reading the address of the `False` singleton.
            p if p == unsafe { ffi::Py_False() } => false,
            _ => return None,
        };
        if slots[0].is_null() || slots[1].is_null() {
            return None;
        }
        let mut put = [std::ptr::null_mut(); POSITIONAL];
        put.copy_from_slice(&slots[..POSITIONAL]);
        Some(Self { slots: put, check })
    }

    /// Calls `f` with the placed arguments as [`PutArgs`] and `check`; None
    /// if `topic` or `body` is missing.
    pub(super) fn with_args<R>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(PutArgs<'_, '_>, bool) -> R,
    ) -> Option<R> {
        // SAFETY: every non-null slot is a live object borrowed from the
        // caller for the duration of this call (`place`'s contract).
        let b: [Option<Borrowed<'_, '_, PyAny>>; POSITIONAL] =
            std::array::from_fn(|i| unsafe { Borrowed::from_ptr_or_opt(py, self.slots[i]) });
        let (Some(topic), Some(body)) = (b[0].as_deref(), b[1].as_deref()) else {
            return None;
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
        Some(f(put, self.check))
    }
}

/// Where each keyword of `kwnames` goes (parameter indexes, in the tuple's
/// order) in a call with `npos` positional arguments, and how many there
/// are; None if a name is not an interned parameter name, is given twice,
/// or names a parameter given by position (the fallback's errors).
///
/// # Safety
/// `kwnames` is a live tuple of keyword names.
unsafe fn place_names(
    py: Python<'_>,
    kwnames: *mut ffi::PyObject,
    npos: usize,
) -> Option<(usize, [u8; NAMES.len()])> {
    let names = INTERNED.get(py)?;
    // SAFETY: a live tuple (the caller's contract).
    let len = unsafe { ffi::PyTuple_Size(kwnames) }.max(0) as usize;
    if len > NAMES.len() - npos {
        return None;
    }
    let mut to = [0u8; NAMES.len()];
    let mut taken = [false; NAMES.len()];
    for (i, t) in to[..len].iter_mut().enumerate() {
        // SAFETY: `i` < the tuple's size; the item is borrowed.
        let name = unsafe { ffi::PyTuple_GetItem(kwnames, i as ffi::Py_ssize_t) };
        // Keywords usually follow the signature's order right after the
        // positional ones: that parameter is tried first, then every one
        // not given by position (one given both ways is the fallback's
        // error to raise).
        let guess = npos + i;
        let j = if names.get(guess).is_some_and(|n| n.as_ptr() == name) {
            guess
        } else {
            npos + names[npos..].iter().position(|n| n.as_ptr() == name)?
        };
        if std::mem::replace(&mut taken[j], true) {
            return None;
        }
        *t = j as u8;
    }
    Some((len, to))
}

/// How many keyword-name tuples [`KW_SITES`] keeps.
const SITES: usize = 4;

/// A keyword-name tuple placed before: CPython passes a call site's
/// keyword names as one tuple, a constant of the calling code, on every
/// call, so a put in a loop hands the same tuple each time. The tuple is
/// held (its address stays its own); its names were placed for calls with
/// `npos` positional arguments.
struct Site {
    names: Py<PyTuple>,
    npos: usize,
    len: usize,
    to: [u8; NAMES.len()],
}

/// The last [`SITES`] keyword-name tuples placed, replaced in turn.
struct Sites {
    sites: [Option<Site>; SITES],
    next: usize,
}

impl Sites {
    /// The placement of `kwnames` for `npos` positional arguments, if kept.
    #[inline]
    fn find(&self, kwnames: *mut ffi::PyObject, npos: usize) -> Option<(usize, [u8; NAMES.len()])> {
        self.sites
            .iter()
            .flatten()
            .find(|s| s.names.as_ptr() == kwnames && s.npos == npos)
            .map(|s| (s.len, s.to))
    }

    /// Keeps a placement (in place of the oldest, which it returns: dropped
    /// by the caller once the cell is no longer borrowed).
    #[cold]
    fn remember(
        &mut self,
        names: Py<PyTuple>,
        npos: usize,
        len: usize,
        to: [u8; NAMES.len()],
    ) -> Option<Site> {
        let old = self.sites[self.next].replace(Site {
            names,
            npos,
            len,
            to,
        });
        self.next = (self.next + 1) % SITES;
        old
    }
}

/// The keyword-name tuples placed lately (under the GIL).
static KW_SITES: GILProtected<RefCell<Sites>> = GILProtected::new(RefCell::new(Sites {
    sites: [None, None, None, None],
    next: 0,
}));
