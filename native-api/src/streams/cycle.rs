//! POST /streams/v1/cycle: one transaction, all or nothing: the query's fence (a reset
//! refuses a cycle of the old id), the state ops as the `kv` rider, the sink pushes, and the
//! source ack (a completed ack commits the cursor through `transactionId`; a partial ack keeps
//! the lease on the un-acked tail, which is what `release_lease:false` asks).
//!
//! A cycle applies at most once. The client retries a cycle whose answer it lost, and a late
//! copy of an older cycle may arrive after newer ones: applied again, its pushes would be
//! duplicated and its absolute upserts would rewind the state. So a cycle with an ack is a
//! strict transaction (an ack its group's cursor already covers makes it a replay), and a
//! cycle without one (the client's flush of ripe windows) must delete the rows it flushes,
//! each delete required (a row already gone makes it a replay). A replay applies nothing and
//! answers success with `replayed:true`: its effects are there, from the copy that committed.
use std::collections::HashSet;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use queenmq_protocol::limits::{self, MAX_KV_VALUE_BYTES};
use queenmq_protocol::{
    AckItem, AckStatus, Command, KvExpiry, KvOp, Outcome, RequestCtx, StateCap, TxnOp, TxnReq,
    STREAMS_NS,
};
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;

use super::{
    check_acked_partition_id, check_partition_id, fence, id_key, row_key, rows_prefix, StreamsError,
};
use crate::capped::{self, Capped};
use crate::push::ItemJson;
use crate::{body, AppState};

/// Most state ops in one cycle: each is a KV write of the one entry the cycle is.
pub const MAX_STREAM_STATE_OPS: usize = 4096;

#[derive(Deserialize)]
struct StateOpJson<'a> {
    #[serde(rename = "type")]
    kind: String,
    key: String,
    #[serde(borrow, default)]
    value: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct AckJson {
    #[serde(rename = "transactionId")]
    transaction_id: String,
    #[serde(default, rename = "leaseId")]
    lease_id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    count: Option<u64>,
}

/// What a cycle reads of the fence row (ids registered before it named the source have
/// none, and their acks are not checked against a queue).
#[derive(Deserialize)]
struct FenceJson {
    #[serde(default)]
    source_queue: Option<String>,
}

#[derive(Deserialize)]
struct CycleJson<'a> {
    query_id: String,
    partition_id: String,
    #[serde(default)]
    consumer_group: Option<String>,
    #[serde(borrow, default)]
    state_ops: Capped<StateOpJson<'a>>,
    #[serde(borrow, default)]
    push_items: Capped<ItemJson<'a>>,
    #[serde(default)]
    ack: Option<AckJson>,
    // Read for the contract; a completed ack already keeps the lease exactly when it does not
    // cover the leased batch (see the module comment).
    #[serde(default, rename = "release_lease")]
    _release_lease: Option<bool>,
}

