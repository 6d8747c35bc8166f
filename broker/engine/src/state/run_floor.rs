//! Derived: the lowest Raft log index whose entry still holds a message the state keeps, so
//! the segments below it can be deleted (docs/storage-format.md "Space reclamation").
//!
//! Kept incrementally, one count per held run by the log index it names. A partition's runs
//! are not in log order once the compactor copied one forward (a `RunCopy` points an old run
//! at a new entry while later runs keep older ones), so the first run is not always the
//! lowest: every run counts. Every change to a run (a push, retention, forgetting, its
//! queue's deletion, a pending run getting its index, a copy, a checkpoint read back) moves
//! one count: O(log n) per run changed, never a walk of the partitions.

use std::collections::BTreeMap;

#[cfg(any(test, feature = "test-support"))]
use super::model::Partition;
use super::model::{Run, PENDING_INDEX};

#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct RunFloor {
    /// Log index → how many held runs name it.
    firsts: BTreeMap<u64, u32>,
}

impl RunFloor {
    /// Counts runs that came into the state.
    pub fn add_runs(&mut self, runs: &[Run]) {
        for r in runs {
            self.moved(None, Some(r.index));
        }
    }

    /// Uncounts runs that left the state.
    pub fn remove_runs(&mut self, runs: &[Run]) {
        for r in runs {
            self.moved(Some(r.index), None);
        }
    }

    /// A run moved from naming `before` to naming `after` (None: not held).
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
                None => debug_assert!(false, "a run at {b} was not counted"),
            }
        }
        if let Some(a) = after {
            *self.firsts.entry(a).or_default() += 1;
        }
    }

    /// Memory the counts hold, roughly: a B-tree slot (key, count and the node's share)
    /// per distinct index.
    pub fn bytes(&self) -> usize {
        self.firsts.len().saturating_mul(32)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_the_lowest_counted_run_and_pending_runs_do_not_count() {
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
