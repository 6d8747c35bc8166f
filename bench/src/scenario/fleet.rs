//! Starting, stopping and joining the workers of one run.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::Plan;
use crate::clock::Clock;
use crate::consumer::{run_consumer, ConsumerPlan};
use crate::driver::{Connector, PopRequest};
use crate::ledger::Ledger;
use crate::producer::{budget_share, run_producer, ProducerPlan, PushMode};
use crate::stats::Stats;

/// How often the drain looks at the ledger.
const DRAIN_POLL: Duration = Duration::from_millis(100);

/// What the producers of a phase share.
pub struct ProducePhase {
    pub mode: PushMode,
    pub batch: usize,
    pub rate: Option<f64>,
    pub start: Instant,
    pub deadline: Instant,
    pub budget: Option<u64>,
}

pub fn start_producers<C: Connector>(
    connector: &C,
    plan: &Plan,
    phase: ProducePhase,
    clock: Clock,
    ledger: &Arc<Ledger>,
) -> JoinSet<anyhow::Result<Stats>> {
    let mut set = JoinSet::new();
    for index in 0..plan.producers {
        let connector = connector.clone();
        let worker = ProducerPlan {
            index,
            producers: plan.producers,
            partitions: plan.partitions,
            batch: phase.batch,
            msg_bytes: plan.msg_bytes,
            spread: plan.spread,
            mode: phase.mode,
            rate: phase.rate,
            start: phase.start,
            deadline: phase.deadline,
            clock,
            budget: phase.budget.map(|b| budget_share(b, plan.producers, index)),
            ledger: Arc::clone(ledger),
        };
        set.spawn(async move {
            let driver = connector.connect().await?;
            Ok(run_producer(driver, worker).await)
        });
    }
    set
}

/// Consumer group names, one per ledger slot (`None` = queue mode).
pub fn group_names(groups: usize) -> Vec<Option<String>> {
    if groups == 0 {
        vec![None]
    } else {
        (0..groups).map(|g| Some(format!("bench-g{g}"))).collect()
    }
}

pub struct Consumers {
    set: JoinSet<anyhow::Result<Stats>>,
    stop: watch::Sender<bool>,
}

pub fn start_consumers<C: Connector>(
    connector: &C,
    plan: &Plan,
    clock: Clock,
    ledger: &Arc<Ledger>,
    measuring: &Arc<AtomicBool>,
    e2e_window: Option<(u64, u64)>,
) -> Consumers {
    let (stop, stop_rx) = watch::channel(false);
    let mut set = JoinSet::new();
    for (slot, group) in group_names(plan.groups).into_iter().enumerate() {
        let workers = plan.consumers.max(1);
        for index in 0..workers {
            let connector = connector.clone();
            let worker = ConsumerPlan {
                group_slot: slot,
                request: PopRequest {
                    group: group.clone(),
                    batch: plan.batch,
                    partitions: plan.pop_partitions,
                    wait_ms: plan.pop_wait_ms,
                    lease_secs: plan.lease_secs,
                    worker: index,
                    workers,
                },
                clock,
                ledger: Arc::clone(ledger),
                measuring: Arc::clone(measuring),
                e2e_window,
                stop: stop_rx.clone(),
                msg_bytes: plan.msg_bytes,
            };
            set.spawn(async move {
                let driver = connector.connect().await?;
                Ok(run_consumer(driver, worker).await)
            });
        }
    }
    Consumers { set, stop }
}

impl Consumers {
    pub async fn stop(self) -> anyhow::Result<Stats> {
        // Receivers outlive the send only if workers are gone already; either way they stop.
        let _ = self.stop.send(true);
        join(self.set).await
    }
}

/// Waits for every worker and merges what they measured.
pub async fn join(mut set: JoinSet<anyhow::Result<Stats>>) -> anyhow::Result<Stats> {
    let mut total = Stats::default();
    while let Some(joined) = set.join_next().await {
        let stats = joined.context("a worker panicked")??;
        total.merge(&stats);
    }
    Ok(total)
}

/// Waits until every group has seen every accepted message (true), or until `idle` passes
/// without any progress (false).
pub async fn drain(ledger: &Ledger, idle: Duration) -> bool {
    let mut missing = ledger.missing();
    let mut progress_at = Instant::now();
    while missing > 0 {
        if progress_at.elapsed() >= idle {
            return false;
        }
        tokio::time::sleep(DRAIN_POLL).await;
        let now_missing = ledger.missing();
        if now_missing < missing {
            progress_at = Instant::now();
        }
        missing = now_missing;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_mode_is_one_unnamed_group() {
        assert_eq!(group_names(0), vec![None]);
        assert_eq!(
            group_names(2),
            vec![Some("bench-g0".to_string()), Some("bench-g1".to_string())]
        );
    }

    #[tokio::test]
    async fn drain_returns_at_once_when_nothing_is_missing() {
        let ledger = Ledger::new(1);
        ledger.record_accepted([1]);
        ledger.record_delivered(0, [1]);
        assert!(drain(&ledger, Duration::from_secs(5)).await);
    }

    #[tokio::test]
    async fn drain_gives_up_without_progress() {
        let ledger = Ledger::new(1);
        ledger.record_accepted([1]);
        assert!(!drain(&ledger, Duration::from_millis(150)).await);
    }
}
