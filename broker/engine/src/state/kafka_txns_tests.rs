use super::*;
use crate::codec::{Reader, Writer};

/// A tenant where "tx" (producer 7, epoch 1, timeout 1 s) opened a transaction at 100 µs
/// over partitions 1 and 2 and group "g".
fn open() -> KafkaTxns {
    let mut t = KafkaTxns::default();
    assert!(t.init("tx", 7, 1, 1000, 50));
    assert!(t.add("tx", 7, 1, &[1, 2], &["g"], 100));
    t
}

#[test]
fn a_commit_releases_the_lso_and_leaves_no_stretch() {
    let mut t = open();
    assert_eq!(t.lso(1, 0, 10), 10, "nothing written yet");
    assert!(t.records("tx", 1, 4, 3, 7));
    assert!(t.records("tx", 1, 8, 1, 9));
    assert_eq!(t.lso(1, 0, 9), 4);
    assert_eq!(t.lso(2, 0, 9), 9, "partition 2 added but unwritten");
    assert!(
        t.hidden(1, 5),
        "open records are hidden too (past the LSO anyway)"
    );
    assert!(
        !t.end("tx", TxnEnd::Commit, &[(1, 9), (2, 3)], 200),
        "a marker on an unwritten partition"
    );
    assert!(!t.end("tx", TxnEnd::Commit, &[(1, 3)], 200), "marker below");
    assert!(t.end("tx", TxnEnd::Commit, &[(1, 9)], 200));
    assert_eq!(t.lso(1, 0, 10), 10);
    // The commit marker is known by its frame, not by the index (review K3).
    assert!(!t.hidden(1, 9) && !t.hidden(1, 4) && !t.hidden(1, 8));
    assert!(t.part(1).is_none(), "a commit leaves nothing in the index");
    assert!(t.aborted_in(1, 0, 10).is_empty());
    let row = t.get("tx").expect("row");
    assert_eq!(
        (row.state, row.last_result),
        (TxnState::Empty, TxnResult::Committed)
    );
    assert!(row.partitions.is_empty() && row.groups.is_empty());
    assert_eq!(t.open_count(), 0);
}

#[test]
fn an_abort_hides_its_records_and_lists_itself() {
    let mut t = open();
    assert!(t.records("tx", 2, 0, 2, 2));
    assert!(t.records("tx", 2, 5, 2, 7));
    assert!(t.end("tx", TxnEnd::Abort, &[(2, 7)], 200));
    for o in [0, 1, 5, 6, 7] {
        assert!(t.hidden(2, o), "offset {o}");
    }
    for o in [2, 3, 4, 8] {
        assert!(!t.hidden(2, o), "offset {o} is another producer's");
    }
    let aborted = t.aborted_in(2, 6, 100);
    assert_eq!(
        aborted,
        vec![AbortedRow {
            producer_id: 7,
            first_offset: 0,
            last_offset: 7
        }]
    );
    assert!(t.aborted_in(2, 8, 100).is_empty());
    assert_eq!(t.get("tx").map(|r| r.last_result), Some(TxnResult::Aborted));
}

#[test]
fn what_the_planner_never_asks_for_changes_nothing() {
    let mut t = open();
    assert!(
        !t.init("tx", 7, 2, 1000, 120),
        "an open transaction is aborted first"
    );
    assert!(!t.add("tx", 7, 0, &[3], &[], 120), "stale epoch");
    assert!(!t.records("tx", 3, 0, 1, 1), "partition not added");
    assert!(!t.records("tx", 1, 0, 0, 1), "no records");
    assert!(!t.records("tx", 1, 0, 2, 1), "past the partition's end");
    assert!(t.records("tx", 1, 0, 2, 2));
    assert!(!t.records("tx", 1, 1, 1, 2), "overlaps");
    let key = ("other".to_owned(), "t".to_owned(), 0);
    let off = PendingOffset {
        offset: 5,
        leader_epoch: -1,
        metadata: String::new(),
    };
    assert!(!t.offset("tx", key, off.clone(), 120), "group not added");
    assert!(t.offset("tx", ("g".to_owned(), "t".to_owned(), 0), off, 120));
    assert!(
        !t.end("tx", TxnEnd::Expire, &[], 120),
        "open rows do not expire"
    );
    assert!(!t.end("nope", TxnEnd::Abort, &[], 120));
    assert!(t.end("tx", TxnEnd::Abort, &[(1, 2)], 130));
    assert!(!t.end("tx", TxnEnd::Commit, &[], 140), "nothing open");
    assert!(t.get("tx").is_some_and(|r| r.pending.is_empty()));
}

