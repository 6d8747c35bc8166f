//! The transaction coordinator on the fixture: epochs and fencing, all-or-nothing
//! AddPartitionsToTxn, offsets visible only at commit, markers, the timeout sweep. Each test
//! ends by checking that a follower and a checkpoint reach the leader's state.

use queenmq_protocol::kafka_producers::GuardVerdict;
use queenmq_protocol::kafka_txns::*;

use super::fixture::{Fixture, SECOND};
use crate::entry::Effect;
use crate::entry_kafka_txns::TxnEffect;
use crate::state::kafka_txns::{StretchKind, TxnResult, TxnState};

/// The partition count the door shows for topic "t" in these tests.
const SHOWN: u32 = 4;

pub(super) fn limits() -> TxnLimits {
    TxnLimits::default()
}

pub(super) fn run(fx: &mut Fixture, req: KafkaTxnReq) -> KafkaTxnOutcome {
    match fx.planner().plan_kafka_txn(&req) {
        Ok(o) => o,
        Err(e) => panic!("refused: {e}"),
    }
}

pub(super) fn init(fx: &mut Fixture, txn_id: &str, timeout_ms: i32) -> (TxnCode, i64, i16) {
    init_as(fx, txn_id, timeout_ms, None)
}

/// InitProducerId for `txn_id`, naming `current` (KIP-360) or no producer.
fn init_as(
    fx: &mut Fixture,
    txn_id: &str,
    timeout_ms: i32,
    current: Option<(i64, i16)>,
) -> (TxnCode, i64, i16) {
    let req = KafkaTxnReq::Init {
        txn_id: txn_id.into(),
        timeout_ms,
        current,
        limits: limits(),
    };
    match run(fx, req) {
        KafkaTxnOutcome::Init {
            code,
            producer_id,
            epoch,
        } => (code, producer_id, epoch),
        other => panic!("{other:?}"),
    }
}

pub(super) fn codes(o: KafkaTxnOutcome) -> Vec<TxnCode> {
    match o {
        KafkaTxnOutcome::Codes(c) => c,
        other => panic!("{other:?}"),
    }
}

pub(super) fn add(fx: &mut Fixture, id: i64, epoch: i16, parts: &[(&str, i32)]) -> Vec<TxnCode> {
    codes(run(
        fx,
        KafkaTxnReq::AddPartitions {
            txn_id: "tx".into(),
            producer_id: id,
            epoch,
            partitions: parts
                .iter()
                .map(|(t, p)| TxnPartition {
                    topic: (*t).into(),
                    index: *p,
                    count: SHOWN,
                })
                .collect(),
            limits: limits(),
        },
    ))
}

pub(super) fn end(fx: &mut Fixture, id: i64, epoch: i16, commit: bool) -> TxnCode {
    end_as(fx, id, epoch, commit, true)
}

pub(super) fn end_as(
    fx: &mut Fixture,
    id: i64,
    epoch: i16,
    commit: bool,
    may_commit_offsets: bool,
) -> TxnCode {
    let req = KafkaTxnReq::End {
        txn_id: "tx".into(),
        producer_id: id,
        epoch,
        commit,
        may_commit_offsets,
        limits: limits(),
    };
    codes(run(fx, req))[0]
}

/// The control type of the frame at `offset` of `pid` (`Some(true)` commit), None for a
/// record.
pub(super) fn marker_at(fx: &mut Fixture, pid: u64, offset: u64) -> Option<bool> {
    let mut p = fx.planner();
    let (st, mut rd) = p.reader_parts();
    let part = st.partitions.get(&pid).expect("partition");
    let m = rd.read_one(part, offset).expect("read").expect("held");
    m.is_control_marker().then(|| m.id[15] == 1)
}

/// `n` records of the transaction appended to partition `partition` of "t", as the produce
/// path will: a push and the KafkaTxnRecords of the same entry.
pub(super) fn produce(fx: &mut Fixture, partition: &str, n: usize) -> u64 {
    let results = fx.push("t", partition, n);
    let first = &results[0];
    fx.planner().emit(Effect::KafkaTxn(TxnEffect::Records {
        txn_id: "tx",
        pid: first.partition_id,
        base_offset: first.offset,
        count: n as u32,
    }));
    fx.commit();
    first.partition_id
}

