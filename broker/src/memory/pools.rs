//! The memory pools: one counter per structure that grows with traffic, in bytes actually
//! held (capacities and allocations, not lengths). The engine sets most of them once per
//! accounting pass; the bus adds the requests it queues. Plain relaxed atomics: a reader sees
//! a value at most one pass old, which is what a gauge and an admission check need.

use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pool {
    /// Recently committed log entries (evictable: it shrinks to its share).
    EntryCache,
    /// The transaction-id index of messages inside the remembered window.
    Dedup,
    /// Queues, partitions (with their run index), groups, cursors, DLQ rows, traces, leases.
    State,
    /// Parked long-poll pops.
    Waiters,
    /// Requests queued for the engine, not yet planned.
    Requests,
    /// The checkpoint being encoded and written.
    Checkpoint,
    /// HTTP connections and the requests in flight on them (hyper's buffers, the tasks):
    /// bounded by the connection and long-poll caps derived from the budget, not by refusal.
    Connections,
    /// Ephemeral (RAM) queues' rings and payloads. Not held: the queues have their own cap
    /// (`ephemeral_max_bytes`), so their traffic never refuses durable writes.
    Ephemeral,
    /// Request bodies the cluster listener holds (review s14 F6): exact, taken from its body
    /// budget as each body's header is read and given back once it is answered. Not held: the
    /// budget caps it (docs/memory.md).
    ClusterBodies,
}

impl Pool {
    pub const ALL: [Pool; 9] = [
        Pool::EntryCache,
        Pool::Dedup,
        Pool::State,
        Pool::Waiters,
        Pool::Requests,
        Pool::Checkpoint,
        Pool::Connections,
        Pool::Ephemeral,
        Pool::ClusterBodies,
    ];

    /// The `pool` label of `queen_memory_bytes`.
    pub fn name(self) -> &'static str {
        match self {
            Pool::EntryCache => "entry_cache",
            Pool::Dedup => "dedup",
            Pool::State => "state",
            Pool::Waiters => "waiters",
            Pool::Requests => "requests",
            Pool::Checkpoint => "checkpoint",
            Pool::Connections => "connections",
            Pool::Ephemeral => "ephemeral",
            Pool::ClusterBodies => "cluster_bodies",
        }
    }

    /// Pools that cannot be evicted: only refusing new writes (and consumers draining, or
    /// time expiring ids) makes them smaller.
    pub fn held(self) -> bool {
        matches!(
            self,
            Pool::Dedup | Pool::State | Pool::Waiters | Pool::Requests
        )
    }
}

#[derive(Debug, Default)]
pub struct Pools {
    bytes: [AtomicUsize; Pool::ALL.len()],
}

impl Pools {
    pub fn get(&self, p: Pool) -> usize {
        self.bytes[p as usize].load(Ordering::Relaxed)
    }

    pub fn set(&self, p: Pool, v: usize) {
        self.bytes[p as usize].store(v, Ordering::Relaxed);
    }

    pub fn add(&self, p: Pool, v: usize) {
        self.bytes[p as usize].fetch_add(v, Ordering::Relaxed);
    }

    /// Subtracts, never below zero (an add and its sub may be seen in either order).
    pub fn sub(&self, p: Pool, v: usize) {
        let _ = self.bytes[p as usize].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
            Some(b.saturating_sub(v))
        });
    }

    /// The sum of the pools that cannot be evicted.
    pub fn held(&self) -> usize {
        Pool::ALL
            .iter()
            .filter(|p| p.held())
            .fold(0usize, |a, p| a.saturating_add(self.get(*p)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_sums_only_the_pools_that_cannot_be_evicted() {
        let p = Pools::default();
        p.set(Pool::EntryCache, 1000);
        p.set(Pool::Checkpoint, 500);
        p.set(Pool::State, 10);
        p.set(Pool::Dedup, 20);
        p.set(Pool::Waiters, 30);
        p.add(Pool::Requests, 40);
        assert_eq!(p.held(), 100);
        p.sub(Pool::Requests, 100);
        assert_eq!(p.get(Pool::Requests), 0, "never below zero");
        assert_eq!(p.held(), 60);
    }

    #[test]
    fn names_are_distinct_labels() {
        let mut names: Vec<_> = Pool::ALL.iter().map(|p| p.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Pool::ALL.len());
    }
}
