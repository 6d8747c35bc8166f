//! A queue's wake gates for waiting pops, one per group and scope (the whole queue, or one
//! partition). A push wakes one waiter per gate that could take it, not every waiter of the
//! queue (review s14 R3: the herd wake); the pop that took leaves the next wake to the store,
//! which rings the same gate again while that pop's scope still holds something due for the
//! group. A waiter enables its `Notified` before it pops, so a push between its pop and its
//! wait is not lost; one woken by `notify_one` that stops waiting hands the wake on (tokio's
//! `Notified` forwards it when dropped).
//!
//! The gates are kept by partition, so a push looks at the gates of the partition it pushed
//! to and the queue-wide ones, never at those of other partitions (review s19 ephemeral M1);
//! a gate no waiter holds any more is dropped when its last waiter leaves (review s20
//! ephemeral M3: it stayed, charged, until a push or the sweep met it), and otherwise by the
//! first ring that meets it, and by the sweep. The maps give their slots back as they empty.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Notify;

/// A gate's cost besides its names: the map slot, the `Arc<Notify>`.
pub const GATE_COST: u64 = 128;
/// A gate map keeps at least this many slots when it shrinks.
const MIN_SLOTS: usize = 16;

type ByGroup = HashMap<String, Arc<Notify>>;

#[derive(Default)]
pub struct Gates {
    /// Pops without a partition, by group.
    any: ByGroup,
    /// Pops of one partition: partition → group → gate.
    partitions: HashMap<String, ByGroup>,
    bytes: u64,
    /// Gates a push, nack or pop looked at, for the bound tests.
    #[cfg(test)]
    pub looked: u64,
}

fn held(gate: &Arc<Notify>) -> bool {
    Arc::strong_count(gate) > 1
}

/// What a gate of `group` costs, with its partition's name when it has one (each gate pays
/// for its partition's name: an overcount when groups share a partition, never an under).
fn cost(group: &str, partition: Option<&str>) -> u64 {
    GATE_COST + group.len() as u64 + partition.map_or(0, |p| p.len() as u64)
}

/// Rings one waiter of each held gate of `gates` that `ring` picks (by group), drops the
/// gates no waiter holds; (gates looked at, bytes freed).
fn ring_held(
    gates: &mut ByGroup,
    partition: Option<&str>,
    ring: impl Fn(&str) -> bool,
) -> (u64, u64) {
    let (mut looked, mut freed) = (0, 0);
    gates.retain(|group, n| {
        looked += 1;
        if !held(n) {
            freed += cost(group, partition);
            return false;
        }
        if ring(group) {
            n.notify_one();
        }
        true
    });
    (looked, freed)
}

/// Gives a map's slots back once it holds under a quarter of them: a burst of waiters on
/// rotating names does not leave its peak capacity behind, uncharged.
fn shrink<V>(map: &mut HashMap<String, V>) {
    let (len, cap) = (map.len(), map.capacity());
    if cap > MIN_SLOTS && len < cap / 4 {
        map.shrink_to((len * 2).max(MIN_SLOTS));
    }
}

impl Gates {
    /// What `gate` would add to the charge: nothing for a gate that exists.
    pub fn would_cost(&self, group: &str, partition: Option<&str>) -> u64 {
        let map = match partition {
            None => Some(&self.any),
            Some(p) => self.partitions.get(p),
        };
        match map.is_some_and(|m| m.contains_key(group)) {
            true => 0,
            false => cost(group, partition),
        }
    }

    /// A waiter of `group`'s gate for `partition` left: the gate goes if no other holds it.
    pub fn left(&mut self, group: &str, partition: Option<&str>) {
        self.ring_scope(partition, Some(group), |_| false);
    }

    /// The gate of `group`'s pops of `partition` (None: of the whole queue), made if need be.
    pub fn gate(&mut self, group: &str, partition: Option<&str>) -> Arc<Notify> {
        let map = match partition {
            None => &mut self.any,
            Some(p) => self.partitions.entry(p.to_string()).or_default(),
        };
        let gate = map.entry(group.to_string()).or_insert_with(|| {
            self.bytes += cost(group, partition);
            Arc::default()
        });
        gate.clone()
    }

    /// Rings the held gates of one scope (None: the queue-wide ones) that `ring` picks, and
    /// drops those no waiter holds; with `group`, looks at that group's gate alone. Gates
    /// looked at.
    fn ring_scope(
        &mut self,
        partition: Option<&str>,
        group: Option<&str>,
        ring: impl Fn(&str) -> bool,
    ) -> u64 {
        let map = match partition {
            None => Some(&mut self.any),
            Some(p) => self.partitions.get_mut(p),
        };
        let Some(map) = map else {
            return 0;
        };
        let (looked, freed) = match group {
            None => ring_held(map, partition, ring),
            Some(g) => match map.get(g) {
                None => (0, 0),
                Some(n) if !held(n) => {
                    map.remove(g);
                    (1, cost(g, partition))
                }
                Some(n) => {
                    if ring(g) {
                        n.notify_one();
                    }
                    (1, 0)
                }
            },
        };
        shrink(map);
        if let Some(p) = partition.filter(|_| map.is_empty()) {
            self.partitions.remove(p);
            shrink(&mut self.partitions);
        }
        self.bytes -= freed.min(self.bytes);
        #[cfg(test)]
        {
            self.looked += looked;
        }
        looked
    }

