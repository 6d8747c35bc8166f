//! What the searches by time already covered, per id key (review s34 d H1 (c)).
//!
//! A lookup past the filters' hour searches bucket files newest first and stops at the
//! cycle's budget (`BY_TIME_SEARCHES_PER_CYCLE`). Without memory, a retry started again
//! from the newest bucket, so a batch needing more than one cycle's searches was refused at
//! every try. This keeps, per key, the one range of buckets already searched by time
//! without a match; the next lookup of that key skips it, so a batch needing N searches
//! goes through after about ceil(N / budget) tries.
//!
//! Why a negative there stays true: a range is recorded only up to the filters' edge at the
//! lookup (`now − 1 h`), and every id spilled later is given a time at or after its own
//! entry, which is after that lookup, so it lands in a newer bucket; merges keep a bucket's
//! content; a bucket that expires needs no search. An id already in the hot table at the
//! lookup was answered there, not searched. A snapshot install, which replaces the table
//! with one that may hold older rows still to spill, clears everything (`clear`).

use std::collections::{HashMap, VecDeque};

/// Keys remembered per group; the oldest recorded goes first (FIFO). At this size the
/// map and its order hold ~300 KiB at most, counted in the `dedup` pool by capacity.
pub const SEARCHED_KEYS: usize = 4096;

/// Bucket ranges `[oldest, newest]` searched by time without a match, by id key.
#[derive(Default)]
pub struct Searched {
    ranges: HashMap<u64, (u64, u64)>,
    /// Keys in the order they were first recorded: exactly the keys of `ranges`.
    order: VecDeque<u64>,
}

impl Searched {
    /// The range of buckets already searched for `key` without a match.
    pub fn get(&self, key: u64) -> Option<(u64, u64)> {
        self.ranges.get(&key).copied()
    }

    /// `oldest..=newest` were searched for `key` without a match. A range that touches or
    /// overlaps the one kept joins it; one that does not replaces it only when wider (the
    /// budget ran out before the search reached the older range).
    pub fn record(&mut self, key: u64, oldest: u64, newest: u64) {
        if oldest > newest {
            return;
        }
        let range = match self.ranges.get(&key) {
            Some(&(a, z)) if oldest <= z.saturating_add(1) && a <= newest.saturating_add(1) => {
                (a.min(oldest), z.max(newest))
            }
            Some(&(a, z)) if z - a >= newest - oldest => (a, z),
            _ => (oldest, newest),
        };
        if self.ranges.insert(key, range).is_none() {
            self.order.push_back(key);
            while self.order.len() > SEARCHED_KEYS {
                if let Some(old) = self.order.pop_front() {
                    self.ranges.remove(&old);
                }
            }
        }
    }

    /// The key was found: nothing to resume.
    pub fn forget(&mut self, key: u64) {
        if self.ranges.remove(&key).is_some() {
            self.order.retain(|k| *k != key);
        }
    }

    pub fn clear(&mut self) {
        self.ranges = HashMap::new();
        self.order = VecDeque::new();
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Bytes held, by capacity: a slot (key, range) and its control byte per map entry, a
    /// key per place in the order.
    pub fn bytes(&self) -> usize {
        let slot = std::mem::size_of::<(u64, (u64, u64))>() + 1;
        self.ranges
            .capacity()
            .saturating_mul(slot)
            .saturating_add(self.order.capacity().saturating_mul(8))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touching_ranges_join_and_a_narrower_stray_one_does_not_replace() {
        let mut s = Searched::default();
        s.record(1, 100, 200);
        s.record(1, 201, 210);
        assert_eq!(s.get(1), Some((100, 210)));
        s.record(1, 40, 99);
        assert_eq!(s.get(1), Some((40, 210)));
        s.record(1, 300, 310);
        assert_eq!(s.get(1), Some((40, 210)), "narrower and apart: kept");
        s.record(1, 1000, 2000);
        assert_eq!(s.get(1), Some((1000, 2000)), "wider and apart: replaces");
        s.record(1, 5, 4);
        assert_eq!(
            s.get(1),
            Some((1000, 2000)),
            "an empty range changes nothing"
        );
        s.forget(1);
        assert_eq!(s.get(1), None);
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn the_map_holds_at_most_its_keys_oldest_out_first() {
        let mut s = Searched::default();
        for k in 0..(SEARCHED_KEYS as u64 + 10) {
            s.record(k, 1, 2);
        }
        assert_eq!(s.len(), SEARCHED_KEYS);
        assert_eq!(s.get(0), None);
        assert_eq!(s.get(9), None);
        assert_eq!(s.get(10), Some((1, 2)));
        // A key recorded again keeps its place; a forgotten one leaves the order too.
        s.record(10, 3, 3);
        s.forget(11);
        s.record(u64::MAX, 1, 1);
        assert_eq!(s.len(), SEARCHED_KEYS);
        assert_eq!(s.get(10), Some((1, 3)));
        assert!(s.bytes() >= SEARCHED_KEYS * 33);
        assert!(s.bytes() < 400 << 10, "{}", s.bytes());
    }
}
