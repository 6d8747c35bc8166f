//! Derived: the lowest Raft log index whose entry still holds a message the state keeps, so
//! the segments below it can be deleted (docs/storage-format.md "Space reclamation").
//!
//! Kept incrementally, one count per partition's first run: runs are appended in log order,
//! so a partition's first run names its lowest index, and the floor is the smallest first
//! index of all. Every change to a partition's first run (the first push into it, retention,
//! forgetting, its queue's deletion, a pending run getting its index, a checkpoint read back)
//! moves one count: O(log n) per change, never a walk of the partitions.

use std::collections::BTreeMap;

use super::model::{Partition, PENDING_INDEX};

#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct RunFloor {
    /// First-run log index → how many partitions' first run it is.
    firsts: BTreeMap<u64, u32>,
}

/// The log index of a partition's first run, if it holds any.
pub fn first_index(p: &Partition) -> Option<u64> {
    p.runs.first().map(|r| r.index)
}

impl RunFloor {
    /// A partition's first run moved from `before` to `after` (None: it holds no run).
    pub fn moved(&mut self, before: Option<u64>, after: Option<u64>) {
        if before == after {
            return;
        }
        if let Some(b) = before {
            match self.firsts.get_mut(&b) {
                Some(n) if *n > 1 => *n -= 1,
                Some(_) => {
                    self.firsts.remove(&b);
                }
                // Only a bug in a caller reaches this; the floor then stays lower (safe).
                None => debug_assert!(false, "first run at {b} was not counted"),
            }
        }
        if let Some(a) = after {
            *self.firsts.entry(a).or_default() += 1;
        }
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

    /// The same, by walking every run of every partition (not only the first ones, so it
    /// does not share the assumption it checks): what tests hold the incremental one to.
    #[cfg(any(test, feature = "test-support"))]
    pub fn walked<'a>(parts: impl Iterator<Item = &'a Partition>) -> Option<u64> {
        parts
            .flat_map(|p| p.runs.iter().map(|r| r.index))
            .filter(|&i| i != PENDING_INDEX)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_the_lowest_counted_first_run_and_pending_runs_do_not_count() {
        let mut f = RunFloor::default();
        assert_eq!(f.lowest(), None);
        f.moved(None, Some(PENDING_INDEX));
        assert_eq!(f.lowest(), None);
        f.moved(Some(PENDING_INDEX), Some(9));
        f.moved(None, Some(5));
        f.moved(None, Some(5));
        assert_eq!(f.lowest(), Some(5));
        f.moved(Some(5), Some(12));
        assert_eq!(f.lowest(), Some(5), "one partition still starts at 5");
        f.moved(Some(5), None);
        assert_eq!(f.lowest(), Some(9));
        f.moved(Some(9), Some(9));
        assert_eq!(f.lowest(), Some(9));
        f.moved(Some(9), None);
        f.moved(Some(12), None);
        assert_eq!(f, RunFloor::default());
    }
}
