//! A queue's wake gates for waiting pops, one per group and scope (the whole queue, or one
//! partition). A push wakes one waiter per gate that could take it, not every waiter of the
//! queue (review s14 R3: the herd wake); the pop that took leaves the next wake to the store,
//! which rings the same gate again while that pop's scope still holds something due for the
//! group. A waiter enables its `Notified` before it pops, so a push between its pop and its
//! wait is not lost; one woken by `notify_one` that stops waiting hands the wake on (tokio's
//! `Notified` forwards it when dropped).

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Notify;

/// A gate's cost besides its names: the map slot, the `Arc<Notify>`.
pub const GATE_COST: u64 = 128;

#[derive(Default)]
struct GroupGates {
    /// Pops without a partition.
    any: Option<Arc<Notify>>,
    /// Pops of one partition.
    partitions: HashMap<String, Arc<Notify>>,
}

#[derive(Default)]
pub struct Gates {
    groups: HashMap<String, GroupGates>,
    bytes: u64,
}

fn held(gate: &Arc<Notify>) -> bool {
    Arc::strong_count(gate) > 1
}

impl Gates {
    /// The gate of `group`'s pops of `partition` (None: of the whole queue), made if need be.
    pub fn gate(&mut self, group: &str, partition: Option<&str>) -> Arc<Notify> {
        if !self.groups.contains_key(group) {
            self.bytes += group.len() as u64;
        }
        let g = self.groups.entry(group.to_string()).or_default();
        let gate = match partition {
            None => g.any.get_or_insert_with(|| {
                self.bytes += GATE_COST;
                Arc::default()
            }),
            Some(p) => g.partitions.entry(p.to_string()).or_insert_with(|| {
                self.bytes += GATE_COST + p.len() as u64;
                Arc::default()
            }),
        };
        gate.clone()
    }

    /// Messages came into `partition` (a push, or a redelivery when `group` is named): one
    /// waiter of each gate that could take them. A gate no waiter holds is not rung: its
    /// stored permit would only make the next waiter pop once for nothing.
    pub fn arrived(&self, partition: &str, group: Option<&str>) {
        let ring = |g: &GroupGates| {
            let gates = g.any.iter().chain(g.partitions.get(partition));
            gates.filter(|n| held(n)).for_each(|n| n.notify_one());
        };
        match group {
            None => self.groups.values().for_each(&ring),
            Some(name) => self.groups.get(name).into_iter().for_each(ring),
        }
    }

    /// A pop of `group` in that scope left something due there: the next waiter's turn.
    pub fn still_due(&self, group: &str, partition: Option<&str>) {
        let Some(g) = self.groups.get(group) else {
            return;
        };
        let gate = match partition {
            None => g.any.as_ref(),
            Some(p) => g.partitions.get(p),
        };
        if let Some(n) = gate.filter(|n| held(n)) {
            n.notify_one();
        }
    }

    /// The sweep's look for what no push or nack announced (a lease that ended): one waiter
    /// of each held gate whose scope `due` says has something for its group is rung.
    pub fn ring_due(&self, due: impl Fn(&str, Option<&str>) -> bool) {
        for (name, g) in &self.groups {
            if let Some(n) = g.any.as_ref().filter(|n| held(n)) {
                if due(name, None) {
                    n.notify_one();
                }
            }
            for (p, n) in &g.partitions {
                if held(n) && due(name, Some(p)) {
                    n.notify_one();
                }
            }
        }
    }

    /// The queue is gone: every waiter answers now rather than at its timeout.
    pub fn close(&self) {
        for g in self.groups.values() {
            g.any.iter().for_each(|n| n.notify_waiters());
            g.partitions.values().for_each(|n| n.notify_waiters());
        }
    }

    /// Whether a pop waits on the queue (its gate is held outside the map).
    pub fn waited_on(&self) -> bool {
        self.groups
            .values()
            .any(|g| g.any.as_ref().is_some_and(held) || g.partitions.values().any(held))
    }

    /// Drops the gates no waiter holds.
    pub fn prune(&mut self) {
        let mut freed = 0;
        self.groups.retain(|name, g| {
            if g.any.as_ref().is_some_and(|n| !held(n)) {
                g.any = None;
                freed += GATE_COST;
            }
            g.partitions.retain(|p, n| {
                let keep = held(n);
                if !keep {
                    freed += GATE_COST + p.len() as u64;
                }
                keep
            });
            let keep = g.any.is_some() || !g.partitions.is_empty();
            if !keep {
                freed += name.len() as u64;
            }
            keep
        });
        self.bytes -= freed.min(self.bytes);
    }

    /// What the gates hold, as the node's cap counts it.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unheld_gates_are_pruned_and_their_charge_given_back() {
        let mut g = Gates::default();
        let a = g.gate("g", None);
        let b = g.gate("g", Some("p"));
        let _c = g.gate("h", Some("p"));
        assert!(g.bytes() > 3 * GATE_COST);
        drop((a, b));
        g.prune();
        assert!(g.waited_on());
        assert_eq!(g.bytes(), GATE_COST + 2);
        drop(_c);
        g.prune();
        assert!(!g.waited_on());
        assert_eq!(g.bytes(), 0);
    }
}
