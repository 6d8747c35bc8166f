//! The planner's idempotence decisions on the fixture: the window of five batches, the
//! sequence wrap, fencing, expiry, the producer cap's eviction and the engine's own checks.
//! Each test ends by checking that a follower and a checkpoint reach the leader's state.

use bytes::Bytes;
use queenmq_protocol::kafka_producers::*;
use queenmq_protocol::{PushItem, PushStatus};

use super::fixture::{Fixture, SECOND};

const DAY_MS: u64 = DEFAULT_PRODUCER_ID_EXPIRATION_MS;

fn init(fx: &mut Fixture, current: Option<(i64, i16)>) -> InitProducerOutcome {
    let req = KafkaProducersReq::InitProducerId {
        current,
        expiration_ms: DAY_MS,
    };
    match fx.planner().plan_kafka_producers(&req) {
        Ok(o) => o,
        Err(e) => panic!("init refused: {e}"),
    }
}

fn granted(o: InitProducerOutcome) -> (i64, i16) {
    match o {
        InitProducerOutcome::Granted { producer_id, epoch } => (producer_id, epoch),
        InitProducerOutcome::Full => panic!("no producer id"),
    }
}

/// A produce of one batch of `n` records to partition "0" of `t`.
fn produce_req(id: i64, epoch: i16, first_seq: i32, n: usize) -> KafkaProduceReq {
    produce_req_to("0", id, epoch, first_seq, n)
}

pub(super) fn produce_req_to(
    partition: &str,
    id: i64,
    epoch: i16,
    first_seq: i32,
    n: usize,
) -> KafkaProduceReq {
    let items: Vec<PushItem> = (0..n)
        .map(|i| PushItem {
            queue: "t".into(),
            partition: partition.into(),
            payload: Bytes::from(format!("{i}")),
            transaction_id: None,
            trace_id: None,
        })
        .collect();
    let last_seq = increment_sequence(first_seq, n as i32 - 1);
    KafkaProduceReq {
        batches: Vec::new(),
        guards: vec![ProducerGuard {
            queue: "t".into(),
            partition: partition.into(),
            start: 0,
            end: n,
            batch: ProducerBatch {
                producer_id: id,
                epoch,
                first_seq,
                last_seq,
                records: n,
            },
        }],
        items,
        expiration_ms: DAY_MS,
        max_producers: DEFAULT_MAX_PRODUCER_IDS,
        evict_min_idle_ms: DEFAULT_PRODUCER_EVICT_MIN_IDLE_MS,
        transactional_id: None,
    }
}

/// The guard's verdict and, when appended, its base offset.
fn produce(fx: &mut Fixture, id: i64, epoch: i16, seq: i32, n: usize) -> (GuardVerdict, u64) {
    let out = match fx
        .planner()
        .plan_kafka_produce(&produce_req(id, epoch, seq, n), None)
    {
        Ok(o) => o,
        Err(e) => panic!("produce refused: {e}"),
    };
    let v = out.verdicts[0];
    (v, out.results[0].offset)
}

fn next_offset_or_none(fx: &Fixture) -> Option<u64> {
    let qid = fx.st.queue_by_name.get("t")?;
    let pid = fx.st.queues[qid].partitions.get("0", &fx.st.partitions)?;
    fx.st.partitions.get(&pid).map(|p| p.next_offset)
}

fn next_offset(fx: &Fixture) -> u64 {
    let qid = fx.st.queue_by_name["t"];
    let pid = fx.st.queues[&qid]
        .partitions
        .get("0", &fx.st.partitions)
        .expect("partition");
    fx.st.partitions.get(&pid).expect("partition").next_offset
}

