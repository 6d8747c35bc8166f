//! EndTxn (API 26): commit or abort the open transaction. One entry writes every marker,
//! the committed group offsets and the end (docs/kafka-transactions.md).

use kafka_protocol::messages::EndTxnResponse;
use queenmq_protocol::kafka_txns::KafkaTxnReq;

use super::{call, producer, single, valid_txn_id};
use crate::connection::{encode, Reply};
use crate::wire::Reader;
use crate::{errors, Door};

pub async fn answer(door: &Door, version: i16, mut r: Reader) -> Reply {
    let decoded = producer(&mut r).and_then(|p| {
        let commit = r.bool()?;
        r.skip_tags()?;
        Ok((p, commit))
    });
    let (p, commit) = match decoded {
        Ok(d) => d,
        Err(e) => return Reply::Close(e.to_string()),
    };
    let code = if valid_txn_id(&p.txn_id) {
        let req = KafkaTxnReq::End {
            txn_id: p.txn_id,
            producer_id: p.producer_id,
            epoch: p.epoch,
            commit,
            // Stamped by the bus from the caller's roles.
            may_commit_offsets: false,
            limits: door.cfg.txn_limits,
        };
        single(call(door, req).await, version >= 2)
    } else {
        errors::INVALID_REQUEST
    };
    encode(&EndTxnResponse::default().with_error_code(code), version)
}
