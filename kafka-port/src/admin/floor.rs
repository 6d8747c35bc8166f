//! A topic's partition floor: the count CreateTopics or CreatePartitions gave it.
//!
//! The engine creates a partition on its first message, so a topic made with 8 partitions
//! and no messages has no partition rows to count. The floor is kept durably in a reserved
//! KV namespace (one row per topic, the count as a JSON number), written through the engine
//! like any other KV row, so it survives restarts and replicates. A topic with no floor
//! shows the configured default, as an auto-created one does.

use queenmq_protocol::kv::{KvExpiry, KvOp, KvOutcome, KvReq, KvResult};
use queenmq_protocol::{Access, Command, Outcome, QueenError, RequestCtx};

use crate::topics::{unexpected, MAX_TOPIC_PARTITIONS};
use crate::Door;

/// The reserved namespace (the native KV API may read it; only this door writes it).
pub const NS: &str = queenmq_protocol::KAFKA_PARTITIONS_NS;

async fn call(door: &Door, op: KvOp) -> Result<KvResult, QueenError> {
    call_as(door, door.ctx.clone(), op).await
}

async fn call_as(door: &Door, ctx: RequestCtx, op: KvOp) -> Result<KvResult, QueenError> {
    let req = KvReq { ops: vec![op] };
    match door.bus.call(ctx, Command::Kv(req)).await? {
        Outcome::Kv(KvOutcome::Results(mut rs)) if rs.len() == 1 => Ok(rs.remove(0)),
        other => Err(unexpected(&other)),
    }
}

/// The stored floor, if any. A row that does not hold a count in range is ignored.
pub async fn get(door: &Door, topic: &str) -> Result<Option<u32>, QueenError> {
    let op = KvOp::Get {
        ns: NS.to_owned(),
        key: topic.to_owned(),
    };
    // The floor is this door's own bookkeeping, read for every Metadata: a read-only user
    // (whose roles do not reach the KV command) must still see the topics of its tenant.
    let own = RequestCtx {
        access: Access::Open,
        ..door.ctx.clone()
    };
    match call_as(door, own, op).await? {
        KvResult::Get(row) => Ok(row.and_then(|r| r.value).and_then(|v| parse(&v))),
        other => Err(QueenError::new(
            queenmq_protocol::ErrorCode::Internal,
            format!("a KV get answered {other:?}"),
        )),
    }
}

pub fn parse(value: &str) -> Option<u32> {
    value
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_TOPIC_PARTITIONS).contains(n))
}

pub async fn set(door: &Door, topic: &str, count: u32) -> Result<(), QueenError> {
    let op = KvOp::Put {
        ns: NS.to_owned(),
        key: topic.to_owned(),
        value: count.to_string(),
        expiry: KvExpiry::Forever,
        expect: None,
        if_absent: false,
        required: false,
    };
    written(call(door, op).await?)
}

/// Drops the floor of a deleted topic, so one created again under the name starts afresh.
pub async fn clear(door: &Door, topic: &str) -> Result<(), QueenError> {
    let op = KvOp::Delete {
        ns: NS.to_owned(),
        key: topic.to_owned(),
        expect: None,
        required: false,
    };
    match call(door, op).await? {
        // Absent is fine: a topic that never had a floor.
        KvResult::Write(_) => Ok(()),
        other => Err(QueenError::new(
            queenmq_protocol::ErrorCode::Internal,
            format!("a KV delete answered {other:?}"),
        )),
    }
}

fn written(r: KvResult) -> Result<(), QueenError> {
    match r {
        KvResult::Write(w) if w.applied => Ok(()),
        other => Err(QueenError::new(
            queenmq_protocol::ErrorCode::Internal,
            format!("storing a partition floor was refused: {other:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_counts_in_range_are_floors() {
        assert_eq!(parse("8"), Some(8));
        assert_eq!(parse("10000"), Some(10_000));
        for bad in ["0", "-1", "10001", "\"8\"", "", "1.5"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
