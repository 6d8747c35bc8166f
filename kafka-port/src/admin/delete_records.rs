//! DeleteRecords (API 21): a partition's log start offset moves up to the requested offset,
//! through the engine's `KafkaDeleteRecords` command (protocol/src/kafka_records.rs): the
//! same floor retention moves, so Kafka fetches below it answer OFFSET_OUT_OF_RANGE,
//! ListOffsets earliest answers it, and HTTP pops and listings no longer see what is below.

use std::collections::HashMap;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use queenmq_protocol::command::rows;
use queenmq_protocol::kafka_records::{
    DeleteRecordsReq, DeleteRecordsTarget, DeleteRecordsVerdict, MAX_DELETE_RECORDS_TARGETS,
};
use queenmq_protocol::{Command, Outcome, QueenError, RequestCtx};

use super::MAX_TOPICS;
use crate::connection::{encode, Reply};
use crate::topics::{self, unexpected};
use crate::wire::{Malformed, Reader};
use crate::{errors, Door};

/// Every version Kafka has; v2 is the flexible one.
pub const VERSIONS: std::ops::RangeInclusive<i16> = 0..=2;

/// Topics with their (partition index, offset) pairs, in request order.
pub type DeleteRecordsRequest = Vec<(String, Vec<(i32, i64)>)>;

pub fn decode(r: &mut Reader) -> Result<DeleteRecordsRequest, Malformed> {
    let n = r.array_len()?.unwrap_or(0);
    if n > MAX_TOPICS {
        return Err(Malformed("too many topics in one request"));
    }
    let mut total = 0usize;
    let mut out = Vec::new();
    for _ in 0..n {
        let name = r.string()?;
        let np = r.array_len()?.unwrap_or(0);
        total = total.saturating_add(np);
        if total > MAX_DELETE_RECORDS_TARGETS {
            return Err(Malformed("too many partitions in one request"));
        }
        let mut parts = Vec::new();
        for _ in 0..np {
            let index = r.i32()?;
            let offset = r.i64()?;
            r.skip_tags()?;
            parts.push((index, offset));
        }
        r.skip_tags()?;
        out.push((name, parts));
    }
    let _timeout_ms = r.i32()?;
    r.skip_tags()?;
    Ok(out)
}

/// A partition's answer before the engine is asked: a refusal, or the target's index.
enum Plan {
    Refused(i16),
    Asked(usize),
}

/// How many partitions a topic has, as Produce and Metadata count them.
async fn lookup(door: &Door, topic: &str) -> Result<u32, QueenError> {
    if topics::valid_topic_name(topic) {
        topics::partition_count(door, topic).await
    } else {
        Err(QueenError::not_found("no such topic"))
    }
}

/// Each partition's plan, in request order, and the targets to ask for. Each distinct
/// topic is looked up once and each distinct partition is one target, whose offset is the
/// last one named (Kafka collects a request's partitions into a map the same way), so
/// repeating names in a request costs no more engine work than naming them once.
async fn plan(
    door: &Door,
    req: &DeleteRecordsRequest,
) -> (Vec<Vec<Plan>>, Vec<DeleteRecordsTarget>) {
    let mut counts: HashMap<&str, Result<u32, QueenError>> = HashMap::new();
    for (topic, _) in req {
        if !counts.contains_key(topic.as_str()) {
            counts.insert(topic, lookup(door, topic).await);
        }
    }
    let mut slots: HashMap<(&str, i32), usize> = HashMap::new();
    let mut targets: Vec<DeleteRecordsTarget> = Vec::new();
    let mut plans = Vec::with_capacity(req.len());
    for (topic, parts) in req {
        let count = counts.get(topic.as_str());
        let mut topic_plans = Vec::with_capacity(parts.len());
        for (index, offset) in parts {
            let p = match count {
                None => Plan::Refused(errors::UNKNOWN_SERVER_ERROR),
                Some(Err(e)) => Plan::Refused(errors::from_queen(e)),
                Some(Ok(n)) if !u32::try_from(*index).is_ok_and(|i| i < *n) => {
                    Plan::Refused(errors::UNKNOWN_TOPIC_OR_PARTITION)
                }
                Some(Ok(_)) => {
                    let slot = *slots.entry((topic.as_str(), *index)).or_insert_with(|| {
                        targets.push(DeleteRecordsTarget {
                            queue: topic.clone(),
                            partition: index.to_string(),
                            offset: *offset,
                        });
                        targets.len() - 1
                    });
                    if let Some(t) = targets.get_mut(slot) {
                        t.offset = *offset;
                    }
                    Plan::Asked(slot)
                }
            };
            topic_plans.push(p);
        }
        plans.push(topic_plans);
    }
    (plans, targets)
}

async fn delete(
    door: &Door,
    ctx: &RequestCtx,
    targets: Vec<DeleteRecordsTarget>,
) -> Result<Vec<DeleteRecordsVerdict>, QueenError> {
    if targets.is_empty() {
        return Ok(Vec::new());
    }
    let n = targets.len();
    let cmd = Command::KafkaDeleteRecords(DeleteRecordsReq { targets });
    match door.bus.call(ctx.clone(), cmd).await? {
        Outcome::KafkaRecordsDeleted(v) if v.len() == n => Ok(v),
        other => Err(unexpected(&other)),
    }
}

