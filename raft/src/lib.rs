//! openraft glue for QueenMQ: every write of the broker is one Raft entry.
//!
//! - `log_store` + `log_writer` + `committed_saver`: `RaftLogStorage` on storage's SegmentLog
//!   (group-committed appends on one writer thread) and the StateStore's meta table.
//! - `state_machine`: `RaftStateMachine` handing committed entries to the engine's
//!   `ApplyHandler`.
//! - `network`: the `RaftNetworkFactory` boundary (no peers yet).
//! - `node`: `RaftNode`, what the engine uses: start, propose, read back, status, shutdown.

mod apply;
mod backend;
mod committed_saver;
mod config;
mod entry_codec;
mod error;
mod index_cell;
mod log_store;
mod log_writer;
mod meta;
mod network;
mod node;
mod state_machine;
mod types;

#[cfg(test)]
mod tests;

pub use apply::ApplyHandler;
pub use config::RaftConfig;
pub use error::RaftError;
pub use node::{RaftNode, RaftStatus};
