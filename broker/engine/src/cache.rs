//! Recently committed entries kept in memory, so pops of fresh messages never touch the disk.
//!
//! The budget counts what the cache really holds: the allocation behind each entry (its
//! capacity, not its length: a `Bytes` made from a `Vec` keeps the whole allocation) plus the
//! bookkeeping of one entry. Counting lengths let 64 KiB build buffers of one-message cycles
//! pass as a few hundred bytes each (issue 15: 6.6 GB resident for a 256 MiB cache).

use bytes::Bytes;
use std::collections::{HashMap, VecDeque};

/// Bookkeeping of one cached entry: its map slot (key, `Bytes`, control byte, at the map's
/// 7/8 load), its slot in the order deque, and the allocator's header on the entry's buffer.
pub const PER_ENTRY_OVERHEAD: usize = 96;

pub struct EntryCache {
    max_bytes: usize,
    /// Bytes held: the capacity of every cached buffer plus [`PER_ENTRY_OVERHEAD`] each.
    bytes: usize,
    order: VecDeque<(u64, usize)>,
    map: HashMap<u64, Bytes>,
}

impl EntryCache {
    pub fn new(max_bytes: usize) -> Self {
        EntryCache {
            max_bytes,
            bytes: 0,
            order: VecDeque::new(),
            map: HashMap::new(),
        }
    }

    pub fn get(&self, index: u64) -> Option<Bytes> {
        self.map.get(&index).cloned()
    }

    /// Bytes the cache holds now (what the `entry_cache` memory pool reports).
    pub fn held_bytes(&self) -> usize {
        self.bytes
    }

    /// Caches an entry built in `entry`, counting its whole allocation; returns the shared
    /// bytes (no copy).
    pub fn insert_vec(&mut self, index: u64, entry: Vec<u8>) -> Bytes {
        let held = entry.capacity();
        let bytes = Bytes::from(entry);
        self.insert_held(index, bytes.clone(), held);
        bytes
    }

    /// Caches an entry whose allocation is `entry.len()` bytes (a `Bytes` from an exact-size
    /// buffer, as the log reads give).
    pub fn insert(&mut self, index: u64, entry: Bytes) {
        let held = entry.len();
        self.insert_held(index, entry, held);
    }

    fn insert_held(&mut self, index: u64, entry: Bytes, held: usize) {
        if self.map.contains_key(&index) {
            return;
        }
        let cost = held.saturating_add(PER_ENTRY_OVERHEAD);
        self.bytes = self.bytes.saturating_add(cost);
        self.map.insert(index, entry);
        self.order.push_back((index, cost));
        while self.bytes > self.max_bytes && self.order.len() > 1 {
            if let Some((old, cost)) = self.order.pop_front() {
                self.map.remove(&old);
                self.bytes = self.bytes.saturating_sub(cost);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_oldest_past_the_budget() {
        let mut c = EntryCache::new(10 + 2 * PER_ENTRY_OVERHEAD);
        c.insert(1, Bytes::from(vec![0; 6]));
        c.insert(2, Bytes::from(vec![0; 6]));
        assert!(c.get(1).is_none());
        assert!(c.get(2).is_some());
        assert_eq!(c.held_bytes(), 6 + PER_ENTRY_OVERHEAD);
    }

    #[test]
    fn an_entry_built_in_a_large_buffer_counts_what_it_holds() {
        let mut c = EntryCache::new(1 << 20);
        let mut v = Vec::with_capacity(64 * 1024);
        v.extend_from_slice(&[1u8; 300]);
        let b = c.insert_vec(1, v);
        assert_eq!(b.len(), 300);
        assert!(c.held_bytes() >= 64 * 1024, "held {}", c.held_bytes());
        // Sixteen such entries pass 1 MiB: the oldest go, whatever their length says.
        for i in 2..=17 {
            let mut v = Vec::with_capacity(64 * 1024);
            v.push(0u8);
            c.insert_vec(i, v);
        }
        assert!(c.held_bytes() <= 1 << 20);
        assert!(c.get(1).is_none() && c.get(17).is_some());
    }

    #[test]
    fn a_duplicate_index_is_not_counted_twice() {
        let mut c = EntryCache::new(1 << 20);
        c.insert(5, Bytes::from(vec![0; 100]));
        c.insert(5, Bytes::from(vec![0; 100]));
        assert_eq!(c.held_bytes(), 100 + PER_ENTRY_OVERHEAD);
    }

    #[test]
    fn one_entry_larger_than_the_budget_stays_alone() {
        let mut c = EntryCache::new(1000);
        c.insert(1, Bytes::from(vec![0; 10]));
        c.insert(2, Bytes::from(vec![0; 5000]));
        assert!(c.get(1).is_none() && c.get(2).is_some());
        assert_eq!(c.held_bytes(), 5000 + PER_ENTRY_OVERHEAD);
    }
}
