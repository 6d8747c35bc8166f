//! When openraft last reported its metrics, so that an age read from them can be made current.
//!
//! openraft computes `millis_since_quorum_ack` when its core flushes metrics: at every turn of
//! its loop, so at least once a tick (1.5 heartbeats) while the core runs, idle or not. A core
//! blocked on its own disk (openraft 0.9's `append_to_log` waits for the leader's fsync) flushes
//! nothing, and the last age it reported stays small for as long as it is stuck: read as it is,
//! a leader whose disk hangs looks acknowledged (review s17 lead M1). Adding the time since the
//! last report makes that age grow with the wall clock, so a frozen core fails closed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The instant of the last metrics report seen, as milliseconds since `base`.
pub(crate) struct MetricsClock {
    base: Instant,
    last_ms: Arc<AtomicU64>,
    watcher: JoinHandle<()>,
}

impl MetricsClock {
    /// Stamps every change of `rx` until its sender (the Raft core) is gone.
    pub(crate) fn spawn<T: Send + Sync + 'static>(mut rx: watch::Receiver<T>) -> MetricsClock {
        let base = Instant::now();
        let last_ms = Arc::new(AtomicU64::new(0));
        let stamp = last_ms.clone();
        let watcher = tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                rx.borrow_and_update();
                stamp.store(millis(base.elapsed()), Ordering::Release);
            }
        });
        MetricsClock {
            base,
            last_ms,
            watcher,
        }
    }

    /// How long ago the core last reported. Read before the metrics themselves: a report that
    /// lands in between then makes the age too old (fails closed), never too young.
    pub(crate) fn since_report(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Acquire));
        self.base.elapsed().saturating_sub(last)
    }

    pub(crate) fn stop(&self) {
        self.watcher.abort();
    }
}

impl Drop for MetricsClock {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The acknowledgement age now: the age openraft reported, plus the time since it reported it.
pub(crate) fn ack_age(reported_ms: Option<u64>, since_report: Duration) -> Option<u64> {
    reported_ms.map(|ms| ms.saturating_add(millis(since_report)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review s17 lead M1: metrics that stop changing (a core blocked on its own fsync) make
    /// the acknowledgement age grow with the clock instead of staying at its last value.
    #[tokio::test(start_paused = true)]
    async fn a_frozen_report_ages_with_the_clock() {
        let (tx, rx) = watch::channel(0u32);
        let clock = MetricsClock::spawn(rx);
        tokio::time::sleep(Duration::from_secs(3)).await;
        tx.send(1).unwrap();
        tokio::task::yield_now().await;
        assert_eq!(clock.since_report(), Duration::ZERO);
        assert_eq!(ack_age(Some(40), clock.since_report()), Some(40));
        // Nothing reported for 10 s: a core stuck in an fsync.
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(ack_age(Some(40), clock.since_report()), Some(10_040));
        assert_eq!(ack_age(None, clock.since_report()), None);
        // A new report brings it back to what openraft says.
        tx.send(2).unwrap();
        tokio::task::yield_now().await;
        assert_eq!(ack_age(Some(40), clock.since_report()), Some(40));
    }
}
