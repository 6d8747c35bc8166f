//! DescribeTransactions, ListTransactions and DescribeProducers answered from the fixture's
//! state (reads/kafka_txns.rs): the state names, the filters, unknown ids and partitions, the
//! per-request caps and the one budget of each answer (review s16 kafka H1, M3, L2, L4).

use queenmq_protocol::kafka_producers::{
    InitProducerOutcome, KafkaProducersReq, DEFAULT_PRODUCER_ID_EXPIRATION_MS,
};
use queenmq_protocol::kafka_txn_reads::*;
use queenmq_protocol::kafka_txns::*;
use queenmq_protocol::{ReadAnswer, ReadReq};

use super::fixture::{opts, Fixture};
use super::kafka_txns_tests::{
    add_group, codes, commit_offsets, end_as, init, limits, run, txn_offset, txn_produce,
};
use crate::reads::kafka_txns::Grant;
use crate::state::kafka_txns::TxnState;

fn ask(fx: &mut Fixture, q: KafkaTxnRead) -> Result<KafkaTxnReadAnswer, String> {
    let mut p = fx.planner();
    let (st, mut rd) = p.reader_parts();
    match crate::reads::answer(st, &mut rd, &ReadReq::KafkaTxns(q)) {
        Ok(ReadAnswer::KafkaTxns(a)) => Ok(a),
        Ok(other) => panic!("not a transactions answer: {other:?}"),
        Err(e) => Err(e.message),
    }
}

fn described(fx: &mut Fixture, ids: &[&str]) -> Vec<TxnDescribed> {
    let q = KafkaTxnRead::Describe {
        txn_ids: ids.iter().map(|s| s.to_string()).collect(),
    };
    match ask(fx, q) {
        Ok(KafkaTxnReadAnswer::Described(v)) => v,
        other => panic!("{other:?}"),
    }
}

fn listed(fx: &mut Fixture, states: &[&str], pids: &[i64]) -> Vec<TxnListed> {
    let q = KafkaTxnRead::List {
        states: states.iter().map(|s| s.to_string()).collect(),
        producer_ids: pids.to_vec(),
    };
    match ask(fx, q) {
        Ok(KafkaTxnReadAnswer::Listed { rows, .. }) => rows,
        other => panic!("{other:?}"),
    }
}

fn producers(fx: &mut Fixture, asked: &[(&str, i32)]) -> Vec<PartitionProducers> {
    let q = KafkaTxnRead::Producers {
        partitions: asked.iter().map(|(t, p)| (t.to_string(), *p)).collect(),
    };
    match ask(fx, q) {
        Ok(KafkaTxnReadAnswer::Producers(v)) => v,
        other => panic!("{other:?}"),
    }
}

/// AddPartitionsToTxn of `indexes` of "t" (shown with `count` partitions) for `txn_id`.
fn add_to(fx: &mut Fixture, txn_id: &str, id: i64, epoch: i16, indexes: &[i32], count: u32) {
    let req = KafkaTxnReq::AddPartitions {
        txn_id: txn_id.into(),
        producer_id: id,
        epoch,
        partitions: indexes
            .iter()
            .map(|i| TxnPartition {
                topic: "t".into(),
                index: *i,
                count,
            })
            .collect(),
        limits: limits(),
    };
    let got = codes(run(fx, req));
    assert!(got.iter().all(|c| *c == TxnCode::None), "{got:?}");
}

fn end(fx: &mut Fixture, txn_id: &str, id: i64, epoch: i16, commit: bool) {
    let req = KafkaTxnReq::End {
        txn_id: txn_id.into(),
        producer_id: id,
        epoch,
        commit,
        may_commit_offsets: true,
        limits: limits(),
    };
    assert_eq!(codes(run(fx, req)), vec![TxnCode::None]);
}

fn known(d: &TxnDescribed) -> &TxnView {
    match d {
        TxnDescribed::Known(v) => v,
        other => panic!("not described: {other:?}"),
    }
}

