//! The planner's idempotence decisions on the fixture: the window of five batches, the
//! sequence wrap, fencing, expiry and the producer cap. Each test ends by checking that a
//! follower and a checkpoint reach the leader's state.

use bytes::Bytes;
use queenmq_protocol::kafka_producers::*;
use queenmq_protocol::PushItem;

use super::fixture::{Fixture, SECOND};

const DAY_MS: u64 = DEFAULT_PRODUCER_ID_EXPIRATION_MS;

fn init(fx: &mut Fixture, current: Option<(i64, i16)>, max: u64) -> InitProducerOutcome {
    let req = KafkaProducersReq::InitProducerId {
        current,
        expiration_ms: DAY_MS,
        max_producers: max,
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
    let items: Vec<PushItem> = (0..n)
        .map(|i| PushItem {
            queue: "t".into(),
            partition: "0".into(),
            payload: Bytes::from(format!("{i}")),
            transaction_id: None,
            trace_id: None,
        })
        .collect();
    let last_seq = increment_sequence(first_seq, n as i32 - 1);
    KafkaProduceReq {
        guards: vec![ProducerGuard {
            queue: "t".into(),
            partition: "0".into(),
            start: 0,
            end: n,
            batches: vec![ProducerBatch {
                producer_id: id,
                epoch,
                first_seq,
                last_seq,
                records: n,
            }],
        }],
        items,
        expiration_ms: DAY_MS,
        max_producers: DEFAULT_MAX_PRODUCER_IDS,
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
    let (id, epoch) = granted(init(&mut fx, None, 10));
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
    let (id, _) = granted(init(&mut fx, None, 10));
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
    let (id, _) = granted(init(&mut fx, None, 10));
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
    let (id, _) = granted(init(&mut fx, None, 10));
    assert_eq!(
        produce(&mut fx, id, 0, i32::MAX - 1, 2).0,
        GuardVerdict::Appended
    );
    assert_eq!(produce(&mut fx, id, 0, 0, 2).0, GuardVerdict::Appended);
    assert_eq!(produce(&mut fx, id, 0, 2, 1).0, GuardVerdict::Appended);
    // A batch across the wrap: first MAX, last 0.
    let (id2, _) = granted(init(&mut fx, None, 10));
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
    let (id, epoch) = granted(init(&mut fx, None, 10));
    assert_eq!(produce(&mut fx, id, epoch, 0, 2).0, GuardVerdict::Appended);
    fx.commit();
    assert_eq!(granted(init(&mut fx, Some((id, epoch)), 10)), (id, 1));
    assert_eq!(produce(&mut fx, id, 1, 5, 1).0, GuardVerdict::OutOfOrder);
    assert_eq!(produce(&mut fx, id, 1, 0, 1).0, GuardVerdict::Appended);
    assert_eq!(produce(&mut fx, id, 0, 2, 1).0, GuardVerdict::Fenced);
    // A stale epoch named in InitProducerId gets a new id, as Kafka gives every
    // non-transactional producer.
    assert_eq!(granted(init(&mut fx, Some((id, 0)), 10)), (id + 1, 0));
    fx.assert_replays();
}

#[test]
fn idle_producers_expire_and_the_cap_refuses_new_ids_until_then() {
    let mut fx = Fixture::new();
    let (a, _) = granted(init(&mut fx, None, 2));
    let (b, _) = granted(init(&mut fx, None, 2));
    assert_eq!(init(&mut fx, None, 2), InitProducerOutcome::Full);
    assert_eq!(produce(&mut fx, a, 0, 0, 1).0, GuardVerdict::Appended);
    fx.advance(DAY_MS as i64 * 1000 / 2);
    assert_eq!(produce(&mut fx, b, 0, 0, 1).0, GuardVerdict::Appended);
    fx.advance(DAY_MS as i64 * 1000 / 2 + SECOND);
    // `a` was idle a day and a second: its state is gone, so any sequence is taken again
    // (its id was handed out here), and `b` still holds its own.
    assert_eq!(fx.st.kafka_producers.len(), 2);
    let (c, _) = granted(init(&mut fx, None, 2));
    assert_eq!(c, b + 1);
    assert!(fx.st.kafka_producers.get(a).is_none());
    assert_eq!(produce(&mut fx, b, 0, 5, 1).0, GuardVerdict::OutOfOrder);
    let mut again = produce_req(a, 0, 5, 1);
    again.max_producers = 2;
    let out = fx.planner().plan_kafka_produce(&again, None);
    assert_eq!(out.map(|o| o.verdicts), Ok(vec![GuardVerdict::Full]));
    again.max_producers = 3;
    let out = fx.planner().plan_kafka_produce(&again, None);
    assert_eq!(
        out.map(|o| o.verdicts),
        Ok(vec![GuardVerdict::Appended]),
        "an expired id of ours comes back with any sequence"
    );
    fx.assert_replays();
}

#[test]
fn retention_trims_do_not_forget_the_batches() {
    let mut fx = Fixture::new();
    let (id, _) = granted(init(&mut fx, None, 10));
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
fn several_batches_of_one_returning_producer_count_once_against_the_cap() {
    let mut fx = Fixture::new();
    let (a, _) = granted(init(&mut fx, None, 10));
    fx.advance(DAY_MS as i64 * 1000 + SECOND);
    let mut req = produce_req(a, 0, 7, 2);
    // Split into two batches of one record each: 7..=7, then 8..=8.
    let one = |first_seq| ProducerBatch {
        producer_id: a,
        epoch: 0,
        first_seq,
        last_seq: first_seq,
        records: 1,
    };
    req.guards[0].batches = vec![one(7), one(8)];
    req.max_producers = 1;
    let out = fx.planner().plan_kafka_produce(&req, None);
    assert_eq!(out.map(|o| o.verdicts), Ok(vec![GuardVerdict::Appended]));
    assert_eq!(
        produce(&mut fx, a, 0, 8, 1).0,
        GuardVerdict::Duplicate { base_offset: 1 }
    );
    fx.assert_replays();
}
