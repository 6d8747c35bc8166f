//! An open-addressed table of 32-bit name hash → 32-bit partition id, grown by half.
//!
//! Why not hashbrown's `HashMap<u32, u32>` (session 34, issue 12): hashbrown keeps at most
//! 7/8 of its buckets full and doubles, so a million names sat in 2^21 buckets of 9 B, 18.9 B
//! a name; between doublings a name costs 10.3-20.6 B. Here a slot is 8 B with no control
//! byte, the table is kept at most 4/5 full and grows by half, so a name costs 10-15 B. The
//! price: more growths, so the tables freed on the way up add to twice the final one (24 MB
//! at a million names, where doubling freed about 19 MB), the allocator's to purge; a growth
//! holds old and new at once, 20 MB at its worst below a million, where hashbrown held 28 MB.
//! Linear probing at 4/5 load looks at about 13 slots (two cache lines) to find a name
//! absent, 3 to find one present (the textbook figures, not measured). Slots are placed by the std's randomly keyed hasher over the stored hash, as
//! hashbrown placed them, so names crafted offline cannot pile onto one run of slots.
//! There is no removal: a queue's partitions leave only with the queue.

use std::hash::{BuildHasher, RandomState};

/// Grows past this load: `len * LOAD_DEN > slots * LOAD_NUM`.
const LOAD_NUM: usize = 4;
const LOAD_DEN: usize = 5;
const FIRST_SLOTS: usize = 8;

pub struct HashSlots {
    /// `hash << 32 | (id + 1)`; 0 is an empty slot.
    slots: Box<[u64]>,
    len: usize,
    keys: RandomState,
}

impl Default for HashSlots {
    fn default() -> Self {
        HashSlots {
            slots: Box::default(),
            len: 0,
            keys: RandomState::new(),
        }
    }
}

/// The largest id a slot holds (`id + 1` must fit 32 bits).
pub const MAX_SLOT_ID: u32 = u32::MAX - 1;

impl HashSlots {
    fn home(&self, h: u32, n: usize) -> usize {
        // Multiply-shift onto 0..n: any table size, no modulo.
        ((u128::from(self.keys.hash_one(h)) * n as u128) >> 64) as usize
    }

    /// The slot holding `h`, or the empty slot where it would go. Only called on a table
    /// with at least one empty slot (the load bound keeps a fifth empty).
    fn find(&self, h: u32) -> usize {
        let n = self.slots.len();
        let mut i = self.home(h, n);
        loop {
            let s = self.slots[i];
            if s == 0 || (s >> 32) as u32 == h {
                return i;
            }
            i += 1;
            if i == n {
                i = 0;
            }
        }
    }

    pub fn get(&self, h: u32) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        let s = self.slots[self.find(h)];
        (s != 0).then(|| (s as u32).wrapping_sub(1))
    }

    /// Sets `h` → `id`, replacing what `h` held. `id` must be at most [`MAX_SLOT_ID`].
    pub fn set(&mut self, h: u32, id: u32) {
        debug_assert!(id <= MAX_SLOT_ID);
        if (self.len + 1).saturating_mul(LOAD_DEN) > self.slots.len().saturating_mul(LOAD_NUM) {
            self.grow();
        }
        let i = self.find(h);
        if self.slots[i] == 0 {
            self.len += 1;
        }
        self.slots[i] = (u64::from(h) << 32) | u64::from(id.saturating_add(1));
    }

    fn grow(&mut self) {
        let n = self.slots.len();
        let bigger = n.saturating_add(n / 2).max(FIRST_SLOTS);
        let old = std::mem::replace(&mut self.slots, vec![0u64; bigger].into_boxed_slice());
        for s in old.iter().copied().filter(|s| *s != 0) {
            let i = self.find((s >> 32) as u32);
            self.slots[i] = s;
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes of the table (its slots).
    pub fn held_bytes(&self) -> usize {
        self.slots.len().saturating_mul(std::mem::size_of::<u64>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn agrees_with_a_hash_map_through_growth_and_replacement() {
        let mut t = HashSlots::default();
        let mut m = HashMap::new();
        assert_eq!(t.get(7), None);
        // A multiplicative walk over u32 hashes, ids up to the largest a slot holds.
        let mut h = 1u32;
        for k in 0..50_000u32 {
            h = h.wrapping_mul(2_654_435_761).wrapping_add(k);
            let id = if k % 1000 == 0 { MAX_SLOT_ID } else { k };
            t.set(h, id);
            m.insert(h, id);
        }
        // Replacing keeps the count.
        let (&some, _) = m.iter().next().expect("filled");
        t.set(some, 3);
        m.insert(some, 3);
        assert_eq!(t.len(), m.len());
        for (&k, &v) in &m {
            assert_eq!(t.get(k), Some(v), "hash {k}");
        }
        assert_eq!(t.get(0), m.get(&0).copied());
        assert_eq!(t.get(u32::MAX), m.get(&u32::MAX).copied());
    }

    /// Pins bytes per name (issue 12, session 34): for every count from 1 000 to 1 100 000
    /// the table stays under 15 B a name (hashbrown's reached 20.6), and at a million under
    /// 13 B (hashbrown's: 18.9 B).
    #[test]
    fn a_name_costs_at_most_15_bytes_and_under_13_at_a_million() {
        let mut t = HashSlots::default();
        let mut worst = 0f64;
        for k in 1..=1_100_000u32 {
            t.set(k.wrapping_mul(2_654_435_761), k);
            if k >= 1000 {
                worst = worst.max(t.held_bytes() as f64 / f64::from(k));
            }
            if k == 1_000_000 {
                let per = t.held_bytes() as f64 / 1e6;
                assert!(per < 13.0, "{per:.2} B a name at a million");
            }
        }
        assert!(worst <= 15.0, "{worst:.2} B a name at worst");
    }
}
