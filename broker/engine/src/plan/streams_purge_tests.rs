//! The streams reset purge: bounded pages per cycle, only the marked id's rows, the marker
//! last, and a follower and a checkpoint reaching the same state.

use queenmq_protocol::{KvExpiry, KvOp, KvReq, STREAMS_NS};

use super::fixture::Fixture;

fn put(key: &str) -> KvOp {
    KvOp::Put {
        ns: STREAMS_NS.into(),
        key: key.into(),
        value: "1".into(),
        expiry: KvExpiry::Forever,
        expect: None,
        if_absent: false,
        required: false,
    }
}

fn write(fx: &mut Fixture, ops: Vec<KvOp>) {
    fx.planner()
        .plan_kv(&KvReq { ops })
        .expect("kv call accepted");
    fx.commit();
}

fn keys(fx: &Fixture) -> Vec<String> {
    fx.st
        .kv
        .prefix(STREAMS_NS, "", None, i64::MAX / 2)
        .map(|(k, _)| k.to_string())
        .collect()
}

#[test]
fn a_marked_query_id_loses_its_rows_page_by_page_then_its_marker() {
    let mut fx = Fixture::new();
    for chunk in 0..3 {
        let ops = (0..100)
            .map(|i| put(&format!("row/old/7/k{}", chunk * 100 + i)))
            .collect();
        write(&mut fx, ops);
    }
    // A neighbour whose id extends the old one's must keep its rows.
    write(
        &mut fx,
        vec![put("row/old2/7/k"), put("row/new/7/k"), put("id/new")],
    );
    // Nothing marked: the sweep does nothing.
    fx.planner().plan_streams_purge(128, usize::MAX);
    assert!(fx.cycle.entry.is_empty());
    write(&mut fx, vec![put("purging/old")]);
    // No room in the entry: nothing is deleted.
    let full = fx.cycle.entry.len();
    fx.planner().plan_streams_purge(128, full);
    assert!(fx.cycle.entry.is_empty());
    let mut cycles = 0;
    while keys(&fx).iter().any(|k| k.starts_with("purging/")) {
        let before = keys(&fx).len();
        fx.planner().plan_streams_purge(128, usize::MAX);
        fx.commit();
        assert!(before - keys(&fx).len() <= 128, "one page per cycle");
        cycles += 1;
        assert!(cycles <= 4, "300 rows in pages of 128, then the marker");
    }
    assert_eq!(cycles, 4);
    assert_eq!(keys(&fx), ["id/new", "row/new/7/k", "row/old2/7/k"]);
    fx.assert_replays();
}