#[test]
fn open_transactions_come_due_at_their_timeout() {
    let mut t = open();
    assert!(t.init("b", 8, 0, 10, 60));
    assert!(t.add("b", 8, 0, &[], &["g"], 100));
    assert!(t.due(100 + 10_000, 10).is_empty(), "due after, not at");
    assert_eq!(t.due(100 + 10_001, 10), vec!["b".to_owned()]);
    assert_eq!(t.due(i64::MAX, 1), vec!["b".to_owned()]);
    assert_eq!(t.due(i64::MAX, 10).len(), 2);
    assert!(t.end("b", TxnEnd::Abort, &[], 200));
    assert_eq!(t.due(i64::MAX, 10), vec!["tx".to_owned()]);
    assert_eq!(t.idle_before(201, 10), vec!["b".to_owned()]);
    assert!(t.end("b", TxnEnd::Expire, &[], 300));
    assert!(t.get("b").is_none() && t.by_producer(8).is_none());
    assert_eq!(t.by_producer(7), Some("tx"));
}

#[test]
fn a_new_producer_id_replaces_the_old_in_the_index() {
    let mut t = KafkaTxns::default();
    assert!(t.init("tx", 7, 32_766, 1000, 1));
    assert!(t.init("tx", 9, 0, 1000, 2));
    assert_eq!(t.by_producer(9), Some("tx"));
    assert_eq!(t.by_producer(7), None);
}

#[test]
fn trimming_forgets_what_lies_below_and_keeps_open_transactions() {
    let mut t = open();
    assert!(t.records("tx", 1, 0, 2, 2));
    assert!(t.end("tx", TxnEnd::Abort, &[(1, 2)], 200));
    assert!(t.add("tx", 7, 1, &[1], &[], 300));
    assert!(t.records("tx", 1, 3, 1, 4));
    let before = t.bytes();
    t.trim(1, 2);
    assert!(t.hidden(1, 2), "the marker at the low offset stays");
    assert_eq!(t.aborted_in(1, 0, 10).len(), 1);
    t.trim(1, 4);
    assert!(t.aborted_in(1, 0, 10).is_empty());
    assert!(t.bytes() < before);
    assert_eq!(
        t.lso(1, 0, 10),
        3,
        "the open transaction still holds the LSO"
    );
    t.forget_partition(1);
    assert_eq!(t.lso(1, 0, 10), 10);
    assert!(t.get("tx").is_some_and(|r| r.partitions.is_empty()));
}

fn encoded(t: &KafkaTxns) -> Writer {
    let mut w = Writer::default();
    t.encode(&mut w);
    w
}

fn decode(w: &Writer) -> Result<KafkaTxns, crate::codec::DecodeError> {
    let next = |pid: u64| (pid < 5).then_some(20);
    KafkaTxns::decode(&mut Reader::new(&w.buf), 1_000, &next)
}

#[test]
fn the_section_round_trips_with_its_derived_indexes() {
    let mut t = open();
    assert!(t.records("tx", 1, 0, 2, 2));
    assert!(t.records("tx", 2, 3, 1, 4));
    assert!(t.offset(
        "tx",
        ("g".to_owned(), "topic".to_owned(), 3),
        PendingOffset {
            offset: 9,
            leader_epoch: 2,
            metadata: "m".to_owned()
        },
        150
    ));
    assert!(t.init("done", 8, 0, 5, 60));
    assert!(t.add("done", 8, 0, &[3], &[], 70));
    assert!(t.records("done", 3, 0, 4, 4));
    assert!(t.end("done", TxnEnd::Abort, &[(3, 4)], 80));
    let back = decode(&encoded(&t)).expect("decodes");
    assert_eq!(back.get("tx"), t.get("tx"));
    assert_eq!(back.get("done"), t.get("done"));
    for pid in 1..=3 {
        assert_eq!(back.part(pid), t.part(pid), "partition {pid}");
        assert_eq!(back.lso(pid, 0, 20), t.lso(pid, 0, 20));
    }
    assert_eq!(back.bytes(), t.bytes());
    assert_eq!(back.due(i64::MAX, 10), t.due(i64::MAX, 10));
    assert_eq!(back.by_producer(8), Some("done"));
    assert_eq!(encoded(&back).buf, encoded(&t).buf);
}

