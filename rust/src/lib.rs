//! rocketstore's engine: RocketMQ's message store (CommitLog, ConsumeQueue,
//! IndexFile, flush and recovery), byte-compatible with a RocketMQ 4.9.8
//! broker's store directory.
//!
//! The engine has no Python dependency; the `python` feature adds the PyO3
//! bindings (the private `python` module). Modules are subsystems (the
//! CommitLog, the consume queues, the index, the services, recovery,
//! verification, the store facade, columnar reads), in the layer order
//! `docs/architecture.md` §1 gives with every file's place. The
//! `failpoints` feature compiles in the fault-injection points of
//! `failpoint` for tests; release wheels are built without it. The bytes on
//! disk are specified in `docs/format.md`; the layers and the data paths
//! through them in `docs/architecture.md`.
//!
//! # Surface
//!
//! The modules are private. The crate root names what an embedder uses:
//! [`Store`] and [`StoreOptions`] (with [`FlushConfig`] and [`WarmConfig`]),
//! the message to put ([`MessageSpec`], [`MessageFields`],
//! [`BatchProperties`], the [`props`] names and [`sysflag`] bits), the
//! results ([`PutOutcome`], [`PutStatus`], [`Refused`], [`GetResult`],
//! [`GetStatus`], [`RecordView`], [`RecoveryReport`] and the reports of
//! each recovery step, [`RuntimeStats`], ...)
//! and the errors ([`StoreError`], [`Result`]). The hidden `internals`
//! module names the parts below the store (CommitLog, codec, queues, index)
//! for the crate's own tests and benchmarks; it is not a stable surface.
//!
//! ```compile_fail
//! use _native::log::commitlog::CommitLog; // private: not part of the surface
//! ```
//!
//! # Example
//!
//! Open a store in a new directory, append a message, read it back from its
//! queue, and shut down:
//!
//! ```
//! use _native::{GetStatus, MessageSpec, PutStatus, Store, StoreOptions};
//!
//! let dir = tempfile::tempdir()?;
//! let opts = StoreOptions {
//!     commit_log_file_size: Some(64 << 10), // small segments for the example
//!     consume_queue_file_size: Some(20 * 100),
//!     max_hash_slot_num: 10,
//!     max_index_num: 40,
//!     ..StoreOptions::at(dir.path())
//! };
//! let store = Store::open_running(opts)?; // lock, recover, start flush and dispatch
//!
//! let spec = MessageSpec::new("orders", 0, b"hello".to_vec());
//! let prepared = store.prepare(spec)?.expect("a valid message");
//! let put = store.put_prepared(&prepared)?;
//! assert_eq!(put.status, PutStatus::PutOk);
//!
//! let got = store.get_message("orders", 0, 0, 32, None)?;
//! assert_eq!(got.status, GetStatus::Found);
//! let (view, raw) = &got.messages[0];
//! assert_eq!(view.queue_offset, 0);
//! assert_eq!(&raw[view.body.clone()], b"hello");
//!
//! store.shutdown()?;
//! assert!(!dir.path().join("abort").exists()); // a clean shutdown
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// Without the binding, the parts only it reaches (the file-name constants it
// publishes, the store probes, the consumer files' locks) are unused; the
// lint gates build with it, so dead code is still found there.
#![cfg_attr(not(feature = "python"), allow(dead_code, unused_imports))]

mod checkpoint;
mod clock;
#[cfg(feature = "arrow")]
mod columnar;
mod consumer_offsets;
mod enums;
mod error;
#[cfg(feature = "failpoints")]
mod failpoint;
mod groups;
mod ha;
mod index;
mod lock;
mod log;
mod paths;
mod queue;
mod ratelog;
mod recovery;
mod running;
mod services;
mod store;
mod sync;
mod verify;

#[cfg(feature = "python")]
#[allow(missing_docs)] // the private binding: its Python names are documented in `_native.pyi`
mod python;

