//! The per-partition transaction index stays bounded (review H1): a transaction's adjacent
//! batches are one stretch, and a transactional batch past the partition's stretch cap is
//! refused with nothing written, while every end still goes through.

use queenmq_protocol::kafka_producers::GuardVerdict;
use queenmq_protocol::kafka_txns::*;

use super::fixture::Fixture;
use super::kafka_txns_tests::{codes, init, limits, run};
use crate::entry::Effect;
use crate::entry_kafka_txns::TxnEffect;
use crate::state::kafka_txns::MAX_STRETCHES_PER_PARTITION as CAP;

fn add_to(fx: &mut Fixture, txn_id: &str, id: i64, epoch: i16) -> TxnCode {
    codes(run(
        fx,
        KafkaTxnReq::AddPartitions {
            txn_id: txn_id.into(),
            producer_id: id,
            epoch,
            partitions: vec![TxnPartition {
                topic: "t".into(),
                index: 0,
                count: 4,
            }],
            limits: limits(),
        },
    ))[0]
}

fn end_of(fx: &mut Fixture, txn_id: &str, id: i64, epoch: i16, commit: bool) -> TxnCode {
    let req = KafkaTxnReq::End {
        txn_id: txn_id.into(),
        producer_id: id,
        epoch,
        commit,
        may_commit_offsets: true,
        limits: limits(),
    };
    let code = codes(run(fx, req))[0];
    fx.commit();
    code
}

/// A transactional batch of `n` records to partition 0 through the produce path.
fn produce_as(
    fx: &mut Fixture,
    txn_id: &str,
    id: i64,
    epoch: i16,
    seq: i32,
    n: usize,
) -> GuardVerdict {
    let mut req = super::kafka_producers_tests::produce_req_to("0", id, epoch, seq, n);
    req.transactional_id = Some(txn_id.into());
    let out = match fx.planner().plan_kafka_produce(&req, None) {
        Ok(o) => o,
        Err(e) => panic!("produce refused: {e}"),
    };
    fx.commit();
    out.verdicts[0]
}

fn partition0(fx: &Fixture) -> u64 {
    let pid = fx
        .st
        .queue_named("t")
        .and_then(|q| q.partitions.get("0", &fx.st.partitions));
    pid.expect("partition 0")
}

#[test]
fn a_transactions_adjacent_batches_are_one_stretch() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 1);
    let pid = partition0(&fx);
    let (_, id, epoch) = init(&mut fx, "a", 60_000);
    assert_eq!(add_to(&mut fx, "a", id, epoch), TxnCode::None);
    for k in 0..200 {
        assert_eq!(
            produce_as(&mut fx, "a", id, epoch, 2 * k, 2),
            GuardVerdict::Appended
        );
    }
    assert_eq!(fx.st.kafka_txns.stretch_count(pid), 1, "one open stretch");
    assert!(fx.st.kafka_txns.hidden(pid, 1) && fx.st.kafka_txns.hidden(pid, 400));
    assert!(!fx.st.kafka_txns.hidden(pid, 0));
    assert_eq!(end_of(&mut fx, "a", id, epoch, false), TxnCode::None);
    assert_eq!(
        fx.st.kafka_txns.stretch_count(pid),
        1,
        "its records and its marker, aborted"
    );
    assert!(fx.st.kafka_txns.hidden(pid, 401), "the abort marker");
    fx.assert_replays();
}

#[test]
fn alternating_producers_stop_at_the_stretch_cap_and_still_end() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 1);
    let pid = partition0(&fx);
    let (_, a, ea) = init(&mut fx, "a", 60_000);
    let (_, b, eb) = init(&mut fx, "b", 60_000);
    // Four rounds of two transactions writing one record each in turn, then both aborting:
    // nothing merges, each batch and each marker stays a stretch.
    let per = (CAP - 16) / 8;
    for _ in 0..4 {
        assert_eq!(add_to(&mut fx, "a", a, ea), TxnCode::None);
        assert_eq!(add_to(&mut fx, "b", b, eb), TxnCode::None);
        let results = fx.push("t", "0", 2 * per);
        for (k, r) in results.iter().enumerate() {
            fx.planner().emit(Effect::KafkaTxn(TxnEffect::Records {
                txn_id: if k % 2 == 0 { "a" } else { "b" },
                pid: r.partition_id,
                base_offset: r.offset,
                count: 1,
            }));
        }
        fx.commit();
        assert_eq!(end_of(&mut fx, "a", a, ea, false), TxnCode::None);
        assert_eq!(end_of(&mut fx, "b", b, eb, false), TxnCode::None);
    }
    let held = fx.st.kafka_txns.stretch_count(pid);
    assert_eq!(held, 4 * (2 * per + 2));
    assert!(held + 4 <= CAP, "room for both to begin");
    assert_eq!(add_to(&mut fx, "a", a, ea), TxnCode::None);
    assert_eq!(add_to(&mut fx, "b", b, eb), TxnCode::None);
    let mut seq = [0, 0];
    let mut refused = None;
    for k in 0..CAP {
        let (txn, id, epoch) = if k % 2 == 0 {
            ("a", a, ea)
        } else {
            ("b", b, eb)
        };
        let before = fx.st.kafka_txns.stretch_count(pid);
        let next = fx.st.partitions.get(&pid).map(|p| p.next_offset);
        let v = produce_as(&mut fx, txn, id, epoch, seq[k % 2], 1);
        let open = 2;
        assert!(fx.st.kafka_txns.stretch_count(pid) + open <= CAP);
        if v != GuardVerdict::Appended {
            assert_eq!(v, GuardVerdict::TxnIndexFull);
            assert_eq!(before + open, CAP, "refused only at the cap");
            assert_eq!(fx.st.kafka_txns.stretch_count(pid), before);
            assert_eq!(
                fx.st.partitions.get(&pid).map(|p| p.next_offset),
                next,
                "nothing appended"
            );
            refused = Some(k);
            break;
        }
        seq[k % 2] += 1;
    }
    let k = refused.expect("a batch past the cap is refused");
    // The producer whose own stretch ends the partition still extends it at the cap.
    let (txn, id, epoch) = if k % 2 == 0 {
        ("b", b, eb)
    } else {
        ("a", a, ea)
    };
    assert_eq!(
        produce_as(&mut fx, txn, id, epoch, seq[(k + 1) % 2], 1),
        GuardVerdict::Appended
    );
    assert_eq!(end_of(&mut fx, "a", a, ea, false), TxnCode::None);
    assert_eq!(end_of(&mut fx, "b", b, eb, true), TxnCode::None);
    assert!(fx.st.kafka_txns.stretch_count(pid) <= CAP);
    fx.assert_replays();
}
