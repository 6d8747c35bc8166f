//! POST /streams/v1/state/get: a partition's state rows of a query, all or the named keys,
//! optionally only those under a key prefix and ripe (`value.windowEnd` ≤ the cutoff), within
//! the KV answer budget.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use queenmq_protocol::limits::{MAX_KV_ANSWER_BYTES, MAX_KV_GET_MANY_KEYS, MAX_KV_PREFIX_LIMIT};
use queenmq_protocol::{KvOp, KvOutcome, KvResult, KvRowView, RequestCtx, STREAMS_NS};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{check_partition_id, fence, kv, list_page, row_key, rows_prefix, StreamsError};
use crate::capped::{self, Capped};
use crate::reserve::Reserved;
use crate::{body, iso_ms, AppState};

#[derive(Deserialize)]
struct GetJson {
    query_id: String,
    partition_id: String,
    #[serde(default)]
    keys: Capped<String>,
    #[serde(default)]
    key_prefix: Option<String>,
    #[serde(default)]
    ripe_at_or_before: Option<f64>,
}

/// The listing stops once past the budget, so it holds at most the budget and one more page
/// (each page within the engine's answer budget), in three copies (rows, tree, text).
const ANSWER_BOUND: usize = 2 * MAX_KV_ANSWER_BYTES * 3;

pub async fn state_get(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, StreamsError> {
    let bytes = body::read(&headers, b, &app.opts).await?;
    let g: GetJson = capped::with_cap(MAX_KV_GET_MANY_KEYS, || body::json(&bytes))?;
    let keys = match g.keys {
        Capped::Within(k) => k,
        Capped::Over(n) => {
            return Err(StreamsError::too_large(format!(
                "{n} keys in one read; the limit is {MAX_KV_GET_MANY_KEYS}"
            )))
        }
    };
    check_partition_id(&g.partition_id)?;
    fence(&app, &ctx, &g.query_id).await?;
    let prefix = rows_prefix(&g.query_id, Some(&g.partition_id));
    let reserved = app.room.take(ANSWER_BOUND).await?;
    let (rows, truncated) = match keys.is_empty() {
        true => {
            let under = match g.key_prefix.as_deref() {
                Some(p) if !p.is_empty() => row_key(&prefix, p)?,
                _ => prefix.clone(),
            };
            list(&app, &ctx, under).await?
        }
        false => {
            let keys = keys
                .iter()
                .map(|k| row_key(&prefix, k))
                .collect::<Result<Vec<_>, _>>()?;
            many(&app, &ctx, keys).await?
        }
    };
    let cutoff = g.ripe_at_or_before;
    let rendered: Vec<Value> = rows
        .into_iter()
        .filter_map(|r| {
            let value: Value = serde_json::from_str(r.value.as_deref()?).ok()?;
            if let Some(cut) = cutoff {
                let end = value.get("windowEnd").and_then(Value::as_f64)?;
                if end > cut {
                    return None;
                }
            }
            let key = r.key.strip_prefix(&prefix)?.to_string();
            Some(json!({"key": key, "value": value, "updated_at": iso_ms(r.updated_at_us)}))
        })
        .collect();
    let mut resp =
        Json(json!({"success": true, "rows": rendered, "truncated": truncated})).into_response();
    Reserved::ride(reserved, &mut resp);
    Ok(resp)
}

/// Every row under `prefix`, page by page, until the answer budget is spent (then truncated).
async fn list(
    app: &AppState,
    ctx: &RequestCtx,
    prefix: String,
) -> Result<(Vec<KvRowView>, bool), StreamsError> {
    let mut out = Vec::new();
    let mut bytes = 0usize;
    let mut after = None;
    loop {
        let (rows, truncated, next) = list_page(
            app,
            ctx,
            prefix.clone(),
            after.take(),
            MAX_KV_PREFIX_LIMIT,
            false,
        )
        .await?;
        bytes += rows
            .iter()
            .map(|r| r.key.len() + r.value.as_ref().map_or(0, String::len))
            .sum::<usize>();
        out.extend(rows);
        match (truncated, next) {
            (true, Some(n)) if bytes < MAX_KV_ANSWER_BYTES => after = Some(n),
            (true, _) => return Ok((out, true)),
            (false, _) => return Ok((out, false)),
        }
    }
}

async fn many(
    app: &AppState,
    ctx: &RequestCtx,
    keys: Vec<String>,
) -> Result<(Vec<KvRowView>, bool), StreamsError> {
    let op = KvOp::GetMany {
        ns: STREAMS_NS.to_string(),
        keys,
    };
    match kv(app, ctx, vec![op]).await? {
        KvOutcome::Results(mut r) => match r.pop() {
            Some(KvResult::GetMany {
                rows, truncated, ..
            }) => Ok((rows, truncated)),
            _ => Err(StreamsError::internal("a read answered no rows")),
        },
        KvOutcome::Precondition(_) => Err(StreamsError::internal("a read lost a precondition")),
    }
}
