//! A partition's name in 8 B of its row: up to 7 bytes inside those 8 B, a longer one behind
//! a thin pointer to a heap block holding its length (LEB128: one byte up to 127, two up to
//! 16 383) and then its UTF-8 bytes.
//!
//! Why (session 35, issue 12 Done-when 3): a `Box<str>` spends 16 B of the row (pointer and
//! length), and with it the row was 112 B, its `Arc` (16 B of counts more) mimalloc's 128 B
//! bin. With the length moved out of the row, and the ids in 32 bits, the row is 96 B and its
//! `Arc` takes the 112 B bin: -16 B an idle partition. A name of up to 7 bytes (the Kafka
//! door's partitions "0", "1", ...; short numeric names) needs no block at all: -8 B more, the
//! smallest bin. A longer name's block grows by its prefix, one byte for a name of up to 127
//! bytes (the doors allow 512, two bytes past 127), which moves it to the next bin (+8 B) only
//! for a name whose length is exactly a bin's size (8, 16, 24, ... bytes).
//!
//! Why `unsafe`: no safe type holds a heap string behind a thin pointer. `Box<str>` and
//! `Arc<str>` are fat; `Box<Box<str>>` adds a second block (16 B, the saving gone); `thin-vec`
//! keeps 16 B of length and capacity in the block, which moves a 7-byte name from the 8 B bin
//! to the 24 B one. The invariants every `unsafe` block below relies on:
//! - `repr` holds either the `inline` bytes, whose word has its lowest bit set (the tag byte
//!   holds `len << 1 | 1`, the name's bytes follow in the others), or a `heap` pointer, whose
//!   lowest bit is clear since its block is allocated 2-aligned. Both fields are exactly one
//!   word of initialised bytes, and a pointer's bytes read as an integer are its address, so
//!   reading `inline` to tell which is sound whichever was written.
//! - A `heap` pointer points at a live block of the global allocator made by `new` with
//!   `block_layout(prefix + len)`, beginning with the complete LEB128 encoding of `len` that
//!   `new` wrote, then `len` bytes copied from a `&str`; the block is never written after
//!   `new` and freed only by `drop`, so it is owned by this value alone, like a `Box<str>`'s.
#![allow(unsafe_code)]

use std::alloc::{self, Layout};
use std::fmt;
use std::mem::size_of;
use std::ops::Deref;
use std::ptr::NonNull;

/// LEB128 bytes of a 64-bit length at most.
const MAX_PREFIX: usize = 10;
const WORD: usize = size_of::<usize>();
/// The byte holding the tag: the word's lowest, wherever the target keeps it.
const TAG_AT: usize = if cfg!(target_endian = "little") {
    0
} else {
    WORD - 1
};
/// Where an inline name's bytes start (the other `WORD - 1` bytes).
const NAME_AT: usize = if cfg!(target_endian = "little") { 1 } else { 0 };
/// The longest name held inline.
pub const INLINE_MAX: usize = WORD - 1;

#[derive(Clone, Copy)]
union Repr {
    heap: NonNull<u8>,
    inline: [u8; WORD],
}

pub struct PartitionName {
    repr: Repr,
}

// SAFETY: a heap block belongs to this value alone and is never written after `new`; moving
// it to another thread or reading it from several is as sound as for the `Box<str>` it
// replaces. Inline bytes are plain data.
unsafe impl Send for PartitionName {}
// SAFETY: as above; `&PartitionName` only reads.
unsafe impl Sync for PartitionName {}

/// Writes `len` as LEB128 into `out`; returns how many bytes.
fn encode_len(mut len: usize, out: &mut [u8; MAX_PREFIX]) -> usize {
    for (i, b) in out.iter_mut().enumerate() {
        *b = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            return i + 1;
        }
        *b |= 0x80;
    }
    // Ten groups of 7 bits cover any 64-bit length: the loop has returned.
    MAX_PREFIX
}

