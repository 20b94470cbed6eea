//! How a store is opened: [`StoreOptions`] (RocketMQ's
//! `MessageStoreConfig` defaults) and the default sizes.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::log::allocate::WarmConfig;
use crate::paths;
use crate::services::flush::FlushConfig;

/// Default CommitLog segment size for a new store (1 GiB).
pub const DEFAULT_COMMIT_LOG_FILE_SIZE: usize = 1 << 30;

/// RocketMQ's default `messageDelayLevel` (18 levels).
pub const DEFAULT_MESSAGE_DELAY_LEVEL: &str =
    "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";

/// How a store is opened. The Python `StoreConfig` is read into one of these
/// (`python/config.rs`); engine-only users start from [`StoreOptions::at`]
/// (or `Default`) and change what they need. The defaults are RocketMQ's
/// `MessageStoreConfig` defaults, as in `config/store_config.py` (a test pins them equal).
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// The store's root directory.
    pub root: PathBuf,
    /// The CommitLog directory (`root/commitlog` by default).
    pub commit_log_dir: PathBuf,
    /// `None`: take the size from the files, or the default for a new store.
    pub commit_log_file_size: Option<usize>,
    /// Size of every consume-queue file; `None`: from the files, or the default (rounded to 20 bytes).
    pub consume_queue_file_size: Option<usize>,
    /// Largest body accepted (`max_message_size`).
    pub max_message_size: usize,
    /// The store host written into every record (`broker_ip:listen_port`).
    pub store_host: SocketAddr,
    /// Delay per level in ms (`message_delay_level`; index 0 = level 1).
    pub delay_levels: Vec<i64>,
    /// Open read-only: no lock, nothing written, following another process's writes.
    pub read_only: bool,
    /// For a read-only open: a directory that holds no store yet is opened
    /// as an empty store that follows the writer once it starts (otherwise
    /// it is refused with [`StoreError::NotAStore`](crate::error::StoreError::NotAStore)).
    pub wait_for_writer: bool,
    /// For a writer: make a store in a directory that is not empty and
    /// holds no store (without it such a directory is refused with
    /// [`StoreError::NotAStore`](crate::error::StoreError::NotAStore), so a
    /// mistyped path such as `/` or a home directory does not become a
    /// store root). An empty or missing directory becomes a store either way.
    pub create: bool,
    /// Opened by a repair (`rocketstore repair`): index files of another
    /// size than the geometry, and every newer one, are removed by recovery
    /// and rebuilt from the CommitLog instead of refusing the store.
    pub repair: bool,
    /// Opened by a rejoin (`rocketstore rejoin`, docs/format.md §21.8):
    /// recovery ends the CommitLog at this offset (a record's start) when
    /// its valid data reaches past it, and cuts the queues and the index
    /// there as at any recovered end.
    pub cut_at: Option<u64>,
    /// Index the keys of every message (`message_index_enable`).
    pub message_index_enable: bool,
    /// Hash slots per index file (`max_hash_slot_num`).
    pub max_hash_slot_num: usize,
    /// Entries per index file (`max_index_num`).
    pub max_index_num: usize,
    /// Messages a key query returns at most (`max_msgs_num_batch`).
    pub max_msgs_num_batch: usize,
    /// `max_transfer_bytes_on_message_in_memory`.
    pub max_transfer_bytes_in_memory: usize,
    /// `max_transfer_count_on_message_in_memory`.
    pub max_transfer_count_in_memory: usize,
    /// `max_transfer_bytes_on_message_in_disk`.
    pub max_transfer_bytes_in_disk: usize,
    /// `max_transfer_count_on_message_in_disk`.
    pub max_transfer_count_in_disk: usize,
    /// `access_message_in_memory_max_ratio`: the share of memory (percent) behind the CommitLog's end counted as in memory.
    pub access_message_in_memory_max_ratio: u64,
    /// `message_index_safe`: index files are flushed with the checkpoint.
    pub message_index_safe: bool,
    /// `transient_store_pool_enable` (ASYNC_FLUSH only).
    pub transient_store_pool_enable: bool,
    /// `transient_store_pool_size`: buffers in the pool.
    pub transient_store_pool_size: usize,
    /// `os_page_cache_busy_time_out_mills`: a put that finds the put lock
    /// held longer than this is refused with `OS_PAGE_CACHE_BUSY` (ms, ≥ 1).
    pub os_page_cache_busy_timeout_ms: i64,
    /// Flush and commit settings.
    pub flush: FlushConfig,
    /// Make the next CommitLog file in the background (RocketMQ's
    /// AllocateMappedFileService); off: a roll creates it on the put path.
    pub preallocate: bool,
    /// Warm-up of new CommitLog files (made by the allocator).
    pub warm: WarmConfig,
    /// `enabled_append_prop_crc`: every record written ends with the
    /// property CRC `__CRC32#` (docs/format.md §6.1).
    pub enabled_append_prop_crc: bool,
    /// Replication (role, listener, master, timeouts; see [`crate::ha`]).
    pub ha: crate::ha::HaOptions,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            root: PathBuf::new(),
            commit_log_dir: PathBuf::new(),
            commit_log_file_size: None,
            consume_queue_file_size: None,
            max_message_size: 4 << 20,
            store_host: SocketAddr::from(([127, 0, 0, 1], 10911)),
            delay_levels: crate::log::message::parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL)
                .unwrap_or_default(),
            read_only: false,
            wait_for_writer: false,
            create: false,
            repair: false,
            cut_at: None,
            message_index_enable: true,
            max_hash_slot_num: 5_000_000,
            max_index_num: 20_000_000,
            max_msgs_num_batch: 64,
            max_transfer_bytes_in_memory: 256 << 10,
            max_transfer_count_in_memory: 32,
            max_transfer_bytes_in_disk: 64 << 10,
            max_transfer_count_in_disk: 8,
            access_message_in_memory_max_ratio: 40,
            message_index_safe: true,
            transient_store_pool_enable: false,
            transient_store_pool_size: 5,
            os_page_cache_busy_timeout_ms:
                crate::log::commitlog::DEFAULT_OS_PAGE_CACHE_BUSY_TIMEOUT_MS,
            flush: FlushConfig::default(),
            // Off by default, as from Python: read-only followers do not yet
            // tell a made-ahead CommitLog file from a written one.
            preallocate: false,
            warm: WarmConfig::default(),
            enabled_append_prop_crc: true,
            ha: crate::ha::HaOptions::default(),
        }
    }
}

impl StoreOptions {
    /// The default options for the store at `root` (CommitLog in
    /// `root/commitlog`).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        Self {
            commit_log_dir: paths::commit_log_dir(&root),
            root,
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod options_tests {
    use super::*;

    #[test]
    fn default_options_parse_rocketmqs_delay_levels() {
        let o = StoreOptions::at("/x");
        assert_eq!(o.delay_levels.len(), 18);
        assert_eq!(o.delay_levels[0], 1000);
        assert_eq!(o.delay_levels[17], 2 * 3_600_000);
        assert_eq!(o.commit_log_dir, PathBuf::from("/x/commitlog"));
    }
}
