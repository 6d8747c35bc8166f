//! A producer worker: pushes batches (or transactions) until its deadline or the shared
//! message budget runs out, closed loop or paced by a `Pacer`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::{micros_between, Clock};
use crate::driver::{Driver, OutMessage};
use crate::ledger::Ledger;
use crate::pacer::Pacer;
use crate::partition_cycle::PartitionCycle;
use crate::payload::{PayloadBuilder, PayloadFields};
use crate::stats::Stats;

/// Pause after a failed request, so a dead broker is not hammered in a tight loop.
const ERROR_PAUSE: Duration = Duration::from_millis(50);

/// Messages left to send across all producers; `None` = unlimited.
#[derive(Debug, Default)]
pub struct Budget {
    left: Option<AtomicU64>,
}

impl Budget {
    pub fn new(messages: Option<u64>) -> Self {
        Self {
            left: messages.map(AtomicU64::new),
        }
    }

    /// Claims up to `want` messages; returns how many were granted (0 = spent).
    pub fn claim(&self, want: u64) -> u64 {
        let Some(left) = &self.left else {
            return want;
        };
        match left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |l| {
            Some(l.saturating_sub(want))
        }) {
            Ok(before) | Err(before) => before.min(want),
        }
    }
}

/// How a producer sends a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushMode {
    Push,
    Transaction,
}

#[derive(Clone)]
pub struct ProducerPlan {
    pub index: usize,
    pub producers: usize,
    pub partitions: u32,
    pub batch: usize,
    pub msg_bytes: usize,
    pub mode: PushMode,
    pub rate: Option<f64>,
    pub start: Instant,
    pub deadline: Instant,
    pub clock: Clock,
    pub budget: Arc<Budget>,
    pub ledger: Arc<Ledger>,
}

pub async fn run_producer<D: Driver>(mut driver: D, plan: ProducerPlan) -> Stats {
    let mut stats = Stats::default();
    let mut pacer = plan
        .rate
        .and_then(|rate| Pacer::new(plan.start, rate, plan.producers, plan.index, plan.batch));
    let mut cycle = PartitionCycle::new(plan.partitions, plan.producers, plan.index);
    let mut payloads = PayloadBuilder::new(plan.msg_bytes);
    let stride = plan.producers.max(1) as u64;
    let mut local_seq = 0u64;
    let mut batch: Vec<OutMessage> = Vec::with_capacity(plan.batch);

    loop {
        let due = match pacer.as_mut() {
            Some(p) => {
                let due = p.next_due();
                if due >= plan.deadline {
                    break;
                }
                tokio::time::sleep_until(due.into()).await;
                due
            }
            None => Instant::now(),
        };
        if Instant::now() >= plan.deadline {
            break;
        }
        let granted = plan.budget.claim(plan.batch as u64);
        if granted == 0 {
            break;
        }
        let ts = plan.clock.epoch_us(due);
        batch.clear();
        for _ in 0..granted {
            let id = local_seq * stride + plan.index as u64;
            local_seq += 1;
            let partition = cycle.next_partition();
            let payload = payloads.build(PayloadFields {
                seq: id,
                p: partition,
                ts,
            });
            batch.push(OutMessage {
                id,
                partition,
                payload,
            });
        }

        // Closed loop: the clock starts when the request goes out. Open loop: at its due time.
        let started = if pacer.is_some() { due } else { Instant::now() };
        let result = match plan.mode {
            PushMode::Push => driver.push(&batch).await,
            PushMode::Transaction => driver.push_transaction(&batch).await,
        };
        let done = Instant::now();
        let op = match plan.mode {
            PushMode::Push => &mut stats.push,
            PushMode::Transaction => &mut stats.txn,
        };
        match result {
            Ok(statuses) => {
                op.success(micros_between(started, done));
                let accepted = batch
                    .iter()
                    .zip(&statuses)
                    .filter(|(_, s)| s.is_accepted())
                    .map(|(m, _)| m);
                let mut count = 0u64;
                let mut bytes = 0u64;
                plan.ledger.record_accepted(accepted.map(|m| {
                    count += 1;
                    bytes += m.payload.len() as u64;
                    m.id
                }));
                stats.produced += count;
                stats.produced_bytes += bytes;
                stats.push_item_failures += batch.len() as u64 - count;
                stats.last_produce = Some(done);
            }
            Err(error) => {
                op.failure();
                stats.note_error(&error);
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_hands_out_exactly_what_it_has() {
        let budget = Budget::new(Some(250));
        assert_eq!(budget.claim(100), 100);
        assert_eq!(budget.claim(100), 100);
        assert_eq!(budget.claim(100), 50);
        assert_eq!(budget.claim(100), 0);
        let unlimited = Budget::new(None);
        assert_eq!(unlimited.claim(100), 100);
    }
}
