//! Timer routes (spec/native-api.md §2.15): `POST /api/v1/timers`, `DELETE` and `GET` of one
//! timer, and the keyset listing of a queue's. Errors carry the timer codes the official
//! client branches on (`timers_bad_request`, `timers_unavailable`, …) in `error` and `code`.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use base64::Engine as _;
use bytes::Bytes;
use queenmq_protocol::{
    Command, ErrorCode, Outcome, QueenError, ReadAnswer, ReadReq, RequestCtx, TimerOp, TimerResult,
    TimerSchedule, TimerView, TimersReq, DEFAULT_PARTITION, MAX_TIMER_OPS, MAX_TIMER_PAYLOAD_BYTES,
    TIMERS_QUOTA_REFUSAL,
};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::capped::{self, Capped};
use crate::{body, iso_ms, render, AppState};

/// Fields the server owns (§2.15): refused, never dropped, so a client cannot forge them.
const SERVER_OWNED: &[&str] = &[
    "producerSub",
    "producer_sub",
    "messageId",
    "message_id",
    "deliverAt",
    "deliver_at",
    "delaySeconds",
    "delay_seconds",
    "attempts",
    "claimToken",
    "claim_token",
    "claimedUntil",
];

/// Every `tenant…` field is server-owned (§2.15), whatever follows the prefix or its case.
fn tenant_field(k: &str) -> bool {
    k.get(..6).is_some_and(|p| p.eq_ignore_ascii_case("tenant"))
}

/// A refusal in the timer surface's own shape.
pub struct TimerError {
    status: StatusCode,
    error: &'static str,
    reason: &'static str,
    detail: String,
}

fn bad(reason: &'static str, detail: impl Into<String>) -> TimerError {
    TimerError {
        status: StatusCode::BAD_REQUEST,
        error: "timers_bad_request",
        reason,
        detail: detail.into(),
    }
}

impl From<QueenError> for TimerError {
    fn from(e: QueenError) -> Self {
        let (status, error, reason) = match e.code {
            ErrorCode::BadRequest | ErrorCode::BadName => (
                StatusCode::BAD_REQUEST,
                "timers_bad_request",
                "timers_bad_request",
            ),
            ErrorCode::Forbidden if e.message.starts_with(TIMERS_QUOTA_REFUSAL) => {
                (StatusCode::FORBIDDEN, "timers_forbidden", "timers_quota")
            }
            ErrorCode::Forbidden => (StatusCode::FORBIDDEN, "timers_forbidden", "timers_horizon"),
            ErrorCode::PayloadTooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "timers_too_large",
                "timers_too_large",
            ),
            ErrorCode::Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "timers_unavailable",
                "timers_unavailable",
            ),
            ErrorCode::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized", "unauthorized"),
            _ => (
                crate::error::status_of(e.code),
                "timers_error",
                e.code.as_str(),
            ),
        };
        TimerError {
            status,
            error,
            reason,
            detail: e.message,
        }
    }
}

impl From<crate::error::ApiError> for TimerError {
    fn from(e: crate::error::ApiError) -> Self {
        e.0.into()
    }
}

impl IntoResponse for TimerError {
    fn into_response(self) -> Response {
        let body = json!({
            "error": self.error,
            "code": self.error,
            "reason": self.reason,
            "detail": self.detail,
        });
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

async fn call(app: &AppState, ctx: RequestCtx, cmd: Command) -> Result<Outcome, TimerError> {
    app.bus.call(ctx, cmd).await.map_err(TimerError::from)
}

fn text<'a>(
    m: &'a Map<String, Value>,
    k: &str,
    required: bool,
) -> Result<Option<&'a str>, TimerError> {
    match m.get(k) {
        None | Some(Value::Null) if !required => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s)),
        _ => Err(bad(
            "timers_bad_field",
            format!("{k} must be a non-empty string"),
        )),
    }
}

/// Decompresses a zstd frame of at most [`MAX_TIMER_PAYLOAD_BYTES`], growing with what the
/// frame really holds (a bulk decode would take the whole bound for every op).
fn zstd_bounded(frame: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let limit = u64::try_from(MAX_TIMER_PAYLOAD_BYTES).unwrap_or(u64::MAX);
    let mut out = Vec::new();
    zstd::stream::read::Decoder::new(frame)
        .map_err(|e| e.to_string())?
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| e.to_string())?;
    if out.len() > MAX_TIMER_PAYLOAD_BYTES {
        return Err("the frame decodes past the limit".into());
    }
    Ok(out)
}

