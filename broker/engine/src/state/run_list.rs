//! A partition's runs, with the one run an idle partition mostly holds kept inside the row,
//! and a long list in fixed blocks.
//!
//! A `Vec<Run>` cost every partition holding a message a 32 B heap block beside its row (the
//! `Arc` of a 96 B row in mimalloc's 112 B bin + 32 B = 144 B); one run inline makes the row
//! 112 B, its `Arc` exactly the 128 B bin and no block: 128 B (issue 12). A partition with
//! no run or with two or more pays 16 B more than before (the row's bin).
//!
//! Why blocks past `BLOCK` runs (session 34): a partition written by batches that each hold
//! one or two of its messages (producers that spread a batch over many partitions, one lane
//! per entity) keeps a run per message or two. In one vector those runs cost up to twice
//! their bytes in room the doubling left (measured: ~18 B of state per message at 50 000
//! msg/s over 100 partitions, issue 12's bound being 16 B), each doubling copied the whole
//! vector under the state lock (megabytes after minutes), and each retention drop moved the
//! rest of it to the front. In blocks of `BLOCK` runs the room is at most one block, a push
//! copies nothing, and a drop frees whole blocks and moves a handful of block handles.

use std::collections::VecDeque;

use super::model::Run;

/// Runs in a block: 4 KiB of runs, one allocation in an allocator's 4 KiB bin.
#[cfg(not(test))]
const BLOCK: usize = 128;
/// Small under test, so tests cross blocks with few runs.
#[cfg(test)]
const BLOCK: usize = 4;

/// What a list in one piece iterates as its blocks.
static NO_BLOCKS: VecDeque<Vec<Run>> = VecDeque::new();

#[derive(Clone)]
pub enum RunList {
    /// No run, or two up to `BLOCK` (or fewer in a vector given room ahead).
    Many(Vec<Run>),
    One(Run),
    /// More than `BLOCK` runs once (boxed: the row keeps its size).
    Blocks(Box<Blocks>),
}

/// Full blocks of exactly `BLOCK` runs, but the last (room for `BLOCK`, at least one run);
/// `head` runs of the first are dropped already.
pub struct Blocks {
    blocks: VecDeque<Vec<Run>>,
    head: usize,
    len: usize,
}

impl Default for RunList {
    fn default() -> Self {
        RunList::Many(Vec::new())
    }
}

/// Each block with room for `BLOCK` runs, as the original's: a derived clone gave the last
/// block room for its runs only, and its next push doubled that past `BLOCK` (review s34 r
/// H1: a checkpoint clones every partition it shares, so each one's next push did).
impl Clone for Blocks {
    fn clone(&self) -> Self {
        let blocks = self
            .blocks
            .iter()
            .map(|b| {
                let mut c = Vec::with_capacity(BLOCK);
                c.extend_from_slice(b);
                c
            })
            .collect();
        Blocks {
            blocks,
            head: self.head,
            len: self.len,
        }
    }
}

impl Blocks {
    fn get(&self, i: usize) -> Option<&Run> {
        if i >= self.len {
            return None;
        }
        let at = self.head + i;
        self.blocks.get(at / BLOCK)?.get(at % BLOCK)
    }

    fn get_mut(&mut self, i: usize) -> Option<&mut Run> {
        if i >= self.len {
            return None;
        }
        let at = self.head + i;
        self.blocks.get_mut(at / BLOCK)?.get_mut(at % BLOCK)
    }

    fn push(&mut self, run: Run) {
        match self.blocks.back_mut() {
            Some(last) if last.len() < BLOCK => {
                // Never past `BLOCK`, whoever made the block.
                last.reserve_exact(BLOCK - last.len());
                last.push(run)
            }
            _ => {
                let mut b = Vec::with_capacity(BLOCK);
                b.push(run);
                self.blocks.push_back(b);
            }
        }
        self.len += 1;
    }

    /// Drops the first `n` runs (`n` < `len`): whole blocks go, the rest stays in place.
    fn drop_front(&mut self, n: usize) {
        self.len -= n;
        self.head += n;
        while self.head >= BLOCK && self.blocks.len() > 1 {
            self.blocks.pop_front();
            self.head -= BLOCK;
        }
        // The handles' room follows the blocks down, as a vector's room does not.
        if self.blocks.capacity() > 4 * self.blocks.len() + 8 {
            self.blocks.shrink_to(2 * self.blocks.len());
        }
    }