#[test]
fn init_bumps_the_epoch_and_checks_the_timeout_and_the_named_producer() {
    let mut fx = Fixture::new();
    assert_eq!(init(&mut fx, "tx", 0).0, TxnCode::InvalidTimeout);
    assert_eq!(init(&mut fx, "tx", 900_001).0, TxnCode::InvalidTimeout);
    let (code, id, epoch) = init(&mut fx, "tx", 60_000);
    assert_eq!((code, epoch), (TxnCode::None, 0));
    assert_eq!(init(&mut fx, "tx", 60_000), (TxnCode::None, id, 1));
    let (other, _, _) = init(&mut fx, "other", 60_000);
    assert_eq!(other, TxnCode::None);
    assert_ne!(
        fx.st.kafka_txns.get("other").map(|r| r.producer_id),
        Some(id)
    );
    let named = |current| KafkaTxnReq::Init {
        txn_id: "tx".into(),
        timeout_ms: 60_000,
        current: Some(current),
        limits: limits(),
    };
    let fenced = run(&mut fx, named((id, 0)));
    assert!(matches!(
        fenced,
        KafkaTxnOutcome::Init {
            code: TxnCode::Fenced,
            ..
        }
    ));
    let bumped = run(&mut fx, named((id, 1)));
    assert!(matches!(
        bumped,
        KafkaTxnOutcome::Init {
            code: TxnCode::None,
            epoch: 2,
            ..
        }
    ));
    let full = KafkaTxnReq::Init {
        txn_id: "third".into(),
        timeout_ms: 60_000,
        current: None,
        limits: TxnLimits {
            max_ids: 2,
            ..limits()
        },
    };
    assert!(matches!(
        run(&mut fx, full),
        KafkaTxnOutcome::Init {
            code: TxnCode::Busy,
            ..
        }
    ));
    fx.assert_replays();
}

fn init_named(fx: &mut Fixture, current: (i64, i16)) -> (TxnCode, i64, i16) {
    init_as(fx, "tx", 60_000, Some(current))
}

#[test]
fn a_retried_kip_360_init_gets_the_pair_it_was_given() {
    let mut fx = Fixture::new();
    let (_, id, _) = init(&mut fx, "tx", 60_000);
    // The bump's answer is lost: the client asks again naming the pair it bumped from.
    assert_eq!(init_named(&mut fx, (id, 0)), (TxnCode::None, id, 1));
    fx.commit();
    let row = fx.st.kafka_txns.get("tx").cloned();
    assert_eq!(init_named(&mut fx, (id, 0)), (TxnCode::None, id, 1));
    assert!(fx.cycle.entry.is_empty(), "a retry writes nothing");
    assert_eq!(fx.st.kafka_txns.get("tx").cloned(), row);
    fx.assert_replays();
    // The current pair bumps again; the pair before the last stays fenced.
    assert_eq!(init_named(&mut fx, (id, 1)), (TxnCode::None, id, 2));
    fx.commit();
    assert_eq!(init_named(&mut fx, (id, 0)).0, TxnCode::Fenced);
    assert_eq!(init_named(&mut fx, (id, 1)), (TxnCode::None, id, 2));
    // A new incarnation (no pair named) forgets it: the old instance is fenced.
    assert_eq!(init(&mut fx, "tx", 60_000), (TxnCode::None, id, 3));
    fx.commit();
    assert_eq!(init_named(&mut fx, (id, 2)).0, TxnCode::Fenced);
    // An open transaction at the current epoch: the retry is fenced, not let in.
    assert_eq!(init_named(&mut fx, (id, 3)), (TxnCode::None, id, 4));
    fx.commit();
    fx.push("t", "0", 1);
    assert_eq!(add(&mut fx, id, 4, &[("t", 0)]), vec![TxnCode::None]);
    assert_eq!(init_named(&mut fx, (id, 3)).0, TxnCode::Fenced);
    fx.assert_replays();
}

