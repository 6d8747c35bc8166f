//! The engine's side of the pools: after each cycle, under the state lock it already holds,
//! a clock check; every `PASS` the pools are set from the structures' capacities, the
//! admission flag is updated and the gauges are published.
//!
//! Why a periodic pass and not a counter in every mutation: the cache, waiters, requests
//! and dedup pools are O(1) to read (counters or a few hundred table capacities); only the
//! state needs a walk, and the walk runs at most once a second (ten times a second while
//! refusing, so writes resume soon after pressure goes) and never more often than 50 times
//! its own duration, which keeps it under 2 % of the engine's time at any state size.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::size;
use super::{Memory, Pool};
use crate::state::State;

const PASS: Duration = Duration::from_millis(100);
const WALK_EVERY: Duration = Duration::from_secs(1);
const WALK_EVERY_REFUSING: Duration = Duration::from_millis(100);
const WALK_COST_FACTOR: u32 = 50;

pub struct Accountant {
    mem: Arc<Memory>,
    next_pass: Instant,
    last_walk: Option<Instant>,
    walk_cost: Duration,
    state: usize,
    /// The partition table's part of `state`, at the same walk.
    partitions: usize,
    /// What this engine put in each pool: several groups share the node's pools, so each
    /// adds the change in its own share, and takes its share out when it ends.
    mine: [usize; Pool::ALL.len()],
    /// This group's part of the held pools, read by the bus for fair admission.
    group_held: Arc<AtomicUsize>,
    /// Counted in the node's active groups now.
    active: bool,
}

/// What the engine knows without the state: its own structures.
pub struct EngineSide {
    pub cache_held: usize,
    pub waiters: usize,
    pub waiter_job_size: usize,
}

impl Accountant {
    pub fn new(mem: Arc<Memory>, group_held: Arc<AtomicUsize>) -> Self {
        // Series exist from the start (docs/metrics.md lists them; a scrape shows them all).
        metrics::counter!("queen_memory_refused_writes_total").increment(0);
        metrics::gauge!("queen_memory_budget_bytes", "share" => "total")
            .set(mem.budget.total as f64);
        metrics::gauge!("queen_memory_budget_bytes", "share" => "entry_cache")
            .set(mem.budget.cache_bytes(u64::MAX) as f64);
        metrics::gauge!("queen_memory_budget_bytes", "share" => "held")
            .set(mem.budget.held_bytes() as f64);
        metrics::gauge!("queen_memory_budget_bytes", "share" => "connections")
            .set(mem.budget.connections_bytes() as f64);
        Accountant {
            mem,
            next_pass: Instant::now(),
            last_walk: None,
            walk_cost: Duration::ZERO,
            state: 0,
            partitions: 0,
            mine: [0; Pool::ALL.len()],
            group_held,
            active: false,
        }
    }

    pub fn memory(&self) -> &Arc<Memory> {
        &self.mem
    }

    /// After each cycle, with the state lock held: nothing but a clock read unless a pass
    /// is due.
    pub fn after_cycle(&mut self, st: &State, engine: EngineSide) {
        let now = Instant::now();
        if now < self.next_pass {
            return;
        }
        self.next_pass = now + PASS;
        let every = if self.mem.refusing() {
            WALK_EVERY_REFUSING
        } else {
            WALK_EVERY
        }
        .max(self.walk_cost.saturating_mul(WALK_COST_FACTOR));
        if self
            .last_walk
            .is_none_or(|t| now.duration_since(t) >= every)
        {
            (self.state, self.partitions) = size::state_and_partition_bytes(st);
            self.last_walk = Some(now);
            self.walk_cost = now.elapsed();
        }
        self.put(Pool::EntryCache, engine.cache_held);
        self.put(Pool::State, self.state);
        self.put(
            Pool::Dedup,
            size::dedup_bytes(st.txn_ids.index_capacity(), st.txn_ids.len())
                .saturating_add(st.txn_spill.as_ref().map_or(0, |s| s.filter_bytes())),
        );
        self.put(
            Pool::Waiters,
            size::waiters_bytes(engine.waiters, engine.waiter_job_size),
        );
        let held = Pool::ALL
            .iter()
            .filter(|p| p.held())
            .fold(0usize, |a, p| a.saturating_add(self.mine[*p as usize]));
        self.group_held.store(held, Ordering::Relaxed);
        self.set_active(self.mem.is_active(held));
        self.mem.update_refusing();
        self.mem.publish();
    }

    #[cfg(test)]
    pub fn set_active_for_test(&mut self, active: bool) {
        self.set_active(active);
    }