pub async fn cycle(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, StreamsError> {
    let bytes = body::read(&headers, b, &app.opts).await?;
    let max_items = app.opts.max_push_items;
    let cap = max_items.max(MAX_STREAM_STATE_OPS);
    let c: CycleJson<'_> = capped::with_cap(cap, || body::json_borrowed(&bytes))?;
    check_partition_id(&c.partition_id)?;
    let state_ops = match c.state_ops {
        Capped::Within(ops) if ops.len() <= MAX_STREAM_STATE_OPS => ops,
        Capped::Within(ops) => return Err(over("state_ops", ops.len(), MAX_STREAM_STATE_OPS)),
        Capped::Over(n) => return Err(over("state_ops", n, MAX_STREAM_STATE_OPS)),
    };
    let items = match c.push_items {
        Capped::Within(items) if items.len() <= max_items => items,
        Capped::Within(items) => return Err(over("push_items", items.len(), max_items)),
        Capped::Over(n) => return Err(over("push_items", n, max_items)),
    };
    for i in &items {
        i.check()?;
    }
    let group = c.consumer_group.filter(|g| !g.is_empty());
    if let Some(g) = &group {
        limits::check_name("consumer_group", g).map_err(|e| StreamsError::bad(e.message))?;
    }
    let prefix = rows_prefix(&c.query_id, &c.partition_id);
    let acked = c.ack.is_some();
    let kv_ops = read_state_ops(&prefix, state_ops, !acked)?;
    if !acked && !kv_ops.iter().any(|o| matches!(o, KvOp::Delete { .. })) {
        return Err(StreamsError::bad(
            "a cycle without an ack deletes the state rows it flushes (nothing else tells it \
             from a replay)",
        ));
    }
    let ack = c
        .ack
        .map(|a| read_ack(a, &c.partition_id, group))
        .transpose()?;
    let fenced = fence(&app, &ctx, &c.query_id).await?;
    let source = fenced
        .value
        .as_deref()
        .and_then(|v| serde_json::from_str::<FenceJson>(v).ok())
        .and_then(|f| f.source_queue);

    let n_state = kv_ops.len();
    let n_pushed = items.len();
    let mut ops = Vec::new();
    if !items.is_empty() {
        ops.push(TxnOp::Push(
            items.into_iter().map(|i| i.into_item(&bytes)).collect(),
        ));
    }
    if let Some(a) = ack {
        ops.push(TxnOp::Ack(a));
    }
    let mut kv = Vec::with_capacity(kv_ops.len() + 1);
    kv.push(KvOp::Check {
        ns: STREAMS_NS.to_string(),
        key: id_key(&c.query_id),
        expect: fenced.version,
        required: true,
    });
    kv.extend(kv_ops);
    let req = TxnReq {
        ops,
        required_leases: Vec::new(),
        kv,
        timers: Vec::new(),
        strict_acks: acked,
        ack_queue: source.filter(|_| acked),
        state_cap: Some(StateCap {
            query_id: c.query_id.clone(),
            max_keys: app.opts.streams_state_max_keys,
            max_bytes: app.opts.streams_state_max_bytes,
        }),
    };
    let replayed = || {
        Json(
            json!({"success": true, "replayed": true, "state_ops": 0, "pushed": 0,
            "acked": false}),
        )
        .into_response()
    };
    match crate::call(&app, ctx, Command::Transaction(req)).await? {
        Outcome::Transaction(r) if r.replayed => Ok(replayed()),
        // The rider's first op (after the pushes and the ack, in the answer's flat index) is
        // the fence; a later one is a flush's delete whose row is gone.
        Outcome::Transaction(r)
            if r.kv_precondition
                .as_ref()
                .is_some_and(|p| p.index > n_pushed + usize::from(acked)) =>
        {
            Ok(replayed())
        }
        Outcome::Transaction(r) if r.kv_precondition.is_some() => Err(StreamsError::Refused(
            StatusCode::CONFLICT,
            format!(
                "query {} was reset or removed while this cycle was built; nothing applied",
                c.query_id
            ),
        )),
        Outcome::Transaction(r) => Ok(Json(json!({"success": true,
            "transactionId": r.transaction_id, "state_ops": n_state, "pushed": n_pushed,
            "acked": acked}))
        .into_response()),
        other => Err(crate::render::unexpected(&other).into()),
    }
}

fn over(what: &str, n: usize, max: usize) -> StreamsError {
    StreamsError::too_large(format!("{n} {what} in one cycle; the limit is {max}"))
}

/// The state ops as KV writes under the partition's prefix; a key written twice keeps its
/// last op (the order the operator meant), since a KV call writes a key once. With
/// `deletes_required` a delete of a row that is gone refuses the whole cycle (a replay).
fn read_state_ops(
    prefix: &str,
    ops: Vec<StateOpJson<'_>>,
    deletes_required: bool,
) -> Result<Vec<KvOp>, StreamsError> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(ops.len());
    for (i, op) in ops.into_iter().enumerate().rev() {
        let key = row_key(prefix, &op.key)?;
        let write = match op.kind.as_str() {
            "upsert" => {
                let value = op
                    .value
                    .ok_or_else(|| {
                        StreamsError::bad(format!("state_ops[{i}]: upsert needs a value"))
                    })?
                    .get();
                if value.len() > MAX_KV_VALUE_BYTES {
                    return Err(StreamsError::too_large(format!(
                        "state_ops[{i}]: a value of {} bytes; the limit is {MAX_KV_VALUE_BYTES}",
                        value.len()
                    )));
                }
                KvOp::Put {
                    ns: STREAMS_NS.to_string(),
                    key: key.clone(),
                    value: value.to_string(),
                    expiry: KvExpiry::Forever,
                    expect: None,
                    if_absent: false,
                    required: true,
                }
            }
            "delete" => KvOp::Delete {
                ns: STREAMS_NS.to_string(),
                key: key.clone(),
                expect: None,
                required: deletes_required,
            },
            other => {
                return Err(StreamsError::bad(format!(
                    "state_ops[{i}]: type {other:?} is neither upsert nor delete"
                )))
            }
        };
        if seen.insert(key) {
            out.push(write);
        }
    }
    out.reverse();
    Ok(out)
}

fn read_ack(
    a: AckJson,
    partition_id: &str,
    group: Option<String>,
) -> Result<AckItem, StreamsError> {
    let bad = |e: queenmq_protocol::QueenError| StreamsError::bad(e.message);
    check_acked_partition_id(partition_id)?;
    if !matches!(a.status.as_deref(), None | Some("completed")) {
        return Err(StreamsError::bad("a cycle's ack status is \"completed\""));
    }
    if a.count == Some(0) {
        return Err(StreamsError::bad("a cycle's ack count is at least 1"));
    }
    if a.transaction_id.is_empty() {
        return Err(StreamsError::bad("the ack needs a transactionId"));
    }
    limits::check_name("ack.transactionId", &a.transaction_id).map_err(bad)?;
    if let Some(l) = &a.lease_id {
        limits::check_name("ack.leaseId", l).map_err(bad)?;
    }
    Ok(AckItem {
        transaction_id: a.transaction_id,
        partition_id: partition_id.to_string(),
        status: AckStatus::Completed,
        error: None,
        lease_id: a.lease_id.filter(|l| !l.is_empty()),
        group,
    })
}
