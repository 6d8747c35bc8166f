//! When openraft last reported its metrics, so that an age read from them can be made current.
//!
//! openraft computes `millis_since_quorum_ack` when its core flushes metrics: at every turn of
//! its loop, so at least once a tick (1.5 heartbeats) while the core runs, idle or not. A core
//! blocked on its own disk (openraft 0.9's `append_to_log` waits for the leader's fsync) flushes
//! nothing, and the last age it reported stays small for as long as it is stuck: read as it is,
//! a leader whose disk hangs looks acknowledged (review s17 lead M1). Adding the time since the
//! last report makes that age grow with the wall clock, so a frozen core fails closed.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One report: the acknowledgement age openraft gave and when it was seen, kept together so
/// that a read never adds the time since one report to the age of another (review s18 K2).
#[derive(Clone, Copy)]
struct Report {
    age_ms: Option<u64>,
    at: Instant,
}

/// The last metrics report seen, and how long a running core may go between two.
pub(crate) struct MetricsClock {
    last: Arc<Mutex<Report>>,
    /// One tick (1.5 heartbeats): a running core reports at least this often, so only the
    /// time past it means a frozen core. Counting it too would age a healthy leader's report
    /// by up to a tick on every read, past its lease under slow fsyncs (review s18 K3); the
    /// lease already allows for a report a tick old (review s17 C5).
    grace: Duration,
    watcher: JoinHandle<()>,
}

impl MetricsClock {
    /// Keeps the age `age_of` reads from every change of `rx`, until its sender (the Raft
    /// core) is gone.
    pub(crate) fn spawn<T, F>(mut rx: watch::Receiver<T>, age_of: F, grace: Duration) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(&T) -> Option<u64> + Send + 'static,
    {
        let first = Report {
            age_ms: age_of(&rx.borrow_and_update()),
            at: Instant::now(),
        };
        let last = Arc::new(Mutex::new(first));
        let stamp = last.clone();
        let watcher = tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let age_ms = age_of(&rx.borrow_and_update());
                let report = Report {
                    age_ms,
                    at: Instant::now(),
                };
                *stamp.lock().unwrap_or_else(PoisonError::into_inner) = report;
            }
        });
        MetricsClock {
            last,
            grace,
            watcher,
        }
    }

    /// The acknowledgement age now: the last age reported, plus the time since that report
    /// beyond one tick. `None` while no majority acknowledged this node as leader.
    pub(crate) fn ack_age(&self) -> Option<u64> {
        let r = *self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let late = r.at.elapsed().saturating_sub(self.grace);
        r.age_ms.map(|ms| ms.saturating_add(millis(late)))
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

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review s17 lead M1: metrics that stop changing (a core blocked on its own fsync) make
    /// the acknowledgement age grow with the clock past one tick instead of staying at its
    /// last value; a report brings it back to what openraft says.
    #[tokio::test(start_paused = true)]
    async fn a_frozen_report_ages_with_the_clock() {
        let tick = Duration::from_millis(1500);
        let (tx, rx) = watch::channel(Some(40u64));
        let clock = MetricsClock::spawn(rx, |age| *age, tick);
        assert_eq!(clock.ack_age(), Some(40));
        // Within a tick a running core reports again: nothing is added.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(clock.ack_age(), Some(40));
        // Nothing reported for 10 s: a core stuck in an fsync.
        tokio::time::sleep(Duration::from_millis(9000)).await;
        assert_eq!(clock.ack_age(), Some(40 + 10_000 - 1500));
        tx.send(Some(300)).unwrap();
        tokio::task::yield_now().await;
        assert_eq!(clock.ack_age(), Some(300));
        tx.send(None).unwrap();
        tokio::task::yield_now().await;
        assert_eq!(clock.ack_age(), None);
    }

    /// Review s18 K2: the age and the time since it are one report's, never the newest age
    /// plus the time since an older report.
    #[tokio::test(start_paused = true)]
    async fn the_age_and_its_time_come_from_one_report() {
        let (tx, rx) = watch::channel(Some(0u64));
        let clock = MetricsClock::spawn(rx, |age| *age, Duration::ZERO);
        tokio::time::sleep(Duration::from_millis(300)).await;
        tx.send(Some(300)).unwrap();
        tokio::task::yield_now().await;
        assert_eq!(
            clock.ack_age(),
            Some(300),
            "not 600: the new report's own time"
        );
    }
}
