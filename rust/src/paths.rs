//! The store's folder and file names: the one place that spells them
//! (RocketMQ's `StorePathConfigHelper`). The engine, the verifier, the
//! command line and the Python package (through the native module's
//! constants) all build their paths here.
//!
//! ```text
//! <root>/
//!   commitlog/<20-digit offset>        CommitLog segments (or a folder of its own)
//!   consumequeue/<topic>/<queue>/...   ConsumeQueue segments
//!   consumequeue_ext/                  ConsumeQueue extension (never written here)
//!   index/<yyyyMMddHHmmssSSS>          IndexFiles
//!   checkpoint                         flush timestamps (4 KiB)
//!   abort                              exists while a writer runs
//!   lock                               the single writer's lock
//!   config/                            topics.json, consumerOffset.json,
//!                                      delayOffset.json, subscriptionGroup.json
//!     <file>.tmp, <file>.bak           a config file's next and previous content
//!     consumerOffset.lock              held while consumerOffset.json is rewritten
//!     consumerLocks/<topic>@<group>.lock   held by an open consumer of the group
//!     consumerGroups/<topic>@<group>/      a shared group's members and queue owners
//!   ha/                                replication's side files (docs/format.md §21.8)
//!     promoted                         this store was promoted: it opens as a master
//!     promote.request, promote.result  a running slave's promotion, asked and answered
//!     tail-<20-digit offset>           the partial record a promotion cut
//!     diverged-<20-digit offset>       the divergent range a rejoin cut
//!     reseed-<ms>/                     the files a reseed moved aside
//! ```

use std::path::{Path, PathBuf};

use crate::error::{Result, StoreError};

/// The CommitLog folder, unless the configuration names another.
pub const COMMIT_LOG_DIR: &str = "commitlog";
/// The ConsumeQueue folder (`<topic>/<queue id>/` below it).
pub const CONSUME_QUEUE_DIR: &str = "consumequeue";
/// The ConsumeQueue extension folder (RocketMQ's; this store never writes it).
pub const CONSUME_QUEUE_EXT_DIR: &str = "consumequeue_ext";
/// The IndexFile folder.
pub const INDEX_DIR: &str = "index";
/// The checkpoint file.
pub const CHECKPOINT_FILE: &str = "checkpoint";
/// The file that exists while a writer runs: found at open, the last writer
/// did not stop cleanly.
pub const ABORT_FILE: &str = "abort";
/// The single writer's lock file.
pub const LOCK_FILE: &str = "lock";
/// The folder of the broker's JSON configuration files.
pub const CONFIG_DIR: &str = "config";
/// Committed consumer offsets, in [`CONFIG_DIR`].
pub const CONSUMER_OFFSET_FILE: &str = "consumerOffset.json";
/// Delayed-delivery progress, in [`CONFIG_DIR`].
pub const DELAY_OFFSET_FILE: &str = "delayOffset.json";
/// Topic configurations, in [`CONFIG_DIR`].
pub const TOPICS_FILE: &str = "topics.json";
/// Subscription groups, in [`CONFIG_DIR`] (a broker's; never written here).
pub const SUBSCRIPTION_GROUP_FILE: &str = "subscriptionGroup.json";
/// Suffix of a config file's next content, written before it is renamed
/// into place (RocketMQ's `MixAll.string2File`).
pub const TEMP_SUFFIX: &str = ".tmp";
/// Suffix of a config file's previous content, read when the file is
/// missing, empty or unparseable.
pub const BACKUP_SUFFIX: &str = ".bak";
/// The lock every writer of [`CONSUMER_OFFSET_FILE`] holds while it reads
/// and rewrites it, in [`CONFIG_DIR`] (rocketstore's).
pub const CONSUMER_OFFSET_LOCK_FILE: &str = "consumerOffset.lock";
/// The folder, in [`CONFIG_DIR`], of the locks open consumers hold, one per
/// group and topic (rocketstore's).
pub const CONSUMER_LOCK_DIR: &str = "consumerLocks";
/// The folder, in [`CONFIG_DIR`], of the consumer groups' membership, one
/// folder per group and topic named as its lock in [`CONSUMER_LOCK_DIR`]
/// (rocketstore's; docs/format.md §13.2).
pub const CONSUMER_GROUPS_DIR: &str = "consumerGroups";
/// Suffix of a consumer's lock file in [`CONSUMER_LOCK_DIR`].
pub const LOCK_SUFFIX: &str = ".lock";

