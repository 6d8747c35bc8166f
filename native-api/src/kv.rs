//! POST /api/v1/kv (spec §2.13): ops are read and bounded here, judged by the engine, and
//! answered index-aligned (the ops are read in kv_ops.rs).

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use queenmq_protocol::limits::{
    KV_ANSWER_ROW_FIELDS, MAX_KV_ANSWER_BYTES, MAX_KV_KEY_BYTES, MAX_KV_VALUE_BYTES,
};
use queenmq_protocol::{
    Command, ErrorCode, KvOp, KvOutcome, KvPrecondition, KvReq, KvResult, KvRowView, KvWriteResult,
    Outcome, RequestCtx,
};
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::reserve::Reserved;
use crate::{body, iso_ms, AppState};

/// What the answer to `ops` can weigh while it is built: the engine's rows, their JSON tree
/// and its text (three copies). Every op may answer one whole value (a get, a refused write's
/// current value, a listing's first row), and the listings share the engine's answer budget
/// (`MAX_KV_ANSWER_BYTES`) beyond that.
pub(crate) fn answer_bound(ops: &[KvOp]) -> usize {
    let one_row = MAX_KV_VALUE_BYTES + MAX_KV_KEY_BYTES + KV_ANSWER_ROW_FIELDS;
    let lists = ops
        .iter()
        .any(|o| matches!(o, KvOp::GetMany { .. } | KvOp::GetPrefix { .. }));
    let rows = ops.len().saturating_mul(one_row).saturating_add(if lists {
        MAX_KV_ANSWER_BYTES
    } else {
        0
    });
    rows.saturating_mul(3)
}

/// A refusal in the KV shape: `{"error", "code", "reason", "detail"}` (the client reads `code`).
#[derive(Debug)]
pub struct KvApiError {
    pub status: StatusCode,
    pub error: &'static str,
    pub reason: &'static str,
    pub detail: String,
}

impl KvApiError {
    pub fn bad(reason: &'static str, detail: impl Into<String>) -> Self {
        KvApiError {
            status: StatusCode::BAD_REQUEST,
            error: "kv_bad_request",
            reason,
            detail: detail.into(),
        }
    }

    pub(crate) fn too_large(error: &'static str, detail: String) -> Self {
        KvApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            error,
            reason: error,
            detail,
        }
    }
}

impl From<ApiError> for KvApiError {
    /// Bus and engine refusals: a retriable one is `kv_unavailable` (503 with Retry-After).
    fn from(e: ApiError) -> Self {
        let e = e.0;
        let status = crate::error::status_of(e.code);
        let error = match e.code {
            ErrorCode::Unavailable => "kv_unavailable",
            ErrorCode::BadRequest | ErrorCode::BadName => "kv_bad_request",
            ErrorCode::PayloadTooLarge => "kv_too_large",
            ErrorCode::StorageFull => "kv_storage_full",
            _ => e.code.as_str(),
        };
        KvApiError {
            status,
            error,
            // The reason names the condition, as the other families' 507 do.
            reason: if e.code == ErrorCode::StorageFull {
                e.code.as_str()
            } else {
                error
            },
            detail: e.message,
        }
    }
}

impl IntoResponse for KvApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": self.error, "code": self.error, "reason": self.reason,
            "detail": self.detail});
        let mut resp = (self.status, Json(body)).into_response();
        // Both are retriable: a full disk frees itself once space is freed (507).
        if self.status == StatusCode::SERVICE_UNAVAILABLE
            || self.status == StatusCode::INSUFFICIENT_STORAGE
        {
            resp.headers_mut()
                .insert("retry-after", HeaderValue::from_static("1"));
        }
        resp
    }
}

