//! POST /streams/v1/queries: register a query by name, idempotently; a changed config_hash
//! needs `reset`, which gives the query a new id: the old state rows are fenced off at once,
//! and the same KV call marks the old id for purging, which the engine then carries out
//! (plan/streams_purge.rs) whatever becomes of this request.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use queenmq_protocol::limits;
use queenmq_protocol::{KvExpiry, KvOp, KvOutcome, RequestCtx, STREAMS_NS};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{get, id_key, kv, purge_key, query_key, StreamsError};
use crate::{body, AppState};

#[derive(Deserialize)]
struct QueryJson {
    name: String,
    source_queue: String,
    config_hash: String,
    #[serde(default)]
    reset: bool,
    #[serde(default)]
    sink_queue: Option<String>,
}

/// Tries before a registration racing another one for the same name gives up (503, which
/// the client retries).
const REGISTER_TRIES: usize = 4;

pub async fn queries(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, StreamsError> {
    let bytes = body::read(&headers, b, &app.opts).await?;
    let q: QueryJson = body::json(&bytes)?;
    let bad = |e: queenmq_protocol::QueenError| StreamsError::bad(e.message);
    if q.name.is_empty() || q.config_hash.is_empty() {
        return Err(StreamsError::bad("name and config_hash are required"));
    }
    limits::check_name("name", &q.name).map_err(bad)?;
    limits::check_name("source_queue", &q.source_queue).map_err(bad)?;
    limits::check_name("config_hash", &q.config_hash).map_err(bad)?;
    if let Some(s) = &q.sink_queue {
        limits::check_name("sink_queue", s).map_err(bad)?;
    }
    for _ in 0..REGISTER_TRIES {
        if let Some(resp) = register_once(&app, &ctx, &q).await? {
            return Ok(resp);
        }
    }
    Err(StreamsError::Refused(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("query {} is being registered concurrently; retry", q.name),
    ))
}

/// One attempt; `None` when another registration changed the row between read and write.
async fn register_once(
    app: &AppState,
    ctx: &RequestCtx,
    q: &QueryJson,
) -> Result<Option<Response>, StreamsError> {
    let current = get(app, ctx, query_key(&q.name)).await?;
    let existing = current.as_ref().and_then(|row| {
        let v: Value = serde_json::from_str(row.value.as_deref()?).ok()?;
        let id = v.get("query_id")?.as_str()?.to_string();
        let hash = v.get("config_hash")?.as_str()?.to_string();
        Some((row.version, id, hash))
    });
    // `reset` wipes state only when the operator chain changed: a worker deployed with
    // reset:true that restarts after a crash keeps its windows (the client's contract: "wipe
    // existing state if config_hash mismatches").
    if let Some((_, id, hash)) = &existing {
        if *hash == q.config_hash {
            return Ok(Some(answer(id, q, false, false)));
        }
        if !q.reset {
            let body = json!({"success": false, "query_id": id, "name": q.name,
                "error": "config_hash mismatch; retry with reset:true"});
            return Ok(Some((StatusCode::CONFLICT, Json(body)).into_response()));
        }
    }
    let new_id = uuid::Uuid::now_v7().to_string();
    let record = json!({"query_id": new_id, "config_hash": q.config_hash,
        "source_queue": q.source_queue, "sink_queue": q.sink_queue});
    let put = |key: String, value: String, expect: Option<u64>| KvOp::Put {
        ns: STREAMS_NS.to_string(),
        key,
        value,
        expiry: KvExpiry::Forever,
        expect,
        if_absent: expect.is_none(),
        required: true,
    };
    let mut ops = vec![put(
        query_key(&q.name),
        record.to_string(),
        existing.as_ref().map(|(v, _, _)| *v),
    )];
    if let Some((_, old, _)) = &existing {
        ops.push(KvOp::Delete {
            ns: STREAMS_NS.to_string(),
            key: id_key(old),
            expect: None,
            required: false,
        });
        ops.push(put(purge_key(old), "{}".to_string(), None));
    }
    // The fence row names the source queue: a cycle's ack must be on it.
    ops.push(put(
        id_key(&new_id),
        json!({"name": q.name, "source_queue": q.source_queue}).to_string(),
        None,
    ));
    match kv(app, ctx, ops).await? {
        KvOutcome::Precondition(_) => Ok(None),
        KvOutcome::Results(_) => Ok(Some(answer(&new_id, q, true, existing.is_some()))),
    }
}

fn answer(id: &str, q: &QueryJson, fresh: bool, reset: bool) -> Response {
    Json(json!({"success": true, "query_id": id, "name": q.name,
        "config_hash": q.config_hash, "fresh": fresh, "reset": reset}))
    .into_response()
}
