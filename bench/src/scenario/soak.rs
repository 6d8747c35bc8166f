//! `soak`: mixed push, pop and ack at batch 1, 10 and 100 at once (one queue per batch
//! size, each with its producers and consumers) for --soak-minutes, while the broker's
//! resident memory is sampled (--rss-pid). What it answers: does the broker's memory level
//! off under steady traffic, and does every message still arrive.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::fleet::{self, ProducePhase};
use super::{Measured, Plan};
use crate::clock::Clock;
use crate::driver::Connector;
use crate::ledger::{Ledger, LedgerSummary};
use crate::producer::PushMode;
use crate::rss;

/// The batch sizes run side by side.
pub const BATCHES: [usize; 3] = [1, 10, 100];

pub struct SoakOptions {
    pub rss_pid: Option<u32>,
    pub rss_every: Duration,
}

/// `lanes`: one connector (one queue) per entry of [`BATCHES`].
pub async fn run<C: Connector>(
    lanes: Vec<C>,
    plan: &Plan,
    opts: &SoakOptions,
) -> anyhow::Result<(Measured, Vec<rss::Sample>)> {
    let clock = Clock::new();
    let start = Instant::now();
    let deadline = start + plan.duration;
    let window = (clock.epoch_us(start), clock.epoch_us(deadline));
    let (stop_rss, stop_rx) = tokio::sync::watch::channel(false);
    let sampler = opts
        .rss_pid
        .map(|pid| tokio::spawn(rss::sample(pid, opts.rss_every, start, stop_rx)));
    let measuring = Arc::new(AtomicBool::new(true));
    let mut running = Vec::new();
    for (connector, batch) in lanes.iter().zip(BATCHES) {
        let lane = Plan {
            batch,
            pop_partitions: batch.min(plan.partitions as usize).max(1),
            ..plan.clone()
        };
        let ledger = Arc::new(Ledger::new(plan.groups));
        let consumers =
            fleet::start_consumers(connector, &lane, clock, &ledger, &measuring, Some(window));
        let phase = ProducePhase {
            mode: PushMode::Push,
            batch,
            rate: plan.rate,
            start,
            deadline,
            budget: plan.messages,
        };
        let producers = fleet::start_producers(connector, &lane, phase, clock, &ledger);
        running.push((ledger, consumers, producers));
    }
    let mut stats = crate::stats::Stats::default();
    let mut lanes_done = Vec::new();
    for (ledger, consumers, producers) in running {
        stats.merge(&fleet::join(producers).await?);
        lanes_done.push((ledger, consumers));
    }
    measuring.store(false, Ordering::Release);
    let mut drained = true;
    let mut summary = LedgerSummary::default();
    for (ledger, consumers) in lanes_done {
        drained &= fleet::drain(&ledger, plan.drain_idle).await;
        stats.merge(&consumers.stop().await?);
        let s = ledger.summary();
        summary.accepted += s.accepted;
        summary.lost += s.lost;
        summary.duplicates += s.duplicates;
        summary.unexpected += s.unexpected;
        if summary.lost_per_group.len() < s.lost_per_group.len() {
            summary.lost_per_group.resize(s.lost_per_group.len(), 0);
        }
        for (a, b) in summary.lost_per_group.iter_mut().zip(&s.lost_per_group) {
            *a += b;
        }
    }
    let _ = stop_rss.send(true);
    let samples = match sampler {
        Some(h) => h.await.unwrap_or_default(),
        None => Vec::new(),
    };
    Ok((
        Measured {
            stats,
            start,
            ledger: Some(summary),
            drained: Some(drained),
            prefilled: None,
        },
        samples,
    ))
}