#[test]
fn the_sweeps_fence_forgets_the_retry_pair() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 1);
    let (_, id, _) = init(&mut fx, "tx", 1_000);
    assert_eq!(init_named(&mut fx, (id, 0)), (TxnCode::None, id, 1));
    fx.commit();
    assert_eq!(add(&mut fx, id, 1, &[("t", 0)]), vec![TxnCode::None]);
    produce(&mut fx, "0", 1);
    // The bump set the timeout init_named asks for, 60 s.
    fx.advance(61 * SECOND);
    assert_eq!(fx.planner().sweep_kafka_txns(1 << 20), 1);
    fx.commit();
    assert_eq!(fx.st.kafka_txns.get("tx").and_then(|r| r.bumped_from), None);
    assert_eq!(init_named(&mut fx, (id, 0)).0, TxnCode::Fenced);
    assert_eq!(init_named(&mut fx, (id, 1)).0, TxnCode::Fenced);
    fx.assert_replays();
}

#[test]
fn a_retried_kip_360_init_past_the_last_epoch_gets_the_new_producer() {
    let mut fx = Fixture::new();
    let (_, id, _) = init(&mut fx, "tx", 60_000);
    let last = i16::MAX - 1;
    fx.planner().emit(Effect::KafkaTxn(TxnEffect::Init {
        txn_id: "tx",
        producer_id: id,
        epoch: last,
        timeout_ms: 60_000,
    }));
    fx.commit();
    let (code, fresh, epoch) = init_named(&mut fx, (id, last));
    assert_eq!((code, epoch), (TxnCode::None, 0));
    assert_ne!(fresh, id);
    fx.commit();
    assert_eq!(init_named(&mut fx, (id, last)), (TxnCode::None, fresh, 0));
    fx.assert_replays();
}

#[test]
fn add_partitions_is_all_or_nothing_and_creates_the_partition() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 1);
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    assert_eq!(
        add(&mut fx, id, epoch, &[("t", 3), ("nope", 0)]),
        vec![TxnCode::NotAttempted, TxnCode::UnknownPartition]
    );
    assert_eq!(
        fx.st.kafka_txns.get("tx").map(|r| r.state),
        Some(TxnState::Empty),
        "nothing opened"
    );
    assert_eq!(
        add(&mut fx, id, epoch + 1, &[("t", 3)]),
        vec![TxnCode::Fenced]
    );
    assert_eq!(
        add(&mut fx, id + 7, epoch, &[("t", 3)]),
        vec![TxnCode::InvalidMapping]
    );
    assert_eq!(
        add(&mut fx, id, epoch, &[("t", 3), ("t", 0)]),
        vec![TxnCode::None; 2]
    );
    let row = fx.st.kafka_txns.get("tx").expect("row");
    assert_eq!((row.state, row.partitions.len()), (TxnState::Ongoing, 2));
    assert!(fx
        .st
        .queue_named("t")
        .is_some_and(|q| q.partitions.len() == 2));
    let many = KafkaTxnReq::AddPartitions {
        txn_id: "tx".into(),
        producer_id: id,
        epoch,
        partitions: vec![TxnPartition {
            topic: "t".into(),
            index: 2,
            count: SHOWN,
        }],
        limits: TxnLimits {
            max_partitions: 2,
            ..limits()
        },
    };
    assert_eq!(codes(run(&mut fx, many)), vec![TxnCode::TooMany]);
    fx.assert_replays();
}

#[test]
fn add_partitions_never_passes_the_topics_shown_count() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 1);
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    let before = fx.st.partitions.len();
    assert_eq!(
        add(&mut fx, id, epoch, &[("t", 0), ("t", 9999)]),
        vec![TxnCode::NotAttempted, TxnCode::UnknownPartition]
    );
    assert_eq!(
        add(&mut fx, id, epoch, &[("t", SHOWN as i32)]),
        vec![TxnCode::UnknownPartition]
    );
    let huge = KafkaTxnReq::AddPartitions {
        txn_id: "tx".into(),
        producer_id: id,
        epoch,
        partitions: vec![TxnPartition {
            topic: "t".into(),
            index: 20_000,
            count: u32::MAX,
        }],
        limits: limits(),
    };
    assert_eq!(codes(run(&mut fx, huge)), vec![TxnCode::UnknownPartition]);
    assert_eq!(fx.st.partitions.len(), before, "no partition created");
    fx.assert_replays();
}

