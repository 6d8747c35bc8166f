//! Window filters for push dedup (issue 12, docs/storage-format.md "The transaction-id index
//! off the heap"): a fixed-size, approximate memory of which transaction-id keys were pushed
//! inside the longest dedup window.
//!
//! A miss is exact (the key was not pushed inside the window, so the push is new without any
//! I/O); a hit only means "maybe" and the caller must confirm it against exact data (the hot
//! table, the per-generation id files, the frame). Everything here is a pure function of the
//! keys and the entry times they were recorded at, so every replica and every replay of the
//! log builds the same bits for the same configuration.

mod allowance;
mod bloom;
mod ring;
#[cfg(test)]
pub use ring::DROPPED_HERE;

pub use allowance::{FilterAllowance, FilterDraw, Want, NODE_FILTERS};
pub use bloom::{Block, BlockedBloom, BLOCK_BYTES};
pub use ring::{
    Arena, FilterConfig, FilterStats, GenerationRing, RingError, SavedGeneration, MAX_FILTER_BYTES,
};
