//! A partition's runs, with the one run an idle partition mostly holds kept inside the row,
//! and a long list in blocks, delta-coded once full.
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
//!
//! Why sealed blocks (session 35): even without room, 32 B a run is 16-32 B a message in
//! that pattern. Every full block but the open tail is delta-coded (`sealed_runs.rs`, ~9 B a
//! run); only the tail is plain `Run`s, so pushes stay a copy into it. Reads return runs by
//! value. A change to a sealed run (the compactor moving its frames, a pending index filled
//! in after its block sealed) re-encodes that one block.

use std::collections::VecDeque;

use super::model::Run;
use super::sealed_runs::Sealed;

/// Runs in a block: the tail is 4 KiB of runs, one allocation in an allocator's 4 KiB bin.
#[cfg(not(test))]
const BLOCK: usize = 128;
/// Small under test, so tests cross blocks with few runs.
#[cfg(test)]
const BLOCK: usize = 4;

#[derive(Clone)]
pub enum RunList {
    /// No run, or two up to `BLOCK` (or fewer in a vector given room ahead).
    Many(Vec<Run>),
    One(Run),
    /// More than `BLOCK` runs once (boxed: the row keeps its size).
    Blocks(Box<Blocks>),
}

/// Sealed blocks of exactly `BLOCK` runs, then the tail (room for `BLOCK`, 1 to `BLOCK`
/// runs: it is sealed when a push finds it full). `head` runs of the first block are
/// dropped already; with no sealed block left they are cut from the tail, so `head` is 0.
pub struct Blocks {
    sealed: VecDeque<Sealed>,
    tail: Vec<Run>,
    head: usize,
    len: usize,
    /// The first run held, decoded: read on every push (the run floor's lowest index) and
    /// every read's low offset, where a decode would walk up to `BLOCK` runs.
    front: Run,
}

impl Default for RunList {
    fn default() -> Self {
        RunList::Many(Vec::new())
    }
}

/// The tail with room for `BLOCK` runs, as the original's: a derived clone gave it room for
/// its runs only, and its next push doubled that past `BLOCK` (review s34 r H1: a checkpoint
/// clones every partition it shares, so each one's next push did). Sealed blocks are exact
/// already, and clone exact.
impl Clone for Blocks {
    fn clone(&self) -> Self {
        let mut tail = Vec::with_capacity(BLOCK);
        tail.extend_from_slice(&self.tail);
        Blocks {
            sealed: self.sealed.clone(),
            tail,
            head: self.head,
            len: self.len,
            front: self.front,
        }
    }
}

impl Blocks {
    fn new() -> Self {
        Blocks {
            sealed: VecDeque::new(),
            tail: Vec::with_capacity(BLOCK),
            head: 0,
            len: 0,
            // Read only while `len` > 0, set by the first push.
            front: Run {
                base_offset: 0,
                count: 0,
                created_us: 0,
                index: 0,
                pos: 0,
            },
        }
    }

    /// Where run `i` is held: `Ok((block, within))` sealed, `Err(at)` at the tail's `at`.
    fn place(&self, i: usize) -> Result<(usize, usize), usize> {
        let at = self.head + i;
        let k = at / BLOCK;
        if k < self.sealed.len() {
            Ok((k, at % BLOCK))
        } else {
            Err(at - self.sealed.len() * BLOCK)
        }
    }

    fn get(&self, i: usize) -> Option<Run> {
        match i {
            _ if i >= self.len => None,
            0 => Some(self.front),
            _ => self.decode(i),
        }
    }

    fn decode(&self, i: usize) -> Option<Run> {
        match self.place(i) {
            Ok((k, w)) => self.sealed.get(k)?.nth(w),
            Err(at) => self.tail.get(at).copied(),
        }
    }

    /// Changes run `i` through `f`; a sealed run's block is decoded and sealed again.
    fn update(&mut self, i: usize, f: impl FnOnce(&mut Run)) -> bool {
        let done = self.update_held(i, f);
        if done && i == 0 {
            self.front = self.decode(0).unwrap_or(self.front);
        }
        done
    }

    fn update_held(&mut self, i: usize, f: impl FnOnce(&mut Run)) -> bool {
        if i >= self.len {
            return false;
        }
        match self.place(i) {
            Ok((k, w)) => {
                let Some(block) = self.sealed.get_mut(k) else {
                    return false;
                };
                let mut runs = block.to_vec();
                let Some(r) = runs.get_mut(w) else {
                    return false;
                };
                f(r);
                match Sealed::encode(&runs) {
                    Some(s) => *block = s,
                    None => return false,
                }
                true
            }
            Err(at) => match self.tail.get_mut(at) {
                Some(r) => {
                    f(r);
                    true
                }
                None => false,
            },
        }
    }

    fn push(&mut self, run: Run) {
        if self.tail.len() >= BLOCK {
            if let Some(s) = Sealed::encode(&self.tail) {
                self.sealed.push_back(s);
                // The tail keeps its room for the next block.
                self.tail.clear();
            }
        }
        // Never past `BLOCK`, whoever made the tail.
        self.tail
            .reserve_exact(BLOCK.saturating_sub(self.tail.len()).max(1));
        self.tail.push(run);
        if self.len == 0 {
            self.front = run;
        }
        self.len += 1;
    }

