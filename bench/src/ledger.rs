//! Which messages were accepted and which each consumer group saw, to count `lost`
//! (accepted, never delivered to some group), duplicates and unexpected deliveries.
//!
//! Message ids are dense (`seq * producers + producer`), so a bit set per group holds a run
//! of ten million messages in 1.25 MB. Writers lock once per batch.

use std::sync::Mutex;

#[derive(Debug, Default, Clone)]
pub struct BitSet {
    words: Vec<u64>,
    ones: u64,
}

impl BitSet {
    /// Sets bit `id`; true if it was clear.
    pub fn insert(&mut self, id: u64) -> bool {
        let word = (id / 64) as usize;
        if word >= self.words.len() {
            self.words.resize((word + 1).next_power_of_two(), 0);
        }
        let mask = 1u64 << (id % 64);
        let fresh = self.words[word] & mask == 0;
        self.words[word] |= mask;
        self.ones += u64::from(fresh);
        fresh
    }

    #[cfg(test)]
    pub fn contains(&self, id: u64) -> bool {
        self.words
            .get((id / 64) as usize)
            .is_some_and(|w| w & (1u64 << (id % 64)) != 0)
    }

    pub fn len(&self) -> u64 {
        self.ones
    }

    /// Number of bits set here and clear in `other`.
    pub fn count_not_in(&self, other: &BitSet) -> u64 {
        self.words
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let theirs = other.words.get(i).copied().unwrap_or(0);
                u64::from((w & !theirs).count_ones())
            })
            .sum()
    }
}

#[derive(Debug, Default)]
struct Seen {
    bits: BitSet,
    duplicates: u64,
}

/// Totals at the end of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerSummary {
    pub accepted: u64,
    /// Accepted messages a group never saw, summed over groups.
    pub lost: u64,
    pub lost_per_group: Vec<u64>,
    /// Deliveries of a message the group had already seen.
    pub duplicates: u64,
    /// Messages delivered that no push reported accepted (e.g. the push answer was lost).
    pub unexpected: u64,
}

#[derive(Debug)]
pub struct Ledger {
    accepted: Mutex<BitSet>,
    groups: Vec<Mutex<Seen>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A worker that panicked mid-update leaves at worst one batch half-recorded.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Ledger {
    /// A ledger for `groups` consumer groups (queue mode counts as one).
    pub fn new(groups: usize) -> Self {
        Self {
            accepted: Mutex::new(BitSet::default()),
            groups: (0..groups.max(1))
                .map(|_| Mutex::new(Seen::default()))
                .collect(),
        }
    }

    pub fn record_accepted(&self, ids: impl IntoIterator<Item = u64>) {
        let mut accepted = lock(&self.accepted);
        for id in ids {
            accepted.insert(id);
        }
    }

    /// Records deliveries to `group`; returns how many were duplicates.
    pub fn record_delivered(&self, group: usize, ids: impl IntoIterator<Item = u64>) -> u64 {
        let Some(slot) = self.groups.get(group) else {
            return 0;
        };
        let mut seen = lock(slot);
        let mut duplicates = 0;
        for id in ids {
            if !seen.bits.insert(id) {
                duplicates += 1;
            }
        }
        seen.duplicates += duplicates;
        duplicates
    }

    pub fn accepted(&self) -> u64 {
        lock(&self.accepted).len()
    }

    /// Accepted messages not yet seen, summed over groups.
    pub fn missing(&self) -> u64 {
        let accepted = lock(&self.accepted);
        self.groups
            .iter()
            .map(|g| accepted.count_not_in(&lock(g).bits))
            .sum()
    }

    pub fn summary(&self) -> LedgerSummary {
        let accepted = lock(&self.accepted);
        let mut summary = LedgerSummary {
            accepted: accepted.len(),
            ..LedgerSummary::default()
        };
        for group in &self.groups {
            let seen = lock(group);
            let lost = accepted.count_not_in(&seen.bits);
            summary.lost += lost;
            summary.lost_per_group.push(lost);
            summary.duplicates += seen.duplicates;
            summary.unexpected += seen.bits.count_not_in(&accepted);
        }
        summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitset_insert_contains_len() {
        let mut b = BitSet::default();
        assert!(b.insert(0));
        assert!(b.insert(1_000));
        assert!(!b.insert(1_000));
        assert!(b.contains(1_000));
        assert!(!b.contains(999));
        assert!(!b.contains(1 << 40));
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn bitset_difference_handles_unequal_lengths() {
        let mut a = BitSet::default();
        let mut b = BitSet::default();
        for id in [1, 64, 5_000] {
            a.insert(id);
        }
        b.insert(64);
        assert_eq!(a.count_not_in(&b), 2);
        assert_eq!(b.count_not_in(&a), 0);
        b.insert(100_000);
        assert_eq!(b.count_not_in(&a), 1);
    }

    #[test]
    fn every_group_must_see_every_accepted_message() {
        let ledger = Ledger::new(2);
        ledger.record_accepted(0..10);
        assert_eq!(ledger.missing(), 20);
        assert_eq!(ledger.record_delivered(0, 0..10), 0);
        assert_eq!(ledger.record_delivered(1, 0..8), 0);
        assert_eq!(ledger.record_delivered(1, [7, 12]), 1);
        assert_eq!(ledger.missing(), 2);
        let s = ledger.summary();
        assert_eq!(s.accepted, 10);
        assert_eq!(s.lost, 2);
        assert_eq!(s.lost_per_group, vec![0, 2]);
        assert_eq!(s.duplicates, 1);
        assert_eq!(s.unexpected, 1);
    }

    #[test]
    fn delivery_before_acceptance_is_not_lost() {
        let ledger = Ledger::new(0);
        ledger.record_delivered(0, [5]);
        ledger.record_accepted([5]);
        let s = ledger.summary();
        assert_eq!((s.lost, s.unexpected, s.duplicates), (0, 0, 0));
    }

    #[test]
    fn unknown_group_is_ignored() {
        let ledger = Ledger::new(1);
        assert_eq!(ledger.record_delivered(3, [1]), 0);
    }
}