#[test]
fn describe_shows_each_state_under_kafkas_name_and_unknown_ids() {
    let mut fx = Fixture::new();
    fx.configure("t", opts(|_| {}));
    let (_, a, ae) = init(&mut fx, "a", 60_000);
    let (_, b, be) = init(&mut fx, "b", 60_000);
    let (_, c, ce) = init(&mut fx, "c", 60_000);
    let (_, _d, _) = init(&mut fx, "d", 60_000);
    add_to(&mut fx, "a", a, ae, &[2, 0], 3);
    add_to(&mut fx, "b", b, be, &[1], 3);
    end(&mut fx, "b", b, be, true);
    add_to(&mut fx, "c", c, ce, &[1], 3);
    end(&mut fx, "c", c, ce, false);
    let got = described(&mut fx, &["a", "b", "c", "d", "nobody"]);
    let a_view = known(&got[0]);
    assert_eq!(a_view.state, TxnStateName::Ongoing);
    assert_eq!((a_view.producer_id, a_view.epoch), (a, ae));
    assert_eq!(a_view.timeout_ms, 60_000);
    assert!(a_view.start_ms >= 0);
    assert_eq!(
        a_view.partitions,
        vec![("t".to_string(), 0), ("t".to_string(), 2)],
        "in topic and index order"
    );
    for (d, state) in got[1..4].iter().zip([
        TxnStateName::CompleteCommit,
        TxnStateName::CompleteAbort,
        TxnStateName::Empty,
    ]) {
        let v = known(d);
        assert_eq!(v.state, state);
        assert_eq!((v.start_ms, v.partitions.len()), (-1, 0), "nothing open");
    }
    assert_eq!(got[4], TxnDescribed::Unknown);
}

/// Review s16 kafka H1: one transaction of 1 000 partitions named 10 000 times built 10 M
/// rows on the engine thread.
#[test]
fn a_describe_naming_one_large_transaction_many_times_stays_within_the_budget() {
    let mut fx = Fixture::new();
    fx.configure("t", opts(|_| {}));
    let (_, id, epoch) = init(&mut fx, "big", 60_000);
    let all: Vec<i32> = (0..1_000).collect();
    add_to(&mut fx, "big", id, epoch, &all, 1_000);
    fx.commit();
    assert_eq!(
        fx.st.kafka_txns.get("big").map(|r| r.partitions.len()),
        Some(1_000)
    );
    let ids = vec!["big"; MAX_TXNS_PER_ANSWER];
    let got = described(&mut fx, &ids);
    assert_eq!(got.len(), MAX_TXNS_PER_ANSWER, "one answer per asked id");
    let total: usize = got
        .iter()
        .map(|d| match d {
            TxnDescribed::Known(v) => v.partitions.len(),
            _ => 0,
        })
        .sum();
    assert!(total <= MAX_ENTRIES_PER_ANSWER, "{total} partitions");
    // Each described transaction is one entry beside its partitions (review s18 kafka M1).
    let served = MAX_ENTRIES_PER_ANSWER / 1_001;
    assert!(got[..served]
        .iter()
        .all(|d| matches!(d, TxnDescribed::Known(v) if v.partitions.len() == 1_000)));
    assert!(
        got[served..].iter().all(|d| *d == TxnDescribed::OverBudget),
        "from the first id past the budget, every id is left for a retry"
    );
}

fn init_producer(fx: &mut Fixture) -> (i64, i16) {
    let req = KafkaProducersReq::InitProducerId {
        current: None,
        expiration_ms: DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    };
    match fx.planner().plan_kafka_producers(&req) {
        Ok(InitProducerOutcome::Granted { producer_id, epoch }) => (producer_id, epoch),
        other => panic!("{other:?}"),
    }
}

fn plain_produce(fx: &mut Fixture, id: i64, epoch: i16, partition: &str) {
    let req = super::kafka_producers_tests::produce_req_to(partition, id, epoch, 0, 1);
    if let Err(e) = fx.planner().plan_kafka_produce(&req, None) {
        panic!("produce refused: {e}");
    }
}

