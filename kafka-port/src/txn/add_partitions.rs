//! AddPartitionsToTxn (API 24) v0-3: the partitions the transaction is about to write.
//! As in Kafka, the request is all or nothing: one refused partition answers the others
//! OPERATION_NOT_ATTEMPTED.

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{AddPartitionsToTxnResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use queenmq_protocol::kafka_txns::{KafkaTxnOutcome, KafkaTxnReq, TxnPartition};

use super::{call, code, producer, valid_txn_id, MAX_PER_REQUEST};
use crate::connection::{encode, Reply};
use crate::group::members::capped_array;
use crate::wire::{Malformed, Reader};
use crate::{errors, topics, Door};

type Topics = Vec<(String, Vec<i32>)>;

fn decode(r: &mut Reader) -> Result<(super::Producer, Topics), Malformed> {
    let p = producer(r)?;
    let mut named = 0usize;
    let topics = capped_array(r, MAX_PER_REQUEST, "too many topics", |r| {
        let name = r.string()?;
        let parts = capped_array(r, MAX_PER_REQUEST, "too many partitions", |r| r.i32())?
            .unwrap_or_default();
        named = named.saturating_add(parts.len());
        if named > MAX_PER_REQUEST {
            return Err(Malformed("AddPartitionsToTxn names too many partitions"));
        }
        r.skip_tags()?;
        Ok((name, parts))
    })?
    .unwrap_or_default();
    r.skip_tags()?;
    Ok((p, topics))
}

/// Every partition's code, in request order, or the door's refusals before the engine.
async fn codes(door: &Door, version: i16, p: super::Producer, topics: &Topics) -> Vec<i16> {
    let total: usize = topics.iter().map(|(_, ps)| ps.len()).sum();
    if !valid_txn_id(&p.txn_id) {
        return vec![errors::INVALID_REQUEST; total];
    }
    let mut partitions = Vec::with_capacity(total);
    let mut refused: Vec<Option<i16>> = Vec::with_capacity(total);
    for (topic, parts) in topics {
        let count = if topics::valid_topic_name(topic) {
            topics::partition_count(door, topic).await.ok()
        } else {
            None
        };
        for index in parts {
            match count {
                Some(count) if u32::try_from(*index).is_ok_and(|i| i < count) => {
                    refused.push(None);
                    partitions.push(TxnPartition {
                        topic: topic.clone(),
                        index: *index,
                        count,
                    });
                }
                _ => refused.push(Some(errors::UNKNOWN_TOPIC_OR_PARTITION)),
            }
        }
    }
    if refused.iter().any(Option::is_some) {
        return refused
            .into_iter()
            .map(|c| c.unwrap_or(errors::OPERATION_NOT_ATTEMPTED))
            .collect();
    }
    if partitions.is_empty() {
        return Vec::new();
    }
    let req = KafkaTxnReq::AddPartitions {
        txn_id: p.txn_id,
        producer_id: p.producer_id,
        epoch: p.epoch,
        partitions,
        limits: door.cfg.txn_limits,
    };
    match call(door, req).await {
        Ok(KafkaTxnOutcome::Codes(c)) if c.len() == total => {
            c.into_iter().map(|c| code(c, version >= 2)).collect()
        }
        Ok(_) => vec![errors::UNKNOWN_SERVER_ERROR; total],
        Err(c) => vec![c; total],
    }
}

pub async fn answer(door: &Door, version: i16, mut r: Reader) -> Reply {
    let (p, topics) = match decode(&mut r) {
        Ok(d) => d,
        Err(e) => return Reply::Close(e.to_string()),
    };
    let mut codes = codes(door, version, p, &topics).await.into_iter();
    let results = topics
        .into_iter()
        .map(|(name, parts)| {
            let parts = parts
                .into_iter()
                .map(|index| {
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(index)
                        .with_partition_error_code(
                            codes.next().unwrap_or(errors::UNKNOWN_SERVER_ERROR),
                        )
                })
                .collect();
            AddPartitionsToTxnTopicResult::default()
                .with_name(TopicName(StrBytes::from_string(name)))
                .with_results_by_partition(parts)
        })
        .collect();
    encode(
        &AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results),
        version,
    )
}