    /// Messages came into `partition` (a push, or a redelivery when `group` is named): one
    /// waiter of each gate that could take them, those of the partition and the queue-wide
    /// ones. A gate no waiter holds is dropped, not rung: its stored permit would only make
    /// the next waiter pop once for nothing. Gates looked at.
    pub fn arrived(&mut self, partition: &str, group: Option<&str>) -> u64 {
        self.ring_scope(None, group, |_| true) + self.ring_scope(Some(partition), group, |_| true)
    }

    /// A pop of `group` in that scope left something due there: the next waiter's turn.
    pub fn still_due(&mut self, group: &str, partition: Option<&str>) {
        self.ring_scope(partition, Some(group), |_| true);
    }

    /// The sweep's look at one partition's gates for what no push or nack announced (a
    /// lease that ended): the held gates of the groups `due` names are rung, the others
    /// that no waiter holds dropped. Gates looked at.
    pub fn ring_partition(&mut self, partition: &str, due: impl Fn(&str) -> bool) -> u64 {
        self.ring_scope(Some(partition), None, due)
    }

    /// `ring_partition` for the queue-wide gates.
    pub fn ring_queue_wide(&mut self, due: impl Fn(&str) -> bool) -> u64 {
        self.ring_scope(None, None, due)
    }

    /// Drops the gates no waiter holds of the partitions `has_ring` says have no ring (the
    /// sweep meets the others ring by ring). Gates looked at.
    pub fn prune_ringless(&mut self, has_ring: impl Fn(&str) -> bool) -> u64 {
        let ringless: Vec<String> = self
            .partitions
            .keys()
            .filter(|p| !has_ring(p))
            .cloned()
            .collect();
        ringless
            .iter()
            .map(|p| self.ring_scope(Some(p), None, |_| false))
            .sum()
    }

    /// The queue is gone: every waiter answers now rather than at its timeout.
    pub fn close(&self) {
        let partitions = self.partitions.values().flat_map(HashMap::values);
        self.any
            .values()
            .chain(partitions)
            .for_each(|n| n.notify_waiters());
    }

    /// Whether a pop waits on the queue (its gate is held outside the map).
    pub fn waited_on(&self) -> bool {
        self.any.values().any(held)
            || self
                .partitions
                .values()
                .any(|gates| gates.values().any(held))
    }

    /// Whether a pop of `group` without a partition waits on the queue.
    pub fn waits_any(&self, group: &str) -> bool {
        self.any.get(group).is_some_and(held)
    }

    /// What the gates hold, as the node's cap counts it.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The slots the maps keep, used or not.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        let partitions: usize = self.partitions.values().map(HashMap::capacity).sum();
        self.any.capacity() + self.partitions.capacity() + partitions
    }

    /// `bytes` counted from the gates.
    #[cfg(test)]
    pub fn recount(&self) -> u64 {
        let any: u64 = self.any.keys().map(|g| cost(g, None)).sum();
        let partitions: u64 = self
            .partitions
            .iter()
            .flat_map(|(p, gates)| gates.keys().map(move |g| cost(g, Some(p))))
            .sum();
        any + partitions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unheld_gates_are_dropped_when_met_and_their_charge_given_back() {
        let mut g = Gates::default();
        let a = g.gate("g", None);
        let b = g.gate("g", Some("p"));
        let c = g.gate("h", Some("p"));
        assert_eq!(g.bytes(), g.recount());
        drop((a, b));
        g.arrived("p", None);
        assert!(g.waited_on());
        assert_eq!(g.bytes(), cost("h", Some("p")));
        assert_eq!(g.bytes(), g.recount());
        drop(c);
        assert_eq!(g.prune_ringless(|_| false), 1);
        assert!(!g.waited_on());
        assert_eq!(g.bytes(), 0);
    }

    /// Review s19 ephemeral M1: a push to one partition looks at that partition's gates and
    /// the queue-wide ones, whatever the gates of other partitions.
    #[test]
    fn a_push_looks_only_at_the_gates_that_can_take_it() {
        let mut g = Gates::default();
        let mut held: Vec<_> = (0..100)
            .map(|i| g.gate(&format!("g{i}"), Some("b")))
            .collect();
        held.extend([g.gate("x", Some("a")), g.gate("y", None)]);
        g.looked = 0;
        g.arrived("a", None);
        assert_eq!(g.looked, 2, "the gate of a and the queue-wide one");
        g.looked = 0;
        g.arrived("b", Some("g5"));
        assert_eq!(g.looked, 1, "a nack looks at its group's gates alone");
        assert_eq!(held.len(), 102);
    }
}