    /// Drops the first `n` runs (`n` < `len`): whole blocks go, the rest stays in place.
    fn drop_front(&mut self, n: usize) {
        self.len -= n;
        self.head += n;
        while self.head >= BLOCK && !self.sealed.is_empty() {
            self.sealed.pop_front();
            self.head -= BLOCK;
        }
        if self.sealed.is_empty() && self.head > 0 {
            // At most `BLOCK` runs moved, once per block dropped into.
            self.tail.drain(..self.head.min(self.tail.len()));
            self.head = 0;
        }
        // The handles' room follows the blocks down, as a vector's room does not.
        if self.sealed.capacity() > 4 * self.sealed.len() + 8 {
            self.sealed.shrink_to(2 * self.sealed.len());
        }
        self.front = self.decode(0).unwrap_or(self.front);
    }

    /// As a slice's, over runs ordered by what `pred` reads: a binary search over the blocks'
    /// first runs, then a walk inside the one block where `pred` turns. With the last run
    /// `pred` holds for, met on the way (none when the point is 0).
    fn partition_point(&self, mut pred: impl FnMut(&Run) -> bool) -> (usize, Option<Run>) {
        // Block `j` >= 1 starts with a run not dropped: sealed, its first; else the tail's.
        let first_of = |j: usize| match self.sealed.get(j) {
            Some(s) => Some(s.first()),
            None => self.tail.first().copied(),
        };
        let (mut lo, mut hi) = (1, self.sealed.len() + 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if first_of(mid).is_some_and(|r| pred(&r)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        // Block `lo - 1` is the last whose first run passes (or block 0, which may not).
        let start = ((lo - 1) * BLOCK).saturating_sub(self.head);
        let mut last = None;
        let passing = self
            .iter_from(start)
            .take_while(|r| pred(r))
            .inspect(|r| last = Some(*r))
            .count();
        (start + passing, last)
    }

    /// Bytes held: the box, the handles' room, each sealed block's bytes, the tail's room.
    fn heap_bytes(&self) -> usize {
        let sealed: usize = self.sealed.iter().map(Sealed::heap_bytes).sum();
        std::mem::size_of::<Blocks>()
            + self.sealed.capacity() * std::mem::size_of::<Sealed>()
            + sealed
            + self.tail.capacity() * std::mem::size_of::<Run>()
    }

    fn iter_from(&self, start: usize) -> Iter<'_> {
        Iter::new(Src::Blocks(self), start.min(self.len), self.len)
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

    /// By value: a sealed run is decoded (at most `BLOCK` runs walked).
    pub fn get(&self, i: usize) -> Option<Run> {
        match self {
            RunList::Many(v) => v.get(i).copied(),
            RunList::One(r) => (i == 0).then_some(*r),
            RunList::Blocks(b) => b.get(i),
        }
    }

    /// Points run `i` at log `index` and `pos`; false past the end. The only change a held
    /// run takes (a pending index filled in, frames moved by the compactor).
    pub fn set_loc(&mut self, i: usize, index: u64, pos: u32) -> bool {
        let f = |r: &mut Run| {
            r.index = index;
            r.pos = pos;
        };
        let r = match self {
            RunList::Many(v) => v.get_mut(i),
            RunList::One(r) => (i == 0).then_some(r),
            RunList::Blocks(b) => return b.update(i, f),
        };
        r.map(f).is_some()
    }

    pub fn first(&self) -> Option<Run> {
        self.get(0)
    }

    pub fn last(&self) -> Option<Run> {
        self.len().checked_sub(1).and_then(|i| self.get(i))
    }

    pub fn iter(&self) -> Iter<'_> {
        self.iter_from(0)
    }

    /// The runs from the `start`-th on (none when `start` is past the end); found in O(1),
    /// but for a walk of at most `BLOCK` runs into a sealed block.
    pub fn iter_from(&self, start: usize) -> Iter<'_> {
        match self {
            RunList::Many(v) => Iter::new(Src::Slice(v), start.min(v.len()), v.len()),
            RunList::One(r) => Iter::new(Src::Slice(std::slice::from_ref(r)), start.min(1), 1),
            RunList::Blocks(b) => b.iter_from(start),
        }
    }

    /// As a slice's: the runs are ordered by every field a caller searches by.
    pub fn partition_point(&self, mut pred: impl FnMut(&Run) -> bool) -> usize {
        match self {
            RunList::Many(v) => v.partition_point(pred),
            RunList::One(r) => usize::from(pred(r)),
            RunList::Blocks(b) => b.partition_point(pred).0,
        }
    }

    /// The last run `pred` holds for (`pred` true, then false over the list), found with
    /// one decode walk: `get(partition_point(pred) - 1)` would walk a block twice.
    pub fn last_passing(&self, mut pred: impl FnMut(&Run) -> bool) -> Option<Run> {
        match self {
            RunList::Blocks(b) => b.partition_point(pred).1,
            _ => {
                let i = self.partition_point(&mut pred);
                self.get(i.checked_sub(1)?)
            }
        }
    }

