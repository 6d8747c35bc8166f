//! Produce: each record of each partition's batches becomes one pushed message (queue =
//! topic, partition = the index as text), all in one push so that the whole request is one
//! engine entry and the answer comes after its fsync. Errors stay per partition.
//!
//! A partition whose batches carry a producer id (idempotent producers) becomes a guard:
//! the engine checks its epoch and sequence numbers against the partition's last batches and
//! appends it in the same step (`Command::KafkaProduce`, docs/kafka-compat.md "Idempotent
//! producers"); a repeat is answered with the first copy's offset.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use queenmq_protocol::kafka_producers::{
    increment_sequence, BatchSpan, GuardVerdict, KafkaProduceReq, ProducerBatch, ProducerGuard,
};
use queenmq_protocol::{Command, Outcome, PushItem, PushResult, QueenError};

use crate::connection::{encode, Reply};
use crate::records::{self, Batch, BatchError, Budget};
use crate::wire::{Malformed, Reader};
use crate::{errors, mapping, topics, Door};

/// v3 (the first with record batches v2) ..= v12 (v13 names topics by id, which topics do
/// not have yet).
pub const VERSIONS: std::ops::RangeInclusive<i16> = 3..=12;

/// One partition's index and record bytes.
pub type PartitionData = (i32, Option<Bytes>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceRequest {
    pub transactional_id: Option<String>,
    pub acks: i16,
    pub topics: Vec<(String, Vec<PartitionData>)>,
}

pub fn decode(r: &mut Reader) -> Result<ProduceRequest, Malformed> {
    let transactional_id = r.nullable_string()?;
    let acks = r.i16()?;
    let _timeout_ms = r.i32()?;
    let mut topics = Vec::new();
    for _ in 0..r.array_len()?.unwrap_or(0) {
        let name = r.string()?;
        let mut parts = Vec::new();
        for _ in 0..r.array_len()?.unwrap_or(0) {
            let index = r.i32()?;
            let records = r.nullable_bytes()?;
            r.skip_tags()?;
            parts.push((index, records));
        }
        r.skip_tags()?;
        topics.push((name, parts));
    }
    r.skip_tags()?;
    Ok(ProduceRequest {
        transactional_id,
        acks,
        topics,
    })
}

/// One partition's fate before and after the push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Refused before the push: this code and message.
    Refused(i16, String),
    /// Its records are items `start..end` of the push; its batch was `wire_bytes` long as
    /// sent (what the topic's `max.message.bytes` bounds, judged by the engine).
    Pushed {
        start: usize,
        end: usize,
        wire_bytes: usize,
    },
}

/// The request's idempotent partitions, and their names to find a repeat in constant time.
#[derive(Debug, Default)]
pub struct Guards {
    pub list: Vec<ProducerGuard>,
    named: HashSet<(String, String)>,
}