pub async fn kv(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, KvApiError> {
    let bytes = body::read(&headers, b, &app.opts).await?;
    let list = crate::kv_ops::read_list(&bytes)?;
    let ops = crate::kv_ops::parse_list(&list, false)?;
    drop(list);
    let names: Vec<&'static str> = ops.iter().map(op_name).collect();
    let keys: Vec<String> = ops.iter().map(|o| o.ns_key().1.to_string()).collect();
    let reserved = app.room.take(answer_bound(&ops)).await?;
    let req = KvReq { ops };
    match crate::call(&app, ctx, Command::Kv(req)).await? {
        Outcome::Kv(KvOutcome::Results(results)) => {
            let rendered: Vec<Value> = results
                .into_iter()
                .enumerate()
                .map(|(i, r)| render_result(i, names[i], &keys[i], r))
                .collect();
            let mut resp = Json(json!({"results": rendered})).into_response();
            Reserved::ride(reserved, &mut resp);
            Ok(resp)
        }
        Outcome::Kv(KvOutcome::Precondition(p)) => {
            Ok(Json(precondition(&p, Map::new())).into_response())
        }
        other => Err(crate::render::unexpected(&other).into()),
    }
}

/// The failure of a call whose `required` op did not hold; `base` carries the transaction's
/// own fields.
pub fn precondition(p: &KvPrecondition, mut base: Map<String, Value>) -> Value {
    base.insert("ok".into(), json!(false));
    base.insert("reason".into(), json!("kv_precondition"));
    base.insert("failedIndex".into(), json!(p.index));
    base.insert("kvReason".into(), json!(p.reason.as_str()));
    base.insert("version".into(), json!(p.version));
    base.insert("value".into(), json_value(p.value.as_deref()));
    Value::Object(base)
}

pub fn op_name(op: &KvOp) -> &'static str {
    match op {
        KvOp::Get { .. } => "get",
        KvOp::GetMany { .. } => "getMany",
        KvOp::GetPrefix { .. } => "getPrefix",
        KvOp::Put {
            if_absent: true, ..
        } => "putIfAbsent",
        KvOp::Put { .. } => "put",
        KvOp::Delete { .. } => "delete",
        KvOp::Incr { .. } => "incr",
        KvOp::Check { .. } => "check",
    }
}

/// Stored JSON text back to JSON (the engine stores only what this door validated).
fn json_value(text: Option<&str>) -> Value {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Value::Null)
}

fn row_json(r: &KvRowView) -> Value {
    let mut m = Map::new();
    m.insert("key".into(), json!(r.key));
    if r.value.is_some() {
        m.insert("value".into(), json_value(r.value.as_deref()));
    }
    m.insert("version".into(), json!(r.version));
    m.insert("expiresAt".into(), json!(r.expires_at_us.map(iso_ms)));
    m.insert("updatedAt".into(), json!(iso_ms(r.updated_at_us)));
    Value::Object(m)
}

fn write_json(m: &mut Map<String, Value>, w: &KvWriteResult) {
    m.insert("applied".into(), json!(w.applied));
    m.insert("version".into(), json!(w.version));
    if let Some(reason) = w.reason {
        m.insert("reason".into(), json!(reason.as_str()));
    }
    if w.value.is_some() {
        m.insert("value".into(), json_value(w.value.as_deref()));
    }
    if w.applied || w.value.is_some() {
        m.insert("expiresAt".into(), json!(w.expires_at_us.map(iso_ms)));
    }
}

/// One result, with its `index`, `op` and `key` (the prefix for a getPrefix).
pub fn render_result(index: usize, op: &str, key: &str, r: KvResult) -> Value {
    let mut m = Map::new();
    m.insert("index".into(), json!(index));
    m.insert("op".into(), json!(op));
    if !key.is_empty() {
        m.insert("key".into(), json!(key));
    }
    match r {
        KvResult::Get(None) => {
            m.insert("found".into(), json!(false));
        }
        KvResult::Get(Some(row)) => {
            m.insert("found".into(), json!(true));
            if let Value::Object(fields) = row_json(&row) {
                m.extend(fields);
            }
        }
        KvResult::GetMany {
            rows,
            missing,
            truncated,
        } => {
            m.insert(
                "rows".into(),
                Value::Array(rows.iter().map(row_json).collect()),
            );
            m.insert("missing".into(), json!(missing));
            m.insert("truncated".into(), json!(truncated));
        }
        KvResult::GetPrefix {
            rows,
            truncated,
            next_after,
        } => {
            m.insert(
                "rows".into(),
                Value::Array(rows.iter().map(row_json).collect()),
            );
            m.insert("truncated".into(), json!(truncated));
            m.insert("nextAfter".into(), json!(next_after));
        }
        KvResult::Write(w) => write_json(&mut m, &w),
    }
    Value::Object(m)
}