    pub fn to_vec(&self) -> Vec<Run> {
        self.iter().collect()
    }

    pub fn push(&mut self, run: Run) {
        match self {
            // A vector given room for runs ahead (`From<Vec<Run>>`) keeps it.
            RunList::Many(v) if v.capacity() == 0 => *self = RunList::One(run),
            RunList::Many(v) if v.len() >= BLOCK => {
                // The vector's runs are sealed as they go into blocks, and it is freed.
                let mut b = Blocks::new();
                for r in std::mem::take(v) {
                    b.push(r);
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
    /// trimmed to half a block's worth or fewer go back to a vector.
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
                    let rest: Vec<Run> = b.iter_from(0).collect();
                    *self = rest.into();
                }
            }
        }
    }

    /// Bytes the heap holds for the list (0 for the inline run): what memory counting
    /// charges. A vector by its room; blocks by their box, handles' room, each sealed
    /// block's exact bytes and the tail's room.
    pub fn heap_bytes(&self) -> usize {
        match self {
            RunList::Many(v) => v.capacity() * std::mem::size_of::<Run>(),
            RunList::One(_) => 0,
            RunList::Blocks(b) => b.heap_bytes(),
        }
    }

    /// Whether the vector's room is over four times its runs: retention then shrinks it.
    /// Blocks never are: their room is one tail, and their handles follow drops down.
    pub fn mostly_room(&self) -> bool {
        match self {
            RunList::Many(v) => v.len() < v.capacity() / 4,
            RunList::One(_) | RunList::Blocks(_) => false,
        }
    }

    /// Gives back the vector's room past `min` runs; nothing for the inline run. Blocks
    /// trim their handles' deque.
    pub fn shrink_to(&mut self, min: usize) {
        match self {
            RunList::Many(v) => v.shrink_to(min),
            RunList::One(_) => {}
            RunList::Blocks(b) => b.sealed.shrink_to_fit(),
        }
    }
}

#[derive(Clone, Copy)]
enum Src<'a> {
    Slice(&'a [Run]),
    Blocks(&'a Blocks),
}

/// Where the forward walk stands in a sealed block: block, run within it, that run, and
/// the byte after it.
#[derive(Clone, Copy)]
struct Cursor {
    block: usize,
    within: usize,
    run: Run,
    at: usize,
}

/// The runs in order, by value, from a list in any form. Forward, a sealed block is decoded
/// one run a step; backward, the block is decoded whole once.
#[derive(Clone)]
pub struct Iter<'a> {
    src: Src<'a>,
    front: usize,
    back: usize,
    cursor: Option<Cursor>,
    /// The sealed block `back_block` decoded, for walks from the end.
    back_runs: Vec<Run>,
    back_block: Option<usize>,
}

impl<'a> Iter<'a> {
    fn new(src: Src<'a>, front: usize, back: usize) -> Self {
        Iter {
            src,
            front,
            back,
            cursor: None,
            back_runs: Vec::new(),
            back_block: None,
        }
    }

    fn forward(&mut self, b: &'a Blocks, i: usize) -> Option<Run> {
        let (k, w) = match b.place(i) {
            Ok(kw) => kw,
            Err(at) => return b.tail.get(at).copied(),
        };
        let block = b.sealed.get(k)?;
        let (run, at) = match self.cursor {
            Some(c) if c.block == k && c.within + 1 == w => {
                let mut at = c.at;
                (block.next_after(&mut at, &c.run)?, at)
            }
            _ => {
                // A first step, or into a new block: from its first run.
                let (mut at, mut run) = (0, block.first());
                for _ in 0..w {
                    run = block.next_after(&mut at, &run)?;
                }
                (run, at)
            }
        };
        self.cursor = Some(Cursor {
            block: k,
            within: w,
            run,
            at,
        });
        Some(run)
    }

    fn backward(&mut self, b: &'a Blocks, i: usize) -> Option<Run> {
        let (k, w) = match b.place(i) {
            Ok(kw) => kw,
            Err(at) => return b.tail.get(at).copied(),
        };
        if self.back_block != Some(k) {
            self.back_runs = b.sealed.get(k)?.to_vec();
            self.back_block = Some(k);
        }
        self.back_runs.get(w).copied()
    }
}

impl Iterator for Iter<'_> {
    type Item = Run;

    fn next(&mut self) -> Option<Run> {
        if self.front >= self.back {
            return None;
        }
        let i = self.front;
        self.front += 1;
        match self.src {
            Src::Slice(s) => s.get(i).copied(),
            Src::Blocks(b) => self.forward(b, i),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.back.saturating_sub(self.front);
        (left, Some(left))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Run> {
        if self.front >= self.back {
            return None;
        }
        self.back -= 1;
        let i = self.back;
        match self.src {
            Src::Slice(s) => s.get(i).copied(),
            Src::Blocks(b) => self.backward(b, i),
        }
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a RunList {
    type Item = Run;
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
#[path = "run_list_tests.rs"]
mod tests;