    fn set_active(&mut self, active: bool) {
        if active != self.active {
            self.active = active;
            if active {
                self.mem.active_groups.fetch_add(1, Ordering::Relaxed);
            } else {
                self.mem.active_groups.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Sets this engine's share of `p` to `v`, moving the node's pool by the difference.
    fn put(&mut self, p: Pool, v: usize) {
        let old = std::mem::replace(&mut self.mine[p as usize], v);
        if v >= old {
            self.mem.pools.add(p, v - old);
        } else {
            self.mem.pools.sub(p, old - v);
        }
    }

    /// The engine took these requests off its queue.
    pub fn drained<'a>(&self, cmds: impl Iterator<Item = &'a queenmq_protocol::Command>) {
        let n = cmds.fold(0usize, |a, c| a.saturating_add(size::request_bytes(c)));
        self.mem.pools.sub(Pool::Requests, n);
    }

    /// A checkpoint that holds `bytes` while written is being written: until the returned
    /// guard is dropped (by the task writing it, once written) the pool holds that too.
    /// The partition table's bytes at the last walk: what a checkpoint's snapshot of it can
    /// hold at most once the engine has copied every chunk.
    pub fn partition_bytes(&self) -> usize {
        self.partitions
    }

    pub fn checkpoint_started(&self, bytes: usize) -> CheckpointHeld {
        self.mem.pools.add(Pool::Checkpoint, bytes);
        CheckpointHeld(self.mem.clone(), bytes)
    }
}

impl Drop for Accountant {
    /// A group that ends (stopped, or failed and rebuilt) no longer holds what it put in.
    fn drop(&mut self) {
        for p in Pool::ALL {
            self.mem.pools.sub(p, self.mine[p as usize]);
        }
        self.group_held.store(0, Ordering::Relaxed);
        self.set_active(false);
    }
}

/// Takes this checkpoint's estimate out of the `checkpoint` pool when its buffers are gone.
pub struct CheckpointHeld(Arc<Memory>, usize);

impl Drop for CheckpointHeld {
    fn drop(&mut self) {
        self.0.pools.sub(Pool::Checkpoint, self.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Budget;

    #[test]
    fn a_pass_sets_every_pool_and_the_flag() {
        let mem = Memory::new(Budget::derive(64 << 20, None, None));
        let mut a = Accountant::new(mem.clone(), Default::default());
        let st = State::default();
        a.after_cycle(
            &st,
            EngineSide {
                cache_held: 123,
                waiters: 1_000_000,
                waiter_job_size: 200,
            },
        );
        assert_eq!(mem.pools.get(Pool::EntryCache), 123);
        assert_eq!(
            mem.pools.get(Pool::Waiters),
            1_000_000 * (200 + size::WAITER_EXTRA)
        );
        assert!(mem.pools.get(Pool::Dedup) > 0, "the FIFO's first blocks");
        assert!(mem.refusing(), "a million parked pops pass a 32 MiB share");
        // The next cycle within the pass interval changes nothing.
        a.after_cycle(
            &st,
            EngineSide {
                cache_held: 0,
                waiters: 0,
                waiter_job_size: 200,
            },
        );
        assert_eq!(mem.pools.get(Pool::EntryCache), 123);
    }

    #[test]
    fn groups_add_their_shares_and_take_them_out_when_they_end() {
        let mem = Memory::new(Budget::derive(64 << 20, None, None));
        let side = |cache_held| EngineSide {
            cache_held,
            waiters: 0,
            waiter_job_size: 200,
        };
        let st = State::default();
        let mut a = Accountant::new(mem.clone(), Default::default());
        let mut b = Accountant::new(mem.clone(), Default::default());
        a.after_cycle(&st, side(100));
        b.after_cycle(&st, side(20));
        assert_eq!(mem.pools.get(Pool::EntryCache), 120);
        let state_of_two = mem.pools.get(Pool::State);
        drop(b);
        assert_eq!(mem.pools.get(Pool::EntryCache), 100);
        assert!(mem.pools.get(Pool::State) <= state_of_two);
        drop(a);
        assert_eq!(mem.pools.get(Pool::EntryCache), 0);
        assert_eq!(mem.pools.get(Pool::State), 0);
    }

    #[test]
    fn requests_drained_are_subtracted_and_checkpoints_counted_while_saved() {
        let mem = Memory::new(Budget::derive(64 << 20, None, None));
        let a = Accountant::new(mem.clone(), Default::default());
        let cmd = queenmq_protocol::Command::DeleteQueue { queue: "q".into() };
        mem.pools.add(Pool::Requests, 2 * size::request_bytes(&cmd));
        a.drained([&cmd].into_iter());
        assert_eq!(mem.pools.get(Pool::Requests), size::request_bytes(&cmd));
        let held = a.checkpoint_started(5000);
        assert_eq!(
            mem.pools.get(Pool::Checkpoint),
            5000,
            "held until the write is done"
        );
        drop(held);
        assert_eq!(mem.pools.get(Pool::Checkpoint), 0);
    }
}
