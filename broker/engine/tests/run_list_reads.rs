//! The cost of reading runs delta-coded (session 35): `partition_point` and walks over
//! 10 000 runs of the benchmark's pattern, against the same runs in a `Vec<Run>`. Printed,
//! not asserted (timings vary with the machine); run with
//! `cargo test --release -p queenmq-engine --test run_list_reads -- --ignored --nocapture`.

use std::hint::black_box;
use std::time::Instant;

use queenmq_engine::state::model::{Run, RunList};

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
    (0..n)
        .map(|_| {
            let out = r;
            r = Run {
                base_offset: r.base_offset + u64::from(r.count),
                count: 1 + next(2) as u32,
                created_us: r.created_us + 1000 + next(2001) as i64,
                index: r.index + next(4),
                pos: next(8 << 20) as u32,
            };
            out
        })
        .collect()
}

/// Nanoseconds per call of `f`, over `n` calls.
fn per_call(n: usize, mut f: impl FnMut(usize) -> u64) -> f64 {
    let t = Instant::now();
    let mut sum = 0u64;
    for i in 0..n {
        sum = sum.wrapping_add(f(i));
    }
    black_box(sum);
    t.elapsed().as_nanos() as f64 / n as f64
}

#[test]
#[ignore = "a timing to print: run in release"]
fn partition_point_and_walks_over_10_000_runs() {
    let runs = bench_runs(10_000);
    let list: RunList = runs.iter().copied().collect();
    let end = runs.last().map_or(0, |r| r.base_offset + 2);
    let at = |i: usize| (i as u64).wrapping_mul(0x9e37_79b9) % end;
    const LOOKUPS: usize = 1_000_000;
    let pp_list = per_call(LOOKUPS, |i| {
        let o = at(i);
        list.partition_point(|r| r.base_offset <= black_box(o)) as u64
    });
    let pp_vec = per_call(LOOKUPS, |i| {
        let o = at(i);
        runs.partition_point(|r| r.base_offset <= black_box(o)) as u64
    });
    // A run read by offset: find it, then read it (model.rs `run_of`).
    let get_list = per_call(LOOKUPS, |i| {
        let o = at(i);
        let k = list.partition_point(|r| r.base_offset <= o);
        list.get(k.saturating_sub(1)).map_or(0, |r| r.index)
    });
    const WALKS: usize = 2_000;
    let walk_list = per_call(WALKS, |_| list.iter().map(|r| u64::from(r.count)).sum());
    let walk_vec = per_call(WALKS, |_| runs.iter().map(|r| u64::from(r.count)).sum());
    let back_list = per_call(WALKS, |_| {
        list.iter().rev().map(|r| u64::from(r.count)).sum()
    });
    println!(
        "10 000 runs: partition_point {pp_list:.0} ns (Vec {pp_vec:.0} ns); \
         partition_point + get {get_list:.0} ns; walk {:.2} ns a run (Vec {:.2}); \
         walk back {:.2} ns a run; {} B held",
        walk_list / 10_000.0,
        walk_vec / 10_000.0,
        back_list / 10_000.0,
        list.heap_bytes()
    );
}
