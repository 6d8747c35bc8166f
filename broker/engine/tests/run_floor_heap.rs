//! What the run floor charges against what it really allocates (review M2): a counting
//! allocator sees every byte its trees and boxes hold, for partitions keeping 1, 2, 12 and
//! 100 copied runs aside. Its own binary, so the allocator counts this test alone.

use std::sync::atomic::Ordering;

use queenmq_engine::state::model::{Partition, Run};
use queenmq_engine::state::run_floor::RunFloor;

mod support;
use support::counting_alloc::HELD;

const PARTS: u32 = 50;
const RUNS: u64 = 120;

fn partition(id: u32) -> Partition {
    let mut p = Partition::new(id, 1, "", 0);
    // Room for every run, so pushing allocates nothing the floor does not hold.
    p.runs = Vec::with_capacity(RUNS as usize).into();
    p
}

/// `copies` runs of each partition copied forward, out of log order: the floor's own heap.
fn measure(copies: usize) -> (usize, usize) {
    let mut parts: Vec<Partition> = (0..PARTS).map(partition).collect();
    let before = HELD.load(Ordering::SeqCst);
    let mut floor = RunFloor::default();
    let mut index = 0;
    for p in &mut parts {
        for o in 0..RUNS {
            index += 1;
            let run = Run {
                base_offset: o,
                count: 1,
                created_us: 0,
                index,
                pos: 0,
            };
            floor.push(p, run);
            p.next_offset = o + 1;
        }
    }
    for p in &mut parts {
        for i in 0..copies {
            index += 1;
            floor.set_index(p, i, index, 0, true);
        }
    }
    let held = HELD.load(Ordering::SeqCst) - before;
    let charged = floor.bytes();
    drop(parts);
    (held, charged)
}

#[test]
fn the_floor_charges_at_least_what_its_trees_and_boxes_hold() {
    for copies in [0, 1, 2, 12, 100] {
        let (held, charged) = measure(copies);
        assert!(
            charged >= held,
            "{copies} copied runs a partition: {held} B held, {charged} B charged"
        );
        if copies > 0 {
            // And not wildly above (the allocator's headers and half-empty nodes aside).
            assert!(
                charged <= held * 4,
                "{copies}: {held} B held, {charged} B charged"
            );
        }
    }
}