/// Review s16 kafka H1: 1 000 producers on one partition, the partition named 10 000 times.
#[test]
fn describe_producers_naming_one_busy_partition_many_times_stays_within_the_budget() {
    let mut fx = Fixture::new();
    for _ in 0..MAX_PRODUCERS_PER_PARTITION {
        let (id, epoch) = init_producer(&mut fx);
        plain_produce(&mut fx, id, epoch, "0");
    }
    fx.commit();
    let asked = vec![("t", 0); MAX_PRODUCER_PARTITIONS];
    let got = producers(&mut fx, &asked);
    assert_eq!(got.len(), MAX_PRODUCER_PARTITIONS);
    let total: usize = got
        .iter()
        .map(|p| match p {
            PartitionProducers::Listed(v) => v.len(),
            _ => 0,
        })
        .sum();
    assert!(
        total <= MAX_PRODUCER_ENTRIES_PER_ANSWER,
        "{total} producers"
    );
    let served = MAX_PRODUCER_ENTRIES_PER_ANSWER / MAX_PRODUCERS_PER_PARTITION;
    assert!(got[..served].iter().all(
        |p| matches!(p, PartitionProducers::Listed(v) if v.len() == MAX_PRODUCERS_PER_PARTITION)
    ));
    assert!(got[served..]
        .iter()
        .all(|p| *p == PartitionProducers::OverBudget));
}

#[test]
fn describe_producers_answers_each_slot_with_its_partitions_producers() {
    let mut fx = Fixture::new();
    let (plain, pe) = init_producer(&mut fx);
    plain_produce(&mut fx, plain, pe, "0");
    plain_produce(&mut fx, plain, pe, "1");
    let (_, tx, te) = init(&mut fx, "tx", 60_000);
    add_to(&mut fx, "tx", tx, te, &[1], 2);
    txn_produce(&mut fx, tx, te, "1", 0, 3);
    fx.commit();
    let got = producers(
        &mut fx,
        &[("t", 1), ("t", 0), ("t", 7), ("none", 0), ("t", 1)],
    );
    let ids = |p: &PartitionProducers| match p {
        PartitionProducers::Listed(v) => {
            let mut v: Vec<(i64, i32, i64)> = v
                .iter()
                .map(|p| (p.producer_id, p.last_sequence, p.txn_start_offset))
                .collect();
            v.sort_unstable();
            v
        }
        other => panic!("{other:?}"),
    };
    let first_txn = fx
        .st
        .kafka_txns
        .get("tx")
        .and_then(|r| r.partitions.values().next().copied().flatten())
        .expect("the transaction wrote") as i64;
    let one = ids(&got[0]);
    assert_eq!(one.len(), 2);
    assert!(one.contains(&(plain, 0, -1)), "{one:?}");
    assert!(one.contains(&(tx, 2, first_txn)), "{one:?}");
    assert_eq!(ids(&got[1]), vec![(plain, 0, -1)]);
    assert_eq!(
        ids(&got[2]),
        vec![],
        "a partition never written lists no one"
    );
    assert_eq!(got[3], PartitionProducers::NoTopic);
    assert_eq!(ids(&got[4]), one, "a repeat is answered alike");
    end_as(&mut fx, tx, te, true, true);
    let after = ids(&producers(&mut fx, &[("t", 1)])[0]);
    assert!(
        after.contains(&(tx, 2, -1)),
        "no open transaction: {after:?}"
    );
}