/// The payload as the fire pushes it: JSON text. The wire carries base64 of the JSON text, or
/// of raw bytes (stored as a JSON string when UTF-8), zstd-compressed when `payloadZstd`.
pub fn decode_payload(b64: &str, zstd: bool) -> Result<Bytes, TimerError> {
    // Base64 takes 4 bytes per 3: anything longer cannot decode within the bound.
    let encoded_max = if zstd {
        MAX_TIMER_PAYLOAD_BYTES
    } else {
        MAX_TIMER_PAYLOAD_BYTES / 3 * 4 + 4
    };
    let too_large = || TimerError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        error: "timers_too_large",
        reason: "timers_payload_too_large",
        detail: format!("the timer payload is over {MAX_TIMER_PAYLOAD_BYTES} bytes"),
    };
    if b64.len() > encoded_max {
        return Err(too_large());
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| bad("timers_bad_payload", format!("payload is not base64: {e}")))?;
    let raw = if zstd {
        zstd_bounded(&raw).map_err(|e| TimerError {
            detail: format!(
                "payloadZstd: not a zstd frame of at most {MAX_TIMER_PAYLOAD_BYTES} bytes ({e})"
            ),
            ..too_large()
        })?
    } else {
        raw
    };
    // The row is counted by its length: what it keeps must be no larger (Bytes::from keeps a
    // Vec's spare capacity).
    if serde_json::from_slice::<&serde_json::value::RawValue>(&raw).is_ok() {
        return Ok(Bytes::copy_from_slice(&raw));
    }
    match String::from_utf8(raw) {
        Ok(s) => Ok(Bytes::copy_from_slice(
            Value::String(s).to_string().as_bytes(),
        )),
        Err(_) => Err(bad(
            "timers_bad_payload",
            "payload decodes to neither JSON nor UTF-8 text",
        )),
    }
}

fn parse_op(v: &Value) -> Result<TimerOp, TimerError> {
    let Value::Object(m) = v else {
        return Err(bad(
            "timers_bad_request",
            "each operation must be an object",
        ));
    };
    if let Some(f) = m
        .keys()
        .find(|k| SERVER_OWNED.contains(&k.as_str()) || k.starts_with('_') || tenant_field(k))
    {
        return Err(bad(
            "timers_server_owned_field",
            format!("`{f}` is server-owned and cannot be supplied"),
        ));
    }
    let queue = text(m, "queue", true)?.unwrap_or_default().to_string();
    let key = text(m, "timerKey", true)?.unwrap_or_default().to_string();
    let txn = text(m, "txn", false)?.map(str::to_string);
    match m.get("op").and_then(Value::as_str) {
        Some("schedule" | "reschedule") => {
            let payload = text(m, "payload", true)?.unwrap_or_default();
            let zstd = match m.get("payloadZstd") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(bad("timers_bad_field", "payloadZstd must be a boolean")),
            };
            let delay_ms = m
                .get("delayMs")
                .and_then(Value::as_i64)
                .ok_or_else(|| bad("timers_bad_delay", "delayMs must be an integer"))?;
            Ok(TimerOp::Schedule(TimerSchedule {
                queue,
                key,
                partition: text(m, "partition", false)?
                    .unwrap_or(DEFAULT_PARTITION)
                    .to_string(),
                payload: decode_payload(payload, zstd)?,
                delay_ms,
                txn: txn.unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            }))
        }
        Some("cancel") => Ok(TimerOp::Cancel { queue, key, txn }),
        other => Err(bad(
            "timers_unknown_op",
            format!("unknown timer op {other:?}: schedule, reschedule or cancel"),
        )),
    }
}

#[derive(serde::Deserialize)]
struct OpsJson<'a> {
    #[serde(borrow)]
    operations: Capped<&'a RawValue>,
}

/// Parses `{"operations": [op…]}` (or a bare array) and checks it as the engine will. The
/// list is capped while it is parsed and each op is parsed alone, so a body of a million ops
/// is refused after one pass over its bytes, never held as a JSON tree.
pub fn parse_ops(json: &[u8]) -> Result<Vec<TimerOp>, TimerError> {
    let shape = || bad("timers_bad_request", "expected {\"operations\": [...]}");
    let list = capped::with_cap(MAX_TIMER_OPS, || {
        match json.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'[') => serde_json::from_slice::<Capped<&RawValue>>(json).ok(),
            Some(b'{') => serde_json::from_slice::<OpsJson<'_>>(json)
                .ok()
                .map(|o| o.operations),
            _ => None,
        }
    })
    .ok_or_else(shape)?;
    let list = match list {
        Capped::Within(l) => l,
        Capped::Over(n) => {
            return Err(bad(
                "timers_too_many_ops",
                format!("{n} operations; the limit is {MAX_TIMER_OPS}"),
            ))
        }
    };
    let ops = list
        .iter()
        .map(|raw| {
            let v: Value = serde_json::from_str(raw.get())
                .map_err(|e| bad("timers_bad_request", format!("bad operation: {e}")))?;
            parse_op(&v)
        })
        .collect::<Result<Vec<_>, _>>()?;
    check_unique_keys(&ops)?;
    Ok(ops)
}

