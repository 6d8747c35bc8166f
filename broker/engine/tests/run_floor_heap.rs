//! What the run floor charges against what it really allocates (review M2): a counting
//! allocator sees every byte its trees and boxes hold, for partitions keeping 1, 2, 12 and
//! 100 copied runs aside. Its own binary, so the allocator counts this test alone.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use queenmq_engine::state::model::{Partition, Run};
use queenmq_engine::state::run_floor::RunFloor;

struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on unchanged to the system allocator, which upholds the
// `GlobalAlloc` contract; the counter only adds up the sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HELD.fetch_add(layout.size(), Ordering::SeqCst);
        // SAFETY: the caller's layout contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size(), Ordering::SeqCst);
        // SAFETY: `ptr` came from `alloc` above with this layout, so from the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const PARTS: u64 = 50;
const RUNS: u64 = 120;

fn partition(id: u64) -> Partition {
    Partition {
        id,
        queue: 1,
        name: String::new(),
        created_us: 0,
        next_offset: 0,
        last_write_us: 0,
        bytes: 0,
        // Room for every run, so pushing allocates nothing the floor does not hold.
        runs: Vec::with_capacity(RUNS as usize),
        floor: 0,
        copied: None,
    }
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