#[test]
fn a_commit_writes_its_markers_and_its_offsets_in_one_entry() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 2);
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    assert_eq!(add(&mut fx, id, epoch, &[("t", 0)]), vec![TxnCode::None]);
    let pid = produce(&mut fx, "0", 3);
    let add_group = KafkaTxnReq::AddOffsets {
        txn_id: "tx".into(),
        producer_id: id,
        epoch,
        group: "g".into(),
        limits: limits(),
    };
    let offset = |group: &str| KafkaTxnReq::OffsetCommit {
        txn_id: "tx".into(),
        producer_id: id,
        epoch,
        group: group.into(),
        offsets: vec![TxnOffset {
            topic: "t".into(),
            partition: 0,
            offset: 42,
            leader_epoch: -1,
            metadata: "m".into(),
        }],
        limits: limits(),
    };
    assert_eq!(
        codes(run(&mut fx, offset("g"))),
        vec![TxnCode::InvalidState]
    );
    assert_eq!(codes(run(&mut fx, add_group)), vec![TxnCode::None]);
    assert_eq!(codes(run(&mut fx, offset("g"))), vec![TxnCode::None]);
    fx.commit();
    assert!(
        fx.st.kafka_groups.get("g").is_none(),
        "invisible until commit"
    );
    assert_eq!(fx.st.kafka_txns.lso(pid, 0, 5), 2);
    let before = fx.cycle.entry.len();
    assert_eq!(
        end_as(&mut fx, id, epoch, true, false),
        TxnCode::GroupAuthorization,
        "a producer-only caller cannot commit group offsets"
    );
    assert_eq!(fx.cycle.entry.len(), before, "and it wrote nothing");
    assert_eq!(end(&mut fx, id, epoch, true), TxnCode::None);
    fx.commit();
    let committed = fx.st.kafka_groups.get("g").map(|g| g.offsets.len());
    assert_eq!(committed, Some(1));
    let next = fx.st.partitions.get(&pid).map(|p| p.next_offset);
    assert_eq!(next, Some(6), "the marker took offset 5");
    assert_eq!(fx.st.kafka_txns.lso(pid, 0, 6), 6);
    // A commit leaves nothing in the index: its marker is known by its frame.
    assert!(fx.st.kafka_txns.part(pid).is_none());
    assert_eq!(marker_at(&mut fx, pid, 5), Some(true));
    assert_eq!(marker_at(&mut fx, pid, 2), None);
    assert_eq!(end(&mut fx, id, epoch, true), TxnCode::None, "a retry");
    assert_eq!(end(&mut fx, id, epoch, false), TxnCode::InvalidState);
    fx.assert_replays();
}

pub(super) fn add_group(
    fx: &mut Fixture,
    id: i64,
    epoch: i16,
    group: &str,
    l: TxnLimits,
) -> TxnCode {
    let req = KafkaTxnReq::AddOffsets {
        txn_id: "tx".into(),
        producer_id: id,
        epoch,
        group: group.into(),
        limits: l,
    };
    codes(run(fx, req))[0]
}

pub(super) fn txn_offset(topic: &str, partition: i32, metadata: usize) -> TxnOffset {
    TxnOffset {
        topic: topic.into(),
        partition,
        offset: 7,
        leader_epoch: -1,
        metadata: "m".repeat(metadata),
    }
}

pub(super) fn commit_offsets(
    fx: &mut Fixture,
    id: i64,
    epoch: i16,
    group: &str,
    offsets: Vec<TxnOffset>,
    l: TxnLimits,
) -> Vec<TxnCode> {
    let req = KafkaTxnReq::OffsetCommit {
        txn_id: "tx".into(),
        producer_id: id,
        epoch,
        group: group.into(),
        offsets,
        limits: l,
    };
    codes(run(fx, req))
}

