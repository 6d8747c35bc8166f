//! `push` and `txn`: producers only for the measured phase; with `--verify`, consumers then
//! drain the queue (unmeasured) so `lost` can be counted.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use super::fleet::{self, ProducePhase};
use super::{Measured, Plan};
use crate::clock::Clock;
use crate::driver::Connector;
use crate::ledger::Ledger;
use crate::producer::PushMode;

pub async fn run<C: Connector>(
    connector: C,
    plan: &Plan,
    mode: PushMode,
) -> anyhow::Result<Measured> {
    let clock = Clock::new();
    let ledger = Arc::new(Ledger::new(plan.groups));
    let start = Instant::now();
    let batch = match mode {
        PushMode::Push => plan.batch,
        PushMode::Transaction => plan.txn_size,
    };
    let phase = ProducePhase {
        mode,
        batch,
        rate: plan.rate,
        start,
        deadline: start + plan.duration,
        budget: plan.messages,
    };
    let producers = fleet::start_producers(&connector, plan, phase, clock, &ledger);
    let mut stats = fleet::join(producers).await?;

    let (ledger_summary, drained) = if plan.verify {
        let measuring = Arc::new(AtomicBool::new(false));
        let consumers = fleet::start_consumers(&connector, plan, clock, &ledger, &measuring, None);
        let drained = fleet::drain(&ledger, plan.drain_idle).await;
        stats.merge(&consumers.stop().await?);
        (Some(ledger.summary()), Some(drained))
    } else {
        (None, None)
    };
    Ok(Measured {
        stats,
        start,
        ledger: ledger_summary,
        drained,
        prefilled: None,
    })
}
