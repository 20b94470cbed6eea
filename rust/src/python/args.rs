//! Argument conversion with errors in Python's words: a wrong type names the
//! argument and the Python types (`topic must be str, not int`), an integer
//! out of range is a `ValueError` naming the argument (never PyO3's internal
//! type names, never a bare `OverflowError`). One rule per kind of
//! argument, on every call: a `bool` is no int (`queue_id must be int, not
//! bool`), a queue id lies in `0..=2**31-1`, a count is above 0.
//!
//! The kinds the read calls take are typed arguments ([`Topic`],
//! [`QueueId`], [`Offset`], [`MaxMsgNums`], [`TagList`], ...). PyO3 rewrites
//! a `TypeError` raised while it extracts an argument into
//! `argument 'topic': ...`; so these types never fail their extraction:
//! each holds its value or the error its conversion raised, and the call
//! takes the value with `arg.get()?`, in signature order, so the first
//! wrong argument is the one reported, in the same words as everywhere.

use pyo3::exceptions::{PyTypeError, PyValueError};
use std::net::{IpAddr, SocketAddr};

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyString};

/// The Python type name of `obj` (`int`, `NoneType`, ...).
pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// `name must be <what>, not <type>`.
pub fn type_error(name: &str, what: &str, obj: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!("{name} must be {what}, not {}", type_name(obj)))
}

/// A `str` argument.
pub fn str_arg<'a, 'py>(obj: &'a Bound<'py, PyAny>, name: &str) -> PyResult<&'a str> {
    let s = obj
        .downcast::<PyString>()
        .map_err(|_| type_error(name, "str", obj))?;
    text(s, name)
}

/// A `str` argument as UTF-8 text (a lone surrogate is a `ValueError`).
pub fn text<'a>(s: &'a Bound<'_, PyString>, name: &str) -> PyResult<&'a str> {
    s.to_str()
        .map_err(|_| PyValueError::new_err(format!("{name} is not valid UTF-8 text")))
}

/// An optional `str` argument (`None` allowed).
pub fn opt_str_arg<'a, 'py>(
    obj: Option<&'a Bound<'py, PyAny>>,
    name: &str,
) -> PyResult<Option<&'a str>> {
    match obj {
        Some(o) if !o.is_none() => Ok(Some(str_arg(o, name)?)),
        _ => Ok(None),
    }
}

/// An `int` argument that must fit in an i64 (a `bool` is refused: `True`
/// is no queue id, offset or count).
#[inline]
pub fn i64_arg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<i64> {
    match exact_i64(obj) {
        Some(v) => Ok(v),
        None => i64_arg_slow(obj, name),
    }
}

/// The value of an exact `int` (never a `bool`) that fits in an i64: one
/// pointer comparison and one call, no conversion machinery (the usual
/// queue id or offset). `None`: anything else, converted (or refused) by
/// the rule's general path.
#[inline]
fn exact_i64(obj: &Bound<'_, PyAny>) -> Option<i64> {
    // SAFETY: `obj` is a live object; the check reads its type pointer.
    if unsafe { pyo3::ffi::PyLong_CheckExact(obj.as_ptr()) } == 0 {
        return None;
    }
    let mut overflow = 0;
    // SAFETY: `obj` is an int; `overflow` is a valid out pointer. For an
    // int the call fails only by overflow, which it reports there.
    let v = unsafe { pyo3::ffi::PyLong_AsLongLongAndOverflow(obj.as_ptr(), &mut overflow) };
    (overflow == 0 && v != -1).then_some(v)
}

#[cold]
#[inline(never)]
fn i64_arg_slow(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<i64> {
    let i = obj
        .downcast::<PyInt>()
        .ok()
        .filter(|_| !obj.is_exact_instance_of::<PyBool>())
        .ok_or_else(|| type_error(name, "int", obj))?;
    i.extract::<i64>().map_err(|_| {
        PyValueError::new_err(format!(
            "{name} is out of range: {} does not fit in a signed 64-bit integer",
            i.str().map(|s| s.to_string()).unwrap_or_default()
        ))
    })
}

/// An optional `int` argument (`None` allowed) that must fit in an i64.
pub fn opt_i64_arg(obj: Option<&Bound<'_, PyAny>>, name: &str) -> PyResult<Option<i64>> {
    match obj {
        Some(o) if !o.is_none() => Ok(Some(i64_arg(o, name)?)),
        _ => Ok(None),
    }
}

/// An `int` argument that must fit in an i32 (RocketMQ's `int` fields).
pub fn i32_arg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<i32> {
    let v = i64_arg(obj, name).map_err(|e| {
        if e.is_instance_of::<PyValueError>(obj.py()) {
            PyValueError::new_err(format!(
                "{name} is out of range: it must fit in a signed 32-bit integer \
                 (-2147483648..2147483647)"
            ))
        } else {
            e
        }
    })?;
    i32::try_from(v).map_err(|_| {
        PyValueError::new_err(format!(
            "{name} is out of range: {v} does not fit in a signed 32-bit integer \
             (-2147483648..2147483647)"
        ))
    })
}

/// A body: any bytes-like object. `bytes` is used as is; anything else
/// supporting the buffer protocol (`bytearray`, `memoryview`, `array`, ...)
/// is copied once into a new `bytes`, so the CRC and the record are taken
/// from the same immutable copy even if the caller mutates its buffer.
pub fn body_arg<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    if let Ok(b) = obj.downcast::<PyBytes>() {
        return Ok(b.clone());
    }
    // SAFETY: `obj` is a valid object reference for the duration of the call.
    let is_buffer = unsafe { pyo3::ffi::PyObject_CheckBuffer(obj.as_ptr()) } == 1;
    if !is_buffer {
        return Err(type_error(
            "body",
            "a bytes-like object (bytes, bytearray, memoryview)",
            obj,
        ));
    }
    Ok(obj
        .py()
        .get_type::<PyBytes>()
        .call1((obj,))?
        .downcast_into::<PyBytes>()?)
}