#[test]
fn the_section_refuses_what_apply_never_makes() {
    // One row: id, producer 1, epoch 0, timeout, state, started, last, result, then
    // partitions, groups and pending as the closure writes them; then no partitions.
    let row = |state: u8, started: i64, body: &dyn Fn(&mut Writer)| {
        let mut w = Writer::default();
        w.u32(1);
        w.str("tx");
        w.i64(1);
        w.u16(0);
        w.u32(1000);
        w.u8(state);
        w.i64(started);
        w.i64(0);
        w.u8(0);
        body(&mut w);
        w.u32(0);
        w
    };
    let nothing = |w: &mut Writer| {
        w.u32(0);
        w.u32(0);
        w.u32(0);
    };
    let one_partition = |pid: u64, first: u64| {
        move |w: &mut Writer| {
            w.u32(1);
            w.u64(pid);
            w.u8(1);
            w.u64(first);
            w.u32(0);
            w.u32(0);
        }
    };
    assert!(decode(&row(0, 0, &nothing)).is_ok());
    assert!(decode(&row(1, 0, &one_partition(1, 3))).is_ok());
    let refused: Vec<(&str, Writer)> = vec![
        ("state byte", row(2, 0, &nothing)),
        ("started in the future", row(1, 1_001, &nothing)),
        (
            "empty row holding a partition",
            row(0, 0, &one_partition(1, 3)),
        ),
        ("unknown partition", row(1, 0, &one_partition(9, 3))),
        (
            "first offset past the end",
            row(1, 0, &one_partition(1, 20)),
        ),
    ];
    for (why, w) in refused {
        assert!(decode(&w).is_err(), "{why} decoded");
    }
    // Partitions: overlapping stretches, a marker of two offsets, an aborted row past the end.
    let part = |stretches: &[(u64, u32, u8)], aborted: &[(u64, u64)]| {
        let mut w = Writer::default();
        w.u32(0);
        w.u32(1);
        w.u64(1);
        w.u32(stretches.len() as u32);
        for (base, count, kind) in stretches {
            w.u64(*base);
            w.u32(*count);
            w.i64(1);
            w.u16(0);
            w.u8(*kind);
        }
        w.u32(aborted.len() as u32);
        for (first, last) in aborted {
            w.i64(1);
            w.u64(*first);
            w.u64(*last);
        }
        w
    };
    assert!(decode(&part(&[(0, 2, 1), (2, 1, 3)], &[(0, 2)])).is_ok());
    for (why, w) in [
        ("overlap", part(&[(0, 2, 1), (1, 1, 3)], &[])),
        ("wide marker", part(&[(0, 2, 2)], &[])),
        ("kind byte", part(&[(0, 1, 4)], &[])),
        ("past the end", part(&[(19, 2, 1)], &[])),
        ("aborted past the end", part(&[], &[(0, 20)])),
        ("aborted reversed", part(&[], &[(3, 2)])),
    ] {
        assert!(decode(&w).is_err(), "{why} decoded");
    }
}

/// Review K3: the index holds no commit and one row and stretch for a loop of aborts.
#[test]
fn ten_thousand_commits_leave_no_stretch_and_adjacent_aborts_one() {
    let mut t = KafkaTxns::default();
    assert!(t.init("tx", 7, 0, 1000, 0));
    let base_bytes = t.bytes();
    let mut next = 0u64;
    for _ in 0..10_000 {
        assert!(t.add("tx", 7, 0, &[1], &[], 1));
        assert!(t.records("tx", 1, next, 1, next + 1));
        assert!(t.end("tx", TxnEnd::Commit, &[(1, next + 1)], 2));
        next += 2;
    }
    assert!(t.part(1).is_none(), "commits leave nothing in the index");
    assert_eq!(t.bytes(), base_bytes);
    let first_abort = next;
    for _ in 0..10_000 {
        assert!(t.add("tx", 7, 0, &[1], &[], 3));
        assert!(t.records("tx", 1, next, 1, next + 1));
        assert!(t.end("tx", TxnEnd::Abort, &[(1, next + 1)], 4));
        next += 2;
    }
    let part = t.part(1).expect("aborted index");
    assert_eq!(part.stretches.len(), 1, "adjacent aborts merge");
    let (base, s) = part
        .stretches
        .iter()
        .next()
        .map(|(b, s)| (*b, *s))
        .expect("one");
    assert_eq!(
        (base, s.count, s.kind),
        (first_abort, 20_000, StretchKind::Aborted)
    );
    assert_eq!(
        part.aborted.iter().copied().collect::<Vec<_>>(),
        vec![AbortedRow {
            producer_id: 7,
            first_offset: first_abort,
            last_offset: next - 1,
        }]
    );
    assert!(
        !t.abort_adds_row(1, 7, next),
        "the next adjacent abort joins the row"
    );
    assert!(t.abort_adds_row(1, 7, next + 1), "one after a gap does not");
    assert!(t.abort_adds_row(1, 8, next), "nor another producer's");
    let far = |pid: u64| (pid < 5).then_some(100_000);
    let back = KafkaTxns::decode(&mut Reader::new(&encoded(&t).buf), 1_000, &far);
    assert_eq!(
        back.map(|b| b.bytes()).ok(),
        Some(t.bytes()),
        "the byte count survives a checkpoint"
    );
}