#[test]
fn a_repeat_of_the_last_five_batches_is_answered_with_its_offset_and_not_stored() {
    let mut fx = Fixture::new();
    let (id, epoch) = granted(init(&mut fx, None));
    let mut bases = Vec::new();
    for k in 0..6 {
        let (v, base) = produce(&mut fx, id, epoch, k * 2, 2);
        assert_eq!(v, GuardVerdict::Appended);
        bases.push(base);
        fx.commit();
    }
    assert_eq!(next_offset(&fx), 12);
    for k in 1..6 {
        let (v, _) = produce(&mut fx, id, epoch, k * 2, 2);
        assert_eq!(
            v,
            GuardVerdict::Duplicate {
                base_offset: bases[k as usize]
            }
        );
    }
    // The first batch left the window of five: a repeat of it is out of order, as in Kafka.
    assert_eq!(
        produce(&mut fx, id, epoch, 0, 2).0,
        GuardVerdict::OutOfOrder
    );
    fx.commit();
    assert_eq!(next_offset(&fx), 12, "nothing appended for repeats");
    fx.assert_replays();
}

#[test]
fn two_produces_of_one_batch_in_one_cycle_append_it_once() {
    let mut fx = Fixture::new();
    let (id, _) = granted(init(&mut fx, None));
    fx.commit();
    assert_eq!(produce(&mut fx, id, 0, 0, 3), (GuardVerdict::Appended, 0));
    // Another connection's retry planned in the same cycle, before the entry commits.
    assert_eq!(
        produce(&mut fx, id, 0, 0, 3).0,
        GuardVerdict::Duplicate { base_offset: 0 }
    );
    fx.assert_replays();
    assert_eq!(next_offset(&fx), 3);
}

#[test]
fn gaps_are_out_of_order_and_the_first_write_takes_any_sequence() {
    let mut fx = Fixture::new();
    let (id, _) = granted(init(&mut fx, None));
    assert_eq!(produce(&mut fx, id, 0, 7, 1).0, GuardVerdict::Appended);
    assert_eq!(produce(&mut fx, id, 0, 9, 1).0, GuardVerdict::OutOfOrder);
    assert_eq!(produce(&mut fx, id, 0, 8, 1).0, GuardVerdict::Appended);
    assert_eq!(
        produce(&mut fx, id + 1, 0, 0, 1).0,
        GuardVerdict::UnknownProducer,
        "an id never handed out"
    );
    fx.assert_replays();
}

#[test]
fn sequences_wrap_at_i32_max() {
    let mut fx = Fixture::new();
    let (id, _) = granted(init(&mut fx, None));
    assert_eq!(
        produce(&mut fx, id, 0, i32::MAX - 1, 2).0,
        GuardVerdict::Appended
    );
    assert_eq!(produce(&mut fx, id, 0, 0, 2).0, GuardVerdict::Appended);
    assert_eq!(produce(&mut fx, id, 0, 2, 1).0, GuardVerdict::Appended);
    // A batch across the wrap: first MAX, last 0.
    let (id2, _) = granted(init(&mut fx, None));
    assert_eq!(
        produce(&mut fx, id2, 0, i32::MAX, 2).0,
        GuardVerdict::Appended
    );
    assert_eq!(
        produce(&mut fx, id2, 0, i32::MAX, 2).0,
        GuardVerdict::Duplicate { base_offset: 5 }
    );
    assert_eq!(produce(&mut fx, id2, 0, 1, 1).0, GuardVerdict::Appended);
    fx.assert_replays();
}

#[test]
fn old_epochs_are_fenced_and_a_bumped_epoch_starts_at_zero() {
    let mut fx = Fixture::new();
    let (id, epoch) = granted(init(&mut fx, None));
    assert_eq!(produce(&mut fx, id, epoch, 0, 2).0, GuardVerdict::Appended);
    fx.commit();
    assert_eq!(granted(init(&mut fx, Some((id, epoch)))), (id, 1));
    assert_eq!(produce(&mut fx, id, 1, 5, 1).0, GuardVerdict::OutOfOrder);
    assert_eq!(produce(&mut fx, id, 1, 0, 1).0, GuardVerdict::Appended);
    assert_eq!(produce(&mut fx, id, 0, 2, 1).0, GuardVerdict::Fenced);
    // A stale epoch named in InitProducerId gets a new id, as Kafka gives every
    // non-transactional producer.
    assert_eq!(granted(init(&mut fx, Some((id, 0)))), (id + 1, 0));
    fx.assert_replays();
}

