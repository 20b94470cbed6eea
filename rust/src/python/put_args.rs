//! The put fields as Python gives them: the one signature of
//! `Message(...)`, `MessageStoreBase.put` and `NativeStore.put`
//! ([`put_fields_method!`]), the one parser of those fields
//! ([`PutArgs::parse`]), the conversion of the `keys` and `properties`
//! arguments every put shares with `put_batch` ([`fill_fields`]), and the
//! bodies and per-message items of a `put_batch`. The rules the fields
//! follow are the engine's ([`crate::log::message::MessageFields`]).

use std::borrow::Cow;
use std::net::SocketAddr;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::log::commitlog::Refused;
use crate::log::message::{
    BatchProperties, InlineProps, MessageFields, MessageSpec, PropsBuf, DEFAULT_BORN_HOST,
};

use super::args::{
    body_arg, defaulted, i32_arg, opt_dict_arg, opt_i64_arg, opt_str_arg, type_error,
};
use super::args::{parse_host, queue_id_arg};

/// Defines a Python method (or, with `new`, the constructor) taking the put
/// fields with the put signature: `topic, body, queue_id=0, tags=None,
/// keys=None, properties=None, delay_level=0, flag=0, born_timestamp=None,
/// born_host=None, sys_flag=0` (a method also takes the keyword-only
/// `check=True`: raise for a put that is not `PUT_OK`). The arguments go
/// unconverted, as a [`PutArgs`], to `handler(self, py, args, check)`
/// (`handler(args)` for `new`), which parses them with [`PutArgs::parse`].
/// Each use is a `#[pymethods]` block of its own.
macro_rules! put_fields_method {
    ($(#[$doc:meta])* new $ty:ident => $handler:path) => {
        $crate::python::put_args::put_fields_method!(@emit $ty, [$(#[$doc])* #[new]],
            "(topic, body, queue_id=0, tags=None, keys=None, properties=None, delay_level=0, flag=0, born_timestamp=None, born_host=None, sys_flag=0)",
            new, [], Self, [], [], [], [] => $handler);
    };
    ($(#[$doc:meta])* fn $name:ident in $ty:ident -> $ret:ty => $handler:path) => {
        $crate::python::put_args::put_fields_method!(@emit $ty, [$(#[$doc])*],
            "($self, topic, body, queue_id=0, tags=None, keys=None, properties=None, delay_level=0, flag=0, born_timestamp=None, born_host=None, sys_flag=0, *, check=True)",
            $name, [&self, py: Python<'_>,], $ret, [self, py,], [, *, check=true],
            [check: bool,], [, check] => $handler);
    };
    (@emit $ty:ty, [$($attr:tt)*], $text:literal, $name:ident, [$($recv:tt)*], $ret:ty,
     [$($pass:tt)*], [$($sig:tt)*], [$($param:tt)*], [$($more:tt)*] => $handler:path) => {
        #[pymethods]
        impl $ty {
            $($attr)*
            #[pyo3(signature = (topic, body, queue_id=None, tags=None, keys=None, properties=None, delay_level=None, flag=None, born_timestamp=None, born_host=None, sys_flag=None $($sig)*), text_signature = $text)]
            #[allow(clippy::too_many_arguments)]
            fn $name(
                $($recv)*
                topic: &Bound<'_, PyAny>,
                body: &Bound<'_, PyAny>,
                queue_id: Option<&Bound<'_, PyAny>>,
                tags: Option<&Bound<'_, PyAny>>,
                keys: Option<&Bound<'_, PyAny>>,
                properties: Option<&Bound<'_, PyAny>>,
                delay_level: Option<&Bound<'_, PyAny>>,
                flag: Option<&Bound<'_, PyAny>>,
                born_timestamp: Option<&Bound<'_, PyAny>>,
                born_host: Option<&Bound<'_, PyAny>>,
                sys_flag: Option<&Bound<'_, PyAny>>,
                $($param)*
            ) -> PyResult<$ret> {
                $handler($($pass)* $crate::python::put_args::PutArgs {
                    topic,
                    body,
                    queue_id,
                    tags,
                    keys,
                    properties,
                    delay_level,
                    flag,
                    born_timestamp,
                    born_host,
                    sys_flag,
                } $($more)*)
            }
        }
    };
}
pub(crate) use put_fields_method;

/// The put fields as given, not converted yet (absent: `None`). The put is
/// the hot path: its fields stay borrowed (no typed value to build, move
/// and drop per call) until [`PutArgs::parse`] converts them, in signature
/// order, with the conversions of the argument kinds (`args.rs`), so a
/// field follows the rule of its kind on every call.
pub struct PutArgs<'a, 'py> {
    pub topic: &'a Bound<'py, PyAny>,
    pub body: &'a Bound<'py, PyAny>,
    pub queue_id: Option<&'a Bound<'py, PyAny>>,
    pub tags: Option<&'a Bound<'py, PyAny>>,
    pub keys: Option<&'a Bound<'py, PyAny>>,
    pub properties: Option<&'a Bound<'py, PyAny>>,
    pub delay_level: Option<&'a Bound<'py, PyAny>>,
    pub flag: Option<&'a Bound<'py, PyAny>>,
    pub born_timestamp: Option<&'a Bound<'py, PyAny>>,
    pub born_host: Option<&'a Bound<'py, PyAny>>,
    pub sys_flag: Option<&'a Bound<'py, PyAny>>,
}

/// The put fields converted, with Python's defaults.
pub struct PutFields<'py> {
    /// Kept as the Python string (a lone surrogate refuses the put, later).
    pub topic: Bound<'py, PyString>,
    /// The body, or the one copy of a bytes-like body that is not `bytes`.
    pub body: Bound<'py, PyBytes>,
    pub queue_id: i32,
    pub flag: i32,
    pub sys_flag: i32,
    pub delay_level: i32,
    pub born_timestamp: Option<i64>,
    pub born_host: Option<SocketAddr>,
    /// Serialized properties (in place: no allocation per put), or why the
    /// message is illegal.
    pub props: std::result::Result<InlineProps, String>,
}

impl<'py> PutArgs<'_, 'py> {
    /// Converts the fields, in signature order, then builds the properties
    /// (the engine's rules). A wrong type is a `TypeError` naming the
    /// argument, a value out of range or a contradiction a `ValueError`;
    /// a value breaking a put rule makes `props` the reason.
    pub fn parse(self) -> PyResult<PutFields<'py>> {
        let topic = self
            .topic
            .downcast::<PyString>()
            .map_err(|_| type_error("topic", "str", self.topic))?
            .clone();
        // Copied once (unless bytes): the CRC and the record come from the copy.
        let body = body_arg(self.body)?;
        let queue_id = defaulted(self.queue_id, 0, queue_id_arg)?;
        let tags = opt_str_arg(self.tags, "tags")?;
        let keys = self.keys.filter(|k| !k.is_none());
        let properties = opt_dict_arg(self.properties, "properties", "a dict of str to str")?;
        let delay_level = defaulted(self.delay_level, 0, |o| i32_arg(o, "delay_level"))?;
        let flag = defaulted(self.flag, 0, |o| i32_arg(o, "flag"))?;
        let sys_flag = defaulted(self.sys_flag, 0, |o| i32_arg(o, "sys_flag"))?;
        let born_timestamp = opt_i64_arg(self.born_timestamp, "born_timestamp")?;
        let born_host = self
            .born_host
            .filter(|h| !h.is_none())
            .map(|h| parse_host(h, "born_host"))
            .transpose()?;
        let props = if tags.is_none() && keys.is_none() && properties.is_none() && delay_level == 0
        {
            Ok(InlineProps::new())
        } else {
            MessageFields::build(tags, keys.is_some(), delay_level, |m| {
                fill_fields(m, keys, properties)
            })?
        };
        Ok(PutFields {
            topic,
            body,
            queue_id,
            flag,
            sys_flag,
            delay_level,
            born_timestamp,
            born_host,
            props,
        })
    }
}

impl PutFields<'_> {
    /// The spec to put (born now, `now`, unless given; at the default born
    /// host unless given), or why the message is illegal.
    pub fn spec(&self, now: i64) -> std::result::Result<MessageSpec<'_>, Refused> {
        let topic = topic_str(&self.topic)?;
        let props = self
            .props
            .as_ref()
            .map_err(|why| Refused::illegal(why.clone()))?;
        Ok(MessageSpec {
            topic: Cow::Borrowed(topic),
            queue_id: self.queue_id,
            flag: self.flag,
            sys_flag: self.sys_flag,
            born_timestamp: self.born_timestamp.unwrap_or(now),
            born_host: self.born_host.unwrap_or(DEFAULT_BORN_HOST),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: Cow::Borrowed(self.body.as_bytes()),
            properties: Cow::Borrowed(props),
        })
    }
}

/// Why a put refuses a topic holding a lone surrogate (which UTF-8 cannot
/// carry): single and batch puts alike.
pub const TOPIC_NOT_UTF8: &str = "topic is not valid UTF-8 text (it holds a lone surrogate)";

/// A topic as UTF-8 text, or the refusal of a topic holding a lone
/// surrogate.
pub fn topic_str<'a>(topic: &'a Bound<'_, PyString>) -> std::result::Result<&'a str, Refused> {
    topic.to_str().map_err(|_| Refused::illegal(TOPIC_NOT_UTF8))
}

/// Feeds a message's `properties` (a dict of str to str) and `keys` (a str
/// or an iterable of str) arguments to the engine's rules, converting each
/// item (a wrong type is a `TypeError` naming it).
pub fn fill_fields<B: PropsBuf>(
    m: &mut MessageFields<'_, '_, B>,
    keys: Option<&Bound<'_, PyAny>>,
    properties: Option<&Bound<'_, PyDict>>,
) -> PyResult<()> {
    if let Some(d) = properties {
        for (k, v) in d.iter() {
            let k: Bound<'_, PyString> = k
                .downcast_into()
                .map_err(|e| type_error("property names", "str", &e.into_inner()))?;
            let v: Bound<'_, PyString> = v
                .downcast_into()
                .map_err(|e| type_error("property values", "str", &e.into_inner()))?;
            m.property(&k.to_cow()?, &v.to_cow()?)?;
        }
    }
    if let Some(k) = keys {
        // Keys go straight into the buffer (no joined string per message).
        // A list or tuple (not a subclass, which may iterate its own way)
        // is read by index: no iterator object per put.
        if let Ok(s) = k.downcast::<PyString>() {
            m.key(&s.to_cow()?);
        } else if let Ok(l) = k.downcast_exact::<PyList>() {
            for item in l.iter() {
                m.key(&key_item(&item)?.to_cow()?);
            }
        } else if let Ok(t) = k.downcast_exact::<PyTuple>() {
            for item in t.iter() {
                m.key(&key_item(&item)?.to_cow()?);
            }
        } else {
            for item in k
                .try_iter()
                .map_err(|_| type_error("keys", "a str or an iterable of str", k))?
            {
                m.key(&key_item(&item?)?.to_cow()?);
            }
        }
    }
    Ok(())
}

/// One item of a `keys` argument, which must be a str.
#[inline]
fn key_item<'a, 'py>(item: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, PyString>> {
    item.downcast::<PyString>()
        .map_err(|_| type_error("each key", "str", item))
}

/// The bodies of a `put_batch`, read in place: `bytes` directly, other
/// bytes-like objects through the buffer protocol (the buffers stay
/// exported, so they cannot be resized, until this drops).
pub struct BatchBodies<'py> {
    items: Vec<Bound<'py, PyAny>>,
    /// For each item, the index of its buffer in `buffers` (None: `bytes`).
    buffer_at: Vec<Option<usize>>,
    buffers: Vec<PyBuffer<u8>>,
}

impl<'py> BatchBodies<'py> {
    /// The bodies of `bodies`, a sequence of bytes-like objects.
    pub fn of(bodies: &Bound<'py, PyAny>) -> PyResult<Self> {
        if bodies.is_instance_of::<PyBytes>() || bodies.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err(
                "put_batch takes a sequence of bodies, not one body",
            ));
        }
        let items = seq_items(bodies).ok_or_else(|| {
            PyTypeError::new_err("bodies must be a sequence of bytes-like objects")
        })??;
        let mut buffers: Vec<PyBuffer<u8>> = Vec::new();
        let mut buffer_at: Vec<Option<usize>> = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            if item.is_instance_of::<PyBytes>() {
                buffer_at.push(None);
                continue;
            }
            let buf =
                PyBuffer::<u8>::get(item).map_err(|_| {
                    PyTypeError::new_err(format!(
                    "body {i} must be bytes-like (bytes, bytearray, memoryview of bytes), not {}",
                    item.get_type().name().map(|s| s.to_string()).unwrap_or_default()
                ))
                })?;
            if !buf.is_c_contiguous() {
                return Err(PyValueError::new_err(format!(
                    "body {i} is not a contiguous buffer"
                )));
            }
            buffer_at.push(Some(buffers.len()));
            buffers.push(buf);
        }
        Ok(Self {
            items,
            buffer_at,
            buffers,
        })
    }

    /// How many bodies.
    pub fn count(&self) -> usize {
        self.items.len()
    }

    /// Every body's bytes, valid while `self` lives.
    pub fn slices(&self) -> Vec<&[u8]> {
        self.items
            .iter()
            .zip(&self.buffer_at)
            .map(|(item, at)| match at {
                None => item
                    .downcast::<PyBytes>()
                    .map(|b| b.as_bytes())
                    .unwrap_or_default(),
                Some(k) => {
                    let b = &self.buffers[*k];
                    // SAFETY: the buffer is exported (kept alive and
                    // unresizable) until `self.buffers` drops, after the
                    // put; the record's CRC is computed over the copied
                    // bytes, so a concurrent change of a mutable buffer
                    // cannot make the record inconsistent.
                    unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes()) }
                }
            })
            .collect()
    }
}

