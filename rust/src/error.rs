//! The engine's single error type.
//!
//! Every fallible engine call returns [`Result<T>`]. Corruption variants carry
//! the file path and offset so a user can find the bad bytes; the Python layer
//! maps each variant to one exception class in `python/errors.rs`.

use std::path::PathBuf;

/// Errors raised by the storage engine.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An operating-system I/O failure, with what we were doing.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// Bytes on disk do not form what the format requires.
    #[error("corrupted data in {path} at offset {offset}: {reason}")]
    Corrupted {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    /// Files on disk disagree with the configuration or with each other.
    #[error("{0}")]
    Mismatch(String),
    /// Another writer (this process or another) holds the store lock.
    #[error("store at {0} is locked by another writer")]
    Locked(PathBuf),
    /// An argument the caller passed is invalid.
    #[error("{0}")]
    InvalidArgument(String),
    /// A write or flush failed earlier; the store refuses writes until reopened.
    #[error("store is poisoned after a failed write or flush: {0}")]
    Poisoned(String),
    /// The store was shut down.
    #[error("store is closed")]
    Closed,
    /// The store was opened read-only.
    #[error("store is opened read-only")]
    ReadOnly,
}

/// Engine result alias.
pub type Result<T> = std::result::Result<T, StoreError>;

impl StoreError {
    /// Wraps an I/O error with a description of the operation.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        StoreError::Io {
            context: context.into(),
            source,
        }
    }

    /// A corruption error at `offset` of `path`.
    pub fn corrupted(path: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Self {
        StoreError::Corrupted {
            path: path.into(),
            offset,
            reason: reason.into(),
        }
    }
}
