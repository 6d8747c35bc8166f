//! What a run list charges (`heap_bytes`) against what it really allocates, at the release
//! build's 128 runs a block: a counting allocator sees every byte its box, handles, sealed
//! blocks and tail hold. And the bytes a run of the benchmark's pattern costs there (issue
//! 12 Done-when 3, session 35). Its own binary, so the allocator counts this test alone.

use std::sync::atomic::Ordering;

use queenmq_engine::state::model::{Run, RunList};

mod support;
use support::counting_alloc::HELD;

/// Runs as `queen-bench e2e` makes them (a batch of 100 spread over a producer's 50
/// partitions: a run of 1-2 messages per partition per batch), 1-3 ms apart, 0-3 log
/// entries apart, at up to 8 MB into the entry.
fn bench_runs(n: usize) -> Vec<Run> {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    };
    let mut r = Run {
        base_offset: 0,
        count: 2,
        created_us: 1_780_000_000_000_000,
        index: 5_000_000,
        pos: 1234,
    };
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(r);
        r = Run {
            base_offset: r.base_offset + u64::from(r.count),
            count: 1 + next(2) as u32,
            created_us: r.created_us + 1000 + next(2001) as i64,
            index: r.index + next(4),
            pos: next(8 << 20) as u32,
        };
    }
    out
}

/// Pushed one by one, as appends do; what the heap holds for the list alone.
fn build(runs: &[Run]) -> (RunList, usize) {
    let before = HELD.load(Ordering::SeqCst);
    let mut l = RunList::default();
    for r in runs {
        l.push(*r);
    }
    (l, HELD.load(Ordering::SeqCst) - before)
}

#[test]
fn the_list_charges_exactly_what_it_holds_and_10_bytes_a_benchmark_run() {
    let runs = bench_runs(100_000);
    let (mut l, held) = build(&runs);
    assert_eq!(l.heap_bytes(), held, "100 000 runs");
    let per_run = held as f64 / runs.len() as f64;
    assert!(per_run <= 10.0, "{per_run} B a run");
    println!("{per_run:.2} B a run over {} runs", runs.len());

    // A copy (a checkpoint's) holds exactly what it charges too.
    let before = HELD.load(Ordering::SeqCst);
    let c = l.clone();
    assert_eq!(
        c.heap_bytes(),
        HELD.load(Ordering::SeqCst) - before,
        "clone"
    );
    assert_eq!(c, l);
    drop(c);

    // Drops inside a sealed block, then whole blocks, then one run's change in a sealed one.
    let base = HELD.load(Ordering::SeqCst) - l.heap_bytes();
    for n in [1, 60, 127, 128, 1000, 5000] {
        l.drop_front(n);
        assert_eq!(
            l.heap_bytes(),
            HELD.load(Ordering::SeqCst) - base,
            "drop {n}"
        );
    }
    assert!(l.set_loc(10, u64::MAX, u32::MAX));
    assert_eq!(
        l.heap_bytes(),
        HELD.load(Ordering::SeqCst) - base,
        "set_loc"
    );
    let left = runs.len() - 6316;
    assert_eq!(l.len(), left);
    l.drop_front(left - 10);
    assert_eq!(
        l.heap_bytes(),
        HELD.load(Ordering::SeqCst) - base,
        "back to a vector"
    );
    l.drop_front(usize::MAX);
    assert_eq!(HELD.load(Ordering::SeqCst), base, "all given back");
}