#[test]
fn each_request_past_its_cap_is_refused() {
    let mut fx = Fixture::new();
    let ids = vec!["x"; MAX_TXNS_PER_ANSWER + 1];
    let q = KafkaTxnRead::Describe {
        txn_ids: ids.iter().map(|s| s.to_string()).collect(),
    };
    assert!(ask(&mut fx, q).is_err());
    let q = KafkaTxnRead::List {
        states: vec!["Ongoing".into(); MAX_LIST_FILTERS + 1],
        producer_ids: Vec::new(),
    };
    assert!(ask(&mut fx, q).is_err());
    let q = KafkaTxnRead::List {
        states: Vec::new(),
        producer_ids: vec![1; MAX_LIST_PRODUCER_FILTERS + 1],
    };
    assert!(ask(&mut fx, q).is_err());
    let q = KafkaTxnRead::Producers {
        partitions: vec![("t".into(), 0); MAX_PRODUCER_PARTITIONS + 1],
    };
    assert!(ask(&mut fx, q).is_err());
    let q = KafkaTxnRead::PendingOffsets {
        group: "g".into(),
        partitions: vec![("t".into(), 0); MAX_PRODUCER_PARTITIONS + 1],
    };
    assert!(ask(&mut fx, q).is_err());
    assert!(ask(
        &mut fx,
        KafkaTxnRead::List {
            states: vec!["Ongoing".into(); MAX_LIST_FILTERS],
            producer_ids: vec![1; MAX_LIST_PRODUCER_FILTERS],
        }
    )
    .is_ok());
}

/// Review s16 kafka M3: the filters through a mask, a set and the producer index give the
/// rows a plain scan of every row gives.
#[test]
fn list_filters_give_what_a_scan_of_every_row_gives() {
    let mut fx = Fixture::new();
    fx.configure("t", opts(|_| {}));
    let mut pids = Vec::new();
    for (n, id) in ["e", "o1", "o2", "c", "a", "o3"].iter().enumerate() {
        let (_, pid, epoch) = init(&mut fx, id, 60_000);
        pids.push(pid);
        match *id {
            "c" | "a" => {
                add_to(&mut fx, id, pid, epoch, &[n as i32], 8);
                end(&mut fx, id, pid, epoch, *id == "c");
            }
            "e" => {}
            _ => add_to(&mut fx, id, pid, epoch, &[n as i32], 8),
        }
    }
    fx.commit();
    let rows: Vec<(String, i64, &str)> = fx
        .st
        .kafka_txns
        .rows()
        .map(|(id, r)| {
            let name = match (r.state, r.last_result) {
                (TxnState::Ongoing, _) => "Ongoing",
                (_, crate::state::kafka_txns::TxnResult::Committed) => "CompleteCommit",
                (_, crate::state::kafka_txns::TxnResult::Aborted) => "CompleteAbort",
                _ => "Empty",
            };
            (id.clone(), r.producer_id, name)
        })
        .collect();
    let filters: Vec<(Vec<&str>, Vec<i64>)> = vec![
        (vec![], vec![]),
        (vec!["Ongoing"], vec![]),
        (vec!["Ongoing", "CompleteAbort", "Nope"], vec![]),
        (vec!["PrepareCommit"], vec![]),
        (vec![], vec![pids[1], pids[3], 999_999, pids[1]]),
        (vec!["Ongoing"], vec![pids[0], pids[2], pids[5]]),
        (
            vec!["Empty", "CompleteCommit"],
            vec![pids[0], pids[3], pids[4]],
        ),
        (vec![], vec![999_999]),
    ];
    for (states, wanted) in filters {
        let got: Vec<(String, i64, &str)> = listed(&mut fx, &states, &wanted)
            .into_iter()
            .map(|t| (t.txn_id, t.producer_id, t.state.kafka_name()))
            .collect();
        let scan: Vec<(String, i64, &str)> = rows
            .iter()
            .filter(|(_, p, s)| {
                (states.is_empty() || states.contains(s))
                    && (wanted.is_empty() || wanted.contains(p))
            })
            .cloned()
            .collect();
        assert_eq!(got, scan, "states {states:?} producers {wanted:?}");
    }
}

