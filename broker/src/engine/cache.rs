//! Recently committed entries kept in memory, so pops of fresh messages never touch the disk.

use bytes::Bytes;
use std::collections::{HashMap, VecDeque};

pub struct EntryCache {
    max_bytes: usize,
    bytes: usize,
    order: VecDeque<u64>,
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

    pub fn insert(&mut self, index: u64, entry: Bytes) {
        if self.map.contains_key(&index) {
            return;
        }
        self.bytes += entry.len();
        self.map.insert(index, entry);
        self.order.push_back(index);
        while self.bytes > self.max_bytes && self.order.len() > 1 {
            if let Some(old) = self.order.pop_front() {
                if let Some(e) = self.map.remove(&old) {
                    self.bytes -= e.len();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_oldest_past_the_budget() {
        let mut c = EntryCache::new(10);
        c.insert(1, Bytes::from(vec![0; 6]));
        c.insert(2, Bytes::from(vec![0; 6]));
        assert!(c.get(1).is_none());
        assert!(c.get(2).is_some());
    }
}
