//! A write's store: opened as its single writer and run as the Python
//! sink's writer runs it (flush threads, dispatch, a master's replication
//! listener), with the flush and replication settings of its options
//! ([`crate::fields::WRITE_FIELDS`]). Its appends keep pace with what
//! confirms them (the disk under SYNC_FLUSH, a slave on a SYNC_MASTER) as
//! the engine's [`ArrowAppend`] does: each batch waits until the first row
//! stored but not confirmed, then the rest goes unwaited and
//! [`Writer::finish`] waits once for all of it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use engine::{ArrowAppend, HaRole, PutStatus, Store};
use jni::objects::{JClass, JObjectArray, JString};
use jni::sys::{jboolean, jlong, jobjectArray};
use jni::JNIEnv;

use crate::handles::{self, Entry};
use crate::store::{open_store, string, string_array, strings};
use crate::write::Outcome;
use crate::{guard, Error, Result};

/// A store opened as the writer of a job, and its append's state.
pub struct Writer {
    /// The store.
    pub store: Arc<Store>,
    append: Mutex<ArrowAppend>,
}

impl Writer {
    /// Opens (made if missing, recovered) and starts the store at `path`.
    pub fn open(path: String, fields: Vec<(String, String)>) -> Result<Writer> {
        let s = open_store(path, fields, false)?;
        let started = s
            .start_flush()
            .and_then(|_| s.start_dispatch())
            // A master listens for slaves when its options say where.
            .and_then(|_| match s.ha_role() {
                HaRole::Slave => Ok(None),
                _ => s.start_ha(),
            });
        if let Err(e) = started {
            let _ = s.shutdown();
            return Err(e.into());
        }
        Ok(Writer {
            store: Arc::new(s),
            append: Mutex::new(ArrowAppend::default()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ArrowAppend> {
        self.append.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends the rows of `batch`, the first being row `first_row` of the
    /// job, with the `extra` properties.
    pub fn append(
        &self,
        batch: &RecordBatch,
        first_row: u64,
        extra: &[(String, String)],
    ) -> Result<Outcome> {
        let mut a = self.state();
        a.rows = first_row;
        let before = a.appended;
        a.batch(&self.store, batch, extra)
            .map_err(crate::write::append_error)?;
        Ok(Outcome {
            appended: a.appended - before,
            refused: a
                .refused
                .as_ref()
                .map(|r| (r.row, r.status as u8, r.reason.clone())),
        })
    }

    /// Waits once for the rows appended unwaited; returns the first row
    /// not confirmed (row, put status, reason), if any, and starts afresh.
    pub fn finish(&self) -> Option<(u64, u8, String)> {
        let mut a = self.state();
        a.finish(&self.store);
        let out = a
            .unconfirmed
            .as_ref()
            .map(|u| (u.first.row, u.first.status as u8, u.first.reason.clone()));
        *a = ArrowAppend::default();
        out
    }

    /// On a SYNC_MASTER that listens: waits (at most `slave_timeout`) until
    /// a slave connected and reported, as the Python sink's commit does
    /// (slaves connect again within a second of the master's start, and a
    /// put finding none is `SLAVE_NOT_AVAILABLE` at once). False when none
    /// did in time.
    pub fn await_slave(&self) -> bool {
        let s = &self.store;
        if s.ha_role() != HaRole::SyncMaster || s.ha_port().is_none() {
            return true;
        }
        let deadline = Instant::now() + s.options().ha.slave_timeout;
        while !s.ha_status().slaves.iter().any(|v| v.acked_offset >= 0) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// Stops replication and shuts the store down.
    pub fn close(&self) -> Result<()> {
        self.store.stop_ha();
        Ok(self.store.shutdown()?)
    }
}

/// Opens the store at `path` as its single writer (made if missing, and
/// recovered) and starts it; `keys`/`values`: StoreConfig fields. Returns
/// its handle.
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_openWriter<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    path: JString<'l>,
    keys: JObjectArray<'l>,
    values: JObjectArray<'l>,
) -> jlong {
    guard(&mut env, 0, |env| {
        let path = string(env, &path, "path")?;
        let fields = crate::store::fields(env, &keys, &values)?;
        let w = Writer::open(path, fields)?;
        Ok(handles::insert(Entry::Writer(Arc::new(w))))
    })
}

/// Waits for a slave of a SYNC_MASTER writer (see [`Writer::await_slave`]).
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_awaitSlave<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    writer: jlong,
) -> jboolean {
    guard(&mut env, 0, |_| {
        Ok(handles::writer(writer)?.await_slave() as jboolean)
    })
}

/// Waits once for the rows a writer appended unwaited: `{row, put
/// status, reason}` of the first row stored but not confirmed, or
/// `{-1, 0, ""}`.
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_finishAppend<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    writer: jlong,
) -> jobjectArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let (row, st, why) = match handles::writer(writer)?.finish() {
            Some((r, st, why)) => (r.to_string(), st.to_string(), why),
            None => ("-1".into(), "0".into(), String::new()),
        };
        string_array(env, &[row, st, why])
    })
}

