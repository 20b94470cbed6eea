//! Handles: what Java holds of native objects. A handle is a number the
//! registry maps to an object; a lookup checks that it exists and is of
//! the kind asked for, so a closed, stale or made-up handle raises an
//! exception instead of touching freed memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use arrow_array::RecordBatch;
use engine::Store;

use crate::read::Reader;
use crate::writer::Writer;
use crate::{Error, Result};

/// One registered object.
#[derive(Clone)]
pub enum Entry {
    /// An open (read-only) store.
    Store(Arc<Store>),
    /// A store opened as a write's writer.
    Writer(Arc<Writer>),
    /// A columnar reader of a store.
    Reader(Arc<Mutex<Reader>>),
    /// A batch whose buffers Java wraps.
    Batch(Arc<RecordBatch>),
}

impl Entry {
    fn kind(&self) -> &'static str {
        match self {
            Entry::Store(_) => "store",
            Entry::Writer(_) => "writer",
            Entry::Reader(_) => "reader",
            Entry::Batch(_) => "batch",
        }
    }
}

struct Registry {
    next: i64,
    map: HashMap<i64, Entry>,
}

fn registry() -> MutexGuard<'static, Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    let m = R.get_or_init(|| {
        Mutex::new(Registry {
            // Handles do not start at small numbers: 0 and typos stay unknown.
            next: 0x5253_0000_0001,
            map: HashMap::new(),
        })
    });
    // A panic while the lock was held left the map consistent (every
    // change is one insert or remove): keep using it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Registers `e`; returns its handle.
pub fn insert(e: Entry) -> i64 {
    let mut r = registry();
    let h = r.next;
    r.next += 1;
    r.map.insert(h, e);
    h
}

/// The entry of `h`, which must be of `kind`.
fn get(h: i64, kind: &str) -> Result<Entry> {
    let r = registry();
    match r.map.get(&h) {
        Some(e) if e.kind() == kind => Ok(e.clone()),
        Some(e) => Err(Error::State(format!(
            "handle {h:#x} is a {}, not a {kind}",
            e.kind()
        ))),
        None => Err(Error::State(format!(
            "no {kind} with handle {h:#x} (closed, or never opened)"
        ))),
    }
}

/// The store of `h`: a read-only store, or a writer's.
pub fn store(h: i64) -> Result<Arc<Store>> {
    let writer = match registry().map.get(&h) {
        Some(Entry::Writer(w)) => Some(w.store.clone()),
        _ => None,
    };
    if let Some(s) = writer {
        return Ok(s);
    }
    match get(h, "store")? {
        Entry::Store(s) => Ok(s),
        _ => Err(Error::State("not a store".into())),
    }
}

/// The writer of `h`.
pub fn writer(h: i64) -> Result<Arc<Writer>> {
    match get(h, "writer")? {
        Entry::Writer(w) => Ok(w),
        _ => Err(Error::State("not a writer".into())),
    }
}

/// The reader of `h`.
pub fn reader(h: i64) -> Result<Arc<Mutex<Reader>>> {
    match get(h, "reader")? {
        Entry::Reader(r) => Ok(r),
        _ => Err(Error::State("not a reader".into())),
    }
}

/// Removes `h`; returns what it held (`None`: unknown, e.g. closed twice).
pub fn remove(h: i64) -> Option<Entry> {
    registry().map.remove(&h)
}

/// How many objects are registered (for the tests of freeing).
pub fn count() -> usize {
    registry().map.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_handle_and_a_writer_handle_both_give_their_store() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("s").to_string_lossy().into_owned();
        let w = Arc::new(Writer::open(p.clone(), Vec::new()).expect("writer"));
        let hw = insert(Entry::Writer(w.clone()));
        assert!(Arc::ptr_eq(
            &store(hw).expect("the writer's store"),
            &w.store
        ));
        assert!(writer(hw).is_ok());
        let hs = insert(Entry::Store(w.store.clone()));
        assert!(Arc::ptr_eq(&store(hs).expect("a store"), &w.store));
        assert!(matches!(writer(hs), Err(Error::State(m)) if m.contains("is a store")));
        assert!(matches!(reader(hw), Err(Error::State(m)) if m.contains("is a writer")));
        remove(hs);
        remove(hw);
        assert!(matches!(store(hw), Err(Error::State(m)) if m.contains("closed")));
        w.close().expect("close");
    }
}