/// Checks one partition's batch and turns its records into push items (appended to
/// `items`), and an idempotent batch into a guard (appended to `guards`). `budget` bounds
/// what decompression may still produce for the request.
pub fn plan_partition(
    topic: &str,
    index: i32,
    records: Option<Bytes>,
    transactional_id: Option<&str>,
    budget: &mut Budget,
    items: &mut Vec<PushItem>,
    guards: &mut Guards,
) -> Fate {
    let refuse = |code: i16, msg: &str| Fate::Refused(code, msg.to_owned());
    if !topics::valid_topic_name(topic) {
        return refuse(errors::INVALID_TOPIC_EXCEPTION, "topic name not acceptable");
    }
    if !u32::try_from(index).is_ok_and(|i| i < topics::MAX_TOPIC_PARTITIONS) {
        return refuse(errors::UNKNOWN_TOPIC_OR_PARTITION, "no such partition");
    }
    if transactional_id.is_some_and(|t| !crate::txn::valid_txn_id(t)) {
        return refuse(errors::INVALID_REQUEST, "transactional id not acceptable");
    }
    let batches: Vec<Batch> = match records::decode_batches(records.unwrap_or_default(), budget) {
        Ok(b) => b,
        Err(BatchError::Decompress(crate::codecs::CodecError::TooLarge(_))) => {
            return refuse(
                errors::MESSAGE_TOO_LARGE,
                "records decompress past the request limit",
            )
        }
        Err(BatchError::TooManyRecords) => {
            return refuse(
                errors::MESSAGE_TOO_LARGE,
                "the request carries more records than max_push_items",
            )
        }
        Err(e @ BatchError::Magic(_)) => {
            return refuse(errors::UNSUPPORTED_FOR_MESSAGE_FORMAT, &e.to_string())
        }
        Err(e @ BatchError::OffsetRange { .. }) => {
            return refuse(errors::INVALID_RECORD, &e.to_string())
        }
        Err(e) => return refuse(errors::CORRUPT_MESSAGE, &e.to_string()),
    };
    // Kafka's ProduceRequest.validateRecords (v3+): several batches would each need a
    // verdict, and one repeat among them must not answer for a new batch.
    if batches.len() > 1 {
        return refuse(
            errors::INVALID_RECORD,
            "a produce request carries exactly one record batch per partition",
        );
    }
    // A transactional request carries only its transaction's batches, and a transactional
    // batch needs the request's transactional id to be judged against.
    if batches
        .iter()
        .any(|b| b.transactional != transactional_id.is_some())
    {
        return refuse(
            errors::INVALID_RECORD,
            "transactional batches travel in, and only in, a transactional produce",
        );
    }
    if transactional_id.is_some() && batches.iter().any(|b| b.producer_id < 0) {
        return refuse(
            errors::INVALID_RECORD,
            "a transactional batch needs a producer id",
        );
    }
    if batches.iter().any(|b| b.control) {
        return refuse(errors::INVALID_RECORD, "control batches cannot be produced");
    }
    let partition = index.to_string();
    let producer_batch = match batches.first().map(producer_batch) {
        Some(Err(why)) => return refuse(errors::INVALID_RECORD, why),
        Some(Ok(b)) => b,
        None => None,
    };
    if producer_batch.is_some() && !guards.named.insert((topic.to_owned(), partition.clone())) {
        return refuse(
            errors::INVALID_RECORD,
            "the request names this partition twice with idempotent batches",
        );
    }
    let start = items.len();
    for rec in batches.iter().flat_map(|b| &b.records) {
        items.push(PushItem {
            queue: topic.to_owned(),
            partition: partition.clone(),
            payload: mapping::payload(rec),
            transaction_id: None,
            trace_id: None,
        });
    }
    if items.len() == start {
        return refuse(errors::INVALID_RECORD, "no records");
    }
    if let Some(batch) = producer_batch {
        guards.list.push(ProducerGuard {
            queue: topic.to_owned(),
            partition,
            start,
            end: items.len(),
            batch,
        });
    }
    Fate::Pushed {
        start,
        end: items.len(),
        wire_bytes: batches.iter().map(|b| b.wire_bytes).sum(),
    }
}

/// A batch's sequence range when it carries a producer id. Refused as Kafka's LogValidator
/// refuses: a producer id without a valid epoch and sequence.
fn producer_batch(b: &Batch) -> Result<Option<ProducerBatch>, &'static str> {
    if b.producer_id < 0 {
        return Ok(None);
    }
    if b.producer_epoch < 0 || b.base_sequence < 0 || b.last_offset_delta < 0 {
        return Err("an idempotent batch needs a producer epoch and sequence");
    }
    if b.records.is_empty() {
        return Err("an idempotent batch without records");
    }
    Ok(Some(ProducerBatch {
        producer_id: b.producer_id,
        epoch: b.producer_epoch,
        first_seq: b.base_sequence,
        last_seq: increment_sequence(b.base_sequence, b.last_offset_delta),
        records: b.records.len(),
    }))
}