/// Waits for the CommitLog bytes `[start, end)` of a writer's store as a
/// put of them waits (`Store::wait_stored`): `{put status, reason}`.
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_waitStored<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    writer: jlong,
    start: jlong,
    end: jlong,
) -> jobjectArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let w = handles::writer(writer)?;
        let (Ok(start), Ok(end)) = (u64::try_from(start), u64::try_from(end)) else {
            return Err(Error::Arg(format!(
                "waitStored: bad range [{start}, {end})"
            )));
        };
        let (st, why): (PutStatus, Option<String>) = w.store.wait_stored(start, end);
        string_array(env, &[(st as u8).to_string(), why.unwrap_or_default()])
    })
}

/// The store fields an open takes: a read-only open's, or a writer's own.
#[no_mangle]
pub extern "system" fn Java_org_rocketstore_spark_NativeLib_storeFields<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    writer: jboolean,
) -> jobjectArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let names = if writer != 0 {
            crate::fields::WRITE_FIELDS
        } else {
            crate::fields::READ_FIELDS
        };
        let v: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        string_array(env, &v)
    })
}

/// The `extra` properties of an append (name, value, ...).
pub fn pairs(env: &mut JNIEnv<'_>, a: &JObjectArray<'_>) -> Result<Vec<(String, String)>> {
    let v = strings(env, a, "an extra property")?.unwrap_or_default();
    if v.len() % 2 != 0 {
        return Err(Error::Arg(
            "extra properties come as name, value pairs".into(),
        ));
    }
    Ok(v.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(kv: &[(&str, &str)]) -> Vec<(String, String)> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_sync_flush_writer_has_its_rows_on_disk_when_the_append_returns() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("s").to_string_lossy().into_owned();
        let f = fields(&[
            ("flush_disk_type", "SYNC_FLUSH"),
            ("flush_interval_commit_log", "60000"),
            ("mapped_file_size_commit_log", "65536"),
        ]);
        let w = Writer::open(p, f).expect("open");
        let batch = crate::write::tests::rows(3);
        let o = w.append(&batch, 0, &[]).expect("append");
        assert_eq!((o.appended, o.refused), (3, None));
        let cl = w.store.commitlog();
        assert!(cl.max_offset() > 0);
        assert_eq!(
            cl.flushed_offset(),
            cl.max_offset(),
            "flushed by the group commit"
        );
        assert_eq!(w.finish(), None);
        w.close().expect("close");
    }

    #[test]
    fn a_sync_master_without_a_slave_stores_rows_unconfirmed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("s").to_string_lossy().into_owned();
        let f = fields(&[
            ("broker_role", "SYNC_MASTER"),
            ("ha_listen_port", "0"),
            ("slave_timeout", "100"),
        ]);
        let w = Writer::open(p, f).expect("open");
        assert!(w.store.ha_port().is_some(), "the master listens");
        assert!(!w.await_slave(), "no slave came");
        let o = w
            .append(&crate::write::tests::rows(2), 5, &[])
            .expect("append");
        assert_eq!((o.appended, o.refused), (2, None));
        let (row, status, _) = w.finish().expect("not confirmed");
        assert_eq!(row, 5);
        assert_eq!(status, PutStatus::SlaveNotAvailable as u8);
        w.close().expect("close");
    }

    #[test]
    fn a_slave_refuses_the_rows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("s").to_string_lossy().into_owned();
        let w = Writer::open(p, fields(&[("broker_role", "SLAVE")])).expect("open");
        let o = w
            .append(&crate::write::tests::rows(2), 0, &[])
            .expect("append");
        let (row, status, why) = o.refused.expect("refused");
        assert_eq!((o.appended, row), (0, 0));
        assert_eq!(status, PutStatus::ServiceNotAvailable as u8);
        assert!(why.contains("SLAVE"), "{why}");
        w.close().expect("close");
    }
}