#[test]
fn aborts_of_two_producers_interleaved_keep_their_rows_apart() {
    let mut t = KafkaTxns::default();
    assert!(t.init("a", 1, 0, 1000, 0));
    assert!(t.init("b", 2, 0, 1000, 0));
    let mut next = 0u64;
    for _ in 0..50 {
        for (id, pid) in [("a", 1i64), ("b", 2)] {
            assert!(t.add(id, pid, 0, &[1], &[], 1));
            assert!(t.records(id, 1, next, 1, next + 1));
            assert!(t.end(id, TxnEnd::Abort, &[(1, next + 1)], 2));
            next += 2;
        }
    }
    assert_eq!(t.aborted_count(1), 100);
    // The binary search answers what a scan would.
    let all: Vec<AbortedRow> = t
        .part(1)
        .map(|p| p.aborted.iter().copied().collect())
        .unwrap_or_default();
    for (from, to) in [(0, 1), (0, 200), (3, 4), (57, 90), (199, 300), (200, 300)] {
        let scan: Vec<AbortedRow> = all
            .iter()
            .filter(|a| a.first_offset < to && a.last_offset >= from)
            .copied()
            .collect();
        assert_eq!(t.aborted_in(1, from, to), scan, "{from}..{to}");
    }
    assert_eq!(
        t.hidden_ranges(1, 0, 200),
        vec![(0, 200)],
        "one walk, ranges joined"
    );
    assert_eq!(t.hidden_ranges(1, 10, 12), vec![(10, 12)]);
    assert_eq!(
        t.hidden_ranges_upto(1, 1, 200, 3),
        (vec![(1, 6)], 6),
        "three stretches, and where they stop describing"
    );
    assert_eq!(
        t.hidden_ranges_upto(1, 1, 200, 0),
        (vec![(1, 2)], 2),
        "always progress"
    );
    assert_eq!(
        t.hidden_run_start(1, 199),
        Some(0),
        "adjacent stretches are one run"
    );
    assert_eq!(t.hidden_run_start(1, 200), None);
}

#[test]
fn the_lso_never_falls_below_the_log_start() {
    let mut t = open();
    assert!(t.records("tx", 1, 3, 2, 5));
    assert_eq!(t.lso(1, 0, 10), 3);
    t.trim(1, 6);
    assert_eq!(t.lso(1, 6, 10), 6, "clamped to the log start");
    assert_eq!(t.lso(1, 12, 10), 10, "and never past the next offset");
    assert!(t.withheld(1, 6, 10, 6) && !t.withheld(2, 0, 10, 9));
}

#[test]
fn deleting_a_topic_forgets_its_pending_offsets() {
    let mut t = open();
    let po = |o| PendingOffset {
        offset: o,
        leader_epoch: -1,
        metadata: "m".into(),
    };
    assert!(t.offset("tx", ("g".into(), "gone".into(), 0), po(5), 1));
    assert!(t.offset("tx", ("g".into(), "kept".into(), 0), po(6), 1));
    t.forget_topic("gone");
    let keys: Vec<_> = t
        .get("tx")
        .map(|r| r.pending.keys().cloned().collect())
        .unwrap_or_default();
    assert_eq!(keys, vec![("g".to_string(), "kept".to_string(), 0)]);
    let back = decode(&encoded(&t)).expect("decodes");
    assert_eq!(back.bytes(), t.bytes());
}

