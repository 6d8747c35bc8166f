//! `consume`: pre-fill the queue (unmeasured, closed loop), then measure pop + ack until the
//! queue is empty for every group or the duration ends; then drain the rest unmeasured.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::fleet::{self, ProducePhase};
use super::{Measured, Plan};
use crate::clock::Clock;
use crate::driver::Connector;
use crate::ledger::Ledger;
use crate::producer::PushMode;

/// How often the measured phase checks whether the queue is empty.
const DONE_POLL: Duration = Duration::from_millis(20);
/// The pre-fill has no time limit of its own; this only bounds a broker that never answers.
const PREFILL_LIMIT: Duration = Duration::from_secs(24 * 3600);

pub async fn run<C: Connector>(connector: C, plan: &Plan) -> anyhow::Result<Measured> {
    let clock = Clock::new();
    let ledger = Arc::new(Ledger::new(plan.groups));
    let fill_start = Instant::now();
    let phase = ProducePhase {
        mode: PushMode::Push,
        batch: plan.batch,
        rate: None,
        start: fill_start,
        deadline: fill_start + PREFILL_LIMIT,
        budget: Some(plan.prefill),
    };
    let fill = fleet::join(fleet::start_producers(
        &connector, plan, phase, clock, &ledger,
    ))
    .await?;
    let prefilled = ledger.accepted();
    if prefilled == 0 {
        anyhow::bail!(
            "pre-fill: the broker accepted none of {} messages ({})",
            plan.prefill,
            fill.errors_seen
                .first()
                .map(String::as_str)
                .unwrap_or("no error text")
        );
    }

    let measuring = Arc::new(AtomicBool::new(true));
    let start = Instant::now();
    let deadline = start + plan.duration;
    let consumers = fleet::start_consumers(&connector, plan, clock, &ledger, &measuring, None);
    while Instant::now() < deadline && ledger.missing() > 0 {
        tokio::time::sleep(DONE_POLL).await;
    }
    measuring.store(false, Ordering::Release);
    let drained = fleet::drain(&ledger, plan.drain_idle).await;
    let mut stats = consumers.stop().await?;
    // Keep the pre-fill's failures visible; its latencies and counts are not the measure.
    stats.push.errors += fill.push.errors;
    stats.push_item_failures += fill.push_item_failures;
    for text in &fill.errors_seen {
        stats.note_error(&anyhow::anyhow!("pre-fill: {text}"));
    }
    Ok(Measured {
        stats,
        start,
        ledger: Some(ledger.summary()),
        drained: Some(drained),
        prefilled: Some(prefilled),
    })
}
