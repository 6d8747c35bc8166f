//! HTTP readers and Kafka transactions (docs/kafka-transactions.md, "HTTP never delivers"):
//! pops, the native fetch, the message listing and look-up never return an open or aborted
//! record nor a control marker, an open transaction holds pops at its first offset until it
//! ends, and a restart (replay or checkpoint) hides the same.

use queenmq_protocol::fetch::{
    FetchEntry, FetchReq, FetchedEntry, TxnMark, TxnMarkKind, MAX_FETCH_BYTES,
};
use queenmq_protocol::kafka_txns::*;
use queenmq_protocol::{AckStatus, PopResult, ReadAnswer, ReadReq};

use super::fixture::{opts, pop_req, Fixture};
use super::kafka_txns_tests::{add, codes, end, init, limits, produce, run};
use super::PopPlan;
use crate::entry::Effect;
use crate::entry_kafka_txns::TxnEffect;
use crate::state::canonical::canonical;
use crate::state::kafka_txns::TxnState;
use crate::state::{decode_state, encode_state};

fn ask(fx: &mut Fixture, req: ReadReq) -> ReadAnswer {
    let mut p = fx.planner();
    let (st, mut rd) = p.reader_parts();
    match crate::reads::answer(st, &mut rd, &req) {
        Ok(a) => a,
        Err(e) => panic!("read failed: {}", e.message),
    }
}

fn offsets(popped: &PopResult) -> Vec<u64> {
    popped.messages.iter().map(|m| m.offset).collect()
}

/// Offsets of partition "0" of "t" the native fetch answers from `from`, and its high
/// watermark.
fn fetched(fx: &mut Fixture, from: u64) -> (Vec<u64>, u64) {
    let req = FetchReq {
        entries: vec![FetchEntry {
            queue: "t".into(),
            partition: "0".into(),
            offset: from,
            max_bytes: MAX_FETCH_BYTES,
        }],
        max_bytes: MAX_FETCH_BYTES,
        read_committed: false,
    };
    match ask(fx, ReadReq::VisibleFetch(req)) {
        ReadAnswer::Fetch(a) => {
            let e = &a.entries[0];
            (
                e.records.iter().map(|r| r.offset).collect(),
                e.high_watermark,
            )
        }
        other => panic!("{other:?}"),
    }
}

