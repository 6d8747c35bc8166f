//! A FIFO in fixed-size blocks. Why not a `VecDeque`: a deque of millions of rows grows by
//! doubling, and each doubling copies every row at once while the engine waits (tens of
//! milliseconds at a few million rows); blocks grow one at a time and are freed as they empty.

use std::collections::VecDeque;

const BLOCK: usize = 4096;

pub struct BlockFifo<T> {
    blocks: VecDeque<Vec<T>>,
    /// Rows of the first block already popped.
    head: usize,
    len: usize,
}

impl<T> Default for BlockFifo<T> {
    fn default() -> Self {
        BlockFifo {
            blocks: VecDeque::new(),
            head: 0,
            len: 0,
        }
    }
}

impl<T: Copy> BlockFifo<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push_back(&mut self, v: T) {
        match self.blocks.back_mut() {
            Some(b) if b.len() < BLOCK => b.push(v),
            _ => {
                let mut b = Vec::with_capacity(BLOCK);
                b.push(v);
                self.blocks.push_back(b);
            }
        }
        self.len += 1;
    }

    pub fn back_mut(&mut self) -> Option<&mut T> {
        if self.len == 0 {
            return None;
        }
        self.blocks.back_mut()?.last_mut()
    }

    pub fn front(&self) -> Option<&T> {
        self.blocks.front()?.get(self.head)
    }

    pub fn pop_front(&mut self) -> Option<T> {
        let first = self.blocks.front()?;
        let v = *first.get(self.head)?;
        self.head += 1;
        self.len -= 1;
        if self.head == first.len() {
            self.blocks.pop_front();
            self.head = 0;
        }
        Some(v)
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        let head = self.head;
        self.blocks
            .iter()
            .enumerate()
            .flat_map(move |(i, b)| b[if i == 0 { head } else { 0 }..].iter())
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
        for i in 0..(BLOCK + 5) {
            assert_eq!(f.pop_front(), Some(i));
        }
        assert_eq!(f.blocks.len(), 2, "the emptied block is freed");
        assert_eq!(f.front(), Some(&(BLOCK + 5)));
        let rest: Vec<usize> = f.iter().copied().collect();
        assert_eq!(rest, ((BLOCK + 5)..(BLOCK * 2 + 10)).collect::<Vec<_>>());
        *f.back_mut().unwrap() = 0;
        while f.pop_front().is_some() {}
        assert!(f.is_empty());
        assert!(f.back_mut().is_none());
        assert!(f.front().is_none());
    }
}
