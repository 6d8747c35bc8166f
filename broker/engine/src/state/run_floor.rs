//! Derived: the lowest Raft log index whose entry still holds a message the state keeps, so
//! the segments below it can be deleted (docs/storage-format.md "The run floor with copies").
//!
//! Kept in O(partitions), not O(runs): one count per partition with runs, by the lowest
//! index its runs name. A partition's runs are in log order except those the compactor
//! copied forward (a copy names the newest entry while later runs keep older ones), so its
//! lowest index is the smaller of its first plain run's and its copied runs' lowest; the
//! copied runs are the few a partition keeps in [`CopiedRuns`]. Every change to a run goes
//! through here and moves at most one count, so a push costs O(log partitions) and a queue
//! delete or a checkpoint load one update per partition, never one per run (review C9).

use std::collections::{BTreeMap, BTreeSet};

use super::model::{Partition, Run, PENDING_INDEX};

#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct RunFloor {
    /// A partition's lowest run index → how many partitions have it.
    firsts: BTreeMap<u64, u32>,
    /// Copied runs held in every partition's [`CopiedRuns`], partitions holding any, and the
    /// B-tree nodes their sets may need beyond the first (see [`tree_nodes`]): what
    /// [`RunFloor::bytes`] charges for them.
    copied_runs: usize,
    copied_parts: usize,
    copied_nodes: usize,
    /// Counts every change that took a run off an index: a drop, a partition's removal, a
    /// copy. While it stands still no segment lost a run (review M3).
    drops: u64,
}

/// A partition's runs that no longer sit in log order because a copy moved their frames
/// forward. Every run whose base offset is below `plain_from` is copied, and the run at
/// `plain_from` (if any) is not: that run is the lowest of the plain ones.
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct CopiedRuns {
    bases: BTreeSet<u64>,
    /// Log index → how many of the copied runs name it.
    indexes: BTreeMap<u64, u32>,
    plain_from: u64,
}

/// The allocator's header and rounding per allocation (glibc), as `memory/size.rs` counts it.
const ALLOC_OVERHEAD: usize = 16;
/// std's B-tree nodes hold up to 11 keys; a leaf is the parent pointer, two `u16` and the
/// key and value arrays: 104 B for a `BTreeSet<u64>` (8 + 4 + 88, aligned) and 144 B for a
/// `BTreeMap<u64, u32>` (8 + 4 + 88 + 44). An internal node adds 12 edge pointers. Even a
/// one-element tree holds a whole leaf (review M2: 304 B measured for one copied run, with
/// the box, where 120 B were charged).
const SET_LEAF: usize = 104;
const MAP_LEAF: usize = 144;
const EDGES: usize = 12 * 8;
/// A partition's box (its `PartitionExtra`, which holds the set) and the first node of each
/// of its two trees.
const COPIED_PART_BYTES: usize =
    std::mem::size_of::<super::model::PartitionExtra>() + SET_LEAF + MAP_LEAF + 3 * ALLOC_OVERHEAD;
/// Each further node of both trees, charged as an internal one (an upper bound).
const COPIED_NODE_BYTES: usize = SET_LEAF + MAP_LEAF + 2 * EDGES + 2 * ALLOC_OVERHEAD;
/// A node of `firsts` (a `BTreeMap<u64, u32>`), charged as an internal one.
const FIRSTS_NODE_BYTES: usize = MAP_LEAF + EDGES + ALLOC_OVERHEAD;

impl RunFloor {
    /// Appends `run` at the end of `p` (the planner appends at the partition's end, at an
    /// index no held run is above).
    pub fn push(&mut self, p: &mut Partition, run: Run) {
        let before = lowest(p);
        p.runs.push(run);
        self.moved(before, lowest(p));
    }

    /// Removes the first `n` runs of `p` (retention, forgetting).
    pub fn drop_front(&mut self, p: &mut Partition, n: usize) {
        let n = n.min(p.runs.len());
        if n == 0 {
            return;
        }
        self.drops = self.drops.wrapping_add(1);
        let before = lowest(p);
        let held = copied_len(p);
        if let Some(c) = p.extra.as_deref_mut().and_then(|e| e.copied.as_mut()) {
            let end = p.runs.get(n).map_or(u64::MAX, |r| r.base_offset);
            for r in p.runs.iter().take(n) {
                if c.bases.remove(&r.base_offset) {
                    uncount(&mut c.indexes, r.index);
                }
            }
            c.plain_from = c.plain_from.max(end);
        }
        p.runs.drop_front(n);
        self.settle(p);
        self.recount(held, copied_len(p));
        self.moved(before, lowest(p));
    }

    /// Points run `i` of `p` at `index`/`pos`. `copy`: the compactor moved its frames, so the
    /// run leaves log order; otherwise (a planned run getting its committed index) it keeps
    /// whatever order it had.
    pub fn set_index(&mut self, p: &mut Partition, i: usize, index: u64, pos: u32, copy: bool) {
        let Some(run) = p.runs.get(i) else {
            return;
        };
        let before = lowest(p);
        let held = copied_len(p);
        let copied = p
            .copied_runs()
            .is_some_and(|c| c.bases.contains(&run.base_offset));
        if copied || copy {
            self.drops = self.drops.wrapping_add(1);
            // Plain from the first run on when made: until now every run was in log order.
            let c = p.copied_runs_or_default();
            if copied {
                uncount(&mut c.indexes, run.index);
            } else {
                c.bases.insert(run.base_offset);
            }
            *c.indexes.entry(index).or_default() += 1;
        }
        p.runs.set_loc(i, index, pos);
        self.settle(p);
        self.recount(held, copied_len(p));
        self.moved(before, lowest(p));
    }