    fn iter_from(&self, start: usize) -> Iter<'_> {
        let start = start.min(self.len);
        let at = self.head + start;
        let (first, rest) = (at / BLOCK, at % BLOCK);
        let mut mid = self.blocks.range(first.min(self.blocks.len())..);
        let front = mid.next().map_or(&[][..], |b| b.get(rest..).unwrap_or(&[]));
        let back = if mid.len() > 0 { mid.next_back() } else { None };
        Iter {
            front: front.iter(),
            mid,
            back: back.map_or(&[][..], |b| b.as_slice()).iter(),
            left: self.len - start,
        }
    }
}

impl RunList {
    pub fn len(&self) -> usize {
        match self {
            RunList::Many(v) => v.len(),
            RunList::One(_) => 1,
            RunList::Blocks(b) => b.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, i: usize) -> Option<&Run> {
        match self {
            RunList::Many(v) => v.get(i),
            RunList::One(r) => (i == 0).then_some(r),
            RunList::Blocks(b) => b.get(i),
        }
    }

    pub fn get_mut(&mut self, i: usize) -> Option<&mut Run> {
        match self {
            RunList::Many(v) => v.get_mut(i),
            RunList::One(r) => (i == 0).then_some(r),
            RunList::Blocks(b) => b.get_mut(i),
        }
    }

    pub fn first(&self) -> Option<&Run> {
        self.get(0)
    }

    pub fn last(&self) -> Option<&Run> {
        self.len().checked_sub(1).and_then(|i| self.get(i))
    }

    pub fn iter(&self) -> Iter<'_> {
        self.iter_from(0)
    }

    /// The runs from the `start`-th on (none when `start` is past the end), found in O(1).
    pub fn iter_from(&self, start: usize) -> Iter<'_> {
        match self {
            RunList::Many(v) => Iter::of(v, start),
            RunList::One(r) => Iter::of(std::slice::from_ref(r), start),
            RunList::Blocks(b) => b.iter_from(start),
        }
    }

    /// As a slice's: the runs are ordered by every field a caller searches by.
    pub fn partition_point(&self, mut pred: impl FnMut(&Run) -> bool) -> usize {
        match self {
            RunList::Many(v) => v.partition_point(pred),
            RunList::One(r) => usize::from(pred(r)),
            RunList::Blocks(b) => {
                let (mut lo, mut hi) = (0, b.len);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if b.get(mid).is_some_and(&mut pred) {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                lo
            }
        }
    }

    pub fn to_vec(&self) -> Vec<Run> {
        self.iter().copied().collect()
    }

    pub fn push(&mut self, run: Run) {
        match self {
            // A vector given room for runs ahead (`From<Vec<Run>>`) keeps it.
            RunList::Many(v) if v.capacity() == 0 => *self = RunList::One(run),
            RunList::Many(v) if v.len() >= BLOCK => {
                // The vector becomes the first block: room for exactly its runs, so a
                // vector given more room ahead gives it back.
                let mut first = std::mem::take(v);
                first.shrink_to_fit();
                let mut b = Blocks {
                    len: first.len(),
                    blocks: VecDeque::new(),
                    head: 0,
                };
                // Blocks of `BLOCK` runs, whatever the vector held.
                let mut rest = first.split_off(first.len().min(BLOCK));
                b.blocks.push_back(first);
                while !rest.is_empty() {
                    let tail = rest.split_off(rest.len().min(BLOCK));
                    let mut block = Vec::with_capacity(BLOCK);
                    block.append(&mut rest);
                    b.blocks.push_back(block);
                    rest = tail;
                }
                b.push(run);
                *self = RunList::Blocks(Box::new(b));
            }
            RunList::Many(v) => v.push(run),
            RunList::One(first) => {
                // What a `Vec` reserved exactly for one run grew to at its second push.
                let mut v = Vec::with_capacity(4);
                v.push(*first);
                v.push(run);
                *self = RunList::Many(v);
            }
            RunList::Blocks(b) => b.push(run),
        }
    }

    /// Removes the first `n` runs (all of them when `n` is past the end); a single run left
    /// goes back inside the row, and the vector is freed when one or none is left.
    /// Freed, not kept for a next push: a partition trimmed to one run and then idle would
    /// hold it for good (retention shrinks only below a quarter full), so one that goes
    /// 1 -> 2 -> 1 runs allocates and frees a vector each time (review s33 p L4). Blocks
    /// trimmed to one block's worth or fewer go back to a vector.
    pub fn drop_front(&mut self, n: usize) {
        match self {
            RunList::One(_) if n > 0 => *self = RunList::default(),
            RunList::One(_) => {}
            RunList::Many(v) => {
                v.drain(..n.min(v.len()));
                match v.as_slice() {
                    [] => *self = RunList::default(),
                    [only] => *self = RunList::One(*only),
                    _ => {}
                }
            }
            RunList::Blocks(b) if n >= b.len => *self = RunList::default(),
            RunList::Blocks(b) => {
                b.drop_front(n);
                if b.len <= BLOCK / 2 {
                    let rest: Vec<Run> = b.iter_from(0).copied().collect();
                    *self = rest.into();
                }
            }
        }
    }

    /// Runs the heap holds room for (0 for the inline run): what memory counting charges.
    /// Blocks add their handles' room, in runs (rounded up).
    pub fn heap_capacity(&self) -> usize {
        match self {
            RunList::Many(v) => v.capacity(),
            RunList::One(_) => 0,
            RunList::Blocks(b) => {
                let run = std::mem::size_of::<Run>();
                let handles = (b.blocks.capacity() * std::mem::size_of::<Vec<Run>>()
                    + std::mem::size_of::<Blocks>())
                .div_ceil(run);
                b.blocks
                    .iter()
                    .map(Vec::capacity)
                    .fold(handles, usize::saturating_add)
            }
        }
    }

    /// Gives back the vector's room past `min` runs; nothing for the inline run. Blocks
    /// hold at most one block of room, and their handles' deque is trimmed.
    pub fn shrink_to(&mut self, min: usize) {
        match self {
            RunList::Many(v) => v.shrink_to(min),
            RunList::One(_) => {}
            RunList::Blocks(b) => b.blocks.shrink_to_fit(),
        }
    }
}

