//! Derived: every group timer (lease expiry, delivery delay, window hold) by time, so the
//! engine tick finds the groups with a timer due in time proportional to what is due, not by
//! walking every parked group across every queue its pops match (that walk was distinct groups
//! x matching queues hash lookups every 100 ms).
//!
//! It mirrors the pushes onto `Group::wake` and is drained, not kept in sync with the heaps:
//! an entry of a group since deleted, or a timer a pop already handled, is dropped when its
//! time comes, at the cost of one group lookup. It holds no more entries than the heaps do.

use std::collections::BTreeSet;

#[derive(Default)]
pub struct WakeIndex {
    due: BTreeSet<(i64, u64)>,
}

impl WakeIndex {
    /// Records that group `gid` has a timer at `at_us`.
    pub fn insert(&mut self, at_us: i64, gid: u64) {
        self.due.insert((at_us, gid));
    }

    /// Removes the timers at or before `now_us` and returns their groups, each once.
    pub fn take_due(&mut self, now_us: i64) -> Vec<u64> {
        let mut gids = Vec::new();
        while let Some(&(t, gid)) = self.due.first() {
            if t > now_us {
                break;
            }
            self.due.pop_first();
            gids.push(gid);
        }
        gids.sort_unstable();
        gids.dedup();
        gids
    }

    /// About the memory held: a 16-byte key plus its share of a B-tree node (11 keys and
    /// edges to 12 children per internal node).
    pub fn bytes(&self) -> usize {
        self.due.len().saturating_mul(32)
    }

    pub fn len(&self) -> usize {
        self.due.len()
    }

    pub fn is_empty(&self) -> bool {
        self.due.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_only_what_is_due_each_group_once() {
        let mut w = WakeIndex::default();
        w.insert(10, 1);
        w.insert(20, 2);
        w.insert(5, 1);
        w.insert(i64::MAX, 3);
        w.insert(i64::MIN, 4);
        assert_eq!(w.take_due(10), vec![1, 4]);
        assert_eq!(w.len(), 2);
        assert!(w.take_due(19).is_empty());
        assert_eq!(w.take_due(i64::MAX), vec![2, 3]);
        assert!(w.is_empty());
    }
}