/// A guarded partition's answer when the engine did not append it.
fn verdict_answer(v: GuardVerdict) -> Option<(i16, i64, Option<String>)> {
    let refused = |code: i16, msg: &str| Some((code, -1, Some(msg.to_owned())));
    match v {
        GuardVerdict::Appended => None,
        GuardVerdict::Duplicate { base_offset } => Some((
            errors::NONE,
            i64::try_from(base_offset).unwrap_or(i64::MAX),
            None,
        )),
        GuardVerdict::OutOfOrder => refused(
            errors::OUT_OF_ORDER_SEQUENCE_NUMBER,
            "the batch's sequence number does not follow the partition's last",
        ),
        GuardVerdict::Fenced => refused(
            errors::INVALID_PRODUCER_EPOCH,
            "the producer epoch is older than the partition's",
        ),
        GuardVerdict::NotInTransaction => refused(
            errors::INVALID_TXN_STATE,
            "the partition is not in the producer's open transaction",
        ),
        GuardVerdict::TxnIndexFull => refused(
            errors::POLICY_VIOLATION,
            "the partition holds the most transactional stretches it keeps; abort",
        ),
        GuardVerdict::UnknownProducer => refused(
            errors::UNKNOWN_PRODUCER_ID,
            "this producer id was not handed out by this broker (InitProducerId)",
        ),
        GuardVerdict::TooLarge => refused(
            errors::MESSAGE_TOO_LARGE,
            "the record batch is larger than the topic's max.message.bytes",
        ),
        GuardVerdict::Full => refused(
            errors::REQUEST_TIMED_OUT,
            "the broker holds kafka_max_producer_ids producer states; retry",
        ),
    }
}

/// A pushed partition's answer from its items' results: the first record's offset, or the
/// first refusal among them.
pub fn settle(results: &[PushResult], storage_error_known: bool) -> (i16, i64, Option<String>) {
    if let Some(e) = results.iter().find_map(|r| r.error.as_ref()) {
        return (
            errors::from_queen_in(e, storage_error_known),
            -1,
            Some(e.message.clone()),
        );
    }
    match results.first() {
        Some(r) => (
            errors::NONE,
            i64::try_from(r.offset).unwrap_or(i64::MAX),
            None,
        ),
        None => (errors::UNKNOWN_SERVER_ERROR, -1, Some("no result".into())),
    }
}

pub async fn answer(door: &Door, version: i16, mut r: Reader) -> Reply {
    let req = match decode(&mut r) {
        Ok(req) => req,
        Err(e) => return Reply::Close(e.to_string()),
    };
    let acks_ok = matches!(req.acks, -1..=1);
    let mut budget = Budget::new(door.cfg.max_request_bytes, door.cfg.max_records);
    let mut items = Vec::new();
    let mut guards = Guards::default();
    let mut plan = Vec::new();
    for (topic, parts) in req.topics {
        let mut fates = Vec::new();
        // Kafka refuses an index at or past the topic's partition count: producing to one
        // would otherwise create it and change every client's key-to-partition mapping.
        let shown = if acks_ok && topics::valid_topic_name(&topic) {
            Some(topics::partition_count(door, &topic).await)
        } else {
            None
        };
        for (index, records) in parts {
            let missing = match &shown {
                Some(Err(_)) => true,
                Some(Ok(n)) => !u32::try_from(index).is_ok_and(|i| i < *n),
                None => false,
            };
            let fate = if missing {
                Fate::Refused(
                    errors::UNKNOWN_TOPIC_OR_PARTITION,
                    "no such topic or partition (ask Metadata first)".into(),
                )
            } else if acks_ok {
                plan_partition(
                    &topic,
                    index,
                    records,
                    req.transactional_id.as_deref(),
                    &mut budget,
                    &mut items,
                    &mut guards,
                )
            } else {
                Fate::Refused(
                    errors::INVALID_REQUIRED_ACKS,
                    "acks must be -1, 0 or 1".into(),
                )
            };
            fates.push((index, fate));
        }
        plan.push((topic, fates));
    }
    let batches = plan
        .iter()
        .flat_map(|(_, fates)| fates)
        .filter_map(|(_, fate)| match fate {
            Fate::Pushed {
                start,
                end,
                wire_bytes,
            } => Some(BatchSpan {
                start: *start,
                end: *end,
                wire_bytes: *wire_bytes,
            }),
            Fate::Refused(..) => None,
        })
        .collect();
    let pushed = push(
        door,
        items,
        guards.list,
        batches,
        req.transactional_id.clone(),
    )
    .await;
    if req.acks == 0 {
        return unacked(&plan, &pushed);
    }
    let responses = plan
        .into_iter()
        .map(|(topic, fates)| {
            let parts = fates
                .into_iter()
                .map(|(index, fate)| partition_response(version, index, fate, &pushed))
                .collect();
            TopicProduceResponse::default()
                .with_name(TopicName(StrBytes::from_string(topic)))
                .with_partition_responses(parts)
        })
        .collect();
    encode(
        &ProduceResponse::default().with_responses(responses),
        version,
    )
}

