//! What one worker measured. Each worker owns its `Stats`; they are merged after the run.

use std::time::Instant;

use crate::histogram::Histogram;

/// Keep this many distinct error texts per run, for the report.
const KEPT_ERRORS: usize = 8;

/// Requests of one operation kind.
#[derive(Debug, Clone, Default)]
pub struct OpStats {
    /// Latency of successful requests, microseconds.
    pub latency: Histogram,
    pub requests: u64,
    pub errors: u64,
}

impl OpStats {
    pub fn success(&mut self, micros: u64) {
        self.requests += 1;
        self.latency.record(micros);
    }

    pub fn failure(&mut self) {
        self.requests += 1;
        self.errors += 1;
    }

    pub fn merge(&mut self, other: &OpStats) {
        self.latency.merge(&other.latency);
        self.requests += other.requests;
        self.errors += other.errors;
    }
}

#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub push: OpStats,
    pub txn: OpStats,
    pub pop: OpStats,
    pub ack: OpStats,
    /// Push time (payload `ts`) to pop answer, microseconds.
    pub e2e: Histogram,
    /// Messages accepted by the broker inside the measured window.
    pub produced: u64,
    pub produced_bytes: u64,
    /// Messages the broker refused (per item) inside the window.
    pub push_item_failures: u64,
    /// Messages delivered inside the measured window.
    pub consumed: u64,
    pub empty_pops: u64,
    /// Deliveries whose payload was not one of ours (or whose transaction id was not the one
    /// pushed with it).
    pub malformed: u64,
    /// Deliveries whose payload bytes differ from the bytes pushed for that message.
    pub payload_mismatches: u64,
    /// Acknowledgements refused item by item.
    pub ack_item_failures: u64,
    /// Failed requests outside the measured window (the verify drain), which the per-op
    /// counts leave out.
    pub unmeasured_errors: u64,
    /// When the last measured request of this worker completed.
    pub last_produce: Option<Instant>,
    pub last_consume: Option<Instant>,
    pub errors_seen: Vec<String>,
}

fn later(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

impl Stats {
    /// Keeps the text of an error if it is new and there is room.
    pub fn note_error(&mut self, error: &anyhow::Error) {
        let text = format!("{error:#}");
        if self.errors_seen.len() < KEPT_ERRORS && !self.errors_seen.contains(&text) {
            self.errors_seen.push(text);
        }
    }

    pub fn merge(&mut self, other: &Stats) {
        self.push.merge(&other.push);
        self.txn.merge(&other.txn);
        self.pop.merge(&other.pop);
        self.ack.merge(&other.ack);
        self.e2e.merge(&other.e2e);
        self.produced += other.produced;
        self.produced_bytes += other.produced_bytes;
        self.push_item_failures += other.push_item_failures;
        self.consumed += other.consumed;
        self.empty_pops += other.empty_pops;
        self.malformed += other.malformed;
        self.payload_mismatches += other.payload_mismatches;
        self.ack_item_failures += other.ack_item_failures;
        self.unmeasured_errors += other.unmeasured_errors;
        self.last_produce = later(self.last_produce, other.last_produce);
        self.last_consume = later(self.last_consume, other.last_consume);
        for text in &other.errors_seen {
            if self.errors_seen.len() < KEPT_ERRORS && !self.errors_seen.contains(text) {
                self.errors_seen.push(text.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn merge_adds_counts_and_keeps_the_latest_times() {
        let t0 = Instant::now();
        let mut a = Stats::default();
        a.push.success(10);
        a.produced = 5;
        a.last_produce = Some(t0);
        a.note_error(&anyhow::anyhow!("boom"));
        let mut b = Stats::default();
        b.push.failure();
        b.produced = 7;
        b.last_produce = Some(t0 + Duration::from_millis(1));
        b.last_consume = Some(t0);
        b.note_error(&anyhow::anyhow!("boom"));
        b.note_error(&anyhow::anyhow!("bang"));
        a.merge(&b);
        assert_eq!(a.push.requests, 2);
        assert_eq!(a.push.errors, 1);
        assert_eq!(a.push.latency.count(), 1);
        assert_eq!(a.produced, 12);
        assert_eq!(a.last_produce, Some(t0 + Duration::from_millis(1)));
        assert_eq!(a.last_consume, Some(t0));
        assert_eq!(a.errors_seen, vec!["boom".to_string(), "bang".to_string()]);
    }
}