/// The runs in order, from a list in any form.
#[derive(Clone)]
pub struct Iter<'a> {
    front: std::slice::Iter<'a, Run>,
    mid: std::collections::vec_deque::Iter<'a, Vec<Run>>,
    back: std::slice::Iter<'a, Run>,
    left: usize,
}

impl<'a> Iter<'a> {
    fn of(runs: &'a [Run], start: usize) -> Self {
        let runs = runs.get(start..).unwrap_or(&[]);
        Iter {
            front: runs.iter(),
            mid: NO_BLOCKS.iter(),
            back: [].iter(),
            left: runs.len(),
        }
    }
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a Run;

    fn next(&mut self) -> Option<&'a Run> {
        loop {
            if let Some(r) = self.front.next() {
                self.left -= 1;
                return Some(r);
            }
            match self.mid.next() {
                Some(b) => self.front = b.iter(),
                None => {
                    let r = self.back.next();
                    if r.is_some() {
                        self.left -= 1;
                    }
                    return r;
                }
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(r) = self.back.next_back() {
                self.left -= 1;
                return Some(r);
            }
            match self.mid.next_back() {
                Some(b) => self.back = b.iter(),
                None => {
                    let r = self.front.next_back();
                    if r.is_some() {
                        self.left -= 1;
                    }
                    return r;
                }
            }
        }
    }
}

impl ExactSizeIterator for Iter<'_> {}

/// Tests only: production code reads through `get`, which cannot panic.
#[cfg(test)]
impl std::ops::Index<usize> for RunList {
    type Output = Run;

    /// Panics past the end, as a slice's index does (callers check `len` first).
    fn index(&self, i: usize) -> &Run {
        match self.get(i) {
            Some(r) => r,
            None => panic!("run {i} of {}", self.len()),
        }
    }
}

