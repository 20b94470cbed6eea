//! Consumer groups spread over threads and processes: who is a member,
//! which queues each member owns, and the hand-over when a member joins,
//! leaves, dies or freezes (docs/format.md §13.2). There is no server: the
//! members meet in the group's folder, `config/consumerGroups/<name>/`.
//!
//! ```text
//!  member ──join──> shared hold on config/consumerLocks/<name>.lock
//!                   members/<id>.lock (held while the process lives)
//!                   heartbeat ──> state (under state.lock)
//!  thread rocketstore-group: heartbeat every interval
//!  consumer ──> owned(), changes(), release(), lease_left()   (local view)
//!  commit   ──> check_owner(queue, member, epoch)             (the fence)
//! ```
//!
//! Data enters as the member's options, the topic's queue ids it sees and
//! its polls; it leaves as the queues it owns (with their epochs and
//! leases) and the changes since the consumer last asked. This folder
//! takes the group's folder name from the caller (the Python package owns
//! the encoding of `<topic>@<group>`); it uses the file locks of `lock.rs`
//! and the service thread shape.
//!
//! # Files
//!
//! - `state.rs`: the state file's records, their encoding, version and CRC
//! - `assign.rs`: the target assignment: fixed queues, RocketMQ's average
//!   and circle strategies
//! - `handover.rs`: one heartbeat's change to the state, a pure function;
//!   `handover_tests.rs` its tests
//! - `files.rs`: the group's folder: state read and write, the state lock,
//!   member lock files, the monotonic clock and boot id
//! - `member.rs`: `GroupMember`: join, heartbeat thread, local view, leave;
//!   `member_tests.rs` its tests against real files and clock
//! - `view.rs`: a member's local view: its leases, what its consumer was
//!   told (`owned`, `changes`, `release`)
//! - `admin.rs`: the fence (`check_owner`), `describe`, `expire`
//! - `model_tests.rs`: the protocol as a model: random joins, heartbeats,
//!   polls, kills, freezes and failed writes; no queue read by two members

pub mod admin;
pub mod assign;
pub mod files;
pub mod handover;
pub mod member;
pub mod state;
pub mod view;

#[cfg(test)]
mod model_tests;

pub use member::{GroupMember, JoinOptions};
pub use state::Strategy;
