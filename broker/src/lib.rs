//! The QueenMQ process: the engine loop, the groups and their supervisor, memory accounting,
//! the server, and the wiring of the `queen` binary. The pure core (codec, entry, state,
//! planners, reads) is the `queenmq-engine` crate, re-exported here under its old paths.

pub mod cluster_admin;
#[cfg(test)]
mod cluster_admin_tests;
mod cluster_group_change;
pub mod cluster_member;
mod cluster_peer_sources;
pub mod config;
pub mod disk_gate;
mod disk_need;
pub mod encryption;
pub mod engine;
pub mod ephemeral;
pub mod group;
pub mod id_store;
pub mod kafka_cluster;
#[cfg(test)]
mod kafka_cluster_tests;
mod key_record;
mod leader_lookup;
#[cfg(test)]
mod leader_lookup_tests;
mod log_backing;
pub mod memory;
mod memory_gate;
pub mod node_metrics;
mod raft_log;
mod sasl_users;
mod scrape;
pub mod server;
mod snapshot_admit;
pub mod telemetry;
pub mod tls;

#[doc(hidden)]
pub use queenmq_engine::fuzzing;
pub use queenmq_engine::{codec, entry, reads, state, time};