/// The items of a per-message argument of `put_batch`, which must have one
/// item per body.
fn per_message<'py>(
    what: &str,
    seq: Option<&Bound<'py, PyAny>>,
    n: usize,
) -> PyResult<Option<Vec<Bound<'py, PyAny>>>> {
    let Some(seq) = seq else { return Ok(None) };
    let v = seq_items(seq).ok_or_else(|| {
        PyTypeError::new_err(format!("{what} must be a sequence with one item per body"))
    })??;
    if v.len() != n {
        return Err(PyValueError::new_err(format!(
            "{what} has {} items for {n} bodies",
            v.len()
        )));
    }
    Ok(Some(v))
}

/// The items of `seq`, in order: an exact list or tuple read by index
/// (no iterator object, one allocation), anything else iterated. `None`:
/// `seq` is not iterable.
fn seq_items<'py>(seq: &Bound<'py, PyAny>) -> Option<PyResult<Vec<Bound<'py, PyAny>>>> {
    if let Ok(l) = seq.downcast_exact::<PyList>() {
        return Some(Ok(l.iter().collect()));
    }
    if let Ok(t) = seq.downcast_exact::<PyTuple>() {
        return Some(Ok(t.iter().collect()));
    }
    let it = seq.try_iter().ok()?;
    Some(it.collect())
}