#[test]
fn an_aborted_transaction_that_began_first_and_ended_last_is_listed() {
    // Review F1: b writes 0, a writes 1, a aborts (marker 2), b aborts (marker 3). Rows are
    // in marker order [a(1..=2), b(0..=3)]: b's first offset is below a's.
    let mut t = KafkaTxns::default();
    assert!(t.init("a", 1, 0, 1000, 0));
    assert!(t.init("b", 2, 0, 1000, 0));
    assert!(t.add("b", 2, 0, &[1], &[], 1));
    assert!(t.records("b", 1, 0, 1, 1));
    assert!(t.add("a", 1, 0, &[1], &[], 1));
    assert!(t.records("a", 1, 1, 1, 2));
    assert!(t.end("a", TxnEnd::Abort, &[(1, 2)], 2));
    assert!(t.end("b", TxnEnd::Abort, &[(1, 3)], 2));
    let producers = |from, to| -> Vec<i64> {
        t.aborted_in(1, from, to)
            .iter()
            .map(|a| a.producer_id)
            .collect()
    };
    assert_eq!(producers(0, 1), vec![2], "b's record 0");
    assert_eq!(producers(0, 4), vec![1, 2]);
    assert_eq!(producers(2, 3), vec![1, 2]);
}

#[test]
fn pending_offsets_are_unstable_until_their_transaction_ends() {
    let mut t = open();
    let po = PendingOffset {
        offset: 5,
        leader_epoch: -1,
        metadata: String::new(),
    };
    assert!(t.offset("tx", ("g".into(), "in".into(), 0), po, 1));
    let asked = vec![("in".to_string(), 0), ("in".to_string(), 1)];
    assert_eq!(t.pending_of("g", &asked), vec![true, false]);
    assert_eq!(t.pending_of("other", &asked), vec![false, false]);
    assert!(t.end("tx", TxnEnd::Commit, &[], 2));
    assert_eq!(t.pending_of("g", &asked), vec![false, false]);
}

/// What `pending_of` must answer, by a walk of every open transaction's pending offsets.
fn pending_scan(t: &KafkaTxns, group: &str) -> BTreeSet<(String, i32)> {
    t.rows()
        .filter(|(_, r)| r.state == TxnState::Ongoing)
        .flat_map(|(_, r)| r.pending.keys())
        .filter(|(g, _, _)| g == group)
        .map(|(_, t, p)| (t.clone(), *p))
        .collect()
}

fn check_pending(t: &KafkaTxns) -> Result<(), proptest::test_runner::TestCaseError> {
    use proptest::{prop_assert, prop_assert_eq};
    let asked: Vec<(String, i32)> = ["t0", "t1"]
        .iter()
        .flat_map(|t| (0..3).map(move |p| (t.to_string(), p)))
        .collect();
    for g in ["g0", "g1", "g2"] {
        let want = pending_scan(t, g);
        let got = t.pending_of(g, &asked);
        let expected: Vec<bool> = asked.iter().map(|a| want.contains(a)).collect();
        prop_assert_eq!(got, expected, "group {}", g);
        let (listed, complete) = t.pending_in(g, 100);
        prop_assert!(complete);
        prop_assert_eq!(listed.into_iter().collect::<BTreeSet<_>>(), want);
    }
    Ok(())
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Review s16 kafka M2: the pending-offset index answers what a walk of every open
    /// transaction answers, through adds, offsets, ends, a deleted topic and a checkpoint.
    #[test]
    fn the_pending_offset_index_matches_a_walk_of_the_open_transactions(
        ops in proptest::collection::vec((0u8..6, 0u8..3, 0u8..3, 0u8..2, 0i32..3), 1..60)
    ) {
        let mut t = KafkaTxns::default();
        let mut epochs = [0i16; 3];
        for (n, tx) in ["x0", "x1", "x2"].iter().enumerate() {
            proptest::prop_assert!(t.init(tx, n as i64 + 1, 0, 1000, 1));
        }
        for (step, (op, x, g, topic, p)) in ops.into_iter().enumerate() {
            let now = step as i64 + 10;
            let tx = ["x0", "x1", "x2"][x as usize];
            let pid = i64::from(x) + 1;
            let epoch = epochs[x as usize];
            let group = ["g0", "g1", "g2"][g as usize];
            let topic = ["t0", "t1"][topic as usize];
            match op {
                0 => {
                    t.add(tx, pid, epoch, &[], &[group], now);
                }
                1 | 2 => {
                    t.offset(
                        tx,
                        (group.to_owned(), topic.to_owned(), p),
                        PendingOffset { offset: now, leader_epoch: 0, metadata: "m".into() },
                        now,
                    );
                }
                3 => {
                    let how = if p == 0 { TxnEnd::Commit } else { TxnEnd::Abort };
                    if t.end(tx, how, &[], now) {
                        epochs[x as usize] += 1;
                        proptest::prop_assert!(t.init(tx, pid, epoch + 1, 1000, now));
                    }
                }
                4 => t.forget_topic(topic),
                _ => {
                    let back = decode(&encoded(&t)).expect("decodes");
                    proptest::prop_assert_eq!(back.bytes(), t.bytes());
                    t = back;
                }
            }
            check_pending(&t)?;
        }
        let back = decode(&encoded(&t)).expect("decodes");
        proptest::prop_assert_eq!(back.bytes(), t.bytes(), "the index's bytes are rebuilt");
        check_pending(&back)?;
    }
}

