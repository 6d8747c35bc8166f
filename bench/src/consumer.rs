//! A consumer worker: pops and acks in a closed loop until told to stop, recording every
//! delivery in the ledger and, while the run is measured, latencies and counts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::clock::{micros_between, Clock};
use crate::driver::{Driver, PopRequest};
use crate::ledger::Ledger;
use crate::payload::{PayloadBuilder, PayloadFields};
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
    /// Payload size pushed, to rebuild each delivered payload and compare it byte for byte.
    pub msg_bytes: usize,
}

pub async fn run_consumer<D: Driver>(mut driver: D, mut plan: ConsumerPlan) -> Stats {
    let mut stats = Stats::default();
    let group = plan.request.group.clone();
    let mut expected = PayloadBuilder::new(plan.msg_bytes);
    let mut scratch = String::with_capacity(plan.msg_bytes.max(64));
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
                } else {
                    stats.unmeasured_errors += 1;
                }
                stats.note_error(&error);
                tokio::time::sleep(ERROR_PAUSE).await;
                continue;
            }
        };
        // A pop served from the driver's own buffer is no request: it would count as a
        // near-zero "pop" beside the real ones.
        let on_wire = driver.last_pop_on_wire();
        if measuring && on_wire {
            stats.pop.success(micros_between(started, done));
        }
        if deliveries.is_empty() {
            if measuring && on_wire {
                stats.empty_pops += 1;
            }
            continue;
        }

        let done_us = plan.clock.epoch_us(done);
        let (mut malformed, mut mismatched, mut verified) = (0u64, 0u64, 0u64);
        // Only a delivery whose bytes are exactly the pushed ones counts as delivered, so a
        // form that mangles payloads shows up as lost, never as fast.
        plan.ledger.record_delivered(
            plan.group_slot,
            deliveries.iter().filter_map(|d| match d.fields {
                None => {
                    malformed += 1;
                    None
                }
                Some(f) if !same_payload(&mut expected, &mut scratch, f, &d.payload) => {
                    mismatched += 1;
                    None
                }
                Some(f) => {
                    verified += 1;
                    Some(f.seq)
                }
            }),
        );
        stats.malformed += malformed;
        stats.payload_mismatches += mismatched;
        if let Some((from, to)) = plan.e2e_window {
            for fields in deliveries.iter().filter_map(|d| d.fields) {
                if (from..to).contains(&fields.ts) {
                    stats.e2e.record(done_us.saturating_sub(fields.ts));
                }
            }
        }
        if measuring {
            // Only verified deliveries count towards the rate.
            stats.consumed += verified;
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
                } else {
                    stats.unmeasured_errors += 1;
                }
                stats.note_error(&error);
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
    }
    stats
}

/// Whether `got` is byte for byte the payload pushed for `fields`.
fn same_payload(
    builder: &mut PayloadBuilder,
    scratch: &mut String,
    fields: PayloadFields,
    got: &[u8],
) -> bool {
    scratch.clear();
    builder.write_to(fields, scratch);
    scratch.as_bytes() == got
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_pushed_bytes_match() {
        let mut builder = PayloadBuilder::new(128);
        let mut scratch = String::new();
        let fields = PayloadFields {
            seq: 5,
            p: 1,
            ts: 9,
        };
        let pushed = builder.build(fields);
        assert!(same_payload(
            &mut builder,
            &mut scratch,
            fields,
            pushed.as_bytes()
        ));
        let reordered = pushed.replacen(r#"{"seq":5,"p":1"#, r#"{"p":1,"seq":5"#, 1);
        assert!(!same_payload(
            &mut builder,
            &mut scratch,
            fields,
            reordered.as_bytes()
        ));
        assert!(!same_payload(
            &mut builder,
            &mut scratch,
            fields,
            &pushed.as_bytes()[1..]
        ));
    }

    /// A broker that changes a field's digits (same length) must not pass: the expected bytes
    /// are rebuilt from the delivered fields, so the pad's digest is what catches it.
    #[test]
    fn a_changed_p_or_ts_is_a_mismatch() -> anyhow::Result<()> {
        let mut builder = PayloadBuilder::new(256);
        let mut scratch = String::new();
        let pushed = PayloadFields {
            seq: 5,
            p: 3,
            ts: 1_767_225_600_000_000,
        };
        let bytes = builder.build(pushed);
        for (from, to) in [(r#""p":3"#, r#""p":4"#), (r#""ts":1"#, r#""ts":9"#)] {
            let changed = bytes.replacen(from, to, 1);
            assert_ne!(changed, bytes);
            let fields: PayloadFields = serde_json::from_str(&changed)?;
            assert!(
                !same_payload(&mut builder, &mut scratch, fields, changed.as_bytes()),
                "{changed}"
            );
        }
        Ok(())
    }
}
