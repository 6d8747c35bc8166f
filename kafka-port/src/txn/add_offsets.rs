//! AddOffsetsToTxn (API 25): the transaction will commit offsets of this group.

use kafka_protocol::messages::AddOffsetsToTxnResponse;
use queenmq_protocol::kafka_txns::KafkaTxnReq;

use super::{call, producer, single, valid_txn_id};
use crate::connection::{encode, Reply};
use crate::wire::Reader;
use crate::{errors, Door};

pub async fn answer(door: &Door, version: i16, mut r: Reader) -> Reply {
    let decoded = producer(&mut r).and_then(|p| {
        let group = r.string()?;
        r.skip_tags()?;
        Ok((p, group))
    });
    let (p, group) = match decoded {
        Ok(d) => d,
        Err(e) => return Reply::Close(e.to_string()),
    };
    let code = if !valid_txn_id(&p.txn_id) {
        errors::INVALID_REQUEST
    } else if group.is_empty() {
        errors::INVALID_GROUP_ID
    } else {
        let req = KafkaTxnReq::AddOffsets {
            txn_id: p.txn_id,
            producer_id: p.producer_id,
            epoch: p.epoch,
            group,
            limits: door.cfg.txn_limits,
        };
        single(call(door, req).await, version >= 2)
    };
    encode(
        &AddOffsetsToTxnResponse::default().with_error_code(code),
        version,
    )
}
