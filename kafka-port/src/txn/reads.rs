//! DescribeTransactions (65), ListTransactions (66) and DescribeProducers (61): read-only
//! views of the coordinator and the producers' state (`ReadReq::KafkaTxns`), no entry.
//! Kafka 3.7 serves v0 of each; so does this door.

use std::collections::{HashMap, HashSet};
use std::ops::RangeInclusive;

use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::list_transactions_response::TransactionState as Listed;
use kafka_protocol::messages::{
    DescribeTransactionsResponse, ListTransactionsResponse, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use queenmq_protocol::kafka_txn_reads::*;
use queenmq_protocol::{Command, ErrorCode, Outcome, QueenError, ReadAnswer, ReadReq};

use crate::answer_room::Held;
use crate::connection::{encode, Reply};
use crate::group::members::{capped_array, capped_array_of, dedup_by_key};
use crate::txn::producers_answer::{self, refuse_listed, Slot, Topics};
use crate::txn::valid_txn_id;
use crate::wire::{Malformed, Reader};
use crate::{errors, topics, Door};

pub const DESCRIBE_PRODUCERS_VERSIONS: RangeInclusive<i16> = 0..=0;
pub const DESCRIBE_TRANSACTIONS_VERSIONS: RangeInclusive<i16> = 0..=0;
/// v1 (the duration filter) and v2 (the id pattern) are Kafka 3.8's and 4.0's.
pub const LIST_TRANSACTIONS_VERSIONS: RangeInclusive<i16> = 0..=0;

/// Kafka's TRANSACTIONAL_ID_NOT_FOUND.
pub const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;
/// The most topics one DescribeProducers may name (each costs a topic look-up).
const MAX_PRODUCER_TOPICS: usize = 1_000;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

async fn read(door: &Door, q: KafkaTxnRead) -> Result<KafkaTxnReadAnswer, QueenError> {
    match door
        .bus
        .call(door.ctx.clone(), Command::Read(ReadReq::KafkaTxns(q)))
        .await?
    {
        Outcome::Read(ReadAnswer::KafkaTxns(a)) => Ok(a),
        other => Err(topics::unexpected(&other)),
    }
}

/// One code for a refused read: authorization is the client's fault, anything else
/// (not the leader, busy) is worth a retry.
fn refusal(e: &QueenError, unauthorized: i16) -> i16 {
    match e.code {
        ErrorCode::Unauthorized | ErrorCode::Forbidden => unauthorized,
        ErrorCode::BadRequest => errors::INVALID_REQUEST,
        _ => errors::COORDINATOR_LOAD_IN_PROGRESS,
    }
}

/// The asked ids, each once (its first time): the answer describes each id once, so naming
/// one large transaction many times cannot multiply it (review s16 kafka H1).
pub fn decode_describe(r: &mut Reader) -> Result<Vec<String>, Malformed> {
    let ids = capped_array(
        r,
        MAX_TXNS_PER_ANSWER,
        "DescribeTransactions names more than 10000 transactional ids",
        |r| r.string(),
    )?
    .unwrap_or_default();
    r.skip_tags()?;
    Ok(dedup_by_key(ids, |id| id.as_str()))
}

pub async fn describe(door: &Door, version: i16, mut r: Reader) -> Reply {
    let ids = match decode_describe(&mut r) {
        Ok(ids) => ids,
        Err(e) => return Reply::Close(e.to_string()),
    };
    // An id the coordinator cannot keep (empty, past 1024 bytes) is not found without
    // asking the engine.
    let asked: Vec<String> = ids.iter().filter(|id| valid_txn_id(id)).cloned().collect();
    let found = if asked.is_empty() {
        Ok(Vec::new())
    } else {
        let n = asked.len();
        match read(door, KafkaTxnRead::Describe { txn_ids: asked }).await {
            Ok(KafkaTxnReadAnswer::Described(v)) if v.len() == n => Ok(v),
            Ok(_) => Err(errors::UNKNOWN_SERVER_ERROR),
            Err(e) => Err(refusal(&e, errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)),
        }
    };
    // Room for the answer before it is converted (review s17 lead H1); without it every
    // described id is retried alone, as past the engine's budget, and the views go at once.
    let held: usize = found.as_ref().map_or(0, |v| {
        v.iter()
            .map(|d| match d {
                TxnDescribed::Known(t) => described_held(t),
                _ => 0,
            })
            .fold(0, usize::saturating_add)
    });
    let (room, mut found) = match door.answers.take(held) {
        Some(room) => (room, found.map(Vec::into_iter)),
        None => {
            let over = found.map(|v| {
                v.into_iter()
                    .map(|d| match d {
                        TxnDescribed::Known(_) => TxnDescribed::OverBudget,
                        other => other,
                    })
                    .collect::<Vec<_>>()
                    .into_iter()
            });
            (Held::nothing(), over)
        }
    };
    let states = ids
        .iter()
        .map(|id| {
            let blank = TransactionState::default()
                .with_transactional_id(TransactionalId(s(id)))
                .with_transaction_state(StrBytes::from_static_str(""))
                .with_transaction_start_time_ms(-1)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
            if !valid_txn_id(id) {
                return blank.with_error_code(TRANSACTIONAL_ID_NOT_FOUND);
            }
            match &mut found {
                Err(code) => blank.with_error_code(*code),
                Ok(it) => match it.next() {
                    Some(TxnDescribed::Known(t)) => described(t),
                    Some(TxnDescribed::Unknown) => {
                        blank.with_error_code(TRANSACTIONAL_ID_NOT_FOUND)
                    }
                    // Past the answer's budget: Kafka's clients retry this code for the
                    // id alone, so the next request describes it.
                    Some(TxnDescribed::OverBudget) => {
                        blank.with_error_code(errors::COORDINATOR_LOAD_IN_PROGRESS)
                    }
                    None => blank.with_error_code(errors::UNKNOWN_SERVER_ERROR),
                },
            }
        })
        .collect();
    encode(
        &DescribeTransactionsResponse::default().with_transaction_states(states),
        version,
    )
    .holding(room)
}

/// What one described transaction holds from the engine's view to the written frame: the
/// view's partitions, the message's and the frame's (an index each, a name per topic), and
/// its id three times.
pub fn described_held(t: &TxnView) -> usize {
    const PER_TXN: usize = 256;
    let per_partition = std::mem::size_of::<(String, i32)>() + 4 + 4;
    t.partitions
        .iter()
        .map(|(topic, _)| per_partition.saturating_add(topic.len().saturating_mul(3)))
        .fold(
            PER_TXN.saturating_add(t.txn_id.len().saturating_mul(3)),
            usize::saturating_add,
        )
}

fn described(t: TxnView) -> TransactionState {
    let mut topics: Vec<TopicData> = Vec::new();
    for (topic, index) in t.partitions {
        match topics.last_mut() {
            Some(last) if last.topic.0.as_str() == topic => last.partitions.push(index),
            _ => topics.push(
                TopicData::default()
                    .with_topic(TopicName(s(&topic)))
                    .with_partitions(vec![index]),
            ),
        }
    }
    TransactionState::default()
        .with_error_code(errors::NONE)
        .with_transactional_id(TransactionalId(s(&t.txn_id)))
        .with_transaction_state(StrBytes::from_static_str(t.state.kafka_name()))
        .with_transaction_timeout_ms(i32::try_from(t.timeout_ms).unwrap_or(i32::MAX))
        .with_transaction_start_time_ms(t.start_ms)
        .with_producer_id(ProducerId(t.producer_id))
        .with_producer_epoch(t.epoch)
        .with_topics(topics)
}

pub fn decode_list(r: &mut Reader) -> Result<(Vec<String>, Vec<i64>), Malformed> {
    let states = capped_array(
        r,
        MAX_LIST_FILTERS,
        "ListTransactions carries more than 1000 state filters",
        |r| r.string(),
    )?
    .unwrap_or_default();
    let producers = capped_array_of(
        r,
        MAX_LIST_PRODUCER_FILTERS,
        8,
        "ListTransactions carries more than 100000 producer id filters",
        |r| r.i64(),
    )?
    .unwrap_or_default();
    r.skip_tags()?;
    Ok((states, producers))
}

pub async fn list(door: &Door, version: i16, mut r: Reader) -> Reply {
    let (states, producer_ids) = match decode_list(&mut r) {
        Ok(d) => d,
        Err(e) => return Reply::Close(e.to_string()),
    };
    let q = KafkaTxnRead::List {
        states,
        producer_ids,
    };
    let refused = |code| {
        (
            ListTransactionsResponse::default().with_error_code(code),
            None,
        )
    };
    let (resp, room) = match read(door, q).await {
        Ok(KafkaTxnReadAnswer::Listed {
            rows,
            unknown_states,
        }) => match door.answers.take(listed_held(&rows, &unknown_states)) {
            // Room for the list before it is converted (review s18 kafka H1); without it
            // the rows go at once and the client retries the whole list, as past the
            // engine's grant.
            None => refused(errors::COORDINATOR_LOAD_IN_PROGRESS),
            Some(room) => (
                ListTransactionsResponse::default()
                    .with_unknown_state_filters(unknown_states.iter().map(|u| s(u)).collect())
                    .with_transaction_states(
                        rows.into_iter()
                            .map(|t| {
                                Listed::default()
                                    .with_transactional_id(TransactionalId(s(&t.txn_id)))
                                    .with_producer_id(ProducerId(t.producer_id))
                                    .with_transaction_state(StrBytes::from_static_str(
                                        t.state.kafka_name(),
                                    ))
                            })
                            .collect(),
                    ),
                Some(room),
            ),
        },
        // Past what the engine's cycle grants: Java's ListTransactionsHandler retries this.
        Ok(KafkaTxnReadAnswer::ListOverBudget) => refused(errors::COORDINATOR_LOAD_IN_PROGRESS),
        Ok(_) => refused(errors::UNKNOWN_SERVER_ERROR),
        Err(e) => refused(refusal(&e, errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)),
    };
    match (encode(&resp, version), room) {
        (Reply::Send { version, body }, Some(room)) => Reply::Held {
            version,
            body,
            room,
        },
        (other, _) => other,
    }
}

/// What a ListTransactions answer holds from the engine's rows to the written frame: each
/// id three times (the row, the message, the frame) beside their fixed parts, and the
/// unknown state filters twice.
pub fn listed_held(rows: &[TxnListed], unknown_states: &[String]) -> usize {
    const PER_ROW: usize = std::mem::size_of::<TxnListed>() + std::mem::size_of::<Listed>() + 32;
    let rows_bytes = rows
        .iter()
        .map(|t| PER_ROW.saturating_add(t.txn_id.len().saturating_mul(3)))
        .fold(0, usize::saturating_add);
    unknown_states
        .iter()
        .map(|u| 48usize.saturating_add(u.len().saturating_mul(2)))
        .fold(rows_bytes, usize::saturating_add)
}

type AskedTopics = Vec<(String, Vec<i32>)>;

pub fn decode_producers(r: &mut Reader) -> Result<AskedTopics, Malformed> {
    let mut budget = 0usize;
    let topics = capped_array(
        r,
        MAX_PRODUCER_TOPICS,
        "DescribeProducers names more than 1000 topics",
        |r| {
            let name = r.string()?;
            let parts = capped_array_of(
                r,
                MAX_PRODUCER_PARTITIONS,
                4,
                "DescribeProducers names more than 10000 partitions",
                |r| r.i32(),
            )?
            .unwrap_or_default();
            budget = budget.saturating_add(parts.len());
            if budget > MAX_PRODUCER_PARTITIONS {
                return Err(Malformed(
                    "DescribeProducers names more than 10000 partitions",
                ));
            }
            r.skip_tags()?;
            Ok((name, parts))
        },
    )?
    .unwrap_or_default();
    r.skip_tags()?;
    Ok(merge_repeats(topics))
}

/// Each topic once (at its first place, with the partitions of all its listings) and each
/// partition once (its first time): a repeat would multiply the look-ups and the answer
/// (review s16 kafka H1, M1).
fn merge_repeats(asked: AskedTopics) -> AskedTopics {
    let mut at: HashMap<String, usize> = HashMap::new();
    let mut out: AskedTopics = Vec::with_capacity(asked.len());
    for (name, parts) in asked {
        let i = match at.get(&name) {
            Some(i) => *i,
            None => {
                at.insert(name.clone(), out.len());
                out.push((name, Vec::new()));
                out.len() - 1
            }
        };
        if let Some((_, all)) = out.get_mut(i) {
            all.extend(parts);
        }
    }
    for (_, parts) in &mut out {
        let mut seen = HashSet::new();
        parts.retain(|p| seen.insert(*p));
    }
    out
}

pub async fn producers(door: &Door, version: i16, mut r: Reader) -> Reply {
    let asked = match decode_producers(&mut r) {
        Ok(a) => a,
        Err(e) => return Reply::Close(e.to_string()),
    };
    // Per topic (each named once): the partition count it shows (`None`: no such topic), or
    // a code for all. A name no topic can have is not looked up.
    let mut counts: Vec<Result<Option<u32>, i16>> = Vec::with_capacity(asked.len());
    for (topic, _) in &asked {
        if !topics::valid_topic_name(topic) {
            counts.push(Err(errors::INVALID_TOPIC_EXCEPTION));
            continue;
        }
        counts.push(match topics::partition_count(door, topic).await {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.code == ErrorCode::NotFound => Ok(None),
            Err(e) => Err(refusal(&e, errors::TOPIC_AUTHORIZATION_FAILED)),
        });
    }
    let mut query: Vec<(String, i32)> = Vec::new();
    for ((topic, parts), count) in asked.iter().zip(&counts) {
        if let Ok(Some(n)) = count {
            for p in parts {
                if u32::try_from(*p).is_ok_and(|p| p < *n) {
                    query.push((topic.clone(), *p));
                }
            }
        }
    }
    let n = query.len();
    let mut answers = if query.is_empty() {
        Ok(Vec::new().into_iter())
    } else {
        match read(door, KafkaTxnRead::Producers { partitions: query }).await {
            Ok(KafkaTxnReadAnswer::Producers(v)) if v.len() == n => Ok(v.into_iter()),
            Ok(_) => Err(errors::UNKNOWN_SERVER_ERROR),
            Err(e) => Err(refusal(&e, errors::TOPIC_AUTHORIZATION_FAILED)),
        }
    };
    let mut topics: Topics = asked
        .into_iter()
        .zip(&counts)
        .map(|((topic, parts), count)| {
            let partitions = parts
                .into_iter()
                .map(|p| {
                    let exists =
                        matches!(count, Ok(Some(n)) if u32::try_from(p).is_ok_and(|p| p < *n));
                    let slot = match (count, exists) {
                        (Err(code), _) => Slot::Code(*code),
                        (Ok(_), false) => Slot::Code(errors::UNKNOWN_TOPIC_OR_PARTITION),
                        (Ok(_), true) => match &mut answers {
                            Err(code) => Slot::Code(*code),
                            Ok(it) => match it.next() {
                                Some(PartitionProducers::Listed(list)) => Slot::Listed(list),
                                // Past the answer's budget: Kafka's admin client retries
                                // this code for the partition alone.
                                Some(PartitionProducers::OverBudget) => {
                                    Slot::Code(errors::NOT_LEADER_OR_FOLLOWER)
                                }
                                // The topic went between the look-up and the read.
                                Some(PartitionProducers::NoTopic) | None => {
                                    Slot::Code(errors::UNKNOWN_TOPIC_OR_PARTITION)
                                }
                            },
                        },
                    };
                    (p, slot)
                })
                .collect();
            (topic, partitions)
        })
        .collect();
    if version != 0 {
        return Reply::Close(format!("DescribeProducers v{version} is not served"));
    }
    let room = match door.answers.take(producers_held(&topics)) {
        Some(room) => room,
        None => {
            // No room for it now: every listed partition is retried alone, as past the
            // engine's budget, and the engine's views go at once.
            refuse_listed(&mut topics, errors::NOT_LEADER_OR_FOLLOWER);
            // The codes alone are a few bytes per asked partition, bounded by the
            // request whose room the connection holds until this is written.
            door.answers
                .take(producers_held(&topics))
                .unwrap_or_else(Held::nothing)
        }
    };
    Reply::Held {
        version,
        body: producers_answer::encode(topics),
        room,
    }
}

/// What a DescribeProducers answer holds while it is written: the engine's views until
/// their partition is encoded, and the frame.
pub fn producers_held(topics: &Topics) -> usize {
    producers_answer::listed(topics)
        .saturating_mul(std::mem::size_of::<ProducerView>())
        .saturating_add(producers_answer::encoded_len(topics))
}