#[test]
fn init_producer_id_makes_no_state_so_short_lived_producers_cannot_fill_the_cap() {
    let mut fx = Fixture::new();
    let ids: Vec<i64> = (0..50).map(|_| granted(init(&mut fx, None)).0).collect();
    assert_eq!(
        ids,
        (0..50).collect::<Vec<i64>>(),
        "unique ids from the counter"
    );
    assert_eq!(fx.st.kafka_producers.len(), 0, "no state before a batch");
    fx.commit();
    assert_eq!(produce(&mut fx, 3, 0, 4, 1).0, GuardVerdict::Appended);
    assert_eq!(fx.st.kafka_producers.len(), 1);
    assert_eq!(
        produce(&mut fx, 50, 0, 0, 1).0,
        GuardVerdict::UnknownProducer,
        "the counter, not a row, says which ids were handed out"
    );
    fx.assert_replays();
}

#[test]
fn idle_producers_expire() {
    let mut fx = Fixture::new();
    let (a, _) = granted(init(&mut fx, None));
    let (b, _) = granted(init(&mut fx, None));
    assert_eq!(produce(&mut fx, a, 0, 0, 1).0, GuardVerdict::Appended);
    fx.advance(DAY_MS as i64 * 1000 / 2);
    assert_eq!(produce(&mut fx, b, 0, 0, 1).0, GuardVerdict::Appended);
    fx.advance(DAY_MS as i64 * 1000 / 2 + SECOND);
    // `a` was idle a day and a second: its state is gone, so any sequence is taken again
    // (its id was handed out here), and `b` still holds its own.
    let (c, _) = granted(init(&mut fx, None));
    assert_eq!(c, b + 1);
    assert!(fx.st.kafka_producers.get(a).is_none());
    assert_eq!(produce(&mut fx, b, 0, 5, 1).0, GuardVerdict::OutOfOrder);
    assert_eq!(
        produce(&mut fx, a, 0, 5, 1).0,
        GuardVerdict::Appended,
        "an expired id of ours comes back with any sequence"
    );
    fx.assert_replays();
}

#[test]
fn a_new_producer_at_the_cap_evicts_the_longest_idle() {
    let mut fx = Fixture::new();
    let ids: Vec<i64> = (0..3).map(|_| granted(init(&mut fx, None)).0).collect();
    let with_cap = |id, seq| {
        let mut r = produce_req(id, 0, seq, 1);
        r.max_producers = 2;
        r.evict_min_idle_ms = 0;
        r
    };
    let go = |fx: &mut Fixture, id, seq| {
        fx.advance(SECOND);
        let out = fx.planner().plan_kafka_produce(&with_cap(id, seq), None);
        out.map(|o| o.verdicts[0])
    };
    assert_eq!(go(&mut fx, ids[0], 0), Ok(GuardVerdict::Appended));
    assert_eq!(go(&mut fx, ids[1], 0), Ok(GuardVerdict::Appended));
    assert_eq!(go(&mut fx, ids[0], 1), Ok(GuardVerdict::Appended));
    // ids[1] is now the longest idle: the third producer takes its place.
    assert_eq!(go(&mut fx, ids[2], 0), Ok(GuardVerdict::Appended));
    assert_eq!(fx.st.kafka_producers.len(), 2);
    assert!(fx.st.kafka_producers.get(ids[1]).is_none());
    assert!(fx.st.kafka_producers.get(ids[0]).is_some());
    assert_eq!(go(&mut fx, ids[0], 5), Ok(GuardVerdict::OutOfOrder), "kept");
    assert_eq!(
        go(&mut fx, ids[1], 7),
        Ok(GuardVerdict::Appended),
        "evicted: takes any sequence, as after expiry"
    );
    assert_eq!(fx.st.kafka_producers.len(), 2);
    fx.assert_replays();
}