/// Review s16 kafka L2: past the row cap the list is cut, in id order, and the cut counted.
#[test]
fn a_list_past_its_row_cap_is_cut_and_counted() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let mut fx = Fixture::new();
    let many = TxnLimits {
        max_ids: MAX_TXNS_PER_ANSWER as u64 + 10,
        ..limits()
    };
    for n in 0..=MAX_TXNS_PER_ANSWER {
        let req = KafkaTxnReq::Init {
            txn_id: format!("id-{n:06}"),
            timeout_ms: 60_000,
            current: None,
            limits: many,
        };
        run(&mut fx, req);
        if n % 1_000 == 0 {
            fx.commit();
        }
    }
    fx.commit();
    let (all, one) = metrics::with_local_recorder(&recorder, || {
        (listed(&mut fx, &[], &[]), listed(&mut fx, &["Empty"], &[]))
    });
    assert_eq!(all.len(), MAX_TXNS_PER_ANSWER);
    assert_eq!(all[0].txn_id, "id-000000");
    assert_eq!(all[MAX_TXNS_PER_ANSWER - 1].txn_id, "id-009999");
    assert_eq!(one.len(), MAX_TXNS_PER_ANSWER);
    let text = handle.render();
    assert!(
        text.contains("queen_kafka_txn_list_truncated_total 2"),
        "{text}"
    );
    let few = metrics::with_local_recorder(&recorder, || listed(&mut fx, &["Ongoing"], &[]));
    assert!(few.is_empty());
    assert!(handle
        .render()
        .contains("queen_kafka_txn_list_truncated_total 2"));
}

/// Group "g" with `n` offsets of `topic` pending in transaction "tx"; its producer id.
fn pending_group(fx: &mut Fixture, topic: &str, n: i32) -> i64 {
    fx.configure(topic, opts(|_| {}));
    let (_, id, epoch) = init(fx, "tx", 60_000);
    assert_eq!(add_group(fx, id, epoch, "g", limits()), TxnCode::None);
    let offsets = (0..n).map(|p| txn_offset(topic, p, 1)).collect();
    let got = commit_offsets(fx, id, epoch, "g", offsets, limits());
    assert!(got.iter().all(|c| *c == TxnCode::None), "{got:?}");
    fx.commit();
    id
}

/// Review s18 kafka M4 and s19 kafka H1: a group's pending offsets are never cut (the door
/// would check a cut set only after reading the committed offsets), and past the cycle's
/// grant they are refused whole, listing nothing (before, they were always served whole).
#[test]
fn a_groups_pending_set_past_the_grant_is_refused_whole_and_within_it_answered_whole() {
    let mut fx = Fixture::new();
    pending_group(&mut fx, "t", 2);
    let q = KafkaTxnRead::GroupPending { group: "g".into() };
    let whole = Grant {
        entries: 2,
        bytes: 2 * (READ_ENTRY_BYTES + 1),
    };
    for short in [
        Grant::default(),
        Grant {
            entries: 1,
            ..whole
        },
        Grant {
            bytes: whole.bytes - 1,
            ..whole
        },
    ] {
        assert_eq!(
            crate::reads::kafka_txns::answer(&fx.st, &q, short),
            Ok((KafkaTxnReadAnswer::GroupPendingOverBudget, Grant::default())),
            "{short:?}"
        );
    }
    match crate::reads::kafka_txns::answer(&fx.st, &q, whole) {
        Ok((KafkaTxnReadAnswer::GroupPending { pairs, complete }, listed)) => {
            assert!(
                complete,
                "a cut set would be checked only after the offsets"
            );
            assert_eq!(pairs, vec![("t".to_string(), 0), ("t".to_string(), 1)]);
            assert_eq!(listed, whole);
        }
        other => panic!("{other:?}"),
    }
}