impl<'a> IntoIterator for &'a RunList {
    type Item = &'a Run;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl From<Vec<Run>> for RunList {
    fn from(v: Vec<Run>) -> Self {
        match v.as_slice() {
            [only] => RunList::One(*only),
            _ if v.len() > BLOCK => {
                let mut l = RunList::default();
                for r in v {
                    l.push(r);
                }
                l
            }
            _ => RunList::Many(v),
        }
    }
}

impl FromIterator<Run> for RunList {
    fn from_iter<I: IntoIterator<Item = Run>>(iter: I) -> Self {
        iter.into_iter().collect::<Vec<Run>>().into()
    }
}

/// Equal when the runs are, however they are held.
impl PartialEq for RunList {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for RunList {}

/// As a `Vec`'s, so the canonical dump replicas compare reads as before.
impl std::fmt::Debug for RunList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(base_offset: u64) -> Run {
        Run {
            base_offset,
            count: 1,
            created_us: base_offset as i64,
            index: base_offset + 10,
            pos: 3,
        }
    }

    #[test]
    fn one_run_is_inline_and_the_list_is_40_bytes() {
        assert_eq!(std::mem::size_of::<RunList>(), 40);
        let mut l = RunList::default();
        l.push(run(0));
        assert!(matches!(l, RunList::One(_)));
        assert_eq!((l.len(), l.heap_capacity()), (1, 0));
        assert_eq!(format!("{l:?}"), format!("{:?}", vec![run(0)]));
    }

    #[test]
    fn pushes_and_drops_read_as_a_vec_would() {
        let mut l = RunList::default();
        let mut v: Vec<Run> = Vec::new();
        // Every push and drop of the first runs, checked against a Vec step by step.
        for step in 0..200u64 {
            if step % 7 == 3 || step % 11 == 5 {
                let n = (step % 4) as usize;
                l.drop_front(n);
                v.drain(..n.min(v.len()));
            } else {
                l.push(run(step));
                v.push(run(step));
            }
            assert_eq!(l.to_vec(), v, "step {step}");
            assert_eq!(l.len() == 1, matches!(l, RunList::One(_)), "step {step}");
        }
        l.drop_front(usize::MAX);
        assert!(l.is_empty());
        l.drop_front(usize::MAX);
        assert!(l.is_empty());
    }

    /// Review s33 p L3: the apply path, not just the list, puts a partition's first run
    /// inside its row (main reserved a one-run vector there: heap capacity 1), and a trim
    /// back to one run frees the vector the second run took.
    #[test]
    fn a_partitions_first_appended_run_lands_inline_through_apply() {
        use crate::entry::Effect;
        use crate::state::{Loc, State};
        let mut st = State::default();
        st.seed_queue(
            1,
            "q",
            Default::default(),
            &[(7, "p")],
            Loc { index: 1, pos: 0 },
        );
        let append = |st: &mut State, base: u64, index: u64| {
            let e = Effect::Append {
                pid: 7,
                base_offset: base,
                hashes: vec![base],
                frames: &[],
            };
            st.apply(&e, index as i64, Loc { index, pos: 0 });
        };
        let held = |st: &State| {
            st.partitions.get(&7).map(|p| {
                (
                    p.runs.len(),
                    p.runs.heap_capacity(),
                    matches!(p.runs, RunList::One(_)),
                )
            })
        };
        assert_eq!(held(&st), Some((0, 0, false)));
        append(&mut st, 0, 2);
        assert_eq!(held(&st), Some((1, 0, true)));
        append(&mut st, 1, 3);
        assert_eq!(held(&st), Some((2, 4, false)));
        st.trim_partition(7, 1);
        assert_eq!(held(&st), Some((1, 0, true)));
        assert_eq!(
            st.partitions.get(&7).map(|p| p.runs[0].base_offset),
            Some(1)
        );
    }