const MINUTE: i64 = 60 * SECOND;

/// A produce naming, for each `(partition, id)`, a first one-record batch.
fn produce_many(batches: &[(String, i64)], max: u64) -> KafkaProduceReq {
    let mut req = KafkaProduceReq {
        expiration_ms: DAY_MS,
        max_producers: max,
        evict_min_idle_ms: DEFAULT_PRODUCER_EVICT_MIN_IDLE_MS,
        ..KafkaProduceReq::default()
    };
    for (partition, id) in batches {
        let one = produce_req_to(partition, *id, 0, 0, 1);
        let mut g = one.guards[0].clone();
        (g.start, g.end) = (req.items.len(), req.items.len() + 1);
        req.items.extend(one.items);
        req.guards.push(g);
    }
    req
}

fn verdicts(fx: &mut Fixture, req: &KafkaProduceReq) -> Vec<GuardVerdict> {
    match fx.planner().plan_kafka_produce(req, None) {
        Ok(o) => o.verdicts,
        Err(e) => panic!("produce refused: {e}"),
    }
}

#[test]
fn at_the_cap_only_a_state_idle_the_minimum_is_evicted_else_the_new_producer_waits() {
    let mut fx = Fixture::new();
    let ids: Vec<i64> = (0..3).map(|_| granted(init(&mut fx, None)).0).collect();
    let one = |id: i64, seq: i32| {
        let mut r = produce_req(id, 0, seq, 1);
        r.max_producers = 2;
        r
    };
    let go = |fx: &mut Fixture, r: KafkaProduceReq| verdicts(fx, &r)[0];
    assert_eq!(go(&mut fx, one(ids[0], 0)), GuardVerdict::Appended);
    fx.advance(SECOND);
    assert_eq!(go(&mut fx, one(ids[1], 0)), GuardVerdict::Appended);
    // Both states were active within the minimum: the third producer is refused, retriable,
    // and nothing of its batch is stored; the others keep their duplicate checks.
    fx.advance(14 * MINUTE);
    assert_eq!(go(&mut fx, one(ids[2], 0)), GuardVerdict::Full);
    assert_eq!(next_offset(&fx), 2);
    assert_eq!(fx.st.kafka_producers.len(), 2);
    assert_eq!(
        go(&mut fx, one(ids[0], 0)),
        GuardVerdict::Duplicate { base_offset: 0 },
        "a retry of the first producer is still answered as a repeat"
    );
    assert_eq!(go(&mut fx, one(ids[0], 1)), GuardVerdict::Appended);
    // ids[1] was idle 14 min; a minute later it is 15, and ids[0] wrote just now.
    fx.advance(MINUTE);
    assert_eq!(go(&mut fx, one(ids[2], 0)), GuardVerdict::Appended);
    assert!(fx.st.kafka_producers.get(ids[1]).is_none());
    assert!(fx.st.kafka_producers.get(ids[0]).is_some());
    assert_eq!(fx.st.kafka_producers.len(), 2);
    fx.assert_replays();
}

#[test]
fn one_command_evicts_a_bounded_number_and_refuses_the_rest() {
    let mut fx = Fixture::new();
    let n = PRODUCER_EVICT_PER_COMMAND + 6;
    let ids: Vec<i64> = (0..2 * n).map(|_| granted(init(&mut fx, None)).0).collect();
    let old: Vec<(String, i64)> = (0..n).map(|i| (i.to_string(), ids[i])).collect();
    let cap = n as u64;
    assert!(verdicts(&mut fx, &produce_many(&old, cap))
        .iter()
        .all(|v| *v == GuardVerdict::Appended));
    fx.commit();
    fx.advance(DAY_MS as i64 * 500);
    let new: Vec<(String, i64)> = (0..n).map(|i| (i.to_string(), ids[n + i])).collect();
    let got = verdicts(&mut fx, &produce_many(&new, cap));
    let appended = got.iter().filter(|v| **v == GuardVerdict::Appended).count();
    assert_eq!(appended, PRODUCER_EVICT_PER_COMMAND);
    assert_eq!(
        got[PRODUCER_EVICT_PER_COMMAND..],
        vec![GuardVerdict::Full; 6]
    );
    assert_eq!(fx.st.kafka_producers.len(), n);
    fx.assert_replays();
}