/// (error code, low watermark) of one partition.
fn answer_of(plan: &Plan, done: &Result<Vec<DeleteRecordsVerdict>, QueenError>) -> (i16, i64) {
    let i = match plan {
        Plan::Refused(code) => return (*code, -1),
        Plan::Asked(i) => *i,
    };
    match done.as_ref().map(|v| v.get(i)) {
        Err(e) => (errors::from_queen(e), -1),
        Ok(None) => (errors::UNKNOWN_SERVER_ERROR, -1),
        Ok(Some(DeleteRecordsVerdict::Deleted { low_watermark })) => (
            errors::NONE,
            i64::try_from(*low_watermark).unwrap_or(i64::MAX),
        ),
        Ok(Some(DeleteRecordsVerdict::OutOfRange)) => (errors::OFFSET_OUT_OF_RANGE, -1),
        Ok(Some(DeleteRecordsVerdict::UnknownQueue)) => (errors::UNKNOWN_TOPIC_OR_PARTITION, -1),
        Ok(Some(DeleteRecordsVerdict::Busy)) => (errors::REQUEST_TIMED_OUT, -1),
    }
}

pub async fn answer(door: &Door, version: i16, mut r: Reader) -> Reply {
    let req = match decode(&mut r) {
        Ok(req) => req,
        Err(e) => return Reply::Close(e.to_string()),
    };
    // The context the command runs as; its role is checked before any topic is looked up,
    // so a caller who may not delete records costs no reads.
    let ctx = &door.ctx;
    let (plans, done) = match ctx.authorize(&rows::KAFKA_DELETE_RECORDS) {
        Err(e) => {
            let code = errors::from_queen(&e);
            let plans = req
                .iter()
                .map(|(_, parts)| parts.iter().map(|_| Plan::Refused(code)).collect())
                .collect();
            (plans, Ok(Vec::new()))
        }
        Ok(()) => {
            let (plans, targets) = plan(door, &req).await;
            (plans, delete(door, ctx, targets).await)
        }
    };
    let topics = req
        .iter()
        .zip(&plans)
        .map(|((topic, parts), plans)| {
            let partitions = parts
                .iter()
                .zip(plans)
                .map(|((index, _), plan)| {
                    let (code, low) = answer_of(plan, &done);
                    DeleteRecordsPartitionResult::default()
                        .with_partition_index(*index)
                        .with_low_watermark(low)
                        .with_error_code(code)
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(TopicName(StrBytes::from_string(topic.clone())))
                .with_partitions(partitions)
        })
        .collect();
    encode(
        &DeleteRecordsResponse::default().with_topics(topics),
        version,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::DeleteRecordsRequest as K;
    use kafka_protocol::protocol::Encodable;

    #[test]
    fn requests_encoded_by_clients_decode_in_every_served_version() {
        for v in VERSIONS {
            let req =
                K::default()
                    .with_timeout_ms(5000)
                    .with_topics(vec![DeleteRecordsTopic::default()
                        .with_name(TopicName(StrBytes::from_static_str("t")))
                        .with_partitions(vec![
                            DeleteRecordsPartition::default()
                                .with_partition_index(2)
                                .with_offset(7),
                            DeleteRecordsPartition::default()
                                .with_partition_index(0)
                                .with_offset(-1),
                        ])]);
            let mut buf = bytes::BytesMut::new();
            req.encode(&mut buf, v).expect("encodes");
            let mut r = Reader::new(buf.freeze(), v >= 2);
            assert_eq!(
                decode(&mut r).expect("decodes"),
                vec![("t".to_owned(), vec![(2, 7), (0, -1)])],
                "v{v}"
            );
            assert_eq!(r.remaining(), 0, "v{v}");
        }
    }

    #[test]
    fn verdicts_answer_as_kafka_does() {
        let done = Ok(vec![
            DeleteRecordsVerdict::Deleted { low_watermark: 9 },
            DeleteRecordsVerdict::OutOfRange,
            DeleteRecordsVerdict::UnknownQueue,
        ]);
        assert_eq!(answer_of(&Plan::Asked(0), &done), (errors::NONE, 9));
        assert_eq!(
            answer_of(&Plan::Asked(1), &done),
            (errors::OFFSET_OUT_OF_RANGE, -1)
        );
        assert_eq!(
            answer_of(&Plan::Asked(2), &done).0,
            errors::UNKNOWN_TOPIC_OR_PARTITION
        );
        assert_eq!(
            answer_of(&Plan::Refused(errors::UNKNOWN_TOPIC_OR_PARTITION), &done).0,
            errors::UNKNOWN_TOPIC_OR_PARTITION
        );
        let refused = Err(QueenError::unavailable("busy"));
        assert_eq!(
            answer_of(&Plan::Asked(0), &refused).0,
            errors::REQUEST_TIMED_OUT
        );
    }
}
