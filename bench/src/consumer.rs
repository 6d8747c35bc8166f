//! A consumer worker: pops and acks in a closed loop until told to stop, recording every
//! delivery in the ledger and, while the run is measured, latencies and counts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::clock::{micros_between, Clock};
use crate::driver::{Driver, PopRequest};
use crate::ledger::Ledger;
use crate::stats::Stats;

/// Pause after a failed request, so a dead broker is not hammered in a tight loop.
const ERROR_PAUSE: Duration = Duration::from_millis(50);

#[derive(Clone)]
pub struct ConsumerPlan {
    /// Ledger slot of this consumer's group.
    pub group_slot: usize,
    pub request: PopRequest,
    pub clock: Clock,
    pub ledger: Arc<Ledger>,
    /// True while counts and latencies go into the report.
    pub measuring: Arc<AtomicBool>,
    /// End-to-end latency is recorded for messages whose push time lies in this range
    /// (epoch microseconds, half open); `None` records none (pre-filled messages).
    pub e2e_window: Option<(u64, u64)>,
    pub stop: watch::Receiver<bool>,
}

pub async fn run_consumer<D: Driver>(mut driver: D, mut plan: ConsumerPlan) -> Stats {
    let mut stats = Stats::default();
    let group = plan.request.group.clone();
    loop {
        if *plan.stop.borrow() {
            break;
        }
        let started = Instant::now();
        let result = tokio::select! {
            biased;
            _ = plan.stop.changed() => break,
            result = driver.pop(&plan.request) => result,
        };
        let done = Instant::now();
        let measuring = plan.measuring.load(Ordering::Acquire);
        let deliveries = match result {
            Ok(deliveries) => deliveries,
            Err(error) => {
                if measuring {
                    stats.pop.failure();
                }
                stats.note_error(&error);
                tokio::time::sleep(ERROR_PAUSE).await;
                continue;
            }
        };
        if measuring {
            stats.pop.success(micros_between(started, done));
        }
        if deliveries.is_empty() {
            if measuring {
                stats.empty_pops += 1;
            }
            continue;
        }

        let done_us = plan.clock.epoch_us(done);
        let mut malformed = 0u64;
        plan.ledger.record_delivered(
            plan.group_slot,
            deliveries.iter().filter_map(|d| {
                if d.fields.is_none() {
                    malformed += 1;
                }
                d.fields.map(|f| f.seq)
            }),
        );
        stats.malformed += malformed;
        if let Some((from, to)) = plan.e2e_window {
            for fields in deliveries.iter().filter_map(|d| d.fields) {
                if (from..to).contains(&fields.ts) {
                    stats.e2e.record(done_us.saturating_sub(fields.ts));
                }
            }
        }
        if measuring {
            stats.consumed += deliveries.len() as u64;
            stats.last_consume = Some(done);
        }

        let acks: Vec<D::Ack> = deliveries.into_iter().map(|d| d.ack).collect();
        let started = Instant::now();
        let result = driver.ack(group.as_deref(), &acks).await;
        let done = Instant::now();
        match result {
            Ok(outcome) => {
                if measuring {
                    stats.ack.success(micros_between(started, done));
                }
                stats.ack_item_failures += outcome.failed as u64;
                if let Some(text) = outcome.first_error {
                    stats.note_error(&anyhow::anyhow!("ack refused: {text}"));
                }
            }
            Err(error) => {
                if measuring {
                    stats.ack.failure();
                }
                stats.note_error(&error);
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
    }
    stats
}
