//! What `/metrics` and `/metrics/prometheus` read from the state, copied out by the engine
//! between cycles, at most once per [`FRESH`] and only when a scrape asked since the last copy.
//!
//! Why: a scrape used to walk every queue, group and partition under the state lock, so
//! frequent scrapes stalled every cycle. Now a scrape takes the last copy (asking the engine
//! for a new one when it is older than [`FRESH`], and waiting up to [`WAIT`] for it); however
//! often it is scraped, the engine walks the state at most once per [`FRESH`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use queenmq_protocol::{QueueCounters, StateCounters};

use crate::scrape::QueuesSample;
use crate::state::State;

/// A copy younger than this is served as it is.
pub const FRESH: Duration = Duration::from_secs(1);
/// How long a scrape waits for the engine's new copy before serving the old one.
pub const WAIT: Duration = Duration::from_secs(2);

pub struct MetricsSample {
    pub taken: Instant,
    pub gauges: QueuesSample,
    /// The counters `/metrics` shows, read from the state.
    pub counters: StateCounters,
}

impl MetricsSample {
    pub fn take(st: &State) -> Self {
        let (mut pushed, mut acked, mut dlq) = (0u64, 0u64, 0u64);
        let mut queues = Vec::with_capacity(st.queues.len());
        for q in st.queues.values() {
            pushed += q.counters.pushed;
            acked += q.counters.acked;
            dlq += q.counters.dead_lettered;
            queues.push(QueueCounters {
                name: q.name.clone(),
                partitions: q.partition_order.len(),
                pushed: q.counters.pushed,
                acked: q.counters.acked,
                dead_lettered: q.counters.dead_lettered,
            });
        }
        MetricsSample {
            taken: Instant::now(),
            gauges: crate::scrape::sample_queues(st),
            counters: StateCounters {
                pushed,
                acked,
                dead_lettered: dlq,
                queues,
                partitions: st.partitions.len(),
                consumer_groups: st.groups.len(),
            },
        }
    }
}

#[derive(Default)]
pub struct SampleSlot {
    last: Mutex<Option<Arc<MetricsSample>>>,
    fresh: Condvar,
    wanted: AtomicBool,
}

impl SampleSlot {
    /// A copy no older than [`FRESH`] when the engine provides one within [`WAIT`]; else the
    /// last one (None before the first).
    pub fn get(&self) -> Option<Arc<MetricsSample>> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.as_ref().is_some_and(|s| s.taken.elapsed() < FRESH) {
            return last.clone();
        }
        self.wanted.store(true, Ordering::Release);
        let asked = Instant::now();
        loop {
            let left = WAIT.saturating_sub(asked.elapsed());
            if left.is_zero() {
                return last.clone();
            }
            last = match self.fresh.wait_timeout(last, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
            if last.as_ref().is_some_and(|s| s.taken >= asked) {
                return last.clone();
            }
        }
    }

    /// Whether a scrape is waiting for a new copy (one atomic load: called after every cycle).
    pub fn wanted(&self) -> bool {
        self.wanted.load(Ordering::Acquire)
    }

    pub fn put(&self, s: MetricsSample) {
        self.wanted.store(false, Ordering::Release);
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(s));
        self.fresh.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_waits_for_the_engine_copy_and_reuses_a_fresh_one() {
        let slot = Arc::new(SampleSlot::default());
        let engine = {
            let slot = slot.clone();
            std::thread::spawn(move || {
                while !slot.wanted() {
                    std::thread::sleep(Duration::from_millis(5));
                }
                slot.put(MetricsSample::take(&State::default()));
            })
        };
        let first = slot.get().expect("the engine answered");
        engine.join().unwrap();
        assert!(!slot.wanted());
        let again = slot.get().unwrap();
        assert!(Arc::ptr_eq(&first, &again), "a fresh copy is reused");
        assert!(!slot.wanted(), "a fresh copy asks for nothing");
    }
}
