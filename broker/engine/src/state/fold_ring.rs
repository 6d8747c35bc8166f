//! The overlaid keys of a copy-on-write table (the partition table's chunks, a group's cursor
//! shards) and where the bounded fold goes on from.
//!
//! Why one type (session 32): the partition table and the cursor map each held the same set,
//! the same resume key and the same fold loop over different key types; a fix to one (review
//! s31 ckpt M1, the round robin) had to be made to both.

use std::collections::BTreeSet;

/// A key the fold can step past (the one after the last looked at, wrapping).
pub(super) trait RingKey: Ord + Copy + Default {
    fn after(self) -> Self;
}

impl RingKey for u64 {
    fn after(self) -> u64 {
        self.wrapping_add(1)
    }
}

impl RingKey for usize {
    fn after(self) -> usize {
        self.wrapping_add(1)
    }
}

/// The keys whose overlay may still need a fold, at most one each.
#[derive(Default)]
pub(super) struct FoldRing<K> {
    keys: BTreeSet<K>,
    /// The key the next fold starts from.
    next: K,
}

/// A key in the set: 8 B and a B-tree node's share (11 keys to a node of about 200 B).
pub(super) const KEY_BYTES: usize = 24;

impl<K: RingKey> FoldRing<K> {
    pub(super) fn insert(&mut self, key: K) {
        self.keys.insert(key);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// What the set holds, by reckoning (`KEY_BYTES` a key).
    pub(super) fn bytes(&self) -> usize {
        self.keys.len().saturating_mul(KEY_BYTES)
    }

    /// Calls `fold` on up to `max` keys, from where the last call stopped and wrapping, so
    /// keys past the first `max` are reached too; a key `fold` answers true for leaves the
    /// set. Returns the keys looked at.
    pub(super) fn fold(&mut self, max: usize, mut fold: impl FnMut(K) -> bool) -> usize {
        let from = self.next;
        let keys: Vec<K> = self
            .keys
            .range(from..)
            .chain(self.keys.range(..from))
            .take(max)
            .copied()
            .collect();
        for &key in &keys {
            if fold(key) {
                self.keys.remove(&key);
            }
        }
        if let Some(last) = keys.last() {
            self.next = last.after();
        }
        keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_goes_on_where_the_last_stopped_and_wraps() {
        let mut r = FoldRing::<u64>::default();
        for k in [3, 7, 9, 20] {
            r.insert(k);
        }
        let mut seen = Vec::new();
        assert_eq!(
            r.fold(3, |k| {
                seen.push(k);
                false
            }),
            3
        );
        assert_eq!(
            r.fold(3, |k| {
                seen.push(k);
                k == 20
            }),
            3
        );
        assert_eq!(seen, [3, 7, 9, 20, 3, 7]);
        assert_eq!(r.bytes(), 3 * KEY_BYTES, "20 folded, the rest stay");
        assert_eq!(r.fold(10, |_| true), 3);
        assert!(r.is_empty());
        assert_eq!(r.fold(10, |_| true), 0);
    }

    #[test]
    fn the_highest_key_wraps_to_the_lowest() {
        let mut r = FoldRing::<u64>::default();
        r.insert(u64::MAX);
        r.insert(0);
        let mut seen = Vec::new();
        r.fold(1, |k| {
            seen.push(k);
            false
        });
        r.fold(1, |k| {
            seen.push(k);
            false
        });
        r.fold(1, |k| {
            seen.push(k);
            false
        });
        assert_eq!(seen, [0, u64::MAX, 0]);
    }
}
