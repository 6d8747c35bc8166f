//! Partitions by id, in fixed-size chunks of a dense array.
//!
//! Why not a `HashMap<u64, Partition>`: partition ids are handed out densely (`next_partition_id`),
//! and at a million partitions the hash table held twice as many buckets as rows (~220 bytes
//! per partition for a 96-byte row). Chunks grow the array without doubling it, and a chunk
//! whose partitions were all deleted is freed.

use super::model::Partition;

const CHUNK: usize = 4096;

#[derive(Default)]
pub struct PartitionTable {
    chunks: Vec<Chunk>,
    len: usize,
}

#[derive(Default)]
struct Chunk {
    slots: Box<[Option<Partition>]>,
    used: usize,
}

fn split(pid: u64) -> Option<(usize, usize)> {
    let i = usize::try_from(pid).ok()?;
    Some((i / CHUNK, i % CHUNK))
}

impl PartitionTable {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, pid: &u64) -> Option<&Partition> {
        let (c, i) = split(*pid)?;
        self.chunks.get(c)?.slots.get(i)?.as_ref()
    }

    pub fn get_mut(&mut self, pid: &u64) -> Option<&mut Partition> {
        let (c, i) = split(*pid)?;
        self.chunks.get_mut(c)?.slots.get_mut(i)?.as_mut()
    }

    pub fn contains_key(&self, pid: &u64) -> bool {
        self.get(pid).is_some()
    }

    /// Stores `p` under `pid`, replacing (and returning) what was there. Ids come from the
    /// replicated `next_partition_id`, so they are dense; an id past `usize` is not stored.
    pub fn insert(&mut self, pid: u64, p: Partition) -> Option<Partition> {
        let (c, i) = split(pid)?;
        if self.chunks.len() <= c {
            self.chunks.resize_with(c + 1, Chunk::default);
        }
        let chunk = &mut self.chunks[c];
        if chunk.slots.is_empty() {
            chunk.slots = std::iter::repeat_with(|| None).take(CHUNK).collect();
        }
        let old = chunk.slots[i].replace(p);
        if old.is_none() {
            chunk.used += 1;
            self.len += 1;
        }
        old
    }

    pub fn remove(&mut self, pid: &u64) -> Option<Partition> {
        let (c, i) = split(*pid)?;
        let chunk = self.chunks.get_mut(c)?;
        let old = chunk.slots.get_mut(i)?.take()?;
        chunk.used -= 1;
        self.len -= 1;
        if chunk.used == 0 {
            chunk.slots = Box::default();
        }
        Some(old)
    }

    pub fn values(&self) -> impl Iterator<Item = &Partition> {
        self.chunks.iter().flat_map(|c| c.slots.iter().flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::model::test_partition;

    fn part(id: u64) -> Partition {
        test_partition(id, &format!("p{id}"))
    }

    #[test]
    fn insert_get_remove_and_free_empty_chunks() {
        let mut t = PartitionTable::default();
        assert!(t.get(&1).is_none());
        for id in [1, 2, 5000, 9000] {
            assert!(t.insert(id, part(id)).is_none());
        }
        assert_eq!(t.len(), 4);
        assert_eq!(t.get(&5000).map(|p| p.name.as_str()), Some("p5000"));
        assert!(t.insert(2, part(2)).is_some(), "replacing keeps the count");
        assert_eq!(t.len(), 4);
        assert!(t.remove(&5000).is_some());
        assert!(t.remove(&5000).is_none());
        assert!(
            t.chunks[1].slots.is_empty(),
            "a chunk with no partitions is freed"
        );
        assert!(!t.contains_key(&5000));
        t.get_mut(&9000).unwrap().next_offset = 7;
        let mut ids: Vec<u64> = t.values().map(|p| p.id).collect();
        ids.sort_unstable();
        assert_eq!(ids, vec![1, 2, 9000]);
        assert!(t.get(&u64::MAX).is_none());
    }
}
