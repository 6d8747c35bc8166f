//! The bus vocabulary of QueenMQ.
//!
//! Each front door (the Queen HTTP API, later the Kafka port) translates its wire requests into
//! [`Command`]s, sends them over a [`Bus`], and translates the [`Outcome`] back. Nothing here does
//! I/O or knows about a runtime: doors and the engine share only these types.

pub mod binary;
pub mod bus;
pub mod command;
pub mod dlq_admin;
pub mod ephemeral;
pub mod error;
pub mod fetch;
pub mod kafka_groups;
pub mod kafka_producers;
pub mod kafka_records;
pub mod kafka_topic_configs;
pub mod kafka_txn_reads;
pub mod kafka_txns;
pub mod kv;
pub mod limits;
pub mod queue_options;
pub mod tenant;
pub mod timers;
pub mod topic_collision;
pub mod types;
pub mod views;

pub use bus::{Access, Bus, BusFuture, RequestCtx};
pub use command::{rows, Command, CommandClass, CommandMeta, Role, COMMAND_TABLE};
pub use dlq_admin::{DlqAdminOutcome, DlqAdminReq};
pub use ephemeral::{EphemeralConfigOutcome, EphemeralConfigReq, EphemeralOptions};
pub use error::{ErrorCode, LeaderHint, QueenError};
pub use fetch::*;
pub use kv::*;
pub use queue_options::{QueueOptions, Setting};
pub use tenant::{check_tenant_name, DEFAULT_TENANT};
pub use timers::*;
pub use types::*;
pub use views::*;

/// The implicit consumer group of pops that name none.
pub const QUEUE_MODE_GROUP: &str = "__QUEUE_MODE__";
/// The partition a push without a partition name goes to.
pub const DEFAULT_PARTITION: &str = "Default";