    /// Counts a partition read back from a checkpoint, whose runs may be in any log order:
    /// walking back from its end, a run naming a higher index than some later run is taken
    /// as copied, which leaves the others in log order.
    pub fn add_partition(&mut self, p: &mut Partition) {
        let mut below = u64::MAX;
        let mut c = CopiedRuns::default();
        for r in p.runs.iter().rev() {
            if r.index > below {
                c.bases.insert(r.base_offset);
                *c.indexes.entry(r.index).or_default() += 1;
            } else {
                below = r.index;
            }
        }
        p.set_copied_runs(None);
        if !c.bases.is_empty() {
            p.set_copied_runs(Some(c));
            self.settle(p);
        }
        self.recount(0, copied_len(p));
        self.moved(None, lowest(p));
    }

    /// Uncounts a partition that left the state (its queue's deletion, a create over it).
    pub fn remove_partition(&mut self, p: &Partition) {
        self.drops = self.drops.wrapping_add(1);
        self.recount(copied_len(p), 0);
        self.moved(lowest(p), None);
    }

    /// Moves `plain_from` to the first plain run, and frees the copied set once empty. Each
    /// copied run is stepped over once between two removals of the first plain run, so this
    /// is amortised O(log n) per change.
    fn settle(&mut self, p: &mut Partition) {
        if p.copied_runs().is_some_and(|c| c.bases.is_empty()) {
            p.set_copied_runs(None);
        }
        // By field, not through a method, so `p.runs` stays readable beside it.
        let Some(c) = p.extra.as_deref_mut().and_then(|e| e.copied.as_mut()) else {
            return;
        };
        // One walk, not a `get` a run: a sealed run is decoded from its block's start.
        let i = p.runs.partition_point(|r| r.base_offset < c.plain_from);
        c.plain_from = p
            .runs
            .iter_from(i)
            .find(|r| !c.bases.contains(&r.base_offset))
            .map_or(p.next_offset, |r| r.base_offset);
    }

    /// A partition's copied set went from `before` runs to `after` (0: no set).
    fn recount(&mut self, before: usize, after: usize) {
        if before == after {
            return;
        }
        self.copied_runs = (self.copied_runs + after).saturating_sub(before);
        self.copied_parts =
            (self.copied_parts + usize::from(after > 0)).saturating_sub(usize::from(before > 0));
        self.copied_nodes = (self.copied_nodes + tree_nodes(after).saturating_sub(1))
            .saturating_sub(tree_nodes(before).saturating_sub(1));
    }

    fn moved(&mut self, before: Option<u64>, after: Option<u64>) {
        if before == after {
            return;
        }
        if let Some(b) = before {
            uncount(&mut self.firsts, b);
        }
        if let Some(a) = after {
            *self.firsts.entry(a).or_default() += 1;
        }
    }

    /// Memory the floor holds, as allocated: the nodes of the distinct partition minimums'
    /// tree, and per partition holding copies its box and the nodes of its two trees (at
    /// least one leaf each, however few runs). Node counts are upper bounds ([`tree_nodes`]).
    pub fn bytes(&self) -> usize {
        tree_nodes(self.firsts.len())
            .saturating_mul(FIRSTS_NODE_BYTES)
            .saturating_add(self.copied_parts.saturating_mul(COPIED_PART_BYTES))
            .saturating_add(self.copied_nodes.saturating_mul(COPIED_NODE_BYTES))
    }

    /// Changes so far that took a run off the index it named (drops, removals, copies): the
    /// compactor walks a segment it found too live again only once this moved.
    pub fn drops(&self) -> u64 {
        self.drops
    }

    /// The lowest committed log index a message still held lives in; None when no committed
    /// run is held (runs still being planned lie above every committed index).
    pub fn lowest(&self) -> Option<u64> {
        self.firsts
            .keys()
            .next()
            .copied()
            .filter(|&i| i != PENDING_INDEX)
    }

    /// The same, by walking every run of every partition: what tests hold the incremental one
    /// to.
    #[cfg(any(test, feature = "test-support"))]
    pub fn walked<'a>(parts: impl Iterator<Item = &'a Partition>) -> Option<u64> {
        parts
            .flat_map(|p| p.runs.iter().map(|r| r.index))
            .filter(|&i| i != PENDING_INDEX)
            .min()
    }
}

/// The lowest index `p`'s runs name: its first plain run's (plain runs are in log order) or
/// its lowest copied run's.
fn lowest(p: &Partition) -> Option<u64> {
    let Some(c) = p.copied_runs() else {
        return p.runs.first().map(|r| r.index);
    };
    let i = p.runs.partition_point(|r| r.base_offset < c.plain_from);
    let plain = p.runs.get(i).map(|r| r.index);
    let copied = c.indexes.keys().next().copied();
    match (plain, copied) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// How many copied runs `p` keeps aside (0: none, no set).
fn copied_len(p: &Partition) -> usize {
    p.copied_runs().map_or(0, |c| c.bases.len())
}

/// At most how many nodes a std B-tree of `n` keys holds: one up to a node's 11 keys; past
/// that every node but the root holds at least 5 keys, so no more than `1 + n / 5`.
fn tree_nodes(n: usize) -> usize {
    match n {
        0 => 0,
        1..=11 => 1,
        _ => 1 + n.div_ceil(5),
    }
}

fn uncount(counts: &mut BTreeMap<u64, u32>, key: u64) {
    match counts.get_mut(&key) {
        Some(n) if *n > 1 => *n -= 1,
        Some(_) => {
            counts.remove(&key);
        }
        // Only a bug in a caller reaches this; the floor then stays lower (safe).
        None => debug_assert!(false, "index {key} was not counted"),
    }
}

#[cfg(test)]
#[path = "run_floor_tests.rs"]
mod tests;
