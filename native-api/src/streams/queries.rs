//! POST /streams/v1/queries: register a query by name, idempotently; a changed config_hash
//! needs `reset`, which gives the query a new id (so the old state rows are fenced off at
//! once, then deleted).

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use queenmq_protocol::limits::{self, MAX_KV_OPS, MAX_KV_PREFIX_LIMIT};
use queenmq_protocol::{KvExpiry, KvOp, KvOutcome, RequestCtx, STREAMS_NS};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{get, id_key, kv, list_page, query_key, rows_prefix, StreamsError};
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
    }
    ops.push(put(
        id_key(&new_id),
        json!({"name": q.name}).to_string(),
        None,
    ));
    match kv(app, ctx, ops).await? {
        KvOutcome::Precondition(_) => Ok(None),
        KvOutcome::Results(_) => {
            if let Some((_, old, _)) = &existing {
                // The old id is fenced already: a purge cut short leaves rows nothing reads.
                if let Err(e) = purge(app, ctx, old).await {
                    tracing::warn!(query = %q.name, old_id = %old, error = ?e,
                        "streams reset: the old state rows were not all deleted");
                }
            }
            Ok(Some(answer(&new_id, q, true, existing.is_some())))
        }
    }
}

fn answer(id: &str, q: &QueryJson, fresh: bool, reset: bool) -> Response {
    Json(json!({"success": true, "query_id": id, "name": q.name,
        "config_hash": q.config_hash, "fresh": fresh, "reset": reset}))
    .into_response()
}

/// Deletes the rows of a query id no longer registered, a bounded page per call. Rows a crash
/// (or a refused page) leaves behind are unreachable and still count against the tenant's KV
/// bytes.
async fn purge(app: &AppState, ctx: &RequestCtx, old_id: &str) -> Result<(), StreamsError> {
    let prefix = rows_prefix(old_id, None);
    loop {
        let limit = MAX_KV_PREFIX_LIMIT.min(MAX_KV_OPS);
        let (rows, _, _) = list_page(app, ctx, prefix.clone(), None, limit, true).await?;
        if rows.is_empty() {
            return Ok(());
        }
        let deletes = rows
            .into_iter()
            .map(|r| KvOp::Delete {
                ns: STREAMS_NS.to_string(),
                key: r.key,
                expect: None,
                required: false,
            })
            .collect();
        kv(app, ctx, deletes).await?;
    }
}
