//! rocketstore's engine: RocketMQ's message store (CommitLog, ConsumeQueue,
//! IndexFile, flush and recovery), byte-compatible with a RocketMQ 4.9.8
//! broker's store directory.
//!
//! The engine has no Python dependency; the `python` feature adds the PyO3
//! bindings in [`python`]. Modules map one-to-one to on-disk structures.
//! The `failpoints` feature compiles in the fault-injection points of
//! [`failpoint`] for tests; release wheels are built without it.

#![warn(missing_docs)]

pub mod checkpoint;
pub mod clock;
#[cfg(feature = "arrow")]
pub mod columnar;
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