/// A block of `size` bytes, 2-aligned so its address leaves the tag bit clear.
fn block_layout(size: usize) -> Layout {
    match Layout::from_size_align(size, 2) {
        Ok(layout) => layout,
        // Only past isize::MAX bytes, and a `&str` is at most that long, so a name within
        // eleven bytes of the address space: as `Box<str>`'s own "capacity overflow".
        Err(_) => panic!("a partition name of {size} bytes cannot be allocated"),
    }
}

impl PartitionName {
    pub fn new(s: &str) -> Self {
        if s.len() <= INLINE_MAX {
            let mut inline = [0u8; WORD];
            inline[TAG_AT] = ((s.len() as u8) << 1) | 1;
            inline[NAME_AT..NAME_AT + s.len()].copy_from_slice(s.as_bytes());
            return Self {
                repr: Repr { inline },
            };
        }
        let mut prefix = [0u8; MAX_PREFIX];
        let k = encode_len(s.len(), &mut prefix);
        // No overflow: `s.len()` is at most isize::MAX.
        let layout = block_layout(k + s.len());
        // SAFETY: the layout's size is at least 1 (the prefix), as `alloc` requires.
        let raw = unsafe { alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        // SAFETY: `raw` is a fresh block of `k + s.len()` bytes, so both copies land inside
        // it and overlap neither source.
        unsafe {
            std::ptr::copy_nonoverlapping(prefix.as_ptr(), raw, k);
            std::ptr::copy_nonoverlapping(s.as_ptr(), raw.add(k), s.len());
        }
        Self {
            repr: Repr { heap: ptr },
        }
    }

    /// The heap block, or None for a name held inline.
    fn block(&self) -> Option<NonNull<u8>> {
        // SAFETY: both fields are one word of initialised bytes (module doc); the tag byte is
        // the word's lowest, so for a pointer it holds the address's lowest bit.
        let tag = unsafe { self.repr.inline }[TAG_AT];
        if tag & 1 == 1 {
            return None;
        }
        // SAFETY: the low bit is clear only for a pointer `new` wrote.
        Some(unsafe { self.repr.heap })
    }

    /// A block's name length, and its prefix's (where the bytes start).
    fn header(ptr: NonNull<u8>) -> (usize, usize) {
        let (mut len, mut shift, mut k) = (0usize, 0u32, 0usize);
        loop {
            // SAFETY: the block begins with the complete LEB128 length `new` wrote, and the
            // loop stops at its last byte (high bit clear), so every read is inside it.
            let byte = unsafe { ptr.as_ptr().add(k).read() };
            len |= usize::from(byte & 0x7f) << shift;
            k += 1;
            if byte & 0x80 == 0 {
                return (len, k);
            }
            shift += 7;
        }
    }

    /// The heap block's bytes (prefix and name), without the allocator's rounding; 0 for a
    /// name held inline.
    pub fn heap_bytes(&self) -> usize {
        self.block().map_or(0, |ptr| {
            let (len, k) = Self::header(ptr);
            len + k
        })
    }
}

impl Drop for PartitionName {
    fn drop(&mut self) {
        if let Some(ptr) = self.block() {
            let (len, k) = Self::header(ptr);
            // SAFETY: `ptr` came from `alloc` in `new` with `block_layout(k + len)`, the same
            // prefix and length read back here, and nothing frees it but this.
            unsafe { alloc::dealloc(ptr.as_ptr(), block_layout(k + len)) }
        }
    }
}

impl Deref for PartitionName {
    type Target = str;