#[test]
fn a_retry_pair_rides_after_the_partitions_and_a_bad_one_is_refused() {
    let mut t = KafkaTxns::default();
    assert!(t.init("tx", 7, 1, 1000, 100));
    let plain = encoded(&t);
    assert!(t.bumped_from("tx", (7, 0)));
    let with_pair = encoded(&t);
    assert_eq!(&with_pair.buf[..plain.buf.len()], &plain.buf[..]);
    let back = decode(&with_pair).expect("decodes");
    assert_eq!(back.get("tx").and_then(|r| r.bumped_from), Some((7, 0)));
    // A checkpoint written before the pairs existed reads as none.
    assert_eq!(
        decode(&plain)
            .ok()
            .and_then(|b| b.get("tx").map(|r| r.bumped_from)),
        Some(None)
    );
    // A later init forgets the pair; the effect is refused for an unknown row.
    assert!(t.init("tx", 7, 2, 1000, 200));
    assert_eq!(t.get("tx").and_then(|r| r.bumped_from), None);
    assert!(!t.bumped_from("nope", (7, 0)));
    // Only the pair the current one was bumped from is taken, by apply and by decode: an
    // unknown row, a pair that is not the predecessor, a negative epoch, a producer id out
    // of range, a repeated row, another layout or a count past the bytes fails.
    assert!(
        !t.bumped_from("tx", (7, 0)),
        "(7, 2) was not bumped from (7, 0)"
    );
    assert!(!t.bumped_from("tx", (7, 2)));
    assert!(t.bumped_from("tx", (7, 1)));
    let trailer = |layout: u8, count: u32, pairs: &[(&str, i64, u16)]| {
        let mut w = Writer {
            buf: plain.buf.clone(),
        };
        w.u8(layout);
        w.u32(count);
        for (id, producer_id, epoch) in pairs {
            w.str(id);
            w.i64(*producer_id);
            w.u16(*epoch);
        }
        w
    };
    assert!(decode(&trailer(1, 1, &[("tx", 7, 0)])).is_ok());
    for (layout, count, pairs) in [
        (1u8, 1u32, vec![("nope", 7i64, 0u16)]),
        (1, 1, vec![("tx", 7, 1)]),
        (1, 1, vec![("tx", 7, u16::MAX)]),
        (1, 1, vec![("tx", -1, 0)]),
        (1, 1, vec![("tx", i64::MAX, 0)]),
        (1, 2, vec![("tx", 7, 0), ("tx", 7, 0)]),
        (2, 1, vec![("tx", 7, 0)]),
        (1, u32::MAX, vec![("tx", 7, 0)]),
    ] {
        assert!(
            decode(&trailer(layout, count, &pairs)).is_err(),
            "{layout} {count} {pairs:?} decoded"
        );
    }
}

#[test]
fn a_pair_past_the_last_epoch_names_the_old_producer() {
    let mut t = KafkaTxns::default();
    let last = crate::state::kafka_txns::LAST_EPOCH;
    assert!(t.init("tx", 7, last, 1000, 100));
    assert!(t.init("tx", 8, 0, 1000, 200));
    assert!(
        !t.bumped_from("tx", (8, last)),
        "the same id does not rotate"
    );
    assert!(!t.bumped_from("tx", (7, last - 1)));
    assert!(t.bumped_from("tx", (7, last)));
    let back = decode(&encoded(&t)).expect("decodes");
    assert_eq!(back.get("tx").and_then(|r| r.bumped_from), Some((7, last)));
}
