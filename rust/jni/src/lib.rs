//! The rocketstore engine for the JVM: the native half of the Spark
//! connector (`java/`), reached through JNI and built from the same engine
//! code as the Python module, without pyo3.
//!
//! Every entry point (`Java_org_rocketstore_spark_NativeLib_*`) runs its body
//! through [`guard`]: a panic is caught before it can unwind into the JVM,
//! and every error becomes a Java exception (bad arguments
//! `IllegalArgumentException`, unknown or closed handles
//! `IllegalStateException`, store errors
//! `org.rocketstore.spark.StoreException`). Objects handed to Java are
//! handles ([`handles`]): numbers checked on every use, never pointers, so a
//! stale or made-up handle is an exception, not a fault.
//!
//! Batches go over as the engine built them (docs/spark.md, "The JVM
//! connector"): [`export`] lists each column's Arrow buffers (address and
//! length) and the JVM wraps them in place; the batch stays registered,
//! and its memory alive, until Java closes its handle.
//!
//! # Files
//!
//! - `lib.rs`: the guard and the error kinds.
//! - `handles.rs`: the handle registry (stores, readers, batches).
//! - `export.rs`: a record batch as field nodes and buffer addresses.
//! - `store.rs`: opening a store read-only, following its writer, and the
//!   planning queries.
//! - `read.rs`: columnar readers and their batches.
//! - `keys.rs`: the `key` option's scan of what the index does not cover.
//! - `write.rs`: a writable open, and the rows a write's commit checks and appends.

use std::panic::{catch_unwind, AssertUnwindSafe};

use jni::JNIEnv;

pub mod export;
pub mod handles;
pub mod keys;
pub mod read;
pub mod store;
pub mod write;

/// Why an entry point failed (each kind is one Java exception class).
#[derive(Debug)]
pub enum Error {
    /// A bad argument (`IllegalArgumentException`).
    Arg(String),
    /// An unknown, closed or mistyped handle (`IllegalStateException`).
    State(String),
    /// The store refused or failed (`org.rocketstore.spark.StoreException`).
    Store(engine::StoreError),
    /// A JNI call failed; a Java exception is pending, or one is raised.
    Jni(jni::errors::Error),
}

impl From<engine::StoreError> for Error {
    fn from(e: engine::StoreError) -> Self {
        match e {
            engine::StoreError::InvalidArgument(m) => Error::Arg(m),
            e => Error::Store(e),
        }
    }
}

impl From<jni::errors::Error> for Error {
    fn from(e: jni::errors::Error) -> Self {
        Error::Jni(e)
    }
}

/// An entry point's result.
pub type Result<T> = std::result::Result<T, Error>;

/// The Java class of the store's errors.
pub const STORE_EXCEPTION: &str = "org/rocketstore/spark/StoreException";

/// Runs `f`; on an error or a panic, raises the matching Java exception
/// and returns `default` (which Java never sees: the exception is thrown
/// when the native method returns).
pub fn guard<T>(
    env: &mut JNIEnv<'_>,
    default: T,
    f: impl FnOnce(&mut JNIEnv<'_>) -> Result<T>,
) -> T {
    let out = catch_unwind(AssertUnwindSafe(|| f(env)));
    let (class, msg) = match out {
        Ok(Ok(v)) => return v,
        Ok(Err(Error::Arg(m))) => ("java/lang/IllegalArgumentException", m),
        Ok(Err(Error::State(m))) => ("java/lang/IllegalStateException", m),
        Ok(Err(Error::Store(e))) => (STORE_EXCEPTION, e.to_string()),
        Ok(Err(Error::Jni(e))) => {
            if env.exception_check().unwrap_or(true) {
                return default; // Java's own exception goes on
            }
            ("java/lang/IllegalStateException", format!("JNI: {e}"))
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            (
                "java/lang/IllegalStateException",
                format!("rocketstore native panic: {what}"),
            )
        }
    };
    if !env.exception_check().unwrap_or(true) {
        // Nothing more can be done if even this fails: the method returns.
        let _ = env.throw_new(class, msg);
    }
    default
}