/// The folder of replication's side files (rocketstore's; docs/format.md §21.8).
pub const HA_DIR: &str = "ha";
/// In [`HA_DIR`]: exists once a slave was promoted; a store opened as a
/// `SLAVE` while it exists opens as an `ASYNC_MASTER`.
pub const PROMOTED_FILE: &str = "promoted";
/// In [`HA_DIR`]: a running slave's promotion, asked for by a command.
pub const PROMOTE_REQUEST_FILE: &str = "promote.request";
/// In [`HA_DIR`]: the running slave's answer to [`PROMOTE_REQUEST_FILE`].
pub const PROMOTE_RESULT_FILE: &str = "promote.result";
/// In [`HA_DIR`]: prefix of the file holding the partial record a promotion
/// cut (followed by the 20-digit CommitLog offset of its first byte).
pub const PROMOTE_TAIL_PREFIX: &str = "tail-";
/// In [`HA_DIR`]: prefix of the file holding the divergent range a rejoin
/// cut (followed by the 20-digit CommitLog offset of its first byte).
pub const REJOIN_CUT_PREFIX: &str = "diverged-";
/// In [`HA_DIR`]: prefix of the folder a reseed moved the data files into
/// (followed by the time in ms since the epoch).
pub const RESEED_PREFIX: &str = "reseed-";

/// Every entry a store folder may hold at its top level: a folder holding
/// none of them is not a store.
pub const STORE_ENTRIES: [&str; 7] = [
    COMMIT_LOG_DIR,
    CONSUME_QUEUE_DIR,
    INDEX_DIR,
    CHECKPOINT_FILE,
    ABORT_FILE,
    LOCK_FILE,
    CONFIG_DIR,
];

/// What a file system's root folder holds from the start (`mkfs`): a
/// folder holding only it is empty for a store opened there.
pub const LOST_AND_FOUND: &str = "lost+found";

/// `<root>/commitlog`, the CommitLog folder when none is configured.
pub fn commit_log_dir(root: &Path) -> PathBuf {
    root.join(COMMIT_LOG_DIR)
}

/// `<root>/consumequeue`.
pub fn consume_queue_dir(root: &Path) -> PathBuf {
    root.join(CONSUME_QUEUE_DIR)
}

/// `<root>/index`.
pub fn index_dir(root: &Path) -> PathBuf {
    root.join(INDEX_DIR)
}

/// `<root>/checkpoint`.
pub fn checkpoint_file(root: &Path) -> PathBuf {
    root.join(CHECKPOINT_FILE)
}

/// `<root>/abort`.
pub fn abort_file(root: &Path) -> PathBuf {
    root.join(ABORT_FILE)
}

/// The folder of replication's side files.
pub fn ha_dir(root: &Path) -> PathBuf {
    root.join(HA_DIR)
}

/// The promotion marker ([`PROMOTED_FILE`]).
pub fn promoted_file(root: &Path) -> PathBuf {
    ha_dir(root).join(PROMOTED_FILE)
}

/// The side file of the partial record a promotion cut at `offset`.
pub fn promote_tail_file(root: &Path, offset: u64) -> PathBuf {
    ha_dir(root).join(format!("{PROMOTE_TAIL_PREFIX}{offset:020}"))
}

/// `<root>/lock`.
pub fn lock_file(root: &Path) -> PathBuf {
    root.join(LOCK_FILE)
}

/// fsyncs the directory `dir`, so a name created or removed in it survives
/// a crash. The one directory sync of the store: every caller gets the
/// error (naming the directory) and decides what it means.
pub fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io(format!("fsync {}", dir.display()), e))
}

/// [`sync_dir`] of the directory holding `path` (nothing for a bare name).
pub fn sync_parent(path: &Path) -> Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => sync_dir(dir),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_rocketmqs() {
        let root = Path::new("/s");
        assert_eq!(commit_log_dir(root), PathBuf::from("/s/commitlog"));
        assert_eq!(consume_queue_dir(root), PathBuf::from("/s/consumequeue"));
        assert_eq!(index_dir(root), PathBuf::from("/s/index"));
        assert_eq!(checkpoint_file(root), PathBuf::from("/s/checkpoint"));
        assert_eq!(abort_file(root), PathBuf::from("/s/abort"));
        assert_eq!(lock_file(root), PathBuf::from("/s/lock"));
    }

    #[test]
    fn a_directory_sync_reports_its_failure() {
        let dir = tempfile::tempdir().unwrap();
        sync_dir(dir.path()).unwrap();
        sync_parent(&dir.path().join("f")).unwrap();
        let gone = dir.path().join("missing");
        let e = sync_dir(&gone).unwrap_err().to_string();
        assert!(e.contains("missing"), "{e}");
        assert!(sync_parent(&gone.join("f")).is_err());
    }
}