#[test]
fn a_lowered_cap_trims_idle_states_toward_it() {
    let mut fx = Fixture::new();
    let ids: Vec<i64> = (0..5).map(|_| granted(init(&mut fx, None)).0).collect();
    let all: Vec<(String, i64)> = ids.iter().map(|id| (id.to_string(), *id)).collect();
    assert!(verdicts(&mut fx, &produce_many(&all, 10))
        .iter()
        .all(|v| *v == GuardVerdict::Appended));
    fx.commit();
    fx.advance(20 * MINUTE);
    // A producer of ours writes again under a cap of 2: the idle states go, it stays.
    let mut again = produce_req_to(&ids[4].to_string(), ids[4], 0, 1, 1);
    again.max_producers = 2;
    assert_eq!(verdicts(&mut fx, &again), vec![GuardVerdict::Appended]);
    assert_eq!(fx.st.kafka_producers.len(), 2);
    assert!(fx.st.kafka_producers.get(ids[4]).is_some());
    assert!(
        fx.st.kafka_producers.get(ids[0]).is_none(),
        "the idlest went first"
    );
    fx.assert_replays();
}

#[test]
fn a_batch_refused_in_part_is_appended_not_at_all() {
    let mut fx = Fixture::new();
    let (id, _) = granted(init(&mut fx, None));
    let mut req = produce_req(id, 0, 0, 3);
    // The last record repeats the first one's transaction id: the push would queue two.
    req.items[0].transaction_id = Some("same".into());
    req.items[2].transaction_id = Some("same".into());
    let out = match fx.planner().plan_kafka_produce(&req, None) {
        Ok(o) => o,
        Err(e) => panic!("produce refused: {e}"),
    };
    assert!(out
        .results
        .iter()
        .all(|r| r.status == PushStatus::Failed && r.error.is_some()));
    assert_eq!(next_offset_or_none(&fx).unwrap_or(0), 0);
    assert!(
        fx.st.kafka_producers.get(id).is_none(),
        "nothing remembered"
    );
    fx.assert_replays();
}

#[test]
fn one_request_cannot_name_more_new_producers_than_the_cap() {
    let mut fx = Fixture::new();
    let (a, _) = granted(init(&mut fx, None));
    let (b, _) = granted(init(&mut fx, None));
    let first = produce_req_to("0", a, 0, 0, 1);
    let second = produce_req_to("1", b, 0, 0, 1);
    let mut req = first.clone();
    req.items.extend(second.items);
    let mut g = second.guards[0].clone();
    (g.start, g.end) = (1, 2);
    req.guards.push(g);
    req.max_producers = 1;
    let out = fx.planner().plan_kafka_produce(&req, None);
    assert_eq!(
        out.map(|o| o.verdicts),
        Ok(vec![GuardVerdict::Appended, GuardVerdict::Full])
    );
    assert_eq!(fx.st.kafka_producers.len(), 1);
    fx.assert_replays();
}

