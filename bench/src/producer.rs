//! A producer worker: pushes batches (or transactions) until its deadline or the shared
//! message budget runs out, closed loop or paced by a `Pacer`.

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

/// This producer's share of a message budget shared by `producers`: split so that, with as
/// many messages as partitions, every partition gets exactly one (see `PartitionCycle`).
pub fn budget_share(total: u64, producers: usize, index: usize) -> u64 {
    let producers = producers.max(1) as u64;
    let index = index as u64;
    total / producers + u64::from(index < total % producers)
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
    /// `PartitionCycle::spread`: consecutive messages this many partitions apart at least.
    pub spread: u32,
    pub mode: PushMode,
    pub rate: Option<f64>,
    pub start: Instant,
    pub deadline: Instant,
    pub clock: Clock,
    /// Messages this producer may send; `None` = until the deadline.
    pub budget: Option<u64>,
    pub ledger: Arc<Ledger>,
}

pub async fn run_producer<D: Driver>(mut driver: D, plan: ProducerPlan) -> Stats {
    let mut stats = Stats::default();
    let mut pacer = plan
        .rate
        .and_then(|rate| Pacer::new(plan.start, rate, plan.producers, plan.index, plan.batch));
    let mut cycle =
        PartitionCycle::new(plan.partitions, plan.producers, plan.index).spread(plan.spread);
    let mut payloads = PayloadBuilder::new(plan.msg_bytes);
    let stride = plan.producers.max(1) as u64;
    let mut local_seq = 0u64;
    let mut sent = 0u64;
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
            None => {
                let now = Instant::now();
                if now >= plan.deadline {
                    break;
                }
                now
            }
        };
        // Open loop: a batch due before the deadline is sent even if the previous answer came
        // late, so the count is decided by the schedule, not by how fast the broker answered.
        let granted = match plan.budget {
            Some(budget) => (budget - sent).min(plan.batch as u64),
            None => plan.batch as u64,
        };
        if granted == 0 {
            break;
        }
        sent += granted;
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
                if let Some(text) = driver.take_push_error() {
                    stats.note_error(&anyhow::anyhow!("push refused: {text}"));
                }
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
    fn budget_shares_match_partition_ownership() {
        // 10 messages, 10 partitions, 3 producers: producer k owns k, k+3, … (4, 3, 3).
        let shares: Vec<u64> = (0..3).map(|k| budget_share(10, 3, k)).collect();
        assert_eq!(shares, vec![4, 3, 3]);
        let mut all: Vec<u32> = Vec::new();
        for (k, share) in shares.iter().enumerate() {
            let mut cycle = PartitionCycle::new(10, 3, k);
            all.extend((0..*share).map(|_| cycle.next_partition()));
        }
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<u32>>());
        assert_eq!(budget_share(5, 0, 0), 5);
    }
}