/// Review s19 kafka H1: in a cycle past its first read, a group's pending set of long names
/// past the reads' share is refused whole, so the cycle holds nothing for it and the pops
/// keep their room; the cycle's first read still gets it whole.
#[test]
fn a_pending_set_past_the_reads_share_leaves_the_cycle_within_it() {
    let mut fx = Fixture::new();
    let long = "t".repeat(249);
    pending_group(&mut fx, &long, 100);
    init(&mut fx, "first", 60_000);
    fx.commit();
    // The reads' share is 8 000 bytes: 100 pairs of 249-byte names are 28 900.
    let room = Room(32_000);
    let q = KafkaTxnRead::GroupPending { group: "g".into() };
    let first = KafkaTxnRead::Describe {
        txn_ids: vec!["first".into()],
    };
    let mut p = fx.planner();
    p.memory = Some(&room);
    assert!(p.plan_kafka_txn_read(&first).is_ok());
    let charged = p.cycle.txn_read_bytes;
    for _ in 0..2 {
        assert_eq!(
            p.plan_kafka_txn_read(&q),
            Ok(KafkaTxnReadAnswer::GroupPendingOverBudget)
        );
    }
    assert_eq!(
        p.cycle.txn_read_bytes, charged,
        "a refused set holds nothing"
    );
    assert!(p.cycle.txn_read_bytes <= room.0 / ADMIN_READ_SHARE_DIVISOR);
    fx.commit();
    let mut p = fx.planner();
    p.memory = Some(&room);
    match p.plan_kafka_txn_read(&q) {
        Ok(KafkaTxnReadAnswer::GroupPending { pairs, complete }) => {
            assert_eq!((pairs.len(), complete), (100, true));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(p.cycle.txn_read_bytes, 100 * (READ_ENTRY_BYTES + 249));
}

/// An answer room of `bytes` (the door holds nothing else).
pub(super) struct Room(pub(super) usize);

impl crate::plan::MemoryGate for Room {
    fn pressed(&self) -> bool {
        false
    }
    fn refusal(&self) -> queenmq_protocol::QueenError {
        queenmq_protocol::QueenError::unavailable("memory")
    }
    fn answer_room(&self) -> usize {
        self.0
    }
}

/// AddPartitionsToTxn of partitions `0..n` of `topic` (shown with `n` partitions).
fn add_many(fx: &mut Fixture, topic: &str, txn_id: &str, id: i64, epoch: i16, n: i32) {
    fx.configure(topic, opts(|_| {}));
    let req = KafkaTxnReq::AddPartitions {
        txn_id: txn_id.into(),
        producer_id: id,
        epoch,
        partitions: (0..n)
            .map(|index| TxnPartition {
                topic: topic.into(),
                index,
                count: u32::try_from(n).unwrap_or(0),
            })
            .collect(),
        limits: limits(),
    };
    let got = codes(run(fx, req));
    assert!(got.iter().all(|c| *c == TxnCode::None), "{got:?}");
}

/// Review s18 kafka H1 and M1: a ListTransactions of the cycle past its first read is
/// charged each row's id and refused whole past what the reads' share grants (before, its
/// rows were counted at 40 bytes each and never refused).
#[test]
fn a_list_past_the_cycles_grant_is_refused_whole_and_each_row_charged_its_id() {
    let mut fx = Fixture::new();
    for n in 0..100 {
        init(&mut fx, &format!("{n:04}{}", "x".repeat(1_020)), 60_000);
    }
    let (_, _, _) = init(&mut fx, "first", 60_000);
    fx.commit();
    let all = KafkaTxnRead::List {
        states: vec![],
        producer_ids: vec![],
    };
    // The reads' share is 8 000 bytes: 101 rows at 40 bytes fit, 101 ids of 1 KiB do not.
    let room = Room(32_000);
    let mut p = fx.planner();
    p.memory = Some(&room);
    let first = KafkaTxnRead::Describe {
        txn_ids: vec!["first".into()],
    };
    assert!(matches!(
        p.plan_kafka_txn_read(&first),
        Ok(KafkaTxnReadAnswer::Described(_))
    ));
    let charged = p.cycle.txn_read_bytes;
    assert_eq!(
        charged,
        READ_ENTRY_BYTES + "first".len(),
        "an idle id is charged"
    );
    assert_eq!(
        p.plan_kafka_txn_read(&all),
        Ok(KafkaTxnReadAnswer::ListOverBudget)
    );
    assert_eq!(
        p.cycle.txn_read_bytes, charged,
        "a refused list holds nothing"
    );
    // The cycle's first read lists whatever the room, charged its ids.
    fx.commit();
    let mut p = fx.planner();
    p.memory = Some(&room);
    match p.plan_kafka_txn_read(&all) {
        Ok(KafkaTxnReadAnswer::Listed { rows, .. }) => assert_eq!(rows.len(), 101),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        p.cycle.txn_read_bytes,
        100 * (READ_ENTRY_BYTES + 1_024) + READ_ENTRY_BYTES + "first".len()
    );
}

/// Review s18 kafka M1: a described partition is charged its topic's name, so a cycle's
/// share holds fewer partitions of long names.
#[test]
fn a_described_partition_is_charged_its_topic_name() {
    let mut fx = Fixture::new();
    let long = "t".repeat(249);
    let (_, id, epoch) = init(&mut fx, "long", 60_000);
    add_many(&mut fx, &long, "long", id, epoch, 20);
    init(&mut fx, "first", 60_000);
    fx.commit();
    // The reads' share is 4 000 bytes: 20 partitions at 40 bytes fit, at 289 they do not.
    let room = Room(16_000);
    let mut p = fx.planner();
    p.memory = Some(&room);
    let first = KafkaTxnRead::Describe {
        txn_ids: vec!["first".into()],
    };
    assert!(p.plan_kafka_txn_read(&first).is_ok());
    let q = KafkaTxnRead::Describe {
        txn_ids: vec!["long".into()],
    };
    assert_eq!(
        p.plan_kafka_txn_read(&q),
        Ok(KafkaTxnReadAnswer::Described(vec![
            TxnDescribed::OverBudget
        ]))
    );
    let granted = crate::reads::kafka_txns::answer(p.st, &q, Grant::UNLIMITED);
    match granted {
        Ok((KafkaTxnReadAnswer::Described(v), spent)) => {
            assert_eq!(known(&v[0]).partitions.len(), 20);
            assert_eq!(spent.entries, 21);
            assert_eq!(
                spent.bytes,
                READ_ENTRY_BYTES + 4 + 20 * (READ_ENTRY_BYTES + 249)
            );
        }
        other => panic!("{other:?}"),
    }
}

/// Review s18 kafka L2 and s19 kafka M3: a DescribeProducers granted nothing answers a
/// partition with producers over budget, and one without producers empty, as it costs
/// nothing (refused, it failed pinned clients such as find-hanging `--broker-id`); the
/// counts come from the derived index, never a walk of every producer row.
#[test]
fn a_producers_read_granted_nothing_serves_the_empty_partitions() {
    let mut fx = Fixture::new();
    let (plain, pe) = init_producer(&mut fx);
    plain_produce(&mut fx, plain, pe, "0");
    fx.push("t", "1", 1);
    fx.commit();
    let q = KafkaTxnRead::Producers {
        partitions: vec![("t".into(), 0), ("t".into(), 1), ("nope".into(), 0)],
    };
    match crate::reads::kafka_txns::answer(&fx.st, &q, Grant::default()) {
        Ok((KafkaTxnReadAnswer::Producers(v), spent)) => {
            assert_eq!(
                v,
                vec![
                    PartitionProducers::OverBudget,
                    PartitionProducers::Listed(vec![]),
                    PartitionProducers::NoTopic
                ]
            );
            assert_eq!(spent, Grant::default());
        }
        other => panic!("{other:?}"),
    }
}

/// Review s19 kafka M3: the per-partition count follows producers as they write and expire.
#[test]
fn the_producers_count_per_partition_follows_writes_and_expiry() {
    let mut fx = Fixture::new();
    let (plain, pe) = init_producer(&mut fx);
    plain_produce(&mut fx, plain, pe, "0");
    fx.commit();
    let pid = |fx: &Fixture| {
        let q = fx.st.queue_named("t").expect("topic");
        q.partitions.get("0", &fx.st.partitions).expect("partition")
    };
    let p0 = pid(&fx);
    assert_eq!(fx.st.kafka_producers.count_on(p0), 1);
    fx.st.kafka_producers.expire(plain);
    assert_eq!(fx.st.kafka_producers.count_on(p0), 0);
}

/// Review s18 kafka M2: admin reads take at most their share of the cycle's answer room,
/// so a cycle's pops keep theirs (before, reads queued ahead cut every pop to one message).
#[test]
fn admin_reads_ahead_of_a_pop_leave_it_its_share_of_the_room() {
    let mut fx = Fixture::new();
    fx.push("q", "0", 100);
    let (_, id, epoch) = init(&mut fx, "big", 60_000);
    add_many(&mut fx, "t", "big", id, epoch, 200);
    fx.commit();
    let room = Room(40_000);
    let mut p = fx.planner();
    p.memory = Some(&room);
    let q = KafkaTxnRead::Describe {
        txn_ids: vec!["big".into()],
    };
    for _ in 0..8 {
        assert!(p.plan_kafka_txn_read(&q).is_ok());
    }
    assert!(p.cycle.txn_read_bytes <= 2 * (40_000 / ADMIN_READ_SHARE_DIVISOR));
    match p.plan_pop(&super::fixture::pop_req("q", 100)) {
        Ok(super::PopPlan::Delivered(r)) => assert_eq!(r.messages.len(), 100),
        other => panic!("{:?}", other.err()),
    }
}

/// Pushes 100 messages of about 1 KiB to partition "0" of queue "q".
fn push_hundred_kib(fx: &mut Fixture) {
    let items: Vec<_> = (0..100)
        .map(|n| {
            let mut it = super::fixture::item("q", "0", &format!("m{n}"));
            it.payload = bytes::Bytes::from(format!("\"{}\"", "p".repeat(1_000)));
            it
        })
        .collect();
    assert!(fx.planner().plan_push(&items, None).is_ok());
}

/// Review s18 kafka M2, the other way: a cycle whose pops filled their room still grants
/// an admin read its share.
#[test]
fn a_pop_heavy_cycle_leaves_admin_reads_their_share() {
    let mut fx = Fixture::new();
    push_hundred_kib(&mut fx);
    let (_, id, epoch) = init(&mut fx, "ten", 60_000);
    add_many(&mut fx, "t", "ten", id, epoch, 10);
    init(&mut fx, "first", 60_000);
    fx.commit();
    let room = Room(40_000);
    let mut p = fx.planner();
    p.memory = Some(&room);
    p.cycle.has_admin_reads = true;
    let first = KafkaTxnRead::Describe {
        txn_ids: vec!["first".into()],
    };
    assert!(p.plan_kafka_txn_read(&first).is_ok());
    match p.plan_pop(&super::fixture::pop_req("q", 100)) {
        Ok(super::PopPlan::Delivered(r)) => assert!(r.messages.len() < 100, "the room ran out"),
        other => panic!("{:?}", other.err()),
    }
    let q = KafkaTxnRead::Describe {
        txn_ids: vec!["ten".into()],
    };
    match p.plan_kafka_txn_read(&q) {
        Ok(KafkaTxnReadAnswer::Described(v)) => assert_eq!(known(&v[0]).partitions.len(), 10),
        other => panic!("{other:?}"),
    }
}

/// Review s19 kafka M2: a cycle whose batch holds no Kafka transaction read gives its pops
/// the whole answer room (they lost the reads' quarter in every cycle).
#[test]
fn a_cycle_of_pops_only_gives_them_the_whole_room() {
    let mut fx = Fixture::new();
    push_hundred_kib(&mut fx);
    fx.commit();
    let room = Room(40_000);
    let mut p = fx.planner();
    p.memory = Some(&room);
    assert!(!p.cycle.has_admin_reads);
    match p.plan_pop(&super::fixture::pop_req("q", 100)) {
        Ok(super::PopPlan::Delivered(r)) => {
            let n = r.messages.len();
            assert!((35..100).contains(&n), "about 40 fit the whole room: {n}");
        }
        other => panic!("{:?}", other.err()),
    }
}