#[test]
fn transactional_offsets_pass_the_checks_of_offset_commit() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 1);
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    let two = TxnLimits {
        max_partitions: 2,
        ..limits()
    };
    let bad_group = KafkaTxnReq::AddOffsets {
        txn_id: "tx".into(),
        producer_id: id,
        epoch,
        group: String::new(),
        limits: two,
    };
    assert!(fx.planner().plan_kafka_txn(&bad_group).is_err());
    assert_eq!(add_group(&mut fx, id, epoch, "g", two), TxnCode::None);
    assert_eq!(add_group(&mut fx, id, epoch, "h", two), TxnCode::None);
    assert_eq!(add_group(&mut fx, id, epoch, "g", two), TxnCode::None);
    assert_eq!(
        add_group(&mut fx, id, epoch, "third", two),
        TxnCode::TooMany,
        "groups per transaction are capped"
    );
    let got = commit_offsets(
        &mut fx,
        id,
        epoch,
        "g",
        vec![
            txn_offset("t", 0, 4097),
            txn_offset("t", -1, 0),
            txn_offset("missing", 0, 0),
            txn_offset("t", 0, 10),
            txn_offset("t", 0, 10),
            txn_offset("t", 1, 0),
            txn_offset("t", 2, 0),
        ],
        two,
    );
    use TxnCode::*;
    assert_eq!(
        got,
        vec![
            MetadataTooLarge,
            InvalidTopic,
            InvalidTopic,
            None,
            None,
            None,
            TooMany
        ],
        "a replaced key costs no room under the cap"
    );
    assert_eq!(fx.st.kafka_txns.get("tx").map(|r| r.pending.len()), Some(2));
    fx.commit();
    fx.assert_replays();
}

#[test]
fn a_replaced_pending_offset_keeps_the_byte_count_of_a_rebuild() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 1);
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    assert_eq!(add_group(&mut fx, id, epoch, "g", limits()), TxnCode::None);
    for metadata in [0, 4000, 10] {
        let got = commit_offsets(
            &mut fx,
            id,
            epoch,
            "g",
            vec![txn_offset("t", 0, metadata)],
            limits(),
        );
        assert_eq!(got, vec![TxnCode::None]);
    }
    let bytes = fx.st.kafka_txns.bytes();
    fx.assert_replays();
    assert_eq!(fx.replay().kafka_txns.bytes(), bytes);
}

#[test]
fn offsets_past_the_group_caps_are_refused_when_sent_and_the_commit_goes_through() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 1);
    let names: Vec<String> = (0..crate::state::kafka_groups::MAX_KAFKA_GROUPS)
        .map(|n| format!("full{n}"))
        .collect();
    for name in &names {
        fx.planner().emit(Effect::KafkaOffsetPut {
            group: name,
            topic: "t",
            partition: 0,
            offset: 0,
            leader_epoch: -1,
            metadata: "",
        });
    }
    fx.commit();
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    assert_eq!(add_group(&mut fx, id, epoch, "g", limits()), TxnCode::None);
    let got = commit_offsets(
        &mut fx,
        id,
        epoch,
        "g",
        vec![txn_offset("t", 0, 0)],
        limits(),
    );
    // Judged when sent (review F2): the commit that follows never meets a cap.
    assert_eq!(got, vec![TxnCode::Busy]);
    fx.commit();
    let groups = fx.st.kafka_groups.len();
    assert_eq!(end(&mut fx, id, epoch, true), TxnCode::None);
    fx.commit();
    assert_eq!(
        fx.st.kafka_groups.len(),
        groups,
        "no group added by the commit"
    );
    fx.assert_replays();
}

#[test]
fn a_new_incarnation_aborts_the_open_transaction() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 1);
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    add(&mut fx, id, epoch, &[("t", 0)]);
    let pid = produce(&mut fx, "0", 2);
    let (code, id2, epoch2) = init(&mut fx, "tx", 60_000);
    assert_eq!((code, id2, epoch2), (TxnCode::None, id, epoch + 1));
    fx.commit();
    for o in 1..=3 {
        assert!(fx.st.kafka_txns.hidden(pid, o), "offset {o}");
    }
    assert_eq!(fx.st.kafka_txns.aborted_in(pid, 0, 4).len(), 1);
    assert_eq!(end(&mut fx, id, epoch, true), TxnCode::Fenced);
    fx.assert_replays();
}

