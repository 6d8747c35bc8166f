//! The pure core of QueenMQ: the entry codec, the entry format and its effects, the state and
//! its `apply`, the planners, the bounds checked before planning, and the reads.
//!
//! Nothing here does I/O or knows a runtime: the log is reached through [`log::ReplicatedLog`],
//! the memory budget through [`plan::MemoryGate`], the time through [`time::Clock`]. The engine
//! loop that drives it (tokio), the Raft node and the doors live in other crates, so the Queen
//! door, the Kafka door and a Raft follower all plan and apply with this same code.

pub mod apply;
pub mod cache;
pub mod codec;
pub mod cycle;
pub mod dedup_filter;
pub mod entry;
pub mod entry_kafka_txns;
pub mod entry_tenants;
#[doc(hidden)]
pub mod fuzzing;
pub mod limits;
pub mod log;
pub mod plan;
pub mod reader;
pub mod reads;
pub mod seal;
pub mod state;
pub mod time;