/// The native fetch of partition "0" of "t" from `from`, within `max_bytes`: the offsets it
/// serves and where it says to read next.
fn fetched_next(fx: &mut Fixture, from: u64, max_bytes: usize) -> (Vec<u64>, u64) {
    let req = FetchReq {
        entries: vec![FetchEntry {
            queue: "t".into(),
            partition: "0".into(),
            offset: from,
            max_bytes,
        }],
        max_bytes,
        read_committed: false,
    };
    match ask(fx, ReadReq::VisibleFetch(req)) {
        ReadAnswer::Fetch(a) => {
            let e = &a.entries[0];
            (e.records.iter().map(|r| r.offset).collect(), e.next_offset)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_native_fetch_moves_past_a_window_that_is_all_hidden() {
    let mut fx = Fixture::new();
    fx.configure("t", opts(|_| {}));
    // 0-1 aborted, 2 its marker, 3 plain, 4 committed, 5 its marker.
    aborted_then_committed(&mut fx);
    assert_eq!(
        fetched_next(&mut fx, 0, MAX_FETCH_BYTES),
        (vec![3, 4], 6),
        "past the commit marker too"
    );
    // A budget of one record: the hidden 0-2 are passed, 3 served, and 4 is next.
    assert_eq!(fetched_next(&mut fx, 0, 1), (vec![3], 4));
    // A window holding only the aborted records and their marker still moves on (review F3):
    // nothing is served, and the next read starts past them, not where it began.
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    add(&mut fx, id, epoch, &[("t", 0)]);
    produce(&mut fx, "0", 3);
    assert_eq!(end(&mut fx, id, epoch, false), TxnCode::None);
    fx.commit();
    assert_eq!(fetched_next(&mut fx, 6, MAX_FETCH_BYTES), (vec![], 10));
    assert_eq!(
        fetched_next(&mut fx, 10, MAX_FETCH_BYTES),
        (vec![], 10),
        "at the end"
    );
    fx.assert_replays();
}

/// Offsets the admin listing shows for "t".
fn listed(fx: &mut Fixture) -> Vec<u64> {
    let req = ReadReq::Messages {
        queue: Some("t".into()),
        limit: 100,
        offset: 0,
    };
    match ask(fx, req) {
        ReadAnswer::Messages(page) => {
            let mut o: Vec<u64> = page.messages.iter().map(|m| m.offset).collect();
            o.sort_unstable();
            o
        }
        other => panic!("{other:?}"),
    }
}

/// Every HTTP reader's view of partition "0" of "t": what a pop delivers from scratch (a
/// new group each time), the native fetch, the listing.
fn every_reader(fx: &mut Fixture, group: &str) -> [Vec<u64>; 3] {
    let popped = fx.pop("t", Some(group), 100, None);
    [offsets(&popped), fetched(fx, 0).0, listed(fx)]
}

/// Offsets 0-1 aborted (marker 2), 3 a plain push, 4 committed (marker 5).
fn aborted_then_committed(fx: &mut Fixture) -> (i64, i16) {
    let (_, id, epoch) = init(fx, "tx", 60_000);
    add(fx, id, epoch, &[("t", 0)]);
    produce(fx, "0", 2);
    assert_eq!(end(fx, id, epoch, false), TxnCode::None);
    fx.push("t", "0", 1);
    add(fx, id, epoch, &[("t", 0)]);
    produce(fx, "0", 1);
    assert_eq!(end(fx, id, epoch, true), TxnCode::None);
    fx.commit();
    (id, epoch)
}

#[test]
fn no_http_reader_returns_an_aborted_record_or_a_marker() {
    let mut fx = Fixture::new();
    fx.configure("t", opts(|_| {}));
    aborted_then_committed(&mut fx);
    let pid = fx.push("t", "0", 1)[0].partition_id;
    fx.commit();
    for (i, seen) in every_reader(&mut fx, "a").iter().enumerate() {
        assert_eq!(seen, &vec![3, 4, 6], "reader {i}");
    }
    // The look-up by transaction id does not find a marker (its transaction id is empty)
    // nor an aborted record.
    let aborted_txn = "m1".to_string();
    let one = |fx: &mut Fixture, txn: &str| {
        let req = ReadReq::Message {
            partition_id: pid.to_string(),
            transaction_id: txn.into(),
        };
        let mut p = fx.planner();
        let (st, mut rd) = p.reader_parts();
        crate::reads::answer(st, &mut rd, &req).is_ok()
    };
    assert!(
        !one(&mut fx, &aborted_txn),
        "an aborted record is not found"
    );
    assert!(!one(&mut fx, ""), "nor a marker");
    assert!(one(&mut fx, "m3"), "a plain push is");
    // A consumer that acks what it got leaves its cursor past every hidden offset.
    let popped = fx.pop("t", Some("b"), 2, None);
    assert_eq!(offsets(&popped), vec![3, 4]);
    fx.ack(&popped, AckStatus::Completed);
    fx.commit();
    let popped = fx.pop("t", Some("b"), 10, None);
    assert_eq!(
        offsets(&popped),
        vec![6],
        "the commit marker at 5 is passed over"
    );
    fx.ack(&popped, AckStatus::Completed);
    fx.assert_replays();
}

#[test]
fn a_claim_of_only_hidden_offsets_moves_the_cursor_without_a_lease() {
    let mut fx = Fixture::new();
    fx.configure("t", opts(|_| {}));
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    add(&mut fx, id, epoch, &[("t", 0)]);
    let pid = produce(&mut fx, "0", 3);
    assert_eq!(end(&mut fx, id, epoch, false), TxnCode::None);
    fx.commit();
    let popped = fx.pop("t", Some("g"), 10, None);
    assert!(popped.messages.is_empty());
    fx.commit();
    let row = fx.group("t", Some("g")).cursors.get(&pid).copied();
    let row = row.expect("a cursor row");
    assert_eq!(row.committed, 4, "past the records and their abort marker");
    assert!(row.lease.is_none());
    fx.assert_replays();
}

#[test]
fn an_open_transaction_holds_pops_until_it_commits() {
    let mut fx = Fixture::new();
    fx.configure("t", opts(|_| {}));
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    add(&mut fx, id, epoch, &[("t", 0)]);
    let pid = produce(&mut fx, "0", 1);
    fx.push("t", "0", 1);
    fx.commit();
    assert!(
        every_reader(&mut fx, "g").iter().all(Vec::is_empty),
        "pinned at offset 0"
    );
    assert_eq!(
        fetched(&mut fx, 0).1,
        0,
        "the native fetch's high watermark is the LSO"
    );
    assert!(
        !fx.group("t", Some("g")).in_ready.contains(&pid),
        "the pinned partition left the ready list"
    );
    fx.commit();
    // Restarts hide the same: a follower's replay and a checkpoint.
    fx.rebuild();
    let back = decode_state(&encode_state(&fx.st)).expect("the checkpoint decodes");
    assert_eq!(canonical(&back), canonical(&fx.st));
    fx.st = back;
    assert!(fx.pop("t", Some("g"), 10, None).messages.is_empty());
    assert_eq!(end(&mut fx, id, epoch, true), TxnCode::None);
    fx.commit();
    // The commit's marker Append made the partition ready again: a parked pop is answered
    // at the commit, not at its timeout.
    assert!(fx.group("t", Some("g")).in_ready.contains(&pid));
    assert_eq!(offsets(&fx.pop("t", Some("g"), 10, None)), vec![0, 1]);
    fx.assert_replays();
}

#[test]
fn conflation_delivers_the_last_visible_record() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 2);
    aborted_then_committed(&mut fx);
    // 0-1 plain, 2-3 aborted, 4 their marker, 5 plain, 6 committed, 7 its marker; then 8
    // aborted, 9 its marker.
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    add(&mut fx, id, epoch, &[("t", 0)]);
    produce(&mut fx, "0", 1);
    assert_eq!(end(&mut fx, id, epoch, false), TxnCode::None);
    fx.commit();
    let mut req = pop_req("t", 10);
    req.group = Some("last".into());
    req.conflation = true;
    let popped = match fx.planner().plan_pop(&req) {
        Ok(PopPlan::Delivered(r)) => r,
        Ok(PopPlan::Empty(_)) => PopResult::default(),
        Err(e) => panic!("pop: {}", e.message),
    };
    assert_eq!(offsets(&popped), vec![6], "not the aborted 8 nor a marker");
    fx.assert_replays();
}

#[test]
fn at_the_aborted_cap_a_new_transaction_waits_but_an_open_one_always_aborts() {
    let mut fx = Fixture::new();
    fx.configure("t", opts(|_| {}));
    let one = TxnLimits {
        max_aborted: 1,
        ..limits()
    };
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    let add_with = |fx: &mut Fixture| {
        codes(run(
            fx,
            KafkaTxnReq::AddPartitions {
                txn_id: "tx".into(),
                producer_id: id,
                epoch,
                partitions: vec![TxnPartition {
                    topic: "t".into(),
                    index: 0,
                    count: 1,
                }],
                limits: one,
            },
        ))
    };
    let end_with = |fx: &mut Fixture, commit: bool| {
        let req = KafkaTxnReq::End {
            txn_id: "tx".into(),
            producer_id: id,
            epoch,
            commit,
            may_commit_offsets: true,
            limits: one,
        };
        codes(run(fx, req))[0]
    };
    assert_eq!(add_with(&mut fx), vec![TxnCode::None]);
    let pid = produce(&mut fx, "0", 1);
    assert_eq!(end_with(&mut fx, false), TxnCode::None);
    assert_eq!(fx.st.kafka_txns.aborted_count(pid), 1, "the cap is reached");
    let before = fx.cycle.entry.len();
    assert_eq!(
        add_with(&mut fx),
        vec![TxnCode::Busy],
        "a transaction that could abort past the cap is not begun"
    );
    assert_eq!(fx.cycle.entry.len(), before, "and nothing was written");
    // One begun below the cap, the cap reached behind it: its abort is never refused
    // (review F2), else the partition's last stable offset would stay behind it forever.
    let (_, other, oe) = init(&mut fx, "tx2", 60_000);
    let add_other = KafkaTxnReq::AddPartitions {
        txn_id: "tx2".into(),
        producer_id: other,
        epoch: oe,
        partitions: vec![TxnPartition {
            topic: "t".into(),
            index: 0,
            count: 1,
        }],
        limits: TxnLimits {
            max_aborted: 2,
            ..one
        },
    };
    assert_eq!(codes(run(&mut fx, add_other)), vec![TxnCode::None]);
    fx.push("t", "0", 1);
    let first = fx.push("t", "0", 1)[0].offset;
    fx.planner().emit(Effect::KafkaTxn(TxnEffect::Records {
        txn_id: "tx2",
        pid,
        base_offset: first,
        count: 1,
    }));
    fx.commit();
    let abort_other = KafkaTxnReq::End {
        txn_id: "tx2".into(),
        producer_id: other,
        epoch: oe,
        commit: false,
        may_commit_offsets: true,
        limits: one,
    };
    assert_eq!(codes(run(&mut fx, abort_other)), vec![TxnCode::None]);
    assert_eq!(
        fx.st.kafka_txns.aborted_count(pid),
        2,
        "past the cap by the open one"
    );
    assert_eq!(
        fx.st.kafka_txns.get("tx2").map(|r| r.state),
        Some(TxnState::Empty)
    );
    fx.assert_replays();
}

/// The Kafka door's fetch of partition "0" of "t" from `from`.
fn kafka_fetch(fx: &mut Fixture, from: u64, read_committed: bool) -> FetchedEntry {
    let req = FetchReq {
        entries: vec![FetchEntry {
            queue: "t".into(),
            partition: "0".into(),
            offset: from,
            max_bytes: MAX_FETCH_BYTES,
        }],
        max_bytes: MAX_FETCH_BYTES,
        read_committed,
    };
    match ask(fx, ReadReq::Fetch(req)) {
        ReadAnswer::Fetch(mut a) => a.entries.remove(0),
        other => panic!("{other:?}"),
    }
}

#[test]
fn kafka_fetch_knows_markers_by_their_frame_and_lists_each_merged_abort() {
    let mut fx = Fixture::new();
    fx.configure("t", opts(|_| {}));
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    // 0-1 aborted (marker 2), 3-4 aborted (marker 5): one merged row 0..=5.
    for _ in 0..2 {
        add(&mut fx, id, epoch, &[("t", 0)]);
        produce(&mut fx, "0", 2);
        assert_eq!(end(&mut fx, id, epoch, false), TxnCode::None);
    }
    fx.push("t", "0", 1);
    // 7 committed (marker 8): a commit leaves no stretch.
    add(&mut fx, id, epoch, &[("t", 0)]);
    let pid = produce(&mut fx, "0", 1);
    assert_eq!(end(&mut fx, id, epoch, true), TxnCode::None);
    fx.commit();
    assert_eq!(fx.st.kafka_txns.aborted_in(pid, 0, 9).len(), 1, "merged");
    let mark = |base_offset, count, producer_id, epoch, kind| TxnMark {
        base_offset,
        count,
        producer_id,
        epoch,
        kind,
    };
    let got = kafka_fetch(&mut fx, 0, true);
    assert_eq!(got.records.len(), 9);
    assert_eq!(
        got.txn_marks,
        vec![
            mark(0, 2, id, epoch, TxnMarkKind::Data),
            mark(2, 1, id, epoch, TxnMarkKind::AbortMarker),
            mark(3, 2, id, epoch, TxnMarkKind::Data),
            mark(5, 1, id, epoch, TxnMarkKind::AbortMarker),
            mark(8, 1, -1, -1, TxnMarkKind::CommitMarker),
        ]
    );
    let listed = |e: &FetchedEntry| -> Vec<(i64, u64)> {
        e.aborted
            .iter()
            .map(|a| (a.producer_id, a.first_offset))
            .collect()
    };
    assert_eq!(
        listed(&got),
        vec![(id, 0), (id, 3)],
        "each abort of the row"
    );
    // From inside the second transaction the client never sees marker 2: the row's start
    // stands for what follows.
    let got = kafka_fetch(&mut fx, 4, true);
    assert_eq!(listed(&got), vec![(id, 0)]);
    assert_eq!(got.txn_marks[0], mark(4, 1, id, epoch, TxnMarkKind::Data));
    assert_eq!(got.txn_marks[1].kind, TxnMarkKind::AbortMarker);
    let got = kafka_fetch(&mut fx, 0, false);
    assert!(got.aborted.is_empty(), "read_uncommitted lists nothing");
    assert_eq!(got.txn_marks.len(), 5);
}

/// Review s16 kafka L3: a request naming several partitions at the aborted cap counts once
/// in `queen_kafka_txn_refused_total{reason="aborted_cap"}`, which counts requests.
#[test]
fn a_request_refused_at_the_aborted_cap_counts_once() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let mut fx = Fixture::new();
    fx.configure("t", opts(|_| {}));
    let one = TxnLimits {
        max_aborted: 1,
        ..limits()
    };
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    let add_three = |fx: &mut Fixture| {
        codes(run(
            fx,
            KafkaTxnReq::AddPartitions {
                txn_id: "tx".into(),
                producer_id: id,
                epoch,
                partitions: (0..3)
                    .map(|index| TxnPartition {
                        topic: "t".into(),
                        index,
                        count: 3,
                    })
                    .collect(),
                limits: one,
            },
        ))
    };
    assert_eq!(add_three(&mut fx), vec![TxnCode::None; 3]);
    for p in ["0", "1", "2"] {
        produce(&mut fx, p, 1);
    }
    assert_eq!(end(&mut fx, id, epoch, false), TxnCode::None);
    let refused = metrics::with_local_recorder(&recorder, || add_three(&mut fx));
    assert_eq!(refused, vec![TxnCode::Busy; 3]);
    let text = handle.render();
    let want = r#"queen_kafka_txn_refused_total{reason="aborted_cap"} 1"#;
    assert!(text.contains(want), "missing {want} in\n{text}");
}
