//! The async shell of the membership machine: one lock around [`Groups`], waits answered
//! through oneshot channels, and a tokio interval that times sessions and join phases out.
//! Generations are minted by the engine outside the lock.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::durable;
use super::machine::{Groups, JoinAnswer, JoinArgs, Step, SyncAnswer};
use crate::errors as e;
use crate::Door;

/// How often sessions and join deadlines are checked.
pub const TICK: Duration = Duration::from_millis(100);

pub struct Coordinator {
    groups: Mutex<Groups>,
    start: Instant,
}

impl Default for Coordinator {
    fn default() -> Self {
        Self::new()
    }
}

impl Coordinator {
    pub fn new() -> Self {
        // Member ids carry this so ids of an earlier run of the node are not handed out again.
        let boot = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        Coordinator {
            groups: Mutex::new(Groups::new(boot)),
            start: Instant::now(),
        }
    }

    pub fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The machine. Its methods do not panic on client input; should one ever, the state it
    /// left is still the best there is, so a poisoned lock is taken over, not propagated.
    pub fn lock(&self) -> MutexGuard<'_, Groups> {
        self.groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub async fn join(&self, door: &Door, args: JoinArgs) -> JoinAnswer {
        let member = args.member_id.clone();
        let step = self.lock().join(args, self.now());
        self.drive(door).await;
        match step {
            Step::Now(a) => a,
            // The member was removed while it waited (it left, or was fenced).
            Step::Wait(rx) => rx
                .await
                .unwrap_or_else(|_| JoinAnswer::error(e::UNKNOWN_MEMBER_ID, &member)),
        }
    }

    pub async fn sync(&self, step: Step<SyncAnswer>) -> SyncAnswer {
        match step {
            Step::Now(a) => a,
            Step::Wait(rx) => rx
                .await
                .unwrap_or_else(|_| SyncAnswer::error(e::REBALANCE_IN_PROGRESS)),
        }
    }

    /// Completes every join phase that can complete: the engine mints the generation, then
    /// the waiting members are answered. A failed mint answers them with a retriable error.
    pub async fn drive(&self, door: &Door) {
        let ready = self.lock().take_ready(self.now());
        for (group, ptype, pname) in ready {
            match durable::next_generation(door, &group, &ptype, &pname).await {
                Ok(generation) => self.lock().complete_join(&group, generation, self.now()),
                Err(err) => {
                    tracing::warn!(%group, error = %err, "kafka group generation not written; members told to retry");
                    self.lock().abort_join(&group, e::COORDINATOR_NOT_AVAILABLE);
                }
            }
        }
    }

    /// Runs until shutdown: session expiry and join deadlines.
    pub async fn run_timers(&self, door: &Door, mut shutdown: watch::Receiver<bool>) {
        let mut every = tokio::time::interval(TICK);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => {
                    let now = self.now();
                    self.lock().expire(now);
                    self.drive(door).await;
                    metrics::gauge!("queen_kafka_group_member_bytes").set(self.lock().bytes() as f64);
                }
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        break;
                    }
                }
            }
        }
    }
}
