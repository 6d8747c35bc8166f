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
    /// Copied runs held in every partition's [`CopiedRuns`], and partitions holding any: what
    /// [`RunFloor::bytes`] charges for them.
    copied_runs: usize,
    copied_parts: usize,
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

/// What a B-tree slot costs, roughly (key, value and the node's share).
const SLOT_BYTES: usize = 32;

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
        let before = lowest(p);
        if let Some(c) = p.copied.as_deref_mut() {
            let end = p.runs.get(n).map_or(u64::MAX, |r| r.base_offset);
            for r in &p.runs[..n] {
                if c.bases.remove(&r.base_offset) {
                    uncount(&mut c.indexes, r.index);
                    self.copied_runs = self.copied_runs.saturating_sub(1);
                }
            }
            c.plain_from = c.plain_from.max(end);
        }
        p.runs.drain(..n);
        self.settle(p);
        self.moved(before, lowest(p));
    }

    /// Points run `i` of `p` at `index`/`pos`. `copy`: the compactor moved its frames, so the
    /// run leaves log order; otherwise (a planned run getting its committed index) it keeps
    /// whatever order it had.
    pub fn set_index(&mut self, p: &mut Partition, i: usize, index: u64, pos: u32, copy: bool) {
        let Some(run) = p.runs.get(i).copied() else {
            return;
        };
        let before = lowest(p);
        let copied = p
            .copied
            .as_deref()
            .is_some_and(|c| c.bases.contains(&run.base_offset));
        if copied || copy {
            if p.copied.is_none() {
                self.copied_parts += 1;
            }
            let c = p.copied.get_or_insert_with(|| {
                // Plain from the first run on: until now every run was in log order.
                Box::default()
            });
            if copied {
                uncount(&mut c.indexes, run.index);
            } else {
                c.bases.insert(run.base_offset);
                self.copied_runs += 1;
            }
            *c.indexes.entry(index).or_default() += 1;
        }
        if let Some(r) = p.runs.get_mut(i) {
            r.index = index;
            r.pos = pos;
        }
        self.settle(p);
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
        p.copied = None;
        if !c.bases.is_empty() {
            self.copied_runs += c.bases.len();
            self.copied_parts += 1;
            p.copied = Some(Box::new(c));
            self.settle(p);
        }
        self.moved(None, lowest(p));
    }

    /// Uncounts a partition that left the state (its queue's deletion, a create over it).
    pub fn remove_partition(&mut self, p: &Partition) {
        if let Some(c) = p.copied.as_deref() {
            self.copied_runs = self.copied_runs.saturating_sub(c.bases.len());
            self.copied_parts = self.copied_parts.saturating_sub(1);
        }
        self.moved(lowest(p), None);
    }

    /// Moves `plain_from` to the first plain run, and frees the copied set once empty. Each
    /// copied run is stepped over once between two removals of the first plain run, so this
    /// is amortised O(log n) per change.
    fn settle(&mut self, p: &mut Partition) {
        let Some(c) = p.copied.as_deref_mut() else {
            return;
        };
        if c.bases.is_empty() {
            p.copied = None;
            self.copied_parts = self.copied_parts.saturating_sub(1);
            return;
        }
        let mut i = p.runs.partition_point(|r| r.base_offset < c.plain_from);
        while p
            .runs
            .get(i)
            .is_some_and(|r| c.bases.contains(&r.base_offset))
        {
            i += 1;
        }
        c.plain_from = p.runs.get(i).map_or(p.next_offset, |r| r.base_offset);
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

    /// Memory the floor holds, roughly: a B-tree slot per distinct partition minimum, two per
    /// copied run (its base and its index) and a boxed set per partition holding copies.
    pub fn bytes(&self) -> usize {
        self.firsts
            .len()
            .saturating_add(self.copied_runs.saturating_mul(2))
            .saturating_mul(SLOT_BYTES)
            .saturating_add(
                self.copied_parts
                    .saturating_mul(std::mem::size_of::<CopiedRuns>()),
            )
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
    let Some(c) = p.copied.as_deref() else {
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