/// An optional `dict` argument.
pub fn opt_dict_arg<'a, 'py>(
    obj: Option<&'a Bound<'py, PyAny>>,
    name: &str,
    what: &str,
) -> PyResult<Option<&'a Bound<'py, PyDict>>> {
    match obj {
        Some(o) if !o.is_none() => Ok(Some(
            o.downcast::<PyDict>()
                .map_err(|_| type_error(name, what, o))?,
        )),
        _ => Ok(None),
    }
}

/// An argument whose Python default is `default`: absent (or None) gives
/// `default`, anything else goes through `convert`.
pub fn defaulted<'py, T>(
    obj: Option<&Bound<'py, PyAny>>,
    default: T,
    convert: impl FnOnce(&Bound<'py, PyAny>) -> PyResult<T>,
) -> PyResult<T> {
    match obj {
        Some(o) if !o.is_none() => convert(o),
        _ => Ok(default),
    }
}

/// Parses an `(ip, port)` tuple.
pub fn parse_host(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<SocketAddr> {
    let (ip, port): (String, i64) = obj.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be an (ip: str, port: int) tuple, not {}",
            type_name(obj)
        ))
    })?;
    let ip: IpAddr = ip
        .parse()
        .map_err(|_| PyValueError::new_err(format!("{what}: {ip:?} is not an IP address")))?;
    if !(0..=65535).contains(&port) {
        return Err(PyValueError::new_err(format!(
            "{what}: port {port} out of range"
        )));
    }
    Ok(SocketAddr::new(ip, port as u16))
}

/// Converts and validates a queue id argument (an int in 0..=2**31-1).
#[inline]
pub fn queue_id_arg(obj: &Bound<'_, PyAny>) -> PyResult<i32> {
    match exact_i64(obj).and_then(|q| i32::try_from(q).ok()) {
        Some(q) if q >= 0 => Ok(q),
        _ => queue_id_arg_slow(obj),
    }
}

#[cold]
#[inline(never)]
fn queue_id_arg_slow(obj: &Bound<'_, PyAny>) -> PyResult<i32> {
    let q = i64_arg(obj, "queue_id").map_err(|e| {
        if e.is_instance_of::<PyValueError>(obj.py()) {
            PyValueError::new_err("queue_id is out of range: it must be in 0..2147483647")
        } else {
            e
        }
    })?;
    check_queue_id(q)
}

/// Validates a queue id argument.
pub fn check_queue_id(q: i64) -> PyResult<i32> {
    if q < 0 {
        return Err(PyValueError::new_err(format!(
            "queue_id must be >= 0, got {q}"
        )));
    }
    i32::try_from(q).map_err(|_| {
        PyValueError::new_err(format!("queue_id is out of range: {q} is over 2147483647"))
    })
}

/// A count argument (`max_msg_nums`, `max_num`, ...): an int above 0.
pub fn count_arg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<usize> {
    let n = i64_arg(obj, name)?;
    if n <= 0 {
        return Err(PyValueError::new_err(format!(
            "{name} must be > 0, got {n}"
        )));
    }
    usize::try_from(n).map_err(|_| PyValueError::new_err(format!("{name} is out of range: {n}")))
}

/// A converted argument, or the error its conversion raised (raised by
/// the call when it takes the value; see the module docs). The error is
/// boxed: a call's arguments stay small to move and to drop.
struct Converted<'py, T>(Result<T, (Python<'py>, Box<PyErr>)>);

impl<'py, T> Converted<'py, T> {
    #[inline]
    fn of(py: Python<'py>, r: PyResult<T>) -> Self {
        Self(r.map_err(|e| (py, Box::new(e))))
    }

    #[inline]
    fn into_value(self) -> PyResult<T> {
        self.0.map_err(|(_, e)| *e)
    }

    #[inline]
    fn value(&self) -> PyResult<&T> {
        match &self.0 {
            Ok(v) => Ok(v),
            Err((py, e)) => Err(e.clone_ref(*py)),
        }
    }
}

