//! What a compactor's look holds in memory (review s16 compactor M2): a counting allocator
//! sees the peak of the heap while a look reads a segment of large entries, each holding one
//! large live run, with a budget for one of them. Each live run once kept its whole entry
//! alive until the look ended, so a look held about the whole segment under the state lock.
//! Its own binary, so the allocator counts this test alone.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use queenmq_engine::plan::fixture::Fixture;
use queenmq_engine::plan::{Memo, Segment};
use queenmq_protocol::PushItem;

#[path = "../engine/tests/support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{HELD, PEAK};

const ENTRIES: usize = 32;
const PAYLOAD: usize = 64 << 10;

fn big(partition: usize) -> PushItem {
    let mut payload = vec![b'x'; PAYLOAD];
    payload[0] = b'"';
    payload[PAYLOAD - 1] = b'"';
    PushItem {
        queue: "keep".into(),
        partition: format!("p{partition}"),
        payload: Bytes::from(payload),
        transaction_id: Some(format!("t{partition}")),
        trace_id: None,
    }
}

#[test]
fn a_look_holds_what_it_copies_and_one_entry_not_the_segment() {
    let mut f = Fixture::new();
    for p in 0..ENTRIES {
        if let Err(e) = f.planner().plan_push(&[big(p)], None) {
            panic!("push: {}", e.message);
        }
        f.commit();
    }
    let last = *f.log.entries.keys().last().expect("entries");
    // The segment's file is made large, so the live runs are under a quarter of what the
    // copy frees: the look reads every one of them.
    let seg = Segment {
        first: 1,
        last,
        bytes: 1 << 40,
    };
    f.log.sealed = vec![(1, last, seg.bytes)];
    // A budget for one run and a bit: the copy takes one, the others wait.
    let budget = (PAYLOAD + PAYLOAD / 2) as u64;
    let mut planner = f.planner();
    let before = HELD.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    let c = planner.plan_compaction(seg, budget, usize::MAX, None, false, &mut Memo::default());
    let peak = PEAK.load(Ordering::SeqCst) - before;
    let c = c.unwrap_or_else(|e| panic!("the look failed: {e}"));
    assert_eq!((c.runs, c.more), (1, true), "{c:?}");
    // One entry read, the one run copied out of it, the cycle's entry growing by the copy,
    // and the look's small vectors: a few payloads, never the segment's 32.
    assert!(
        peak < 8 * PAYLOAD,
        "a look held {peak} bytes for a budget of {budget} (entries of {PAYLOAD})"
    );
}
