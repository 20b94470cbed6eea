//! What the Rust test targets share. Each target compiles the whole module
//! and uses part of it, hence the `dead_code` allowance.
//!
//! * [`log`]: records, hosts and CommitLogs for the `commitlog_*` targets.
//! * [`Points`] (fault-injection builds): serialises the tests that arm fail
//!   points.

#![allow(dead_code)]

pub mod log;
#[cfg(feature = "failpoints")]
mod points;
#[cfg(feature = "failpoints")]
#[allow(unused_imports)] // the commitlog_* targets use only `log`
pub use points::Points;