#[test]
fn the_engine_rechecks_what_the_door_says_about_a_batch() {
    let mut fx = Fixture::new();
    let (id, _) = granted(init(&mut fx, None));
    let mut wide = produce_req(id, 0, 0, 3);
    wide.guards[0].batch.last_seq = 0;
    assert!(fx.planner().plan_kafka_produce(&wide, None).is_err());
    let mut wrapped = produce_req(id, 0, i32::MAX, 2);
    assert_eq!(wrapped.guards[0].batch.last_seq, 0);
    wrapped.guards[0].batch.last_seq = 1;
    assert!(fx.planner().plan_kafka_produce(&wrapped, None).is_err());
    let top = produce_req(i64::MAX, 0, 0, 1);
    assert!(fx.planner().plan_kafka_produce(&top, None).is_err());
    assert_eq!(next_offset_or_none(&fx), None, "nothing appended");
}

#[test]
fn the_id_counter_stops_below_i64_max_and_never_wraps() {
    let mut fx = Fixture::new();
    fx.planner()
        .emit(crate::entry::Effect::KafkaProducerIdTaken {
            producer_id: MAX_PRODUCER_ID - 1,
        });
    assert_eq!(granted(init(&mut fx, None)), (MAX_PRODUCER_ID, 0));
    assert_eq!(init(&mut fx, None), InitProducerOutcome::Full);
    assert_eq!(init(&mut fx, None), InitProducerOutcome::Full);
    assert_eq!(fx.st.kafka_producers.next_id(), MAX_PRODUCER_ID + 1);
    assert_eq!(
        produce(&mut fx, MAX_PRODUCER_ID, 0, 0, 1).0,
        GuardVerdict::Appended
    );
    fx.assert_replays();
}

#[test]
fn retention_trims_do_not_forget_the_batches() {
    let mut fx = Fixture::new();
    let (id, _) = granted(init(&mut fx, None));
    assert_eq!(produce(&mut fx, id, 0, 0, 4).0, GuardVerdict::Appended);
    fx.commit();
    let pid = fx.st.queues[&fx.st.queue_by_name["t"]]
        .partitions
        .get("0", &fx.st.partitions)
        .expect("partition");
    fx.planner()
        .emit(crate::entry::Effect::RetentionTrim { pid, low: 4 });
    fx.commit();
    assert_eq!(
        produce(&mut fx, id, 0, 0, 4).0,
        GuardVerdict::Duplicate { base_offset: 0 }
    );
    fx.assert_replays();
}

#[test]
fn apply_skips_batches_and_appends_the_planner_never_makes() {
    use crate::entry::Effect;
    let mut fx = Fixture::new();
    let (id, _) = granted(init(&mut fx, None));
    assert_eq!(produce(&mut fx, id, 0, 0, 2).0, GuardVerdict::Appended);
    fx.commit();
    let qid = fx.st.queue_by_name["t"];
    let pid = fx.st.queues[&qid]
        .partitions
        .get("0", &fx.st.partitions)
        .expect("partition");
    let next_pid = fx.st.next_partition_id;
    let batch =
        |pid: u64, first_seq: i32, last_seq: i32, records: u32| Effect::KafkaProducerBatch {
            producer_id: id,
            pid,
            epoch: 0,
            first_seq,
            last_seq,
            base_offset: 2,
            records,
        };
    let bad = [
        batch(pid, 2, 2, 0),
        batch(next_pid, 0, 0, 1),
        batch(pid, 5, 5, 1),
        batch(pid, 2, 9, 2),
    ];
    for e in bad {
        fx.planner().emit(e);
    }
    // An append not at the partition's end would overlap the runs held.
    fx.planner().emit(Effect::Append {
        pid,
        base_offset: 0,
        hashes: vec![1, 2, 3],
        frames: &[0; 8],
    });
    let row = fx.st.kafka_producers.get(id).expect("row");
    assert_eq!(row.partitions.len(), 1);
    assert_eq!(row.partitions[&pid].batches.len(), 1, "none of them kept");
    assert_eq!(next_offset(&fx), 2);
    // Every later checkpoint still decodes.
    fx.assert_replays();
    assert_eq!(produce(&mut fx, id, 0, 2, 1), (GuardVerdict::Appended, 2));
    fx.assert_replays();
}
