//! `e2e`: producers and consumers together. End-to-end latency is the pop answer time minus
//! the push time carried in the payload (the scheduled time in open loop), for messages
//! pushed inside the measured window. After the window the consumers drain what is left.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::fleet::{self, ProducePhase};
use super::{Measured, Plan};
use crate::clock::Clock;
use crate::driver::Connector;
use crate::ledger::Ledger;
use crate::producer::PushMode;

pub async fn run<C: Connector>(connector: C, plan: &Plan) -> anyhow::Result<Measured> {
    let clock = Clock::new();
    let ledger = Arc::new(Ledger::new(plan.groups));
    let measuring = Arc::new(AtomicBool::new(true));
    let start = Instant::now();
    let deadline = start + plan.duration;
    let window = (clock.epoch_us(start), clock.epoch_us(deadline));
    let consumers =
        fleet::start_consumers(&connector, plan, clock, &ledger, &measuring, Some(window));
    let phase = ProducePhase {
        mode: PushMode::Push,
        batch: plan.batch,
        rate: plan.rate,
        start,
        deadline,
        budget: plan.messages,
    };
    let producers = fleet::start_producers(&connector, plan, phase, clock, &ledger);
    let mut stats = fleet::join(producers).await?;
    measuring.store(false, Ordering::Release);

    let drained = fleet::drain(&ledger, plan.drain_idle).await;
    stats.merge(&consumers.stop().await?);
    Ok(Measured {
        stats,
        start,
        ledger: Some(ledger.summary()),
        drained: Some(drained),
        prefilled: None,
    })
}
