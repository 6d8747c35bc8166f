//! openraft glue for QueenMQ: every write of the broker is one Raft entry.
//!
//! - `log_store` + `log_writer` + `committed_saver`: `RaftLogStorage` on storage's SegmentLog
//!   (group-committed appends on one writer thread) and the StateStore's meta table.
//! - `state_machine`: `RaftStateMachine` handing committed entries to the engine's
//!   `ApplyHandler`.
//! - `network`: `NoPeers`, the network of a single-voter group.
//! - `tcp_client` + `tcp_server` + `rpc_codec`: the Raft network between `queen` processes
//!   (one TCP connection per openraft client, a listener serving every hosted group).
//! - `node`: `RaftNode`, what the engine uses: start, propose, read back, status, shutdown,
//!   and the membership changes (refused after a reclamation).
//! - `hand_over` + `elect_now`: the leader hands its lead to a caught-up voter (openraft 0.9
//!   has no leadership transfer), over the network's "elect now" request.
//! - `wire`: the frames of the network between nodes, size-checked before allocating (the
//!   transport on top is issue 13's next step).
//!
//! Decisions a reader should know before changing anything here:
//! - openraft runs with `single-term-leader` (standard Raft: one leader per term), so a LogId is
//!   exactly the (term, index) a SegmentLog record and the engine's checkpoint carry.
//! - The vote and the purge horizon are durable before their calls return; the committed id is
//!   persisted in the background (`committed_saver` says why and why that is safe).
//! - openraft's purge only moves the Raft horizon: message bytes in the log are freed by the
//!   broker's retention, never by Raft. openraft never snapshots on its own.
//! - openraft 0.9 fsyncs each append before taking the next (`log_writer`): throughput comes
//!   from the engine putting many commands into one entry.

mod append_gate;
mod apply;
mod backend;
pub mod body_budget;
mod cluster_start;
mod commit_read;
mod committed_saver;
mod config;
mod core_probe;
mod elect_now;
mod election_nudge;
mod entry_codec;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod hand_over;
mod horizons;
mod index_cell;
pub mod join_horizon;
mod join_read;
mod join_read_log;
mod keepalive;
mod leader_gone;
mod listener_metrics;
mod log_store;
mod log_writer;
pub mod member_addr;
mod membership_change;
mod membership_history;
mod meta;
mod metrics_clock;
mod network;
mod node;
mod peer_closed;
pub mod pre_hello;
mod rpc_codec;
mod snapshot_feed;
mod snapshot_inbox;
mod snapshot_reader;
mod snapshot_sender;
mod state_machine;
mod tcp_client;
mod tcp_server;
mod types;
pub mod undiallable;
mod vote_gate;
mod warn_limit;
pub mod wire;

#[cfg(test)]
mod tests;

pub use apply::ApplyHandler;
pub use cluster_start::{ClusterStart, CLUSTER_ENTRY_MAX};
pub use config::RaftConfig;
pub use error::{ChangeRefusal, RaftError};
pub use hand_over::{Abdication, HandOver};
pub use join_read::read_join_horizon;
// The storage pair openraft runs on, public so openraft's own storage suite can drive it
// (tests/openraft_suite.rs) and so can the cluster to come; `RaftNode` is what the broker uses.
pub use listener_metrics::register_series as register_listener_series;
pub use log_store::LogStore;
pub use membership_change::{Change, MemberView, MembershipView, LIVE_LAG};
pub use meta::{accept_missing_log_start, read_persisted, Persisted};
pub use node::{RaftNode, RaftStatus};
pub use openraft::BasicNode;
pub use snapshot_feed::{SnapshotFeed, KEEP_BELOW_SNAPSHOT};
pub use snapshot_inbox::SnapshotInbox;
pub use snapshot_reader::SnapshotReader;
pub use state_machine::StateMachine;
pub use tcp_client::TcpNetwork;
pub use tcp_server::{run as serve_cluster, Groups, ServerConfig};
pub use types::TypeConfig;
pub use vote_gate::VoteGate;

/// openraft's handle of a running group (`RaftNode::raft_handle`), for a caller that must
/// watch or initialise the group without holding its storage (a `RaftNode` clone holds it).
pub type RaftHandle = openraft::Raft<TypeConfig>;
