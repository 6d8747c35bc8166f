//! What `begin_checkpoint` costs under the state lock at a million partitions with a cursor
//! each and millions of transaction ids (issue 12), part by part, with the caches cold as
//! after a cycle's work. An integration test so the engine is built as the broker runs it
//! (the unit tests shrink the shards and chunks to a few rows). Ignored: it builds about a
//! gigabyte of state; run it in release with
//!
//!   cargo test --release -p queenmq-engine --test checkpoint_pause -- --ignored --nocapture
//!
//! PARTS (1 000 000), IDS (10 000 000) and RUNS (50) size it.

use std::time::{Duration, Instant};

use queenmq_engine::entry::Effect;
use queenmq_engine::state::model::CursorRow;
use queenmq_engine::state::{begin_checkpoint, Loc, State};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn build(parts: u64, ids: u64) -> State {
    let mut s = State::default();
    let loc = Loc { index: 1, pos: 0 };
    s.apply(
        &Effect::QueueUpsert {
            qid: 1,
            name: "q",
            namespace: "",
            task: "",
            configured: true,
            config: Default::default(),
        },
        0,
        loc,
    );
    s.apply(
        &Effect::GroupRegister {
            qid: 1,
            gid: 1,
            name: "g",
            start_from_us: i64::MIN,
        },
        0,
        loc,
    );
    for pid in 0..parts {
        let name = pid.to_string();
        s.apply(
            &Effect::PartitionCreate {
                qid: 1,
                pid,
                name: &name,
            },
            0,
            loc,
        );
        let row = CursorRow {
            committed: 1,
            delivered_end: 1,
            ..Default::default()
        };
        s.apply(&Effect::CursorPut { gid: 1, pid, row }, 0, loc);
    }
    let hashes: Vec<u64> = (0..100).collect();
    let mut n = 0u64;
    while n < ids {
        let pid = (n / 100) % parts.max(1);
        let batch: Vec<u64> = hashes.iter().map(|h| n + h).collect();
        s.txn_ids.record(n as i64, pid, n, &batch);
        n += 100;
    }
    s
}

/// Evicts the caches as a cycle's work between two checkpoints would (64 MB touched).
fn chill(buf: &mut [u8], round: u8) {
    for b in buf.iter_mut().step_by(64) {
        *b = b.wrapping_add(round);
    }
    std::hint::black_box(&buf);
}

#[derive(Default)]
struct Times(Vec<Duration>);

impl Times {
    fn line(&mut self, name: &str) {
        self.0.sort();
        let n = self.0.len().max(1);
        let mean = self.0.iter().sum::<Duration>() / n as u32;
        let p50 = self.0[n / 2];
        let max = self.0[n - 1];
        println!("{name:<28} mean {mean:>10.3?}  p50 {p50:>10.3?}  max {max:>10.3?}");
    }
}

#[test]
#[ignore]
fn begin_checkpoint_at_a_million_cursors() {
    let parts = env("PARTS", 1_000_000) as u64;
    let ids = env("IDS", 10_000_000) as u64;
    let runs = env("RUNS", 50);
    let started = Instant::now();
    let s = build(parts, ids);
    println!(
        "built {parts} partitions, {} cursors, {} ids in {:?}",
        s.groups.values().map(|g| g.cursors.len()).sum::<usize>(),
        s.txn_ids.len(),
        started.elapsed()
    );
    let mut cold = vec![0u8; 64 << 20];
    let (mut whole, mut cursors, mut order, mut table, mut txn) = Default::default();
    let mut all: [&mut Times; 5] = [&mut whole, &mut cursors, &mut order, &mut table, &mut txn];
    for round in 0..runs {
        for (part, times) in all.iter_mut().enumerate() {
            chill(&mut cold, round as u8);
            let t = Instant::now();
            // Each part's taken value is dropped after the clock stops, as the broker drops
            // a checkpoint's snapshot off the lock.
            let taken: Box<dyn std::any::Any> = match part {
                0 => Box::new(begin_checkpoint(&s)),
                1 => Box::new(
                    s.groups
                        .values()
                        .map(|g| g.cursors.snapshot())
                        .collect::<Vec<_>>(),
                ),
                2 => Box::new(
                    s.queues
                        .values()
                        .map(|q| q.partition_order.clone())
                        .collect::<Vec<_>>(),
                ),
                3 => Box::new(s.partitions.snapshot()),
                _ => Box::new(s.txn_ids.snapshot()),
            };
            times.0.push(t.elapsed());
            drop(std::hint::black_box(taken));
        }
    }
    println!("{runs} runs, caches cold before each");
    whole.line("begin_checkpoint");
    cursors.line("  cursors.snapshot");
    order.line("  partition_order.clone");
    table.line("  partitions.snapshot");
    txn.line("  txn_ids.snapshot");
}