/// Item `i` of a per-message argument, unless it (or the item) is None.
fn item<'a, 'py>(v: &'a Option<Vec<Bound<'py, PyAny>>>, i: usize) -> Option<&'a Bound<'py, PyAny>> {
    v.as_ref().and_then(|v| v.get(i)).filter(|o| !o.is_none())
}

/// The properties of `n` batch messages from the per-message `keys`,
/// `tags` and `properties` arguments (each None or one item per body).
pub fn batch_properties(
    n: usize,
    keys: Option<&Bound<'_, PyAny>>,
    tags: Option<&Bound<'_, PyAny>>,
    properties: Option<&Bound<'_, PyAny>>,
) -> PyResult<BatchProperties> {
    let keys = per_message("keys", keys, n)?;
    let tags = per_message("tags", tags, n)?;
    let properties = per_message("properties", properties, n)?;
    if keys.is_none() && tags.is_none() && properties.is_none() {
        return Ok(BatchProperties::new());
    }
    // Tags and a key or two: room for the usual message, grown if needed.
    let mut batch = BatchProperties::with_capacity(n, 32);
    for i in 0..n {
        let k = item(&keys, i);
        let t =
            match item(&tags, i) {
                Some(t) => Some(t.downcast::<PyString>().map_err(|_| {
                    PyTypeError::new_err(format!("tags[{i}] must be a str or None"))
                })?),
                None => None,
            };
        let t = t.map(|t| t.to_cow()).transpose()?;
        let p = match item(&properties, i) {
            Some(p) => Some(p.downcast::<PyDict>().map_err(|_| {
                PyTypeError::new_err(format!("properties[{i}] must be a dict or None"))
            })?),
            None => None,
        };
        batch.message(t.as_deref(), k.is_some(), |m| fill_fields(m, k, p))?;
    }
    Ok(batch)
}