#[test]
fn the_sweep_aborts_a_hung_transaction_and_fences_its_producer() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 1);
    let (_, id, epoch) = init(&mut fx, "tx", 1_000);
    add(&mut fx, id, epoch, &[("t", 0)]);
    let pid = produce(&mut fx, "0", 1);
    fx.advance(SECOND / 2);
    assert_eq!(fx.planner().sweep_kafka_txns(1 << 20), 0);
    fx.advance(SECOND);
    assert_eq!(fx.planner().sweep_kafka_txns(0), 0, "no room in the entry");
    assert_eq!(fx.planner().sweep_kafka_txns(1 << 20), 1);
    fx.commit();
    let row = fx.st.kafka_txns.get("tx").expect("row");
    assert_eq!((row.state, row.epoch), (TxnState::Empty, epoch + 1));
    assert_eq!(row.last_result, TxnResult::None);
    let kinds: Vec<_> = fx
        .st
        .kafka_txns
        .stretches_in(pid, 0, 10)
        .into_iter()
        .map(|(_, s)| s.kind)
        .collect();
    assert_eq!(
        kinds,
        vec![StretchKind::Aborted],
        "records and marker, one stretch"
    );
    assert_eq!(end(&mut fx, id, epoch, true), TxnCode::Fenced);
    fx.assert_replays();
}

#[test]
fn the_sweep_fences_a_producer_at_the_last_epoch() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 1);
    let (_, id, _) = init(&mut fx, "tx", 1_000);
    let last = i16::MAX - 1;
    fx.planner().emit(Effect::KafkaTxn(TxnEffect::Init {
        txn_id: "tx",
        producer_id: id,
        epoch: last,
        timeout_ms: 1_000,
    }));
    fx.commit();
    assert_eq!(add(&mut fx, id, last, &[("t", 0)]), vec![TxnCode::None]);
    produce(&mut fx, "0", 1);
    fx.advance(2 * SECOND);
    assert_eq!(fx.planner().sweep_kafka_txns(1 << 20), 1);
    fx.commit();
    let code = add(&mut fx, id, last, &[("t", 0)])[0];
    assert!(
        matches!(code, TxnCode::Fenced | TxnCode::InvalidMapping),
        "the zombie opened a new transaction: {code:?}"
    );
    assert_eq!(end(&mut fx, id, last, true), code);
    let (code, fresh, epoch) = init(&mut fx, "tx", 1_000);
    assert_eq!(code, TxnCode::None);
    assert!(fresh != id && epoch == 1, "{fresh} {epoch}");
    fx.assert_replays();
}

/// A transactional produce of `n` records to partition `partition` of "t" through the
/// idempotent produce path: the guard's verdict and the partition's first offset.
pub(super) fn txn_produce(
    fx: &mut Fixture,
    id: i64,
    epoch: i16,
    partition: &str,
    seq: i32,
    n: usize,
) -> (GuardVerdict, u64) {
    let mut req = super::kafka_producers_tests::produce_req_to(partition, id, epoch, seq, n);
    req.transactional_id = Some("tx".into());
    let out = match fx.planner().plan_kafka_produce(&req, None) {
        Ok(o) => o,
        Err(e) => panic!("produce refused: {e}"),
    };
    fx.commit();
    (out.verdicts[0], out.results[0].offset)
}

#[test]
fn a_transactional_produce_refuses_items_outside_its_batches() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 1);
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    add(&mut fx, id, epoch, &[("t", 0)]);
    let mut req = super::kafka_producers_tests::produce_req_to("0", id, epoch, 0, 1);
    req.transactional_id = Some("tx".into());
    let stray = req.items[0].clone();
    req.items.push(stray);
    let before = fx.cycle.entry.len();
    assert!(fx.planner().plan_kafka_produce(&req, None).is_err());
    assert_eq!(fx.cycle.entry.len(), before, "nothing appended");
    fx.assert_replays();
}

