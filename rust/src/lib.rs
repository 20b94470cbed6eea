//! rocketstore's engine: RocketMQ's message store (CommitLog, ConsumeQueue,
//! IndexFile, flush and recovery), byte-compatible with a RocketMQ 4.9.8
//! broker's store directory.
//!
//! The engine has no Python dependency; the `python` feature adds the PyO3
//! bindings in [`python`]. Modules are subsystems (the CommitLog, the consume
//! queues, the index, the services, recovery, verification, the store facade,
//! columnar reads), in the layer order `docs/architecture.md` §1 gives with
//! every file's place.
//! The `failpoints` feature compiles in the fault-injection points of
//! `failpoint` for tests; release wheels are built without it. The bytes on
//! disk are specified in `docs/format.md`; the layers and the data paths
//! through them in `docs/architecture.md`.
//!
//! # Example
//!
//! Open a store in a new directory, append a message, read it back from its
//! queue, and shut down:
//!
//! ```
//! use _native::log::message::MessageSpec;
//! use _native::log::commitlog::PutStatus;
//! use _native::queue::reader::GetStatus;
//! use _native::store::{Store, StoreOptions};
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

#![warn(missing_docs)]

pub mod checkpoint;
pub mod clock;
#[cfg(feature = "arrow")]
pub mod columnar;
pub mod enums;
pub mod error;
#[cfg(feature = "failpoints")]
pub mod failpoint;
pub mod index;
pub mod lock;
pub mod log;
pub mod paths;
pub mod queue;
pub mod ratelog;
pub mod recovery;
pub mod running;
pub mod services;
pub mod store;
pub mod verify;

#[cfg(feature = "python")]
#[allow(missing_docs)] // the private binding: its Python names are documented in `_native.pyi`
pub mod python;

pub use error::{Result, StoreError};
