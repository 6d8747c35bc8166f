//! A queue's partition ids in creation order, append-only, in shared chunks of 512 ids.
//!
//! Why `u32` (session 32, issue 12): ids are below `MAX_NEXT_PARTITION_ID` (2^32), so half
//! of the 8 B an id held was zeros; 4 B a partition less at a million partitions.
//!
//! Why chunks: a checkpoint writes each queue's partitions in this order, off the state lock;
//! copying the list under the lock was 8 MB at a million partitions. Taking it is now one
//! handle per chunk; the engine's next create copies at most the last chunk (2 KB) while a
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
    #[cfg(test)]
    WIDENED.with(|w| w.set(w.get() + 1));
    u64::from(*pid)
}

// Counts the ids an iterator touched: a skip's cost, as a test can see it.
#[cfg(test)]
thread_local! {
    static WIDENED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
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

    pub fn iter(&self) -> Ids<'_> {
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

/// The ids in order, as the `u64` the rest of the state keys them by.
///
/// Its own type, not `flat_map(.. map(wide))`: `Map` walks every id it skips (it cannot
/// know `wide` is pure), so `skip(n)` was n steps where the slices' was n / 512; `changed`
/// and `queues::one` skip to a client's resume point inside the engine cycle (review s32 p M1).
#[derive(Clone)]
pub struct Ids<'a> {
    front: std::slice::Iter<'a, u32>,
    chunks: std::slice::Iter<'a, Arc<Vec<u32>>>,
    back: std::slice::Iter<'a, u32>,
}

impl Iterator for Ids<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        loop {
            if let Some(pid) = self.front.next() {
                return Some(wide(pid));
            }
            match self.chunks.next() {
                Some(c) => self.front = c.iter(),
                None => return self.back.next().map(wide),
            }
        }
    }

    /// By whole chunks: one step a chunk passed, one `wide` for the id taken.
    fn nth(&mut self, mut n: usize) -> Option<u64> {
        loop {
            let here = self.front.len();
            if n < here {
                return self.front.nth(n).map(wide);
            }
            n -= here;
            self.front = [].iter();
            match self.chunks.next() {
                Some(c) => self.front = c.iter(),
                None => return self.back.nth(n).map(wide),
            }
        }
    }

    /// Exact, in constant time: every chunk but the order's last is full (`push`).
    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.chunks.as_slice();
        let whole = left.split_last().map_or(0, |(last, full)| {
            full.len().saturating_mul(CHUNK).saturating_add(last.len())
        });
        let all = whole
            .saturating_add(self.front.len())
            .saturating_add(self.back.len());
        (all, Some(all))
    }
}

impl DoubleEndedIterator for Ids<'_> {
    fn next_back(&mut self) -> Option<u64> {
        loop {
            if let Some(pid) = self.back.next_back() {
                return Some(wide(pid));
            }
            match self.chunks.next_back() {
                Some(c) => self.back = c.iter(),
                None => return self.front.next_back().map(wide),
            }
        }
    }
}

impl<'a> IntoIterator for &'a PartitionOrder {
    type Item = u64;
    type IntoIter = Ids<'a>;

    fn into_iter(self) -> Ids<'a> {
        Ids {
            front: [].iter(),
            chunks: self.chunks.iter(),
            back: [].iter(),
        }
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
        assert_eq!(
            o.iter().next_back(),
            Some(u64::from(top) - 2 * CHUNK as u64 + 1)
        );
    }

    /// Every mix of ends and skips yields what a `Vec`'s iterator does, with an exact
    /// length, across chunk borders and at every length up to three chunks and a bit.
    #[test]
    fn ids_skip_and_walk_from_both_ends_as_a_vec_does() {
        for n in 0..=3 * CHUNK + 1 {
            let mut o = PartitionOrder::default();
            for i in 0..n as u32 {
                o.push(i * 3 + 1);
            }
            let model: Vec<u64> = (0..n as u64).map(|i| i * 3 + 1).collect();
            for back in 0..=n + 1 {
                for skip in 0..=n + 1 {
                    let (mut a, mut b) = (o.iter(), model.iter().copied());
                    for _ in 0..back {
                        assert_eq!(a.next_back(), b.next_back(), "n {n} back {back}");
                    }
                    assert_eq!(a.size_hint(), b.size_hint(), "n {n} back {back}");
                    assert_eq!(a.nth(skip), b.nth(skip), "n {n} back {back} skip {skip}");
                    assert_eq!(a.size_hint(), b.size_hint(), "n {n} {back} {skip}");
                    let mut turn = false;
                    loop {
                        turn = !turn;
                        let (x, y) = if turn {
                            (a.next(), b.next())
                        } else {
                            (a.next_back(), b.next_back())
                        };
                        assert_eq!(x, y, "n {n} back {back} skip {skip}");
                        if x.is_none() {
                            break;
                        }
                    }
                }
                let from: Vec<u64> = o.iter().skip(back).collect();
                assert_eq!(from, model.get(back..).unwrap_or(&[]), "n {n} from {back}");
            }
        }
    }

    /// A skip to a client's resume point (`changed`, `queues::one`) steps by chunks and
    /// widens only the id it stops at; walking the ids one by one counted every id skipped.
    #[test]
    fn skipping_to_a_resume_point_widens_only_the_id_it_takes() {
        let mut o = PartitionOrder::default();
        let n = 100 * CHUNK;
        for i in 0..n as u32 {
            o.push(i);
        }
        let widened = |f: &dyn Fn() -> Option<u64>| {
            WIDENED.with(|w| w.set(0));
            let got = f();
            (got, WIDENED.with(|w| w.get()))
        };
        let at = n as u64 - 2;
        assert_eq!(widened(&|| o.iter().nth(n - 2)), (Some(at), 1));
        // `Skip`, as the callers hold it, reaches `nth`.
        #[allow(clippy::iter_skip_next)]
        let skipped = widened(&|| o.iter().skip(n - 2).next());
        assert_eq!(skipped, (Some(at), 1));
        let skip_into_the_back = || {
            let mut ids = o.iter();
            ids.next_back();
            ids.nth(n - 2)
        };
        assert_eq!(widened(&skip_into_the_back), (Some(at), 2));
        assert_eq!(widened(&|| o.iter().nth(n)), (None, 0));
        assert_eq!(widened(&|| o.iter().nth(usize::MAX)), (None, 0));
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
        assert_eq!(snap.iter().next_back(), Some(CHUNK as u64));
        assert_eq!(o.iter().next_back(), Some(100_001));
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
