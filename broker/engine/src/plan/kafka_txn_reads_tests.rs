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
    let served = MAX_ENTRIES_PER_ANSWER / 1_000;
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

/// Review s18 kafka M4: a group's pending offsets are listed whole whatever the cycle grants,
/// so the door never falls back to checking them after reading the committed offsets.
#[test]
fn a_groups_pending_offsets_are_never_cut_by_the_cycles_grant() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 1);
    fx.push("t", "1", 1);
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    assert_eq!(add_group(&mut fx, id, epoch, "g", limits()), TxnCode::None);
    let offsets = vec![txn_offset("t", 0, 1), txn_offset("t", 1, 1)];
    assert_eq!(
        commit_offsets(&mut fx, id, epoch, "g", offsets, limits()),
        vec![TxnCode::None, TxnCode::None]
    );
    fx.commit();
    let q = KafkaTxnRead::GroupPending { group: "g".into() };
    match crate::reads::kafka_txns::answer(&fx.st, &q, 0) {
        Ok((KafkaTxnReadAnswer::GroupPending { pairs, complete }, listed)) => {
            assert!(
                complete,
                "a cut set would be checked only after the offsets"
            );
            assert_eq!((pairs.len(), listed), (2, 2));
        }
        other => panic!("{other:?}"),
    }
}