    fn deref(&self) -> &str {
        let bytes = match self.block() {
            Some(ptr) => {
                let (len, k) = Self::header(ptr);
                // SAFETY: bytes `k..k + len` of the block are the bytes `new` copied, never
                // written since, and they live as long as `self`, which the result borrows.
                unsafe { std::slice::from_raw_parts(ptr.as_ptr().add(k), len) }
            }
            None => {
                // SAFETY: inline bytes were written (block() is None only for them).
                let inline = unsafe { &self.repr.inline };
                let len = usize::from(inline[TAG_AT] >> 1);
                &inline[NAME_AT..NAME_AT + len]
            }
        };
        // SAFETY: either way the bytes were copied whole from a `&str` by `new`: UTF-8.
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }
}

impl Clone for PartitionName {
    fn clone(&self) -> Self {
        match self.block() {
            Some(_) => Self::new(self),
            None => Self { repr: self.repr },
        }
    }
}

impl From<&str> for PartitionName {
    fn from(s: &str) -> Self {
        Self::new(s)
    }
}

impl From<String> for PartitionName {
    fn from(s: String) -> Self {
        Self::new(&s)
    }
}

impl PartialEq for PartitionName {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for PartitionName {}

impl PartialEq<str> for PartitionName {
    fn eq(&self, other: &str) -> bool {
        &**self == other
    }
}

/// As the `Box<str>` printed (the canonical dump prints partitions with `{:?}`).
impl fmt::Debug for PartitionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl fmt::Display for PartitionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_one_word() {
        assert_eq!(size_of::<PartitionName>(), 8);
        assert_eq!(INLINE_MAX, 7);
    }

    /// Every representation's edges: inline up to 7 bytes, then each prefix length; and names
    /// that are not ASCII.
    #[test]
    fn names_of_every_length_come_back_whole() {
        for len in [0, 1, 6, 7, 8, 9, 127, 128, 129, 512, 16_383, 16_384, 70_000] {
            let s: String = (0..len)
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect();
            let n = PartitionName::new(&s);
            assert_eq!(&*n, s.as_str(), "length {len}");
            let block = match len {
                0..=7 => 0,
                8..=127 => len + 1,
                128..=16_383 => len + 2,
                _ => len + 3,
            };
            assert_eq!(n.heap_bytes(), block, "length {len}");
            assert_eq!(&*n.clone(), s.as_str(), "a clone of length {len}");
        }
        for s in ["é", "名前", "🦀", "p-é-名", "partition-é-名前-🦀"] {
            assert_eq!(&*PartitionName::from(s), s);
            assert_eq!(&*PartitionName::from(s.to_string()), s);
        }
    }

    #[test]
    fn a_clone_is_its_own_block_and_outlives_the_original() {
        let a = PartitionName::new("partition-123456");
        let b = a.clone();
        assert_ne!(a.block(), b.block());
        assert!(a.block().is_some());
        drop(a);
        assert_eq!(&*b, "partition-123456");
        assert_eq!(b, PartitionName::from("partition-123456"));
        assert!(b == *"partition-123456" && b != *"partition-12345");
        let s = "partition-123456";
        assert_eq!(format!("{b:?} {b}"), format!("{s:?} {s}"));
    }

    /// "p999999", as the idle-partition benchmark names them, and the Kafka door's "0", "1",
    /// ... take no block; the first name past 7 bytes takes its bytes and one of length.
    #[test]
    fn a_short_name_takes_no_block() {
        for s in ["", "0", "17", "p999999"] {
            let n = PartitionName::new(s);
            assert!(n.block().is_none() && n.heap_bytes() == 0, "{s:?}");
            assert_eq!(&*n, s);
            let c = n.clone();
            drop(n);
            assert_eq!(&*c, s);
        }
        assert_eq!(PartitionName::new("p1000000").heap_bytes(), 9);
    }

    #[test]
    fn lengths_encode_in_the_fewest_leb128_bytes() {
        let mut out = [0u8; MAX_PREFIX];
        assert_eq!(encode_len(0, &mut out), 1);
        assert_eq!(out[0], 0);
        assert_eq!(encode_len(300, &mut out), 2);
        assert_eq!(out[..2], [0xac, 0x02]);
        assert_eq!(encode_len(usize::MAX, &mut out), 10);
        assert_eq!(out[9], 1);
    }
}
