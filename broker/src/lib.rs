//! The QueenMQ engine: planner, apply, consumption, reads, and the wiring of the `queen` binary.

pub mod codec;
pub mod config;
pub mod engine;
pub mod entry;
#[doc(hidden)]
pub mod fuzzing;
pub mod group;
mod log_backing;
pub mod memory;
mod raft_log;
pub mod reads;
mod scrape;
pub mod server;
pub mod state;
pub mod telemetry;
pub mod time;
