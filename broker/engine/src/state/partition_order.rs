//! A queue's partition ids in creation order, append-only, in shared chunks of 512 ids.
//!
//! Why `u32` (session 32, issue 12): ids are below `MAX_NEXT_PARTITION_ID` (2^32), so half
//! of the 8 B an id held was zeros; 4 B a partition less at a million partitions.
//!
//! Why chunks: a checkpoint writes each queue's partitions in this order, off the state lock;
//! copying the list under the lock was 8 MB at a million partitions. Taking it is now one
//! handle per chunk; the engine's next create copies at most the last chunk (4 KB) while a
//! checkpoint still holds it, timed by [`super::cow_clock`]. Ids are only appended: a
//! partition goes only with its queue.

use std::sync::Arc;

use super::cow_clock;

/// 512 ids (2 KB): the most a create copies while a checkpoint holds the last chunk (4096 u64
/// made that 32 KB), against 48 B of handle per chunk (0.1 B an id).
const FULL_CHUNK: usize = 512;
#[cfg(not(test))]
const CHUNK: usize = FULL_CHUNK;
/// Small under test, so the property tests' few partitions cross chunks (review s26 ckpt M5).
#[cfg(test)]
const CHUNK: usize = 4;

// A chunk's `Vec` grows by doubling from a power of two (`copy_capacity`, or `vec![pid]`
// grown to 4, 8, ...), so it fills a power-of-two chunk exactly and never passes it.
const _: () = assert!(CHUNK.is_power_of_two() && FULL_CHUNK.is_power_of_two());

/// The room a copy of a last chunk of `len` ids gets: what a push would have grown it to,
/// rounded to a power of two so that later pushes double it to exactly `chunk`, never past
/// (2 × 3 = 6 would double to 768 past 512: review s27 ckpt L2).
fn copy_capacity(len: usize, chunk: usize) -> usize {
    len.saturating_mul(2).max(1).next_power_of_two().min(chunk)
}

/// Cloning shares the chunks (a write copies the one it touches).
#[derive(Default, Clone)]
pub struct PartitionOrder {
    chunks: Vec<Arc<Vec<u32>>>,
    len: usize,
}

// Every id an entry or a checkpoint can carry fits: `push` takes the `u32` callers checked.
const _: () = assert!(super::MAX_NEXT_PARTITION_ID <= 1 << 32);

/// An id as the rest of the state keys it.
fn wide(pid: &u32) -> u64 {
    u64::from(*pid)
}

impl PartitionOrder {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `pid`; callers hold ids below `MAX_NEXT_PARTITION_ID` as `u32`.
    pub fn push(&mut self, pid: u32) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => {
                if Arc::get_mut(last).is_none() {
                    // The copy gets the room a push would have grown to, never past a chunk
                    // (`make_mut` would clone at its length, and the push double that: review
                    // s26 ckpt L1).
                    let started = cow_clock::start();
                    let mut copy = Vec::with_capacity(copy_capacity(last.len(), CHUNK));
                    copy.extend_from_slice(last);
                    copy.push(pid);
                    *last = Arc::new(copy);
                    cow_clock::record(cow_clock::Block::Ids, started);
                } else {
                    Arc::make_mut(last).push(pid);
                }
            }
            // The first chunk grows as a `Vec` does, so a queue of a few partitions holds a
            // few ids, not a whole chunk.
            _ => self.chunks.push(Arc::new(vec![pid])),
        }
        self.len += 1;
    }

    pub fn get(&self, i: usize) -> Option<u64> {
        self.chunks.get(i / CHUNK)?.get(i % CHUNK).map(wide)
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = u64> + Clone + '_ {
        self.into_iter()
    }

    /// The first index whose id fails `pred`, which must hold for a prefix (as the slice's).
    pub fn partition_point(&self, mut pred: impl FnMut(&u64) -> bool) -> usize {
        let full = self
            .chunks
            .partition_point(|c| c.last().is_some_and(|p| pred(&wide(p))));
        match self.chunks.get(full) {
            Some(c) => full * CHUNK + c.partition_point(|p| pred(&wide(p))),
            None => self.len,
        }
    }

    /// What the last chunk holds, by capacity, or a push's copy of it while a checkpoint
    /// shares it (`copy_capacity`), whichever is more.
    pub fn last_chunk_bytes(&self) -> usize {
        self.chunks.last().map_or(0, |c| {
            let copy = copy_capacity(c.len(), CHUNK);
            c.capacity().max(copy).saturating_mul(ID).saturating_add(40)
        })
    }

    /// What the ids hold in memory, by capacity.
    pub fn held_bytes(&self) -> usize {
        let ids: usize = self.chunks.iter().map(|c| c.capacity()).sum();
        ids.saturating_mul(ID)
            .saturating_add(self.chunks.capacity().saturating_mul(8))
            .saturating_add(self.chunks.len().saturating_mul(40))
    }
}

/// An id's bytes in a chunk.
const ID: usize = std::mem::size_of::<u32>();

