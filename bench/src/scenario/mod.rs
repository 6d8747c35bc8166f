//! The four scenarios of issue 4, each one file, over any `Connector`.

mod consume;
mod e2e;
mod fleet;
mod push;
pub mod soak;

use std::time::{Duration, Instant};

use crate::driver::Connector;
use crate::ledger::LedgerSummary;
use crate::stats::Stats;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// Push only (closed loop, or open loop with --rate).
    Push,
    /// Pop + ack of a queue pre-filled with --prefill messages.
    Consume,
    /// Push and consume together; end-to-end latency from push to pop.
    E2e,
    /// Transactions of --txn-size pushes; commit latency.
    Txn,
    /// Push, pop and ack at batch 1, 10 and 100 at once for --soak-minutes, sampling the
    /// broker's resident memory (--rss-pid).
    Soak,
}

/// Everything a scenario needs, already validated.
#[derive(Debug, Clone)]
pub struct Plan {
    pub scenario: Scenario,
    pub producers: usize,
    /// Consumers per group (queue mode: in total).
    pub consumers: usize,
    pub msg_bytes: usize,
    pub batch: usize,
    pub partitions: u32,
    /// Producers' consecutive messages at least this many partitions apart (1: round robin).
    pub spread: u32,
    pub pop_partitions: usize,
    /// Consumer groups; 0 = queue mode.
    pub groups: usize,
    pub duration: Duration,
    pub rate: Option<f64>,
    pub messages: Option<u64>,
    pub prefill: u64,
    pub txn_size: usize,
    /// Push/txn: consume everything afterwards to count `lost`.
    pub verify: bool,
    /// Give up draining after this long without progress.
    pub drain_idle: Duration,
    pub pop_wait_ms: u64,
    pub lease_secs: Option<u64>,
    /// Push body and pop answer forms (JSON or binary).
    pub forms: crate::queen_http::Forms,
}

/// What a scenario measured, before it is turned into a report.
#[derive(Debug)]
pub struct Measured {
    pub stats: Stats,
    pub start: Instant,
    /// `None` when nothing was consumed to check.
    pub ledger: Option<LedgerSummary>,
    /// Whether every accepted message reached every group before the drain gave up.
    pub drained: Option<bool>,
    /// Messages pre-filled before the measured phase (consume).
    pub prefilled: Option<u64>,
}

pub async fn run<C: Connector>(connector: C, plan: &Plan) -> anyhow::Result<Measured> {
    match plan.scenario {
        Scenario::Push => push::run(connector, plan, crate::producer::PushMode::Push).await,
        Scenario::Txn => push::run(connector, plan, crate::producer::PushMode::Transaction).await,
        Scenario::Consume => consume::run(connector, plan).await,
        Scenario::E2e => e2e::run(connector, plan).await,
        Scenario::Soak => anyhow::bail!("soak runs one queue per batch size: use soak::run"),
    }
}
