//! The consume-queue subsystem: per `topic/queueId`, a run of 20-byte units
//! (CommitLog offset, size, tag code) in `consumequeue/<topic>/<queueId>/`.
//!
//! ```text
//!  dispatch ──> cq_table ──> consume_queue (append unit)
//!  get_message ──> reader ──> consume_queue units ──> CommitLog records (by offset)
//! ```
//!
//! It owns one queue's files ([`consume_queue`]), the table of all queues
//! ([`cq_table`]) and RocketMQ's `getMessage` read path over them
//! ([`reader`]). Units enter from dispatch (and recovery's rebuild); they
//! leave as CommitLog offsets that the reader resolves into records.
//!
//! # Files
//!
//! - `consume_queue/`: one queue's files (units, write, read, recover).
//! - `cq_table.rs`: the `consumequeue/` directory, every queue of the store.
//! - `reader.rs`: `getMessage` over a queue (filters, transfer limits).

pub mod consume_queue;
pub mod cq_table;
pub mod reader;