// The supported surface: what an embedder of the engine opens, puts, reads
// and configures with. Everything else is private to the crate.
#[cfg(feature = "arrow")]
pub use columnar::{
    AppendError, ArrowAppend, ArrowReadRequest, ColumnSpec, Nulls, Projection, ProjectionError,
    ReadStats, RowFilter, COLUMNS,
};
pub use consumer_offsets::{ConsumerOffsetTable, OffsetKey, OffsetRow};
pub use error::{Result, StoreError, ERROR_KINDS};
pub use ha::{AllowedNet, HaOptions, HaRole};
pub use log::allocate::WarmConfig;
pub use log::commitlog::{
    BatchInput, BatchOutcome, BatchRefusal, Prepared, PutOutcome, PutStatus, Refused,
};
pub use log::message::is_system_topic;
pub use log::message::{
    decode_msg_id, offset_msg_id, props, sysflag, BatchProperties, MessageFields, MessageSpec,
    RecordView,
};
pub use queue::reader::{GetResult, GetStatus, PullRequest, TagFilter};
pub use recovery::{
    CommitLogScan, ConsumeQueueRecovery, ConsumerOffsetClamp, DamageRule, FileSizeReport,
    IndexRebuild, QueueHoleRebuild, QueueOffsetTable, RecoveryMode, RecoveryStep, Redispatch,
    Truncation,
};
pub use services::flush::{transient_pool_in_use, FlushConfig, FlushDiskType};
pub use services::retention::{CommitLogRetention, QueueRetention, RetentionPolicy};
pub use store::{
    KeyHits, PointerRebuild, QueueEnds, RecoveryReport, RuntimeStats, Store, StoreOptions,
    DEFAULT_COMMIT_LOG_FILE_SIZE, DEFAULT_MESSAGE_DELAY_LEVEL,
};

/// The engine's parts below [`Store`], named for the crate's own tests and
/// benchmarks (the CommitLog, the message codec, the consume queues, the
/// index, the fault-injection points). Not a supported surface: names here
/// change with the engine.
#[doc(hidden)]
pub mod internals {
    /// The checkpoint file.
    pub mod checkpoint {
        pub use crate::checkpoint::{Checkpoint, CheckpointData, CHECKPOINT_FILE_SIZE};
    }
    /// The cached millisecond clock.
    pub mod clock {
        pub use crate::clock::CachedClock;
    }
    /// The CommitLog, its put path and its recovery scan.
    pub mod commitlog {
        pub use crate::log::commitlog::{
            account_record, check_read_record, now_ms, CommitLog, CommitLogConfig,
            QueueOffsetTable, ScanReport,
        };
    }
    /// Segment files and their names.
    pub mod mapped_file {
        pub use crate::log::mapped_file::{file_name, MappedFile};
        pub use crate::log::mapped_file_queue::list_segment_files;
    }
    /// The record codec: encode, decode, properties, message ids.
    pub mod message {
        pub use crate::log::message::{
            body_crc, encode_blank, encode_v1, find_property, iter_properties, parse_delay_levels,
            parse_record, parse_record_frame, prop_crc_extra, prop_crc_ok, record_len, tags_code,
            to_hex_upper, NotARecord, Parsed, PropertiesBuilder, RecordFrame, RecordRef,
            StoreStamp, BLANK_MAGIC, END_FILE_MIN_BLANK_LENGTH, FIXED_OVERHEAD_V4, MAGIC_V1,
            MAGIC_V2, SCHEDULE_TOPIC,
        };
    }
    /// The IndexFile and the index service.
    pub mod index {
        pub use crate::index::index_file::{
            index_file_size, IndexEntry, IndexHeader, HASH_SLOT_SIZE, INDEX_ENTRY_SIZE,
            INDEX_HEADER_SIZE,
        };
        pub use crate::index::index_service::IndexStore;
    }
    /// The consume queues.
    pub mod queue {
        pub use crate::queue::consume_queue::{ConsumeQueue, CqUnit, CQ_UNIT_SIZE};
        pub use crate::queue::cq_table::ConsumeQueueTable;
    }
    /// The running flags shared by the store and its services.
    pub mod running {
        pub use crate::running::{Flag, RunningFlags};
    }
    /// The dispatcher (CommitLog to consume queues and index).
    pub mod dispatch {
        pub use crate::services::dispatch::Dispatcher;
    }
    /// Delayed delivery, one step.
    pub mod schedule {
        pub use crate::store::schedule::{deliver_due, DeliverStep};
    }
    /// The fault-injection points.
    #[cfg(feature = "failpoints")]
    pub mod failpoint {
        pub use crate::failpoint::{check, clear, set, POINTS};
    }
}