/// The client of an acks=0 produce reads no answer: as a Kafka broker does, close the
/// connection on any error (a refused partition, a guard's verdict, a failed record) so
/// that the client notices and refreshes its metadata.
fn unacked(plan: &[(String, Vec<(i32, Fate)>)], pushed: &Pushed) -> Reply {
    let refused = plan
        .iter()
        .flat_map(|(_, fates)| fates)
        .any(|(_, f)| matches!(f, Fate::Refused(..)));
    match (pushed, refused) {
        (Err(e), _) => Reply::Close(format!("acks=0 produce refused: {e}")),
        (Ok(_), true) => Reply::Close("acks=0 produce refused for a partition".into()),
        (Ok((results, verdicts)), false) => {
            let verdict = verdicts
                .values()
                .filter_map(|v| verdict_answer(*v))
                .find(|(code, _, _)| *code != errors::NONE);
            let failed = results.iter().find_map(|r| r.error.as_ref());
            match (verdict, failed) {
                (Some((code, _, _)), _) => {
                    Reply::Close(format!("acks=0 produce refused: error {code}"))
                }
                (None, Some(e)) => Reply::Close(format!("acks=0 produce refused: {e}")),
                (None, None) => Reply::Nothing,
            }
        }
    }
}

/// Every item's result, and the verdict of each guard by its first item's index.
type Pushed = Result<(Vec<PushResult>, HashMap<usize, GuardVerdict>), QueenError>;

/// One bus call for the whole request, a Kafka produce: the engine judges each partition's
/// batch against its topic's `max.message.bytes` and its idempotent guard, and pushes the
/// rest (a plain push when no batch is guarded or too large).
async fn push(
    door: &Door,
    items: Vec<PushItem>,
    guards: Vec<ProducerGuard>,
    batches: Vec<BatchSpan>,
    transactional_id: Option<String>,
) -> Pushed {
    if items.is_empty() {
        return Ok((Vec::new(), HashMap::new()));
    }
    let ctx = door.ctx.clone();
    let starts: Vec<usize> = guards.iter().map(|g| g.start).collect();
    let req = KafkaProduceReq {
        items,
        guards,
        batches,
        expiration_ms: door.cfg.producer_id_expiration_ms,
        max_producers: door.cfg.max_producer_ids,
        evict_min_idle_ms: door.cfg.producer_evict_min_idle_ms,
        transactional_id,
    };
    match door.bus.call(ctx, Command::KafkaProduce(req)).await {
        Ok(Outcome::KafkaProduced(o)) if o.verdicts.len() == starts.len() => {
            Ok((o.results, starts.into_iter().zip(o.verdicts).collect()))
        }
        Ok(other) => Err(topics::unexpected(&other)),
        Err(e) => Err(e),
    }
}

/// Produce answers KAFKA_STORAGE_ERROR from version 4 on.
fn storage_error_known(version: i16) -> bool {
    version >= 4
}