#[test]
fn transactional_batches_land_only_in_added_partitions_at_the_current_epoch() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 1);
    fx.push("t", "1", 1);
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    let (refused, _) = txn_produce(&mut fx, id, epoch, "0", 0, 1);
    assert_eq!(refused, GuardVerdict::NotInTransaction, "nothing added yet");
    add(&mut fx, id, epoch, &[("t", 0)]);
    let (v, base) = txn_produce(&mut fx, id, epoch, "0", 0, 2);
    assert_eq!((v, base), (GuardVerdict::Appended, 1));
    let pid = fx
        .st
        .queue_named("t")
        .and_then(|q| q.partitions.get("0", &fx.st.partitions));
    let pid = pid.expect("partition 0");
    assert_eq!(
        fx.st.kafka_txns.lso(pid, 0, 3),
        1,
        "the open records hold the LSO"
    );
    let (other, _) = txn_produce(&mut fx, id, epoch, "1", 0, 1);
    assert_eq!(other, GuardVerdict::NotInTransaction);
    let (_, id2, epoch2) = init(&mut fx, "tx", 60_000);
    assert_eq!(id2, id);
    let (fenced, _) = txn_produce(&mut fx, id, epoch, "0", 2, 1);
    assert_eq!(fenced, GuardVerdict::Fenced);
    add(&mut fx, id, epoch2, &[("t", 0)]);
    let (v, base) = txn_produce(&mut fx, id, epoch2, "0", 0, 1);
    assert_eq!(
        (v, base),
        (GuardVerdict::Appended, 4),
        "after the abort marker at 3"
    );
    assert_eq!(end(&mut fx, id, epoch2, true), TxnCode::None);
    fx.commit();
    assert!(fx.st.kafka_txns.hidden(pid, 1) && fx.st.kafka_txns.hidden(pid, 3));
    assert!(!fx.st.kafka_txns.hidden(pid, 4) && !fx.st.kafka_txns.hidden(pid, 5));
    assert_eq!(marker_at(&mut fx, pid, 3), Some(false), "the abort marker");
    assert_eq!(marker_at(&mut fx, pid, 5), Some(true), "the commit marker");
    fx.assert_replays();
}

#[test]
fn plain_requests_cannot_use_a_transactional_producer_id() {
    use queenmq_protocol::kafka_producers::{InitProducerOutcome, KafkaProducersReq};
    let mut fx = Fixture::new();
    fx.push("t", "0", 1);
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    add(&mut fx, id, epoch, &[("t", 0)]);
    fx.commit();
    let plain = super::kafka_producers_tests::produce_req_to("0", id, epoch, 0, 1);
    let out = match fx.planner().plan_kafka_produce(&plain, None) {
        Ok(o) => o,
        Err(e) => panic!("produce refused: {e}"),
    };
    assert_eq!(out.verdicts[0], GuardVerdict::NotInTransaction);
    let kip360 = KafkaProducersReq::InitProducerId {
        current: Some((id, epoch)),
        expiration_ms: 60_000,
    };
    match fx.planner().plan_kafka_producers(&kip360) {
        Ok(InitProducerOutcome::Granted { producer_id, .. }) => {
            assert_ne!(
                producer_id, id,
                "a plain init bumped the transactional producer"
            )
        }
        other => panic!("{other:?}"),
    }
    let row = fx.st.kafka_txns.get("tx").map(|r| (r.producer_id, r.epoch));
    assert_eq!(row, Some((id, epoch)));
    fx.assert_replays();
}

#[test]
fn an_idle_transactional_id_expires_by_the_entry_time_and_an_open_one_never() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 1);
    let (_, id, epoch) = init(&mut fx, "tx", 60_000);
    let (_, other, oe) = init(&mut fx, "open", 60_000);
    assert_eq!(add_named(&mut fx, "open", other, oe), vec![TxnCode::None]);
    fx.commit();
    fx.advance(SECOND / 2);
    assert_eq!(
        fx.planner().expire_kafka_txn_ids(1 << 20, 1_000),
        0,
        "not idle long enough"
    );
    fx.advance(SECOND);
    assert_eq!(
        fx.planner().expire_kafka_txn_ids(0, 1_000),
        0,
        "no room in the entry"
    );
    assert_eq!(fx.planner().expire_kafka_txn_ids(1 << 20, 1_000), 1);
    fx.commit();
    assert!(fx.st.kafka_txns.get("tx").is_none(), "forgotten");
    assert!(
        fx.st.kafka_txns.get("open").is_some(),
        "an open transaction stays"
    );
    assert_eq!(end(&mut fx, id, epoch, true), TxnCode::InvalidMapping);
    let (code, _, fresh_epoch) = init(&mut fx, "tx", 60_000);
    assert_eq!((code, fresh_epoch), (TxnCode::None, 0), "a new row");
    fx.assert_replays();
}

fn add_named(fx: &mut Fixture, txn_id: &str, id: i64, epoch: i16) -> Vec<TxnCode> {
    codes(run(
        fx,
        KafkaTxnReq::AddPartitions {
            txn_id: txn_id.into(),
            producer_id: id,
            epoch,
            partitions: vec![TxnPartition {
                topic: "t".into(),
                index: 0,
                count: SHOWN,
            }],
            limits: limits(),
        },
    ))
}
