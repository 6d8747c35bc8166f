//! Partition name → id within one queue, keyed by the xxh3-64 of the name.
//!
//! Why not `HashMap<String, u64>`: the name is already stored once, in the `Partition`; a
//! second copy as the key cost ~50 bytes per partition at a million partitions. A hash shared
//! by two names of one queue (about 1 in 10^7 at a million names) sends the later name to a
//! small map keyed by the name itself, so lookups stay exact.

use std::collections::HashMap;

use super::partition_table::PartitionTable;

#[derive(Default)]
pub struct NameIndex {
    by_hash: HashMap<u64, u64>,
    overflow: HashMap<String, u64>,
}

fn hash(name: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name.as_bytes())
}

impl NameIndex {
    /// The id of partition `name`; `parts` holds the names the hashes stand for.
    pub fn get(&self, name: &str, parts: &PartitionTable) -> Option<u64> {
        if let Some(pid) = self.by_hash.get(&hash(name)) {
            if parts.get(pid).is_some_and(|p| &*p.name == name) {
                return Some(*pid);
            }
        }
        self.overflow.get(name).copied()
    }

    /// Records `name` → `pid`; call after `pid` is in `parts`.
    pub fn insert(&mut self, name: &str, pid: u64, parts: &PartitionTable) {
        self.insert_hashed(hash(name), name, pid, parts);
    }

    fn insert_hashed(&mut self, h: u64, name: &str, pid: u64, parts: &PartitionTable) {
        match self.by_hash.get(&h) {
            Some(other) if *other != pid && parts.get(other).is_some_and(|p| &*p.name != name) => {
                self.overflow.insert(name.to_string(), pid);
            }
            _ => {
                self.by_hash.insert(h, pid);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.by_hash.len() + self.overflow.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::model::test_partition as part;

    #[test]
    fn names_resolve_exactly_even_when_hashes_collide() {
        let mut parts = PartitionTable::default();
        let mut idx = NameIndex::default();
        parts.insert(1, part(1, "a"));
        idx.insert("a", 1, &parts);
        parts.insert(2, part(2, "b"));
        idx.insert("b", 2, &parts);
        assert_eq!(idx.get("a", &parts), Some(1));
        assert_eq!(idx.get("b", &parts), Some(2));
        assert_eq!(idx.get("c", &parts), None);
        // "c" forced onto the hash of "a": it lands in the overflow map, both stay exact.
        parts.insert(3, part(3, "c"));
        idx.insert_hashed(hash("a"), "c", 3, &parts);
        assert_eq!(idx.get("c", &parts), Some(3));
        assert_eq!(idx.get("a", &parts), Some(1));
        assert_eq!(idx.len(), 3);
    }
}
