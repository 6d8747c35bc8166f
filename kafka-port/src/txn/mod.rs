//! Kafka transactions' coordinator requests (docs/kafka-transactions.md, layer 3): this node
//! coordinates every transactional id of the tenant, and each request is one
//! `Command::KafkaTxn` answered after its entry commits.

pub mod add_offsets;
pub mod add_partitions;
pub mod end;
pub mod offset_commit;
pub mod producers_answer;
pub mod reads;
#[cfg(test)]
mod reads_room_tests;
#[cfg(test)]
mod reads_tests;

use std::ops::RangeInclusive;

use kafka_protocol::messages::ApiKey;
use queenmq_protocol::kafka_txns::{KafkaTxnOutcome, KafkaTxnReq, TxnCode};
use queenmq_protocol::{Command, ErrorCode, Outcome};

use crate::connection::Reply;
use crate::wire::{Malformed, Reader};
use crate::{errors, topics, Door};

/// v4 of AddPartitionsToTxn batches transactions for brokers (KIP-890): not served.
pub const ADD_PARTITIONS_VERSIONS: RangeInclusive<i16> = 0..=3;
pub const ADD_OFFSETS_VERSIONS: RangeInclusive<i16> = 0..=3;
/// v4 answers the new producer id and epoch (KIP-890): not served.
pub const END_VERSIONS: RangeInclusive<i16> = 0..=3;
pub const OFFSET_COMMIT_VERSIONS: RangeInclusive<i16> = 0..=3;

/// The most partitions (or offsets) one request may name: past the per-transaction cap
/// anyway.
pub const MAX_PER_REQUEST: usize = 10_000;

const SERVED: &[(ApiKey, RangeInclusive<i16>)] = &[
    (ApiKey::AddPartitionsToTxn, ADD_PARTITIONS_VERSIONS),
    (ApiKey::AddOffsetsToTxn, ADD_OFFSETS_VERSIONS),
    (ApiKey::EndTxn, END_VERSIONS),
    (ApiKey::TxnOffsetCommit, OFFSET_COMMIT_VERSIONS),
    (
        ApiKey::DescribeProducers,
        reads::DESCRIBE_PRODUCERS_VERSIONS,
    ),
    (
        ApiKey::DescribeTransactions,
        reads::DESCRIBE_TRANSACTIONS_VERSIONS,
    ),
    (ApiKey::ListTransactions, reads::LIST_TRANSACTIONS_VERSIONS),
];

pub fn served() -> impl Iterator<Item = (ApiKey, i16, i16)> {
    SERVED.iter().map(|(k, v)| (*k, *v.start(), *v.end()))
}

pub fn is_txn_api(api: ApiKey, version: i16) -> bool {
    SERVED
        .iter()
        .any(|(k, v)| *k == api && v.contains(&version))
}

pub async fn dispatch(door: &Door, api: ApiKey, version: i16, r: Reader) -> Reply {
    match api {
        ApiKey::AddPartitionsToTxn => add_partitions::answer(door, version, r).await,
        ApiKey::AddOffsetsToTxn => add_offsets::answer(door, version, r).await,
        ApiKey::EndTxn => end::answer(door, version, r).await,
        ApiKey::TxnOffsetCommit => offset_commit::answer(door, version, r).await,
        ApiKey::DescribeProducers => reads::producers(door, version, r).await,
        ApiKey::DescribeTransactions => reads::describe(door, version, r).await,
        ApiKey::ListTransactions => reads::list(door, version, r).await,
        _ => Reply::Close(format!("{api:?} is not a transaction api")),
    }
}

/// The (transactional id, producer id, epoch) every request but InitProducerId starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Producer {
    pub txn_id: String,
    pub producer_id: i64,
    pub epoch: i16,
}

pub fn producer(r: &mut Reader) -> Result<Producer, Malformed> {
    Ok(Producer {
        txn_id: r.string()?,
        producer_id: r.i64()?,
        epoch: r.i16()?,
    })
}

/// Kafka's code for `c`; `fenced_known` is whether the request's version knows
/// PRODUCER_FENCED (KIP-588), else an older epoch is INVALID_PRODUCER_EPOCH.
pub fn code(c: TxnCode, fenced_known: bool) -> i16 {
    match c {
        TxnCode::None => errors::NONE,
        TxnCode::InvalidTimeout => errors::INVALID_TRANSACTION_TIMEOUT,
        TxnCode::Fenced if fenced_known => errors::PRODUCER_FENCED,
        TxnCode::Fenced => errors::INVALID_PRODUCER_EPOCH,
        TxnCode::InvalidMapping => errors::INVALID_PRODUCER_ID_MAPPING,
        TxnCode::InvalidState => errors::INVALID_TXN_STATE,
        TxnCode::UnknownPartition => errors::UNKNOWN_TOPIC_OR_PARTITION,
        TxnCode::NotAttempted => errors::OPERATION_NOT_ATTEMPTED,
        TxnCode::Busy => errors::COORDINATOR_LOAD_IN_PROGRESS,
        TxnCode::TooMany => errors::POLICY_VIOLATION,
        TxnCode::GroupAuthorization => errors::GROUP_AUTHORIZATION_FAILED,
        TxnCode::InvalidTopic => errors::INVALID_TOPIC_EXCEPTION,
        TxnCode::MetadataTooLarge => errors::OFFSET_METADATA_TOO_LARGE,
    }
}

/// Whether a transactional id is one the coordinator keeps (the engine refuses the rest
/// as malformed entries would be).
pub fn valid_txn_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= queenmq_protocol::kafka_txns::MAX_TRANSACTIONAL_ID_BYTES
}

/// Asks the coordinator; a refusal of the bus is one Kafka code for the whole request.
pub async fn call(door: &Door, req: KafkaTxnReq) -> Result<KafkaTxnOutcome, i16> {
    match door
        .bus
        .call(door.ctx.clone(), Command::KafkaTxn(req))
        .await
    {
        Ok(Outcome::KafkaTxn(o)) => Ok(o),
        Ok(other) => {
            let e = topics::unexpected(&other);
            tracing::warn!(error = %e, "a transaction request got an unexpected answer");
            Err(errors::UNKNOWN_SERVER_ERROR)
        }
        Err(e) if matches!(e.code, ErrorCode::Unauthorized | ErrorCode::Forbidden) => {
            Err(errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        }
        // Busy, disk full, memory: retriable for the client; a follower sends it to the
        // coordinator (the leader).
        Err(e) => Err(errors::coordinator_refusal(
            &e,
            errors::COORDINATOR_LOAD_IN_PROGRESS,
        )),
    }
}

/// The one code of an AddOffsets or End answer.
pub fn single(o: Result<KafkaTxnOutcome, i16>, fenced_known: bool) -> i16 {
    match o {
        Ok(KafkaTxnOutcome::Codes(c)) if c.len() == 1 => code(c[0], fenced_known),
        Ok(_) => errors::UNKNOWN_SERVER_ERROR,
        Err(c) => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fencing_answers_by_version() {
        assert_eq!(code(TxnCode::Fenced, true), errors::PRODUCER_FENCED);
        assert_eq!(code(TxnCode::Fenced, false), errors::INVALID_PRODUCER_EPOCH);
        assert_eq!(
            code(TxnCode::Busy, true),
            errors::COORDINATOR_LOAD_IN_PROGRESS
        );
        assert_eq!(
            single(Ok(KafkaTxnOutcome::Codes(vec![])), true),
            errors::UNKNOWN_SERVER_ERROR
        );
        assert!(!valid_txn_id("") && valid_txn_id("t") && !valid_txn_id(&"x".repeat(1025)));
    }
}
