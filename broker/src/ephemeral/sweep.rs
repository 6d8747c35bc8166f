//! The store's timer: ages out messages past their queue's `ttlSeconds` and removes implicit
//! queues idle past `ephemeral_implicit_idle_s`, so neither waits for the next request. One
//! slice of [`SWEEP_BUDGET`] entries a tick, so a node of a million rings is swept over
//! several ticks rather than under one long hold of the store's lock (review s19 M3).

use std::sync::Arc;
use std::time::Duration;

use super::store::SWEEP_BUDGET;
use super::Store;

/// How often the sweep runs: the age bounds are seconds, so a second is their resolution.
const EVERY: Duration = Duration::from_secs(1);

pub fn spawn_sweeper(store: Arc<Store>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            store.sweep_slice(super::store::now(), SWEEP_BUDGET);
        }
    })
}
