//! InitProducerId (API 22): producer ids for idempotent producers, handed out from the
//! engine's replicated state so they stay unique across restarts (docs/kafka-compat.md
//! "Idempotent producers").
//!
//! A request naming a transactional id goes to the engine's transaction coordinator
//! (docs/kafka-transactions.md): the id's epoch is bumped, which fences the previous
//! incarnation and aborts its open transaction.

use kafka_protocol::messages::{InitProducerIdResponse, ProducerId};
use queenmq_protocol::kafka_producers::{InitProducerOutcome, KafkaProducersReq};
use queenmq_protocol::kafka_txns::{KafkaTxnOutcome, KafkaTxnReq};
use queenmq_protocol::{Command, ErrorCode, Outcome};

use crate::connection::{encode, Reply};
use crate::wire::{Malformed, Reader};
use crate::{errors, topics, Door};

/// Every version `kafka-protocol` 0.18 has; v3 adds the producer id and epoch (KIP-360).
pub const VERSIONS: std::ops::RangeInclusive<i16> = 0..=5;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitProducerIdRequest {
    pub transactional_id: Option<String>,
    pub transaction_timeout_ms: i32,
    /// (-1, -1) when the client names none (v0-2 never do).
    pub producer_id: i64,
    pub producer_epoch: i16,
}

pub fn decode(version: i16, r: &mut Reader) -> Result<InitProducerIdRequest, Malformed> {
    let transactional_id = r.nullable_string()?;
    let transaction_timeout_ms = r.i32()?;
    let (producer_id, producer_epoch) = if version >= 3 {
        (r.i64()?, r.i16()?)
    } else {
        (-1, -1)
    };
    r.skip_tags()?;
    Ok(InitProducerIdRequest {
        transactional_id,
        transaction_timeout_ms,
        producer_id,
        producer_epoch,
    })
}

/// What a transactional request is answered without asking the engine: a code, or `None`
/// to ask it. Non-transactional requests are not checked for their timeout, as in Kafka
/// (librdkafka's idempotent producer sends -1).
pub fn precheck(req: &InitProducerIdRequest, max_timeout_ms: u32) -> Option<i16> {
    let txn = req.transactional_id.as_deref()?;
    if !crate::txn::valid_txn_id(txn) {
        Some(errors::INVALID_REQUEST)
    } else if !u32::try_from(req.transaction_timeout_ms)
        .is_ok_and(|t| (1..=max_timeout_ms).contains(&t))
    {
        Some(errors::INVALID_TRANSACTION_TIMEOUT)
    } else {
        None
    }
}

/// The (id, epoch) a KIP-360 client names, when it names a valid one.
fn current(req: &InitProducerIdRequest) -> Option<(i64, i16)> {
    (req.producer_id >= 0 && req.producer_epoch >= 0)
        .then_some((req.producer_id, req.producer_epoch))
}

/// InitProducerId for a transactional id: one coordinator command.
async fn transactional(
    door: &Door,
    version: i16,
    txn_id: String,
    req: &InitProducerIdRequest,
) -> (i16, i64, i16) {
    let cmd = KafkaTxnReq::Init {
        txn_id,
        timeout_ms: req.transaction_timeout_ms,
        current: current(req),
        limits: door.cfg.txn_limits,
    };
    match crate::txn::call(door, cmd).await {
        Ok(KafkaTxnOutcome::Init {
            code,
            producer_id,
            epoch,
        }) => {
            let code = crate::txn::code(code, version >= 4);
            if code == errors::NONE {
                (code, producer_id, epoch)
            } else {
                (code, -1, -1)
            }
        }
        Ok(_) => (errors::UNKNOWN_SERVER_ERROR, -1, -1),
        Err(code) => (code, -1, -1),
    }
}

/// InitProducerId without a transactional id: an idempotent producer's id.
async fn idempotent(door: &Door, req: &InitProducerIdRequest) -> (i16, i64, i16) {
    let cmd = Command::KafkaProducers(KafkaProducersReq::InitProducerId {
        current: current(req),
        expiration_ms: door.cfg.producer_id_expiration_ms,
    });
    match door.bus.call(door.ctx.clone(), cmd).await {
        Ok(Outcome::KafkaProducerId(InitProducerOutcome::Granted { producer_id, epoch })) => {
            (errors::NONE, producer_id, epoch)
        }
        // Kafka's answer when its producer id manager has no id to hand out.
        Ok(Outcome::KafkaProducerId(InitProducerOutcome::Full)) => {
            (errors::COORDINATOR_LOAD_IN_PROGRESS, -1, -1)
        }
        Ok(other) => {
            let e = topics::unexpected(&other);
            tracing::warn!(error = %e, "InitProducerId got an unexpected answer");
            (errors::UNKNOWN_SERVER_ERROR, -1, -1)
        }
        // A user without a write role: final, as Kafka answers one without
        // IdempotentWrite.
        Err(e) if matches!(e.code, ErrorCode::Unauthorized | ErrorCode::Forbidden) => {
            (errors::CLUSTER_AUTHORIZATION_FAILED, -1, -1)
        }
        // Busy, disk full, memory, a cluster's follower: all retriable for the client.
        Err(_) => (errors::COORDINATOR_LOAD_IN_PROGRESS, -1, -1),
    }
}

