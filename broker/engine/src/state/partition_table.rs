//! Partitions by id, in fixed-size chunks of a dense array.
//!
//! Why not a `HashMap<u64, Partition>`: partition ids are handed out densely (`next_partition_id`),
//! and at a million partitions the hash table held twice as many buckets as rows (~220 bytes
//! per partition for a 96-byte row). Chunks grow the array without doubling it, and a chunk
//! whose partitions were all deleted is freed.
//!
//! Chunks are shared (`Arc`) and copied on write: a checkpoint takes the table by cloning one
//! handle per chunk under the state lock and encodes the partitions after releasing it, and
//! the engine copies a chunk only at its first write while that checkpoint still holds it.

use std::sync::Arc;

use super::cow_clock;
use super::model::Partition;

const CHUNK: usize = 4096;

#[derive(Default)]
pub struct PartitionTable {
    chunks: Vec<Arc<Chunk>>,
    len: usize,
}

#[derive(Default, Clone)]
struct Chunk {
    slots: Box<[Option<Partition>]>,
    used: usize,
}

/// The partitions at one moment, detached from the table (shared chunks).
pub struct PartitionsSnapshot {
    chunks: Vec<Arc<Chunk>>,
}

impl PartitionsSnapshot {
    pub fn get(&self, pid: &u64) -> Option<&Partition> {
        let (c, i) = split(*pid)?;
        self.chunks.get(c)?.slots.get(i)?.as_ref()
    }

    pub fn values(&self) -> impl Iterator<Item = &Partition> {
        self.chunks.iter().flat_map(|c| c.slots.iter().flatten())
    }
}

/// The chunk, copied first (and the copy timed: `cow_clock`) if a checkpoint shares it.
fn writable(chunk: &mut Arc<Chunk>) -> &mut Chunk {
    if Arc::get_mut(chunk).is_none() {
        let started = cow_clock::start();
        let copy = Arc::make_mut(chunk);
        cow_clock::record(started);
        return copy;
    }
    Arc::make_mut(chunk)
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

    /// Copies the partition's chunk first if a checkpoint still holds it, so only an id that
    /// exists pays that copy.
    pub fn get_mut(&mut self, pid: &u64) -> Option<&mut Partition> {
        self.get(pid)?;
        let (c, i) = split(*pid)?;
        writable(self.chunks.get_mut(c)?).slots.get_mut(i)?.as_mut()
    }

    pub fn contains_key(&self, pid: &u64) -> bool {
        self.get(pid).is_some()
    }

    /// Stores `p` under `pid`, replacing (and returning) what was there. Ids come from the
    /// replicated `next_partition_id`, so they are dense; an id past `usize` is not stored.
    pub fn insert(&mut self, pid: u64, p: Partition) -> Option<Partition> {
        let (c, i) = split(pid)?;
        if self.chunks.len() <= c {
            self.chunks.resize_with(c + 1, Arc::default);
        }
        let chunk = writable(&mut self.chunks[c]);
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
        self.get(pid)?;
        let (c, i) = split(*pid)?;
        let chunk = writable(self.chunks.get_mut(c)?);
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

    /// The table as it is now, in O(chunks): later writes copy the chunks they touch.
    pub fn snapshot(&self) -> PartitionsSnapshot {
        PartitionsSnapshot {
            chunks: self.chunks.clone(),
        }
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

    #[test]
    fn a_snapshot_keeps_its_moment_and_writes_copy_only_the_chunk_they_touch() {
        let mut t = PartitionTable::default();
        for id in [1, 2, 5000] {
            t.insert(id, part(id));
        }
        let snap = t.snapshot();
        assert!(Arc::ptr_eq(&t.chunks[0], &snap.chunks[0]));
        t.get_mut(&1).unwrap().next_offset = 9;
        t.insert(3, part(3));
        t.remove(&2);
        assert!(t.get_mut(&4).is_none() && t.remove(&4).is_none());
        assert!(
            !Arc::ptr_eq(&t.chunks[0], &snap.chunks[0]),
            "the written chunk was copied"
        );
        assert!(
            Arc::ptr_eq(&t.chunks[1], &snap.chunks[1]),
            "the untouched chunk is still shared"
        );
        assert_eq!(snap.get(&1).map(|p| p.next_offset), Some(0));
        assert!(snap.get(&2).is_some() && snap.get(&3).is_none());
        let ids: Vec<u64> = snap.values().map(|p| p.id).collect();
        assert_eq!(ids, vec![1, 2, 5000]);
        assert_eq!(t.get(&1).map(|p| p.next_offset), Some(9));
        drop(snap);
        let before = Arc::as_ptr(&t.chunks[1]);
        t.get_mut(&5000).unwrap().next_offset = 1;
        assert_eq!(
            Arc::as_ptr(&t.chunks[1]),
            before,
            "no copy once no checkpoint holds the chunk"
        );
    }
}