fn partition_response(
    version: i16,
    index: i32,
    fate: Fate,
    pushed: &Pushed,
) -> PartitionProduceResponse {
    let (code, offset, message) = match (fate, pushed) {
        (Fate::Refused(code, msg), _) => (code, -1, Some(msg)),
        (Fate::Pushed { .. }, Err(e)) => (
            errors::from_queen_in(e, storage_error_known(version)),
            -1,
            Some(e.message.clone()),
        ),
        (Fate::Pushed { start, end, .. }, Ok((results, verdicts))) => {
            let verdict = verdicts.get(&start).and_then(|v| verdict_answer(*v));
            match (verdict, results.get(start..end)) {
                (Some(answer), _) => answer,
                (None, Some(rs)) => settle(rs, storage_error_known(version)),
                (None, None) => (
                    errors::UNKNOWN_SERVER_ERROR,
                    -1,
                    Some("missing results".into()),
                ),
            }
        }
    };
    PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(code)
        .with_base_offset(offset)
        .with_error_message(message.map(StrBytes::from_string))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::tests::{batch, batch_seq};
    use bytes::BytesMut;
    use queenmq_protocol::PushStatus;

    fn plan(records: Bytes, index: i32, txn: Option<&str>) -> (Fate, Vec<PushItem>) {
        let (fate, items, _) = plan_guarded(records, index, txn);
        (fate, items)
    }

    fn plan_guarded(
        records: Bytes,
        index: i32,
        txn: Option<&str>,
    ) -> (Fate, Vec<PushItem>, Vec<ProducerGuard>) {
        let mut items = Vec::new();
        let mut guards = Guards::default();
        let mut budget = Budget::new(1 << 20, 10_000);
        let fate = plan_partition(
            "orders",
            index,
            Some(records),
            txn,
            &mut budget,
            &mut items,
            &mut guards,
        );
        (fate, items, guards.list)
    }

    #[test]
    fn records_past_the_request_cap_are_refused_before_they_are_built() {
        let data = batch(
            -1,
            0,
            &[(0, None, Some(b"1"), &[]), (1, None, Some(b"2"), &[])],
        );
        let mut items = Vec::new();
        let mut budget = Budget::new(1 << 20, 1);
        let fate = plan_partition(
            "orders",
            0,
            Some(data),
            None,
            &mut budget,
            &mut items,
            &mut Guards::default(),
        );
        assert!(
            matches!(fate, Fate::Refused(errors::MESSAGE_TOO_LARGE, _)),
            "{fate:?}"
        );
        assert!(items.is_empty());
    }

    #[test]
    fn records_become_items_of_the_numbered_partition() {
        let data = batch(
            -1,
            5,
            &[
                (5, None, Some(b"{\"n\":1}"), &[]),
                (6, Some(b"k"), Some(b"2"), &[]),
            ],
        );
        let (fate, items) = plan(data, 3, None);
        assert!(
            matches!(
                fate,
                Fate::Pushed {
                    start: 0,
                    end: 2,
                    ..
                }
            ),
            "{fate:?}"
        );
        assert_eq!(items[0].queue, "orders");
        assert_eq!(items[0].partition, "3");
        assert_eq!(&items[0].payload[..], b"{\"n\":1}");
        let second: serde_json::Value =
            serde_json::from_slice(&items[1].payload).expect("envelope is JSON");
        assert_eq!(second["$kafka"]["key"], "k");
        assert_eq!(second["$kafka"]["value"], 2);
        assert_eq!(second["$kafka"]["timestamp"], 6);
    }

    #[test]
    fn refusals_stay_per_partition() {
        let good = batch(-1, 0, &[(0, None, Some(b"1"), &[])]);
        let code = |f: Fate| match f {
            Fate::Refused(c, _) => c,
            Fate::Pushed { .. } => errors::NONE,
        };
        assert_eq!(
            code(plan(good.clone(), -1, None).0),
            errors::UNKNOWN_TOPIC_OR_PARTITION
        );
        assert_eq!(
            code(plan(good.clone(), 0, Some("tx")).0),
            errors::INVALID_RECORD,
            "a plain batch in a transactional produce"
        );
        let no_sequence = batch_seq(7, 0, -1, 0, &[(0, None, Some(b"1"), &[])]);
        assert_eq!(code(plan(no_sequence, 0, None).0), errors::INVALID_RECORD);
        let no_epoch = batch_seq(7, -1, 0, 0, &[(0, None, Some(b"1"), &[])]);
        assert_eq!(code(plan(no_epoch, 0, None).0), errors::INVALID_RECORD);
        let mut mixed = BytesMut::new();
        mixed.extend_from_slice(&batch(7, 0, &[(0, None, Some(b"1"), &[])]));
        mixed.extend_from_slice(&good);
        assert_eq!(
            code(plan(mixed.freeze(), 0, None).0),
            errors::INVALID_RECORD
        );
        assert_eq!(
            code(plan(Bytes::from_static(b"garbage"), 0, None).0),
            errors::CORRUPT_MESSAGE
        );
        assert_eq!(code(plan(Bytes::new(), 0, None).0), errors::INVALID_RECORD);
    }

    #[test]
    fn an_idempotent_batch_becomes_a_guard_with_its_sequence_range() {
        let recs: &[crate::records::tests::TestRecord<'_>] =
            &[(0, None, Some(b"1"), &[]), (1, None, Some(b"2"), &[])];
        let (fate, items, guards) = plan_guarded(batch_seq(9, 3, i32::MAX, 0, recs), 4, None);
        assert!(
            matches!(
                fate,
                Fate::Pushed {
                    start: 0,
                    end: 2,
                    ..
                }
            ),
            "{fate:?}"
        );
        assert_eq!(items.len(), 2);
        assert_eq!(
            guards,
            vec![ProducerGuard {
                queue: "orders".into(),
                partition: "4".into(),
                start: 0,
                end: 2,
                batch: ProducerBatch {
                    producer_id: 9,
                    epoch: 3,
                    first_seq: i32::MAX,
                    last_seq: 0,
                    records: 2,
                },
            }]
        );
    }

    #[test]
    fn two_batches_for_one_partition_are_refused_as_kafka_does() {
        // A new batch then a repeat: one verdict cannot answer for both, so neither is taken.
        let mut two = BytesMut::new();
        two.extend_from_slice(&batch_seq(9, 0, 5, 0, &[(0, None, Some(b"1"), &[])]));
        two.extend_from_slice(&batch_seq(9, 0, 0, 0, &[(0, None, Some(b"2"), &[])]));
        let (fate, items, guards) = plan_guarded(two.freeze(), 0, None);
        assert!(
            matches!(fate, Fate::Refused(errors::INVALID_RECORD, _)),
            "{fate:?}"
        );
        assert!(items.is_empty() && guards.is_empty());
        let mut plain = BytesMut::new();
        plain.extend_from_slice(&batch(-1, 0, &[(0, None, Some(b"1"), &[])]));
        plain.extend_from_slice(&batch(-1, 0, &[(0, None, Some(b"2"), &[])]));
        let (fate, _) = plan(plain.freeze(), 0, None);
        assert!(matches!(fate, Fate::Refused(errors::INVALID_RECORD, _)));
    }

    #[test]
    fn a_partition_named_twice_with_idempotent_batches_is_refused_the_second_time() {
        let one = batch_seq(9, 0, 0, 0, &[(0, None, Some(b"1"), &[])]);
        let mut items = Vec::new();
        let mut guards = Guards::default();
        let mut budget = Budget::new(1 << 20, 10_000);
        let mut go = |index| {
            plan_partition(
                "orders",
                index,
                Some(one.clone()),
                None,
                &mut budget,
                &mut items,
                &mut guards,
            )
        };
        assert!(matches!(go(0), Fate::Pushed { .. }));
        assert!(matches!(go(1), Fate::Pushed { .. }));
        assert!(matches!(go(0), Fate::Refused(errors::INVALID_RECORD, _)));
        assert_eq!(guards.list.len(), 2);
    }

    #[test]
    fn acks_zero_closes_on_any_refusal_the_engine_gives() {
        let plan = vec![(
            "t".to_owned(),
            vec![(
                0,
                Fate::Pushed {
                    start: 0,
                    end: 1,
                    wire_bytes: 1,
                },
            )],
        )];
        let with = |v| Ok((vec![result(0, None)], HashMap::from([(0, v)])));
        assert!(matches!(
            unacked(&plan, &with(GuardVerdict::Appended)),
            Reply::Nothing
        ));
        assert!(matches!(
            unacked(&plan, &with(GuardVerdict::Duplicate { base_offset: 0 })),
            Reply::Nothing
        ));
        for v in [
            GuardVerdict::OutOfOrder,
            GuardVerdict::Fenced,
            GuardVerdict::UnknownProducer,
            GuardVerdict::Full,
            GuardVerdict::TooLarge,
        ] {
            assert!(matches!(unacked(&plan, &with(v)), Reply::Close(_)), "{v:?}");
        }
        let failed = Ok((
            vec![result(0, Some(QueenError::unavailable("busy")))],
            HashMap::new(),
        ));
        assert!(matches!(unacked(&plan, &failed), Reply::Close(_)));
    }

    #[test]
    fn verdicts_answer_as_kafka_does() {
        assert_eq!(
            verdict_answer(GuardVerdict::Duplicate { base_offset: 12 }),
            Some((errors::NONE, 12, None))
        );
        let code = |v| verdict_answer(v).map(|a| a.0);
        assert_eq!(code(GuardVerdict::Appended), None);
        assert_eq!(
            code(GuardVerdict::OutOfOrder),
            Some(errors::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        assert_eq!(
            code(GuardVerdict::Fenced),
            Some(errors::INVALID_PRODUCER_EPOCH)
        );
        assert_eq!(
            code(GuardVerdict::UnknownProducer),
            Some(errors::UNKNOWN_PRODUCER_ID)
        );
        assert_eq!(code(GuardVerdict::Full), Some(errors::REQUEST_TIMED_OUT));
        assert_eq!(
            code(GuardVerdict::TooLarge),
            Some(errors::MESSAGE_TOO_LARGE)
        );
        assert_eq!(
            code(GuardVerdict::TxnIndexFull),
            Some(errors::POLICY_VIOLATION)
        );
    }

    fn result(offset: u64, error: Option<QueenError>) -> PushResult {
        PushResult {
            message_id: String::new(),
            transaction_id: String::new(),
            queue: "q".into(),
            partition_id: 1,
            offset,
            status: if error.is_some() {
                PushStatus::Failed
            } else {
                PushStatus::Queued
            },
            error,
        }
    }

    #[test]
    fn the_base_offset_is_the_first_records_offset() {
        assert_eq!(
            settle(&[result(41, None), result(42, None)], true),
            (0, 41, None)
        );
        let (code, offset, _) = settle(
            &[
                result(1, None),
                result(0, Some(QueenError::unavailable("busy"))),
            ],
            true,
        );
        assert_eq!((code, offset), (errors::REQUEST_TIMED_OUT, -1));
        let full = || {
            let e = QueenError::new(queenmq_protocol::ErrorCode::StorageFull, "disk");
            result(0, Some(e))
        };
        assert_eq!(
            settle(&[full()], storage_error_known(4)).0,
            errors::KAFKA_STORAGE_ERROR
        );
        assert_eq!(
            settle(&[full()], storage_error_known(3)).0,
            errors::NOT_LEADER_OR_FOLLOWER,
            "Produce v3 does not know KAFKA_STORAGE_ERROR"
        );
    }

    #[test]
    fn requests_encoded_by_clients_decode_in_every_served_version() {
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        use kafka_protocol::messages::ProduceRequest as K;
        use kafka_protocol::protocol::Encodable;
        let data = batch(-1, 0, &[(0, None, Some(b"1"), &[])]);
        for v in VERSIONS {
            let req = K::default()
                .with_acks(-1)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_static_str("t")))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(2)
                        .with_records(Some(data.clone()))])]);
            let mut buf = bytes::BytesMut::new();
            req.encode(&mut buf, v).expect("encodes");
            let mut r = Reader::new(buf.freeze(), v >= 9);
            let got = decode(&mut r).expect("decodes");
            assert_eq!(r.remaining(), 0, "v{v}");
            assert_eq!(got.acks, -1);
            assert_eq!(
                got.topics,
                vec![("t".to_owned(), vec![(2, Some(data.clone()))])]
            );
        }
    }
}
