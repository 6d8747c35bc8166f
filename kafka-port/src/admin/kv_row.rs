//! The KV calls behind the door's own bookkeeping rows (the partition floor, [`super::floor`];
//! the topic configs, [`super::config_row`]): one op per engine call, and every rewrite
//! conditional on the version its writer read, so racing admin requests cannot both win.

use queenmq_protocol::kv::{KvExpiry, KvOp, KvOutcome, KvRefusal, KvReq, KvResult};
use queenmq_protocol::{Command, ErrorCode, Outcome, QueenError, RequestCtx};

use crate::topics::unexpected;
use crate::Door;

/// A stored row: its JSON text (`None`: no value) and its version.
pub type Stored = (Option<String>, u64);

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

/// The row, if any. Read as the door's own bookkeeping: a read-only or write-only user
/// (whose roles do not reach the KV command) must still see its tenant's topics as they are.
pub async fn get(door: &Door, ns: &str, key: &str) -> Result<Option<Stored>, QueenError> {
    let op = KvOp::Get {
        ns: ns.to_owned(),
        key: key.to_owned(),
    };
    match call_as(door, door.describe_ctx(), op).await? {
        KvResult::Get(row) => Ok(row.map(|r| (r.value, r.version))),
        other => Err(QueenError::new(
            ErrorCode::Internal,
            format!("a KV get answered {other:?}"),
        )),
    }
}

/// Writes `value` if the row is still at `seen` (the version read; `None`: there was no row).
/// `Ok(None)`: another request changed the row first; `Ok(Some(version))`: written.
pub async fn put(
    door: &Door,
    ns: &str,
    key: &str,
    value: String,
    seen: Option<u64>,
    what: &str,
) -> Result<Option<u64>, QueenError> {
    let op = KvOp::Put {
        ns: ns.to_owned(),
        key: key.to_owned(),
        value,
        expiry: KvExpiry::Forever,
        // Version 0 is "must be absent".
        expect: Some(seen.unwrap_or(0)),
        if_absent: false,
        required: false,
    };
    conditional(call(door, op).await?, what)
}

/// Deletes the row if it is still at `version`. `Ok(None)`: another request changed it.
pub async fn delete_at(
    door: &Door,
    ns: &str,
    key: &str,
    version: u64,
    what: &str,
) -> Result<Option<u64>, QueenError> {
    let op = KvOp::Delete {
        ns: ns.to_owned(),
        key: key.to_owned(),
        expect: Some(version),
        required: false,
    };
    conditional(call(door, op).await?, what)
}

/// Deletes the row whatever it holds (absent is fine).
pub async fn clear(door: &Door, ns: &str, key: &str) -> Result<(), QueenError> {
    let op = KvOp::Delete {
        ns: ns.to_owned(),
        key: key.to_owned(),
        expect: None,
        required: false,
    };
    match call(door, op).await? {
        KvResult::Write(_) => Ok(()),
        other => Err(QueenError::new(
            ErrorCode::Internal,
            format!("a KV delete answered {other:?}"),
        )),
    }
}

fn conditional(r: KvResult, what: &str) -> Result<Option<u64>, QueenError> {
    match r {
        KvResult::Write(w) if w.applied => Ok(Some(w.version)),
        KvResult::Write(w)
            if matches!(
                w.reason,
                Some(KvRefusal::Exists | KvRefusal::Version | KvRefusal::Absent)
            ) =>
        {
            Ok(None)
        }
        other => Err(QueenError::new(
            ErrorCode::Internal,
            format!("{what} was refused: {other:?}"),
        )),
    }
}
