//! The time the engine spends copying blocks a checkpoint still shares (partition chunks,
//! cursor shards, partition-id chunks): the part of a checkpoint's pause that moved from
//! `begin_checkpoint` to the first write of each block (review s25 ckpt M1).
//!
//! Per thread, because a copy happens deep inside `apply` and the planner, which take no
//! handle to anything but the state: the broker drains it at the start and end of each
//! stretch it holds the state lock for a cycle (synchronous, so on one thread) and records
//! the sum as `queen_checkpoint_cow_copy_seconds`. Only metrics read it; the state never does.

use std::cell::Cell;
use std::time::{Duration, Instant};

thread_local! {
    static COPIES: Cell<(u64, Duration)> = const { Cell::new((0, Duration::ZERO)) };
}

pub fn start() -> Instant {
    Instant::now()
}

/// One copy, begun at `started`.
pub fn record(started: Instant) {
    let took = started.elapsed();
    COPIES.with(|c| {
        let (n, d) = c.get();
        c.set((n.saturating_add(1), d.saturating_add(took)));
    });
}

/// The copies made on this thread since the last call, and their time; resets both.
pub fn take() -> (u64, Duration) {
    COPIES.with(|c| c.replace((0, Duration::ZERO)))
}