/// Why a follower closes a connection after refusing an idempotent InitProducerId.
const NOT_LEADER_CLOSE: &str = "InitProducerId on a follower: only the cluster's leader \
     hands out producer ids; closed so that the client asks another broker";

pub async fn answer(door: &Door, version: i16, mut r: Reader) -> Reply {
    let req = match decode(version, &mut r) {
        Ok(req) => req,
        Err(e) => return Reply::Close(e.to_string()),
    };
    let (code, id, epoch) = match &req.transactional_id {
        Some(txn_id) => match precheck(&req, door.cfg.txn_limits.max_timeout_ms) {
            Some(code) => (code, -1, -1),
            None => transactional(door, version, txn_id.clone(), &req).await,
        },
        None => idempotent(door, &req).await,
    };
    let reply = encode(
        &InitProducerIdResponse::default()
            .with_error_code(code)
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(epoch),
        version,
    );
    // An idempotent producer sends InitProducerId to any broker and retries a refusal at
    // the broker it is connected to: on a follower it would retry there for ever (Kafka has
    // no code that sends it elsewhere). Closing the connection after the answer makes the
    // client pick another broker (docs/kafka-compat.md "Cluster").
    match reply {
        Reply::Send { version, body }
            if req.transactional_id.is_none() && code != errors::NONE && door.not_coordinator() =>
        {
            Reply::Last {
                version,
                body,
                why: NOT_LEADER_CLOSE.to_string(),
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::InitProducerIdRequest as K;
    use kafka_protocol::messages::TransactionalId;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn decoded(k: &K, v: i16) -> InitProducerIdRequest {
        let mut buf = bytes::BytesMut::new();
        k.encode(&mut buf, v).expect("encodes");
        let mut r = Reader::new(buf.freeze(), v >= 2);
        let got = decode(v, &mut r).expect("decodes");
        assert_eq!(r.remaining(), 0, "v{v}");
        got
    }

    #[test]
    fn requests_encoded_by_clients_decode_in_every_served_version() {
        for v in VERSIONS {
            let k = K::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(-1)
                .with_producer_id(ProducerId(if v >= 3 { 42 } else { -1 }))
                .with_producer_epoch(if v >= 3 { 3 } else { -1 });
            let got = decoded(&k, v);
            assert_eq!(got.transactional_id, None);
            assert_eq!(got.transaction_timeout_ms, -1);
            assert_eq!(current(&got), (v >= 3).then_some((42, 3)));
            let t = K::default()
                .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("tx"))))
                .with_transaction_timeout_ms(60_000);
            assert_eq!(decoded(&t, v).transactional_id.as_deref(), Some("tx"));
        }
    }

    #[test]
    fn transactional_requests_are_checked_before_the_coordinator() {
        let req = |txn: Option<&str>, timeout| InitProducerIdRequest {
            transactional_id: txn.map(str::to_owned),
            transaction_timeout_ms: timeout,
            producer_id: -1,
            producer_epoch: -1,
        };
        let max = 900_000;
        assert_eq!(precheck(&req(None, -1), max), None, "librdkafka sends -1");
        assert_eq!(
            precheck(&req(Some("tx"), 0), max),
            Some(errors::INVALID_TRANSACTION_TIMEOUT)
        );
        assert_eq!(
            precheck(&req(Some("tx"), 900_001), max),
            Some(errors::INVALID_TRANSACTION_TIMEOUT)
        );
        assert_eq!(precheck(&req(Some("tx"), 60_000), max), None);
        assert_eq!(
            precheck(&req(Some(""), 60_000), max),
            Some(errors::INVALID_REQUEST)
        );
        // KIP-360: (-1, -1) names no producer.
        assert_eq!(current(&req(Some("tx"), 60_000)), None);
    }
}