    /// Every read of a list against a `Vec` holding the same runs, through pushes and drops
    /// that cross blocks (4 runs a block under test) both ways, many times over.
    #[test]
    fn blocks_read_as_a_vec_would_through_random_pushes_and_drops() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % m
        };
        let mut l = RunList::default();
        let mut v: Vec<Run> = Vec::new();
        let mut base = 0u64;
        let mut blocks_seen = 0;
        for step in 0..20_000 {
            match next(10) {
                0 => {
                    let n = next(BLOCK as u64 * 3) as usize;
                    l.drop_front(n);
                    v.drain(..n.min(v.len()));
                }
                1 if next(50) == 0 => {
                    l.drop_front(usize::MAX);
                    v.clear();
                }
                _ => {
                    let r = Run {
                        count: 1 + next(3) as u32,
                        ..run(base)
                    };
                    base += u64::from(r.count);
                    l.push(r);
                    v.push(r);
                }
            }
            blocks_seen += usize::from(matches!(l, RunList::Blocks(_)));
            assert_eq!(l.len(), v.len(), "step {step}");
            assert_eq!(l.to_vec(), v, "step {step}");
            assert!(l.iter().rev().eq(v.iter().rev()), "step {step}");
            assert_eq!(l.iter().len(), v.len(), "step {step}");
            let start = next(v.len() as u64 + 2) as usize;
            assert!(l.iter_from(start).eq(v.iter().skip(start)), "step {step}");
            assert_eq!(l.iter_from(start).len(), v.len().saturating_sub(start));
            let i = next(v.len() as u64 + 1) as usize;
            assert_eq!(l.get(i), v.get(i), "step {step}");
            let at = next(base + 2);
            assert_eq!(
                l.partition_point(|r| r.base_offset < at),
                v.partition_point(|r| r.base_offset < at),
                "step {step}"
            );
            assert_eq!((l.first(), l.last()), (v.first(), v.last()));
            assert_eq!(l.len() == 1, matches!(l, RunList::One(_)), "step {step}");
            // Room: at most one block past the runs, and the blocks' handles (24 B each, at
            // most four times the blocks and 8 in the deque's room, in runs of 32 B).
            let blocks = v.len() / BLOCK + 2;
            assert!(
                l.heap_capacity() <= v.len() + BLOCK + (4 * blocks + 8) * 24 / 32 + 4,
                "step {step}: {} for {}",
                l.heap_capacity(),
                v.len()
            );
        }
        assert!(blocks_seen > 1000, "the walk reached blocks: {blocks_seen}");
    }

    /// A long list pays room for one block at most: no doubling (session 34).
    #[test]
    fn a_long_list_holds_at_most_one_block_of_room() {
        let mut l = RunList::default();
        for i in 0..(BLOCK as u64 * 50 + 1) {
            l.push(run(i));
        }
        assert!(matches!(l, RunList::Blocks(_)));
        let runs = l.len();
        let handles = l.heap_capacity() - 51 * BLOCK;
        assert!(handles <= 51 * 2 * 24 / 32 + 4, "{}", l.heap_capacity());
        // A drop to one block's half goes back to a vector.
        l.drop_front(runs - BLOCK / 2);
        assert!(matches!(l, RunList::Many(_)));
        assert_eq!(
            l.first().map(|r| r.base_offset),
            Some(runs as u64 - BLOCK as u64 / 2)
        );
    }

    /// Review s34 r H1: a clone (a checkpoint's copy of a shared partition) holds the room
    /// its original does, and a push to it never grows a block past `BLOCK`.
    #[test]
    fn a_cloned_list_keeps_its_blocks_room_and_pushes_within_it() {
        let mut l = RunList::default();
        for i in 0..(BLOCK as u64 * 3 + 1) {
            l.push(run(i));
        }
        let mut c = l.clone();
        assert_eq!(c.heap_capacity(), l.heap_capacity());
        for i in 0..(BLOCK as u64 * 3) {
            c.push(run(BLOCK as u64 * 3 + 1 + i));
            if let RunList::Blocks(b) = &c {
                assert!(b.blocks.iter().all(|b| b.capacity() == BLOCK), "push {i}");
            }
        }
    }

    #[test]
    fn a_run_changed_through_the_slice_stays_changed() {
        let mut l: RunList = vec![run(0)].into();
        if let Some(r) = l.get_mut(0) {
            r.index = 99;
        }
        assert_eq!(l[0].index, 99);
        l.push(run(1));
        assert_eq!(
            (l[0].index, l[1].base_offset, l.heap_capacity()),
            (99, 1, 4)
        );
        l.drop_front(1);
        assert!(matches!(l, RunList::One(r) if r.base_offset == 1));
    }
}