/// The door refuses what the engine would (a repeated key names its own reason).
fn check_unique_keys(ops: &[TimerOp]) -> Result<(), TimerError> {
    let mut seen = std::collections::HashSet::new();
    for op in ops {
        let k = match op {
            TimerOp::Schedule(s) => (&s.queue, &s.key),
            TimerOp::Cancel { queue, key, .. } => (queue, key),
        };
        if !seen.insert(k) {
            return Err(bad(
                "timers_duplicate_key_in_call",
                format!("timer {}/{} appears more than once in one call", k.0, k.1),
            ));
        }
    }
    Ok(())
}

pub fn result_json(r: &TimerResult) -> Value {
    let mut v = json!({
        "ok": r.status.ok(),
        "status": r.status.as_str(),
        "queue": r.queue,
        "timerKey": r.key,
        "txn": r.txn,
    });
    if let Some(id) = &r.message_id {
        v["messageId"] = json!(id);
    }
    if let Some(at) = r.deliver_at_us {
        v["deliverAt"] = json!(iso_ms(at));
    }
    v
}

pub async fn post(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, TimerError> {
    let bytes = body::read(&headers, b, &app.opts).await?;
    let ops = parse_ops(&bytes)?;
    let results = timers(&app, ctx, ops).await?;
    let rows: Vec<Value> = results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut v = result_json(r);
            v["index"] = json!(i);
            v
        })
        .collect();
    Ok(Json(json!({ "results": rows })).into_response())
}

async fn timers(
    app: &AppState,
    ctx: RequestCtx,
    ops: Vec<TimerOp>,
) -> Result<Vec<TimerResult>, TimerError> {
    if ops.is_empty() {
        return Ok(Vec::new());
    }
    match call(app, ctx, Command::Timers(TimersReq { ops })).await? {
        Outcome::Timers(r) => Ok(r),
        other => Err(render::unexpected(&other).into()),
    }
}

type Params = HashMap<String, String>;

pub async fn cancel(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path((queue, key)): Path<(String, String)>,
    Query(p): Query<Params>,
) -> Result<Response, TimerError> {
    let op = TimerOp::Cancel {
        queue,
        key,
        txn: p.get("txn").filter(|t| !t.is_empty()).cloned(),
    };
    check_unique_keys(std::slice::from_ref(&op))?;
    let r = timers(&app, ctx, vec![op]).await?;
    let r = r.first().ok_or_else(|| {
        TimerError::from(QueenError::new(
            ErrorCode::Internal,
            "no result for a cancel",
        ))
    })?;
    Ok(
        Json(json!({"ok": r.status.ok(), "status": r.status.as_str(), "txn": r.txn}))
            .into_response(),
    )
}

fn view_json(t: &TimerView, with_payload: bool) -> Value {
    let mut v = json!({
        "queue": t.queue,
        "timerKey": t.key,
        "partition": t.partition,
        "txn": t.txn,
        "messageId": t.message_id,
        "deliverAt": iso_ms(t.deliver_at_us),
        "createdAt": iso_ms(t.created_us),
    });
    if let Some(p) = t.payload.as_ref().filter(|_| with_payload) {
        v["payload"] = json!(base64::engine::general_purpose::STANDARD.encode(p));
        v["encrypted"] = json!(t.encrypted);
    }
    v
}

async fn read(app: &AppState, ctx: RequestCtx, req: ReadReq) -> Result<ReadAnswer, TimerError> {
    match call(app, ctx, Command::Read(req)).await? {
        Outcome::Read(a) => Ok(a),
        other => Err(render::unexpected(&other).into()),
    }
}

pub async fn peek(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path((queue, key)): Path<(String, String)>,
) -> Result<Response, TimerError> {
    let a = read(&app, ctx, ReadReq::Timer { queue, key }).await?;
    Ok(Json(render_read(&a)).into_response())
}

pub async fn list(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path(queue): Path<String>,
    Query(p): Query<Params>,
) -> Result<Response, TimerError> {
    let limit = match p.get("limit") {
        None => 100,
        Some(v) => v
            .parse::<i64>()
            .map_err(|_| bad("timers_bad_limit", "limit must be an integer"))?
            .clamp(1, i64::from(u16::MAX)) as usize,
    };
    let after = p.get("after").filter(|a| !a.is_empty()).cloned();
    let a = read(
        &app,
        ctx,
        ReadReq::Timers {
            queue,
            after,
            limit,
        },
    )
    .await?;
    Ok(Json(render_read(&a)).into_response())
}

/// The JSON of a timer read (also for `render::read`).
pub fn render_read(a: &ReadAnswer) -> Value {
    match a {
        ReadAnswer::Timer(None) => json!({"found": false}),
        ReadAnswer::Timer(Some(t)) => {
            let mut v = view_json(t, true);
            v["found"] = json!(true);
            v
        }
        ReadAnswer::Timers(p) => json!({
            "rows": p.rows.iter().map(|t| view_json(t, false)).collect::<Vec<_>>(),
            "truncated": p.truncated,
            "nextAfter": p.next_after,
        }),
        _ => Value::Null,
    }
}

#[cfg(test)]
#[path = "timers_tests.rs"]
mod tests;
