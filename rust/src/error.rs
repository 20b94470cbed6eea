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
        /// What the store was doing ("fsync <path>", "create <path>").
        context: String,
        #[source]
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Bytes on disk do not form what the format requires.
    #[error("corrupted data in {path} at offset {offset}: {reason}")]
    Corrupted {
        /// The file holding the bad bytes.
        path: PathBuf,
        /// Offset of the bad bytes (in the file's offset space: a CommitLog offset for CommitLog files).
        offset: u64,
        /// Which rule the bytes break.
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
    /// An engine invariant does not hold: a bug in rocketstore, not a
    /// problem with the caller's input or the files on disk.
    #[error("internal error in the rocketstore engine (please report this bug): {0}")]
    Internal(String),
    /// A recovery step was called out of order, or the store was used
    /// before its recovery finished (`crate::recovery`).
    #[error("{0}")]
    RecoveryOrder(String),
    /// A read-only open of a directory that holds no store (no CommitLog,
    /// queues, index, checkpoint or config): the message names the folder.
    #[error("{0}")]
    NotAStore(String),
    /// A consumer group refuses this member: an exclusive consumer holds
    /// it, another member names the same fixed queue, or its state lock
    /// stayed held past its deadline (the message names the holder's pid).
    #[error("{0}")]
    GroupBusy(String),
    /// A consumer group member's lease on a queue lapsed, or the queue
    /// now belongs to another member: its commit is refused (the message
    /// names the queue, the owner and its epoch).
    #[error("{0}")]
    Fenced(String),
}

/// Every kind of [`StoreError`], by name (see [`StoreError::kind`]).
pub const ERROR_KINDS: &[&str] = &[
    "Io",
    "Corrupted",
    "Mismatch",
    "Locked",
    "InvalidArgument",
    "Poisoned",
    "Closed",
    "ReadOnly",
    "Internal",
    "RecoveryOrder",
    "NotAStore",
    "GroupBusy",
    "Fenced",
];

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

    /// The name of this error's kind (its variant), as listed in [`ERROR_KINDS`].
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Io { .. } => "Io",
            StoreError::Corrupted { .. } => "Corrupted",
            StoreError::Mismatch(_) => "Mismatch",
            StoreError::Locked(_) => "Locked",
            StoreError::InvalidArgument(_) => "InvalidArgument",
            StoreError::Poisoned(_) => "Poisoned",
            StoreError::Closed => "Closed",
            StoreError::ReadOnly => "ReadOnly",
            StoreError::Internal(_) => "Internal",
            StoreError::RecoveryOrder(_) => "RecoveryOrder",
            StoreError::NotAStore(_) => "NotAStore",
            StoreError::GroupBusy(_) => "GroupBusy",
            StoreError::Fenced(_) => "Fenced",
        }
    }

    /// A broken engine invariant (the message asks the user to report it).
    pub fn internal(what: impl Into<String>) -> Self {
        StoreError::Internal(what.into())
    }

    /// One error of the kind named `kind` (from [`ERROR_KINDS`]), for tests
    /// that pin each kind to what callers see.
    pub fn sample(kind: &str) -> Option<Self> {
        Some(match kind {
            "Io" => StoreError::io(
                "open /nonexistent/sample",
                std::io::Error::from_raw_os_error(libc::ENOENT),
            ),
            "Corrupted" => StoreError::corrupted("/sample/00000000000000000000", 8, "sample"),
            "Mismatch" => StoreError::Mismatch("sample mismatch".into()),
            "Locked" => StoreError::Locked(PathBuf::from("/sample")),
            "InvalidArgument" => StoreError::InvalidArgument("sample argument".into()),
            "Poisoned" => StoreError::Poisoned("sample".into()),
            "Closed" => StoreError::Closed,
            "ReadOnly" => StoreError::ReadOnly,
            "Internal" => StoreError::internal("sample invariant"),
            "RecoveryOrder" => StoreError::RecoveryOrder("sample step".into()),
            "NotAStore" => StoreError::NotAStore("/sample is not a store".into()),
            "GroupBusy" => StoreError::GroupBusy("sample group busy".into()),
            "Fenced" => StoreError::Fenced("sample queue fenced".into()),
            _ => return None,
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_sample_of_that_kind() {
        for kind in ERROR_KINDS {
            let e = StoreError::sample(kind).expect("a sample for every kind");
            assert_eq!(e.kind(), *kind);
        }
        assert!(StoreError::sample("NoSuchKind").is_none());
    }

    #[test]
    fn internal_errors_ask_for_a_bug_report() {
        let msg = StoreError::internal("x").to_string();
        assert!(msg.contains("please report this bug"), "{msg}");
    }
}
