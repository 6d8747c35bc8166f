//! The time the engine spends copying blocks a checkpoint still shares (partition chunks,
//! cursor shards, partition-id chunks): the part of a checkpoint's pause that moved from
//! `begin_checkpoint` to the first write of each block (review s25 ckpt M1).
//!
//! Per thread, because a copy happens deep inside `apply` and the planner, which take no
//! handle to anything but the state: the broker drains it at the start and end of each
//! stretch it holds the state lock for a cycle (synchronous, so on one thread) and records
//! the sum as `queen_checkpoint_cow_copy_seconds`, and each kind of block's share as
//! `queen_checkpoint_cow_block_seconds{block}` (so a slow stretch names the block that made
//! it slow: review s26 ckpt L6). Only metrics read it; the state never does.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The kinds of shared block a write may copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// A chunk of the partition table's handles (`partition_group.rs`).
    Partitions = 0,
    /// A shard's table of a group's cursors, or its overlay's (`cursor_map.rs`).
    Cursors = 1,
    /// A queue's last chunk of partition ids (`partition_order.rs`).
    Ids = 2,
    /// One cursor a checkpoint still holds, copied or replaced by a new `Arc` at its first
    /// write (`cursor_map.rs`): apart from its shard's copy since session 30, so a slow
    /// stretch tells the many small row copies from the few shard copies.
    CursorRows = 3,
    /// One partition a checkpoint still holds, copied at its first write
    /// (`partition_group.rs`): apart from its chunk's copy since session 31, as the cursors'.
    PartitionRows = 4,
    /// A partition chunk's overlay a checkpoint taken while it held slots shares
    /// (`partition_group.rs`): apart from the chunks' copies since review s31 ckpt L4, so
    /// the measure of this session's change (chunks no longer copied) is not hidden by
    /// overlays carried over from one checkpoint to the next.
    PartitionOverlays = 5,
    /// A shelf of 64 cursor shards' handles a checkpoint shares, copied at the first write to
    /// any of its shards (`cursor_map.rs`, session 34): the price of taking a group's cursors
    /// as one handle per shelf instead of one per shard.
    CursorShelves = 6,
}

impl Block {
    pub const ALL: [Block; 7] = [
        Block::Partitions,
        Block::Cursors,
        Block::Ids,
        Block::CursorRows,
        Block::PartitionRows,
        Block::PartitionOverlays,
        Block::CursorShelves,
    ];

    /// The `block` label of `queen_checkpoint_cow_block_seconds`.
    pub fn label(self) -> &'static str {
        match self {
            Block::Partitions => "partitions",
            Block::Cursors => "cursors",
            Block::Ids => "ids",
            Block::CursorRows => "cursor_rows",
            Block::PartitionRows => "partition_rows",
            Block::PartitionOverlays => "partition_overlays",
            Block::CursorShelves => "cursor_shelves",
        }
    }
}

/// The copies of one stretch: their count and time, in all and per kind of block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Copies {
    pub copies: u64,
    pub took: Duration,
    /// Indexed by `Block as usize`: that kind's copies and their time.
    pub by_block: [(u64, Duration); 7],
}

thread_local! {
    static COPIES: Cell<Copies> = Cell::new(Copies::default());
}

pub fn start() -> Instant {
    Instant::now()
}

/// One copy of a `block`, begun at `started`.
pub fn record(block: Block, started: Instant) {
    let took = started.elapsed();
    COPIES.with(|c| {
        let mut all = c.get();
        all.copies = all.copies.saturating_add(1);
        all.took = all.took.saturating_add(took);
        let (n, d) = all.by_block[block as usize];
        all.by_block[block as usize] = (n.saturating_add(1), d.saturating_add(took));
        c.set(all);
    });
}

/// The copies made on this thread since the last call; resets them.
pub fn take() -> Copies {
    COPIES.with(|c| c.replace(Copies::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_counted_per_block_and_reset_by_take() {
        let _ = take();
        record(Block::Cursors, start());
        record(Block::Cursors, start());
        record(Block::Ids, start());
        let got = take();
        assert_eq!(got.copies, 3);
        assert_eq!(got.by_block[Block::Cursors as usize].0, 2);
        assert_eq!(got.by_block[Block::Ids as usize].0, 1);
        assert_eq!(got.by_block[Block::Partitions as usize].0, 0);
        let parts: Duration = got.by_block.iter().map(|b| b.1).sum();
        assert_eq!(parts, got.took, "the kinds' times add up to the sum");
        assert_eq!(take(), Copies::default());
    }
}
