//! A topic's `max.message.bytes` on the fixture: a batch over the bound is refused for its
//! partition only, nothing of it stored, and an idempotent one does not advance its sequence.

use queenmq_protocol::kafka_producers::*;
use queenmq_protocol::kafka_topic_configs::{TopicConfigs, KAFKA_TOPIC_CONFIGS_NS};
use queenmq_protocol::{ErrorCode, KvExpiry, KvOp, KvReq, PushStatus};

use super::fixture::{item, Fixture};
use super::kafka_producers_tests::produce_req_to;
use super::queue_uuid;

fn bound(fx: &mut Fixture, queue: Option<String>, max: i32) {
    let row = TopicConfigs {
        queue,
        max_message_bytes: Some(max),
        segment_bytes: Some(20_000),
    };
    let op = KvOp::Put {
        ns: KAFKA_TOPIC_CONFIGS_NS.into(),
        key: "t".into(),
        value: row.encode(),
        expiry: KvExpiry::Forever,
        expect: None,
        if_absent: false,
        required: false,
    };
    if let Err(e) = fx.planner().plan_kv(&KvReq { ops: vec![op] }) {
        panic!("kv put refused: {e}");
    }
    fx.commit();
}

fn span(start: usize, end: usize, wire_bytes: usize) -> BatchSpan {
    BatchSpan {
        start,
        end,
        wire_bytes,
    }
}

/// A plain produce of one record to partitions "0" and "1" of `t`, batches of these sizes.
fn plain(sizes: [usize; 2]) -> KafkaProduceReq {
    KafkaProduceReq {
        items: vec![item("t", "0", "a"), item("t", "1", "b")],
        batches: vec![span(0, 1, sizes[0]), span(1, 2, sizes[1])],
        ..KafkaProduceReq::default()
    }
}

fn stored(fx: &Fixture, partition: &str) -> u64 {
    let Some(qid) = fx.st.queue_by_name.get("t") else {
        return 0;
    };
    fx.st.queues[qid]
        .partitions
        .get(partition, &fx.st.partitions)
        .and_then(|pid| fx.st.partitions.get(&pid))
        .map_or(0, |p| p.next_offset)
}

#[test]
fn a_batch_over_its_topics_bound_is_refused_for_its_partition_only() {
    let mut fx = Fixture::new();
    bound(&mut fx, None, 100);
    let out = match fx.planner().plan_kafka_produce(&plain([101, 100]), None) {
        Ok(o) => o,
        Err(e) => panic!("produce refused: {e}"),
    };
    fx.commit();
    let code = out.results[0].error.as_ref().map(|e| e.code);
    assert_eq!(code, Some(ErrorCode::PayloadTooLarge));
    assert_eq!(out.results[0].status, PushStatus::Failed);
    assert_eq!(
        out.results[1].status,
        PushStatus::Queued,
        "the bound is inclusive"
    );
    assert_eq!((stored(&fx, "0"), stored(&fx, "1")), (0, 1));
    fx.assert_replays();
}

#[test]
fn a_row_of_a_dead_queue_of_the_name_bounds_nothing() {
    let mut fx = Fixture::new();
    // Creates queue `t`; a row naming another queue id is a dead incarnation's.
    let first = fx.planner().plan_kafka_produce(&plain([10, 10]), None);
    assert!(first.is_ok());
    fx.commit();
    let qid = fx.st.queue_by_name["t"];
    bound(&mut fx, Some(queue_uuid(qid + 1)), 5);
    let out = match fx.planner().plan_kafka_produce(&plain([10, 10]), None) {
        Ok(o) => o,
        Err(e) => panic!("produce refused: {e}"),
    };
    // The same transaction ids again: repeats, answered, not refused.
    assert!(out.results.iter().all(|r| r.error.is_none()));
    fx.commit();
    bound(&mut fx, Some(queue_uuid(qid)), 5);
    let out = match fx.planner().plan_kafka_produce(&plain([10, 5]), None) {
        Ok(o) => o,
        Err(e) => panic!("produce refused: {e}"),
    };
    let code = out.results[0].error.as_ref().map(|e| e.code);
    assert_eq!(
        code,
        Some(ErrorCode::PayloadTooLarge),
        "its own queue's row"
    );
    assert!(out.results[1].error.is_none());
    fx.commit();
    fx.assert_replays();
}

#[test]
fn an_idempotent_batch_over_the_bound_does_not_advance_its_sequence() {
    let mut fx = Fixture::new();
    let req = KafkaProducersReq::InitProducerId {
        current: None,
        expiration_ms: DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    };
    let Ok(InitProducerOutcome::Granted { producer_id, epoch }) =
        fx.planner().plan_kafka_producers(&req)
    else {
        panic!("no producer id");
    };
    fx.commit();
    bound(&mut fx, None, 100);
    let mut big = produce_req_to("0", producer_id, epoch, 0, 2);
    big.batches = vec![span(0, 2, 101)];
    let out = match fx.planner().plan_kafka_produce(&big, None) {
        Ok(o) => o,
        Err(e) => panic!("produce refused: {e}"),
    };
    fx.commit();
    assert_eq!(out.verdicts, vec![GuardVerdict::TooLarge]);
    assert_eq!(stored(&fx, "0"), 0, "nothing stored");
    // The same sequence again, now under the bound: a first batch, not a repeat.
    let mut small = produce_req_to("0", producer_id, epoch, 0, 2);
    small.batches = vec![span(0, 2, 100)];
    let out = match fx.planner().plan_kafka_produce(&small, None) {
        Ok(o) => o,
        Err(e) => panic!("produce refused: {e}"),
    };
    fx.commit();
    assert_eq!(out.verdicts, vec![GuardVerdict::Appended]);
    assert_eq!(stored(&fx, "0"), 2);
    fx.assert_replays();
}

#[test]
fn spans_that_do_not_describe_the_items_are_refused_whole() {
    let mut fx = Fixture::new();
    for batches in [
        vec![span(0, 3, 1)],
        vec![span(0, 0, 1)],
        vec![span(0, 2, 1)],
        vec![span(1, 2, 1), span(0, 1, 1)],
    ] {
        let req = KafkaProduceReq {
            batches: batches.clone(),
            ..plain([1, 1])
        };
        let r = fx.planner().plan_kafka_produce(&req, None);
        assert_eq!(
            r.err().map(|e| e.code),
            Some(ErrorCode::BadRequest),
            "{batches:?}"
        );
    }
}
