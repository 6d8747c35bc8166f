//! TxnOffsetCommit (API 28) v0-3: group offsets held by the open transaction, visible to
//! OffsetFetch only once it commits. v3 carries the consumer's generation and member id
//! (KIP-447), checked against the live group as Kafka does.

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TopicName, TxnOffsetCommitResponse};
use kafka_protocol::protocol::StrBytes;
use queenmq_protocol::kafka_groups::valid_group_id;
use queenmq_protocol::kafka_txns::{KafkaTxnOutcome, KafkaTxnReq, TxnOffset};

use super::{call, code, valid_txn_id, MAX_PER_REQUEST};
use crate::connection::{encode, Reply};
use crate::group::members::capped_array;
use crate::wire::{Malformed, Reader};
use crate::{errors, Door};

/// (partition, offset, leader epoch, metadata) as the client sent them.
type Part = (i32, i64, i32, String);

struct Request {
    producer: super::Producer,
    group: String,
    generation: i32,
    member: String,
    instance: Option<String>,
    topics: crate::group::offsets::Topics<Part>,
}

fn decode(version: i16, r: &mut Reader) -> Result<Request, Malformed> {
    let txn_id = r.string()?;
    let group = r.string()?;
    let producer = super::Producer {
        txn_id,
        producer_id: r.i64()?,
        epoch: r.i16()?,
    };
    let (generation, member, instance) = if version >= 3 {
        (r.i32()?, r.string()?, r.nullable_string()?)
    } else {
        (-1, String::new(), None)
    };
    let mut named = 0usize;
    let topics = capped_array(r, MAX_PER_REQUEST, "too many topics", |r| {
        let name = r.string()?;
        let parts = capped_array(r, MAX_PER_REQUEST, "too many partitions", |r| {
            let index = r.i32()?;
            let offset = r.i64()?;
            let epoch = if version >= 2 { r.i32()? } else { -1 };
            let metadata = r.nullable_string()?.unwrap_or_default();
            r.skip_tags()?;
            Ok((index, offset, epoch, metadata))
        })?
        .unwrap_or_default();
        named = named.saturating_add(parts.len());
        if named > MAX_PER_REQUEST {
            return Err(Malformed("TxnOffsetCommit names too many partitions"));
        }
        r.skip_tags()?;
        Ok((name, parts))
    })?
    .unwrap_or_default();
    r.skip_tags()?;
    Ok(Request {
        producer,
        group,
        generation,
        member,
        instance,
        topics,
    })
}

/// Kafka's check of a transactional commit: a producer naming no member commits as the
/// group's producer; one naming a member must be of the live group at its generation.
fn member_check(door: &Door, req: &Request) -> Result<(), i16> {
    // As OffsetCommit: a follower's generations are not the group's, and a node leading
    // again under a new term forgets its old ones first (review s23 lead H1).
    if door.not_coordinator() {
        return Err(errors::NOT_COORDINATOR);
    }
    if req.member.is_empty() && req.generation < 0 && req.instance.is_none() {
        return Ok(());
    }
    door.groups.lock().may_commit(
        &req.group,
        req.generation,
        &req.member,
        req.instance.as_deref(),
        door.groups.now(),
    )
}

async fn codes(door: &Door, version: i16, req: &Request) -> Vec<i16> {
    let offsets: Vec<TxnOffset> = crate::group::offsets::flatten(&req.topics);
    let total = offsets.len();
    let gate = if !valid_txn_id(&req.producer.txn_id) {
        Err(errors::INVALID_REQUEST)
    } else if !valid_group_id(&req.group) {
        Err(errors::INVALID_GROUP_ID)
    } else {
        member_check(door, req)
    };
    if let Err(c) = gate {
        return vec![c; total];
    }
    if total == 0 {
        return Vec::new();
    }
    let call_req = KafkaTxnReq::OffsetCommit {
        txn_id: req.producer.txn_id.clone(),
        producer_id: req.producer.producer_id,
        epoch: req.producer.epoch,
        group: req.group.clone(),
        offsets,
        limits: door.cfg.txn_limits,
    };
    match call(door, call_req).await {
        Ok(KafkaTxnOutcome::Codes(c)) if c.len() == total => {
            c.into_iter().map(|c| code(c, version >= 3)).collect()
        }
        Ok(_) => vec![errors::UNKNOWN_SERVER_ERROR; total],
        Err(c) => vec![c; total],
    }
}

pub async fn answer(door: &Door, version: i16, mut r: Reader) -> Reply {
    let req = match decode(version, &mut r) {
        Ok(d) => d,
        Err(e) => return Reply::Close(e.to_string()),
    };
    let mut codes = codes(door, version, &req).await.into_iter();
    let topics = req
        .topics
        .into_iter()
        .map(|(name, parts)| {
            let parts = parts
                .into_iter()
                .map(|(index, ..)| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(index)
                        .with_error_code(codes.next().unwrap_or(errors::UNKNOWN_SERVER_ERROR))
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(TopicName(StrBytes::from_string(name)))
                .with_partitions(parts)
        })
        .collect();
    encode(
        &TxnOffsetCommitResponse::default().with_topics(topics),
        version,
    )
}
