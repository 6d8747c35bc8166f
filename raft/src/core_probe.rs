//! When the Raft core last answered a question, so that a core frozen on its own disk shows.
//!
//! openraft 0.9's core waits in `append` for the log writer, and in `save_vote` for the vote's
//! fsync: while the disk hangs it reports no metrics, and a follower's or candidate's metrics
//! do not change when it is idle either, so neither their values nor their timing tell a
//! frozen core from a quiet one (review s19 lead M2). One task asks the core a question that
//! costs nothing, waits for the answer however long it takes, stamps it, and asks again after
//! a pause: at most one question is ever queued in the core, whatever the probes read
//! (review s20 lead A1), and the time since the last answer grows with the wall clock while
//! the core is stuck.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::Raft;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::metrics_clock::millis;
use crate::types::TypeConfig;

pub(crate) struct CoreProbe {
    origin: Instant,
    /// Milliseconds from `origin` to the last answer.
    answered: Arc<AtomicU64>,
    asker: JoinHandle<()>,
}

impl CoreProbe {
    /// Asks `raft`'s core one question every `pause` after its last answer, until it stops.
    pub(crate) fn spawn(raft: Raft<TypeConfig>, pause: Duration) -> Self {
        let origin = Instant::now();
        let answered = Arc::new(AtomicU64::new(0));
        let stamp = answered.clone();
        let asker = tokio::spawn(async move {
            // An Err is a core that has stopped: nothing answers any more.
            while raft.with_raft_state(|_| ()).await.is_ok() {
                stamp.store(millis(origin.elapsed()), Ordering::Relaxed);
                tokio::time::sleep(pause).await;
            }
        });
        CoreProbe {
            origin,
            answered,
            asker,
        }
    }

    /// How long ago the core last answered: up to one pause plus the answer's own time while
    /// it runs, and growing without bound while it is stuck.
    pub(crate) fn silent_ms(&self) -> u64 {
        millis(self.origin.elapsed()).saturating_sub(self.answered.load(Ordering::Relaxed))
    }

    pub(crate) fn stop(&self) {
        self.asker.abort();
    }
}

impl Drop for CoreProbe {
    fn drop(&mut self) {
        self.asker.abort();
    }
}
