//! Partition name → id within one queue, keyed by the xxh3-64 of the name.
//!
//! Why not `HashMap<String, u64>`: the name is already stored once, in the `Partition`; a
//! second copy as the key cost ~50 bytes per partition at a million partitions. A hash shared
//! by two names of one queue sends the later name to a small map keyed by the name itself, so
//! lookups stay exact.
//!
//! Why 32 bits of hash and a 32-bit id (session 29, issue 12): a row is 8 B, not 16, so a
//! bucket is 9 B with its control byte; at a million names (2^21 buckets, hashbrown's 7/8
//! load) that is 18.9 MB instead of 35.7 MB, 17 B less per partition. Ids are below
//! `MAX_NEXT_PARTITION_ID` (2^32), so they fit. Two names sharing 32 bits of hash are about
//! n²/2^33 pairs (about 120 at a million names), each an overflow row of its name's length
//! plus ~40 B; names crafted to collide cost a row each, as a name-keyed map would.
//!
//! Session 34: the rows sit in an open-addressed table grown by half (`hash_slots.rs`),
//! 12.1 B a name at a million names instead of hashbrown's 18.9 B.

use std::collections::HashMap;

use super::hash_slots::{HashSlots, MAX_SLOT_ID};
use super::partition_table::PartitionTable;

#[derive(Default)]
pub struct NameIndex {
    by_hash: HashSlots,
    overflow: HashMap<String, u64>,
}

/// The low 32 bits of the name's xxh3-64 (the map hashes the key again to place it).
fn hash(name: &str) -> u32 {
    xxhash_rust::xxh3::xxh3_64(name.as_bytes()) as u32
}

impl NameIndex {
    /// The id of partition `name`; `parts` holds the names the hashes stand for.
    pub fn get(&self, name: &str, parts: &PartitionTable) -> Option<u64> {
        if let Some(pid) = self.by_hash.get(hash(name)).map(u64::from) {
            if parts.get(&pid).is_some_and(|p| &*p.name == name) {
                return Some(pid);
            }
        }
        self.overflow.get(name).copied()
    }

    /// Records `name` → `pid`; call after `pid` is in `parts`.
    pub fn insert(&mut self, name: &str, pid: u64, parts: &PartitionTable) {
        self.insert_hashed(hash(name), name, pid, parts);
    }

    fn insert_hashed(&mut self, h: u32, name: &str, pid: u64, parts: &PartitionTable) {
        // An id past 32 bits is never handed out (`MAX_NEXT_PARTITION_ID`), the last one below
        // (`u32::MAX`) has no slot; both kept exact in the overflow map rather than truncated.
        let Some(short) = u32::try_from(pid).ok().filter(|s| *s <= MAX_SLOT_ID) else {
            self.overflow.insert(name.to_string(), pid);
            return;
        };
        match self.by_hash.get(h).map(u64::from) {
            Some(other) if other != pid && parts.get(&other).is_some_and(|p| &*p.name != name) => {
                self.overflow.insert(name.to_string(), pid);
            }
            _ => {
                self.by_hash.set(h, short);
            }
        }
    }

    /// What the index holds, by capacity: the hash table's slots, and the overflow map's
    /// buckets (row and control byte) with their names.
    pub fn held_bytes(&self) -> usize {
        fn buckets(cap: usize) -> usize {
            if cap == 0 {
                return 0;
            }
            cap.saturating_mul(8)
                .checked_div(7)
                .unwrap_or(0)
                .max(4)
                .checked_next_power_of_two()
                .unwrap_or(usize::MAX)
        }
        let rows = self.by_hash.held_bytes();
        let over = buckets(self.overflow.capacity())
            .saturating_mul(std::mem::size_of::<(String, u64)>().saturating_add(1));
        let names: usize = self.overflow.keys().map(|n| n.capacity()).sum();
        rows.saturating_add(over).saturating_add(names)
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

    /// Pins a name's row (issue 12, session 29; 34): 8 B, so at 100 000 names (at most
    /// 150 000 slots) under 12 B a name; hashbrown's 131 072 buckets of 9 B were 11.8 B, the
    /// (u64, u64) rows before 22 B.
    #[test]
    fn a_row_is_8_bytes_and_a_name_costs_under_12_at_100_000() {
        let mut parts = PartitionTable::default();
        let mut idx = NameIndex::default();
        let n = 100_000u64;
        for pid in 0..n {
            let name = format!("p{pid}");
            parts.insert(pid, part(pid, &name));
            idx.insert(&name, pid, &parts);
        }
        for pid in (0..n).step_by(997) {
            assert_eq!(idx.get(&format!("p{pid}"), &parts), Some(pid));
        }
        assert_eq!(idx.len(), n as usize);
        let per = idx.held_bytes() as f64 / n as f64;
        assert!(per < 12.0, "{per:.1} B a name");
    }

    /// Pins the session 34 table (issue 12): a million names in about 12.1 B each, where
    /// hashbrown's 2^21 buckets of 9 B held 18.9 B.
    #[test]
    fn a_million_names_cost_under_13_bytes_each() {
        let mut parts = PartitionTable::default();
        let mut idx = NameIndex::default();
        let n = 1_000_000u64;
        for pid in 0..n {
            let name = format!("p{pid}");
            parts.insert(pid, part(pid, &name));
            idx.insert(&name, pid, &parts);
        }
        assert_eq!(idx.get("p999999", &parts), Some(999_999));
        assert_eq!(idx.get("p1000000", &parts), None);
        let per = idx.held_bytes() as f64 / n as f64;
        assert!(per < 13.0, "{per:.1} B a name");
    }

    /// An id past 32 bits (never handed out) stays exact rather than truncated, and so does
    /// the last id below them, which has no slot.
    #[test]
    fn an_id_past_32_bits_is_kept_whole() {
        let mut parts = PartitionTable::default();
        let mut idx = NameIndex::default();
        let big = (1u64 << 32) + 5;
        idx.insert("big", big, &parts);
        assert_eq!(idx.get("big", &parts), Some(big));
        assert_eq!(idx.get("p5", &parts), None);
        let last = u64::from(u32::MAX);
        parts.insert(last, part(last, "last"));
        idx.insert("last", last, &parts);
        assert_eq!(idx.get("last", &parts), Some(last));
        assert_eq!(idx.len(), 2);
    }
}
