//! A FIFO in fixed-size blocks. Why not a `VecDeque`: a deque of millions of rows grows by
//! doubling, and each doubling copies every row at once while the engine waits (tens of
//! milliseconds at a few million rows); blocks grow one at a time and are freed as they empty.
//!
//! A full block is frozen (shared, immutable), so a checkpoint can take the whole FIFO by
//! cloning block handles under the state lock and write the rows after releasing it.

use std::collections::VecDeque;
use std::sync::Arc;

const BLOCK: usize = 4096;

pub struct BlockFifo<T> {
    frozen: VecDeque<Arc<[T]>>,
    /// The block being filled; always after every frozen block.
    tail: Vec<T>,
    /// Rows of the first block (frozen, else the tail) already popped.
    head: usize,
    len: usize,
}

impl<T> Default for BlockFifo<T> {
    fn default() -> Self {
        BlockFifo {
            frozen: VecDeque::new(),
            tail: Vec::new(),
            head: 0,
            len: 0,
        }
    }
}

/// The rows of a FIFO at one moment, detached from it.
pub struct FifoSnapshot<T> {
    frozen: Vec<Arc<[T]>>,
    tail: Vec<T>,
    head: usize,
    len: usize,
}

fn blocks_from<'a, T>(
    frozen: impl Iterator<Item = &'a [T]>,
    tail: &'a [T],
    head: usize,
) -> impl Iterator<Item = &'a T>
where
    T: 'a,
{
    frozen
        .chain(std::iter::once(tail))
        .enumerate()
        .flat_map(move |(i, b)| b.get(if i == 0 { head } else { 0 }..).unwrap_or(&[]).iter())
}

impl<T: Copy> BlockFifo<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push_back(&mut self, v: T) {
        if self.tail.len() == BLOCK {
            let full = std::mem::replace(&mut self.tail, Vec::with_capacity(BLOCK));
            self.frozen.push_back(full.into());
        } else if self.tail.capacity() == 0 {
            self.tail.reserve_exact(BLOCK);
        }
        self.tail.push(v);
        self.len += 1;
    }

    /// The newest row, if it is still in the block being filled (a frozen row never changes).
    pub fn back_mut(&mut self) -> Option<&mut T> {
        if self.frozen.is_empty() && self.head >= self.tail.len() {
            return None;
        }
        self.tail.last_mut()
    }

    pub fn front(&self) -> Option<&T> {
        match self.frozen.front() {
            Some(b) => b.get(self.head),
            None => self.tail.get(self.head),
        }
    }

    pub fn pop_front(&mut self) -> Option<T> {
        let v = *self.front()?;
        self.head += 1;
        self.len -= 1;
        match self.frozen.front() {
            Some(b) if self.head == b.len() => {
                self.frozen.pop_front();
                self.head = 0;
            }
            None if self.head == self.tail.len() => {
                self.tail.clear();
                self.head = 0;
            }
            _ => {}
        }
        Some(v)
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        blocks_from(self.frozen.iter().map(|b| &b[..]), &self.tail, self.head)
    }

    /// The rows as they are now: block handles are shared, only the tail block is copied.
    pub fn snapshot(&self) -> FifoSnapshot<T> {
        FifoSnapshot {
            frozen: self.frozen.iter().cloned().collect(),
            tail: self.tail.clone(),
            head: self.head,
            len: self.len,
        }
    }
}

impl<T> FifoSnapshot<T> {
    /// Rows in the snapshot.
    pub fn rows(&self) -> usize {
        self.len
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        blocks_from(self.frozen.iter().map(|b| &b[..]), &self.tail, self.head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_as_a_fifo_across_blocks() {
        let mut f = BlockFifo::default();
        for i in 0..(BLOCK * 2 + 10) {
            f.push_back(i);
        }
        assert_eq!(f.len(), BLOCK * 2 + 10);
        let snap = f.snapshot();
        for i in 0..(BLOCK + 5) {
            assert_eq!(f.pop_front(), Some(i));
        }
        assert_eq!(f.frozen.len(), 1, "the emptied block is freed");
        assert_eq!(f.front(), Some(&(BLOCK + 5)));
        let rest: Vec<usize> = f.iter().copied().collect();
        assert_eq!(rest, ((BLOCK + 5)..(BLOCK * 2 + 10)).collect::<Vec<_>>());
        assert_eq!(
            snap.iter().copied().collect::<Vec<_>>(),
            (0..(BLOCK * 2 + 10)).collect::<Vec<_>>(),
            "a snapshot keeps the rows of its moment"
        );
        assert_eq!(snap.rows(), BLOCK * 2 + 10);
        *f.back_mut().unwrap() = 0;
        while f.pop_front().is_some() {}
        assert!(f.is_empty());
        assert!(f.back_mut().is_none());
        assert!(f.front().is_none());
        assert_eq!(f.iter().count(), 0);
        f.push_back(7);
        assert_eq!(f.front(), Some(&7));
        assert_eq!(f.back_mut(), Some(&mut 7));
    }
}