/// Declares typed arguments: `Name: value = conversion;` gives a
/// `FromPyObject` type `Name` whose `get()` returns the value (a copy).
macro_rules! arg_kinds {
    ($($(#[$doc:meta])* $ty:ident: $value:ty = $convert:expr;)*) => {$(
        $(#[$doc])*
        pub struct $ty<'py>(Converted<'py, $value>);

        impl<'py> FromPyObject<'py> for $ty<'py> {
            #[inline]
            fn extract_bound(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
                let convert: fn(&Bound<'py, PyAny>) -> PyResult<$value> = $convert;
                Ok(Self(Converted::of(obj.py(), convert(obj))))
            }
        }

        impl<'py> $ty<'py> {
            /// The value, or the error its conversion raised.
            #[inline]
            pub fn get(self) -> PyResult<$value> {
                self.0.into_value()
            }
        }
    )*};
}

arg_kinds! {
    /// A queue id: an int in `0..=2**31-1`.
    QueueId: i32 = queue_id_arg;
    /// A logical offset in a queue, or a CommitLog offset: an int (a Java long).
    Offset: i64 = |o| i64_arg(o, "offset");
    /// The logical offset of a message in its queue (`cq_offset`).
    CqOffset: i64 = |o| i64_arg(o, "cq_offset");
    /// A store time in ms since the epoch (`timestamp`).
    Timestamp: i64 = |o| i64_arg(o, "timestamp");
    /// The first store time of a window (`begin_timestamp`, ms).
    BeginTimestamp: i64 = |o| i64_arg(o, "begin_timestamp");
    /// The last store time of a window (`end_timestamp`, ms).
    EndTimestamp: i64 = |o| i64_arg(o, "end_timestamp");
    /// `get_message`'s count of messages at most (`max_msg_nums`, above 0).
    MaxMsgNums: usize = |o| count_arg(o, "max_msg_nums");
    /// `get_arrow`'s count of messages at most (`max_messages`, above 0).
    MaxMessages: usize = |o| count_arg(o, "max_messages");
    /// `query_message`'s count of messages at most (`max_num`, above 0).
    MaxNum: usize = |o| count_arg(o, "max_num");
    /// A tag subscription: an iterable of str (each a tag).
    TagList: Vec<String> = tag_list;
    /// A `dispatch_seq` value (`seq`, at least 0).
    Seq: u64 = |o| {
        u64::try_from(i64_arg(o, "seq")?)
            .map_err(|_| PyValueError::new_err("seq must be >= 0 (a dispatch_seq value)"))
    };
    /// A wait in seconds (`timeout`): an int or a float, at least 0.
    Timeout: f64 = seconds_arg;
}

/// A `timeout` argument: an int (not a bool) or a float, at least 0.
fn seconds_arg(obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    let secs = if obj.is_instance_of::<pyo3::types::PyFloat>() {
        obj.extract::<f64>()?
    } else if obj.is_instance_of::<PyInt>() && !obj.is_exact_instance_of::<PyBool>() {
        i64_arg(obj, "timeout")? as f64
    } else {
        return Err(type_error("timeout", "a number of seconds or None", obj));
    };
    if secs.is_nan() || secs < 0.0 {
        return Err(PyValueError::new_err("timeout must be >= 0"));
    }
    Ok(secs)
}

/// A `tags` argument of a read: an iterable of str.
fn tag_list(obj: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    let iter = obj
        .try_iter()
        .map_err(|_| type_error("tags", "a list of str", obj))?;
    let mut out = Vec::new();
    for item in iter {
        let item = item?;
        out.push(str_arg(&item, "each tag")?.to_owned());
    }
    Ok(out)
}

/// Declares typed `str` arguments: `Name = "name";` gives a `FromPyObject`
/// type whose `get()` returns the text (a lone surrogate is a `ValueError`).
macro_rules! str_kinds {
    ($($(#[$doc:meta])* $ty:ident = $name:literal;)*) => {$(
        $(#[$doc])*
        pub struct $ty<'py>(Converted<'py, Bound<'py, PyString>>);

        impl<'py> FromPyObject<'py> for $ty<'py> {
            #[inline]
            fn extract_bound(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
                let s = obj
                    .downcast::<PyString>()
                    .map(|s| s.clone())
                    .map_err(|_| type_error($name, "str", obj));
                Ok(Self(Converted::of(obj.py(), s)))
            }
        }

        impl $ty<'_> {
            /// The text, or the error its conversion raised.
            #[inline]
            pub fn get(&self) -> PyResult<&str> {
                text(self.0.value()?, $name)
            }
        }
    )*};
}

str_kinds! {
    /// A topic name (the engine judges it: see `Store::check_read_topic`).
    Topic = "topic";
    /// A message key (`UNIQ_KEY` or one of `KEYS`).
    Key = "key";
    /// An offset message id (the engine parses it).
    MsgId = "msg_id";
    /// A TAGS string (`tags_code`).
    TagsText = "tags";
    /// A string whose Java hash is asked for (`java_string_hash`).
    HashedText = "s";
    /// A text to parse (`parse_delay_levels`).
    Text = "text";
}
