//! The report of one run: the maths from raw counts to rates and percentiles, and its JSON
//! shape. Rates divide by the time from the start of the measured phase to the last request
//! that completed inside it. MB is 10^6 bytes of payload (HTTP and JSON framing excluded).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::histogram::Histogram;
use crate::queen_http::{PopForm, PushForm};
use crate::scenario::{Measured, Plan, Scenario};
use crate::stats::{OpStats, Stats};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Throughput {
    pub messages: u64,
    pub bytes: u64,
    pub elapsed_secs: f64,
    pub msg_per_sec: f64,
    pub mb_per_sec: f64,
}

impl Throughput {
    pub fn new(messages: u64, bytes: u64, elapsed: Duration) -> Self {
        let secs = elapsed.as_secs_f64();
        let per_sec = |n: f64| if secs > 0.0 { n / secs } else { 0.0 };
        Self {
            messages,
            bytes,
            elapsed_secs: round(secs, 3),
            msg_per_sec: round(per_sec(messages as f64), 1),
            mb_per_sec: round(per_sec(bytes as f64) / 1e6, 3),
        }
    }
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Latency {
    pub count: u64,
    pub min: u64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
}

impl Latency {
    pub fn from_histogram(h: &Histogram) -> Option<Self> {
        Some(Self {
            count: h.count(),
            min: h.min()?,
            p50: h.quantile(0.5)?,
            p99: h.quantile(0.99)?,
            p999: h.quantile(0.999)?,
            max: h.max()?,
            mean: round(h.mean()?, 1),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Requests {
    /// Measured successes plus every failure of the run.
    pub count: u64,
    pub errors: u64,
}

/// The options the run used, echoed for the record.
#[derive(Debug, Clone, Serialize)]
pub struct RunConfig {
    pub producers: usize,
    pub consumers: usize,
    pub msg_bytes: usize,
    pub batch: usize,
    pub partitions: u32,
    pub pop_partitions: usize,
    pub groups: usize,
    pub duration_secs: f64,
    pub rate: Option<f64>,
    pub messages: Option<u64>,
    pub prefill: Option<u64>,
    pub txn_size: Option<usize>,
    pub verify: bool,
    pub mode: &'static str,
    pub push_form: PushForm,
    pub pop_form: PopForm,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: Scenario,
    pub driver: &'static str,
    pub url: String,
    pub queue: String,
    pub config: RunConfig,
    pub produce: Option<Throughput>,
    pub consume: Option<Throughput>,
    /// Per operation (`push`, `txn`, `pop`, `ack`) and `e2e`, microseconds.
    pub latency_us: BTreeMap<&'static str, Latency>,
    pub requests: BTreeMap<&'static str, Requests>,
    /// Failed requests (measured or not) plus items the broker refused one by one.
    pub errors: u64,
    pub push_items_refused: u64,
    pub ack_items_refused: u64,
    pub empty_pops: u64,
    pub malformed: u64,
    /// Deliveries whose payload bytes were not the pushed ones. Must be 0.
    pub payload_mismatches: u64,
    pub prefilled: Option<u64>,
    pub accepted: Option<u64>,
    /// Accepted pushes some group never received (summed over groups). Must be 0.
    pub lost: Option<u64>,
    pub lost_per_group: Option<Vec<u64>>,
    pub duplicates: Option<u64>,
    pub unexpected: Option<u64>,
    pub drained: Option<bool>,
    pub error_samples: Vec<String>,
    /// What the load tool itself used, over the whole run (pre-fill and drain included).
    pub tool: ToolUsage,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ToolUsage {
    pub wall_secs: f64,
    pub cpu_secs: Option<f64>,
    /// CPU seconds per wall second, in percent of one core.
    pub cpu_percent_of_core: Option<f64>,
}

impl ToolUsage {
    /// From the wall time and the process CPU seconds (before, after).
    pub fn new(wall: Duration, cpu: Option<(f64, f64)>) -> Self {
        let wall_secs = wall.as_secs_f64();
        let cpu_secs = cpu.map(|(before, after)| round((after - before).max(0.0), 2));
        Self {
            wall_secs: round(wall_secs, 3),
            cpu_secs,
            cpu_percent_of_core: cpu_secs
                .filter(|_| wall_secs > 0.0)
                .map(|c| round(c / wall_secs * 100.0, 1)),
        }
    }
}

fn round(value: f64, places: i32) -> f64 {
    let scale = 10f64.powi(places);
    (value * scale).round() / scale
}

fn elapsed(start: Instant, last: Option<Instant>) -> Duration {
    last.map(|l| l.saturating_duration_since(start))
        .unwrap_or_default()
}

fn add_op(
    name: &'static str,
    op: &OpStats,
    latency: &mut BTreeMap<&'static str, Latency>,
    requests: &mut BTreeMap<&'static str, Requests>,
) {
    if op.requests == 0 {
        return;
    }
    requests.insert(
        name,
        Requests {
            count: op.requests,
            errors: op.errors,
        },
    );
    if let Some(l) = Latency::from_histogram(&op.latency) {
        latency.insert(name, l);
    }
}

impl Report {
    pub fn build(
        plan: &Plan,
        measured: &Measured,
        driver: &'static str,
        url: &str,
        queue: &str,
    ) -> Self {
        let s: &Stats = &measured.stats;
        let produce = (s.push.requests + s.txn.requests > 0 && plan.scenario != Scenario::Consume)
            .then(|| {
                Throughput::new(
                    s.produced,
                    s.produced_bytes,
                    elapsed(measured.start, s.last_produce),
                )
            });
        let consume = (s.pop.requests > 0).then(|| {
            Throughput::new(
                s.consumed,
                s.consumed * plan.msg_bytes as u64,
                elapsed(measured.start, s.last_consume),
            )
        });
        let mut latency = BTreeMap::new();
        let mut requests = BTreeMap::new();
        add_op("push", &s.push, &mut latency, &mut requests);
        add_op("txn", &s.txn, &mut latency, &mut requests);
        add_op("pop", &s.pop, &mut latency, &mut requests);
        add_op("ack", &s.ack, &mut latency, &mut requests);
        if let Some(l) = Latency::from_histogram(&s.e2e) {
            latency.insert("e2e", l);
        }
        let failed_requests =
            s.push.errors + s.txn.errors + s.pop.errors + s.ack.errors + s.unmeasured_errors;
        let ledger = measured.ledger.as_ref();
        Self {
            scenario: plan.scenario,
            driver,
            url: url.to_string(),
            queue: queue.to_string(),
            config: RunConfig {
                producers: plan.producers,
                consumers: plan.consumers,
                msg_bytes: plan.msg_bytes,
                batch: plan.batch,
                partitions: plan.partitions,
                pop_partitions: plan.pop_partitions,
                groups: plan.groups,
                duration_secs: plan.duration.as_secs_f64(),
                rate: plan.rate,
                messages: plan.messages,
                prefill: (plan.scenario == Scenario::Consume).then_some(plan.prefill),
                txn_size: (plan.scenario == Scenario::Txn).then_some(plan.txn_size),
                verify: plan.verify,
                mode: if plan.rate.is_some() {
                    "open-loop"
                } else {
                    "closed-loop"
                },
                push_form: plan.forms.push,
                pop_form: plan.forms.pop,
            },
            produce,
            consume,
            latency_us: latency,
            requests,
            errors: failed_requests + s.push_item_failures + s.ack_item_failures,
            push_items_refused: s.push_item_failures,
            ack_items_refused: s.ack_item_failures,
            empty_pops: s.empty_pops,
            malformed: s.malformed,
            payload_mismatches: s.payload_mismatches,
            prefilled: measured.prefilled,
            accepted: ledger.map(|l| l.accepted),
            lost: ledger.map(|l| l.lost),
            lost_per_group: ledger.map(|l| l.lost_per_group.clone()),
            duplicates: ledger.map(|l| l.duplicates),
            unexpected: ledger.map(|l| l.unexpected),
            drained: measured.drained,
            error_samples: s.errors_seen.clone(),
            tool: ToolUsage::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_maths() {
        let t = Throughput::new(150_000, 150_000 * 256, Duration::from_millis(2_000));
        assert_eq!(t.msg_per_sec, 75_000.0);
        assert_eq!(t.mb_per_sec, 19.2);
        assert_eq!(t.elapsed_secs, 2.0);
    }

    #[test]
    fn throughput_of_nothing_is_zero_not_nan() {
        let t = Throughput::new(0, 0, Duration::ZERO);
        assert_eq!((t.msg_per_sec, t.mb_per_sec), (0.0, 0.0));
        let t = Throughput::new(10, 10, Duration::ZERO);
        assert_eq!(t.msg_per_sec, 0.0);
    }

    #[test]
    fn latency_summary_from_histogram() {
        let mut h = Histogram::new();
        for v in 1..=1_000u64 {
            h.record(v);
        }
        let l = Latency::from_histogram(&h);
        let l = l.as_ref();
        assert_eq!(l.map(|l| l.count), Some(1_000));
        assert_eq!(l.map(|l| l.max), Some(1_000));
        assert_eq!(l.map(|l| l.mean), Some(500.5));
        // 500 and 990 are exact below 256 · 2 only up to 255; above that within 1/128.
        let p50 = l.map(|l| l.p50).unwrap_or_default();
        assert!((500..=504).contains(&p50), "{p50}");
        let p99 = l.map(|l| l.p99).unwrap_or_default();
        assert!((990..=997).contains(&p99), "{p99}");
        assert!(Latency::from_histogram(&Histogram::new()).is_none());
    }

    #[test]
    fn tool_usage_in_percent_of_a_core() {
        let t = ToolUsage::new(Duration::from_secs(4), Some((1.0, 3.0)));
        assert_eq!(t.cpu_secs, Some(2.0));
        assert_eq!(t.cpu_percent_of_core, Some(50.0));
        assert_eq!(
            ToolUsage::new(Duration::ZERO, Some((0.0, 1.0))).cpu_percent_of_core,
            None
        );
        assert_eq!(ToolUsage::new(Duration::from_secs(1), None).cpu_secs, None);
    }

    #[test]
    fn elapsed_runs_to_the_last_completion() {
        let start = Instant::now();
        assert_eq!(elapsed(start, None), Duration::ZERO);
        let last = start + Duration::from_millis(1_500);
        assert_eq!(elapsed(start, Some(last)), Duration::from_millis(1_500));
    }
}