/// As the `Vec` it replaced prints: the ids in order.
impl std::fmt::Debug for PartitionOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

type Ids<'a> = std::iter::Map<std::slice::Iter<'a, u32>, fn(&u32) -> u64>;

/// The ids in order, as the `u64` the rest of the state keys them by.
impl<'a> IntoIterator for &'a PartitionOrder {
    type Item = u64;
    type IntoIter = std::iter::FlatMap<
        std::slice::Iter<'a, Arc<Vec<u32>>>,
        Ids<'a>,
        fn(&'a Arc<Vec<u32>>) -> Ids<'a>,
    >;

    fn into_iter(self) -> Self::IntoIter {
        fn ids(c: &Arc<Vec<u32>>) -> Ids<'_> {
            c.iter().map(wide as fn(&u32) -> u64)
        }
        self.chunks
            .iter()
            .flat_map(ids as fn(&'a Arc<Vec<u32>>) -> Ids<'a>)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_index_search_and_iterate_across_chunks() {
        let mut o = PartitionOrder::default();
        let n = CHUNK * 2 + 5;
        for i in 0..n {
            o.push(i as u32 * 2);
        }
        assert_eq!(o.len(), n);
        assert_eq!(o.get(CHUNK), Some(CHUNK as u64 * 2));
        assert_eq!(o.get(n), None);
        assert_eq!(o.iter().count(), n);
        assert_eq!((&o).into_iter().nth(CHUNK + 1), Some(CHUNK as u64 * 2 + 2));
        for at in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, n - 1, n] {
            let bound = at as u64 * 2;
            assert_eq!(o.partition_point(|p| *p < bound), at, "at {at}");
        }
        assert!(o.held_bytes() >= n * ID);
    }

    /// Pins an id's 4 B (issue 12, session 32): two full chunks hold 4 B an id, the list of
    /// handles (grown to 4) and their `Arc`s; at 8 B an id this was 2 × CHUNK × 4 B more. The
    /// largest id an entry may carry comes back whole.
    #[test]
    fn an_id_holds_4_bytes_and_the_largest_comes_back_whole() {
        let mut o = PartitionOrder::default();
        let top = u32::try_from(crate::state::MAX_NEXT_PARTITION_ID - 1).unwrap();
        for i in 0..2 * CHUNK as u32 {
            o.push(top - i);
        }
        assert_eq!(std::mem::size_of_val(o.chunks[0].as_slice()), CHUNK * 4);
        assert_eq!(o.held_bytes(), 2 * CHUNK * 4 + 4 * 8 + 2 * 40);
        assert_eq!(o.get(0), Some(crate::state::MAX_NEXT_PARTITION_ID - 1));
        assert_eq!(o.iter().last(), Some(u64::from(top) - 2 * CHUNK as u64 + 1));
    }

    #[test]
    fn a_clone_keeps_its_moment_and_a_push_copies_only_the_last_chunk() {
        let mut o = PartitionOrder::default();
        for i in 0..(CHUNK as u32 + 1) {
            o.push(i);
        }
        let snap = o.clone();
        let _ = cow_clock::take();
        o.push(100_000);
        o.push(100_001);
        assert_eq!(cow_clock::take().copies, 1, "one copy, of the last chunk");
        assert!(Arc::ptr_eq(&o.chunks[0], &snap.chunks[0]));
        assert_eq!(snap.len(), CHUNK + 1);
        assert_eq!(snap.iter().last(), Some(CHUNK as u64));
        assert_eq!(o.iter().last(), Some(100_001));
    }

    #[test]
    fn a_copied_last_chunk_never_outgrows_a_chunk() {
        for held in 1..CHUNK {
            let mut o = PartitionOrder::default();
            for i in 0..(CHUNK + held) as u32 {
                o.push(i);
            }
            let snap = o.clone();
            // The copy, then every push until the chunk is full.
            while o.len() < 2 * CHUNK {
                o.push(99);
                let last = o.chunks.last().map_or(0, |c| c.capacity());
                assert!(
                    last <= CHUNK,
                    "capacity {last} past a chunk of {CHUNK} (copied at {held})"
                );
                assert!(o.last_chunk_bytes() >= last * ID);
            }
            assert_eq!(o.chunks.len(), 2, "the copied chunk was filled");
            assert_eq!(snap.len(), CHUNK + held);
        }
    }

    /// At the real chunk size, a copy made at any length and filled by `Vec`'s own growth
    /// stays within the chunk (with twice the length as room, 3 ids grew to 768).
    #[test]
    fn a_copy_at_any_length_stays_within_a_full_chunk() {
        for held in 1..FULL_CHUNK {
            let mut copy: Vec<u32> = Vec::with_capacity(copy_capacity(held, FULL_CHUNK));
            copy.extend(0..held as u32);
            while copy.len() < FULL_CHUNK {
                copy.push(0);
            }
            assert!(copy.capacity() <= FULL_CHUNK, "copied at {held}");
        }
    }
}
