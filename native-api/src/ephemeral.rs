//! `/api/v1/ephemeral/*` (spec native-api §2.16): JSON to the RAM store's calls. Declarations
//! go through the bus first (replicated), then to the store; contents never touch the bus.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use queenmq_protocol::ephemeral::{check_ephemeral_field, check_ephemeral_name};
use queenmq_protocol::{
    Access, Command, EphemeralConfigOutcome, EphemeralConfigReq, EphemeralOptions, Outcome,
    RequestCtx,
};
use serde_json::{json, Map, Value};

use crate::ephemeral_door::{AckStatus, EphemeralDoor, EphemeralRefusal, PopAsk};
use crate::{body, AppState};

/// Most messages in one push and acks in one call.
pub const MAX_ITEMS: usize = 10_000;
/// Largest pop batch.
pub const MAX_BATCH: u64 = 10_000;
/// Longest long-poll wait, in ms.
pub const MAX_TIMEOUT_MS: u64 = 300_000;
const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// `{"error", "code"}` with the codes of §2.16.
#[derive(Debug)]
pub struct EphError {
    status: StatusCode,
    code: String,
    error: String,
}

fn bad(msg: impl Into<String>) -> EphError {
    EphError {
        status: StatusCode::BAD_REQUEST,
        code: "ephemeral_bad_request".into(),
        error: msg.into(),
    }
}

impl From<crate::ApiError> for EphError {
    fn from(e: crate::ApiError) -> Self {
        let q = e.0;
        if q.code == queenmq_protocol::ErrorCode::BadRequest {
            return bad(q.message);
        }
        EphError {
            status: crate::error::status_of(q.code),
            code: q.code.as_str().into(),
            error: q.message,
        }
    }
}

impl From<EphemeralRefusal> for EphError {
    fn from(r: EphemeralRefusal) -> Self {
        let (status, code, error) = match r {
            EphemeralRefusal::BadRequest(m) => {
                (StatusCode::BAD_REQUEST, "ephemeral_bad_request", m)
            }
            EphemeralRefusal::NotFound => (
                StatusCode::NOT_FOUND,
                "ephemeral_queue_not_found",
                "no such ephemeral queue".into(),
            ),
            EphemeralRefusal::Full(m) => (StatusCode::TOO_MANY_REQUESTS, "queue_full", m),
            EphemeralRefusal::Quota(m) => (StatusCode::FORBIDDEN, "ephemeral_quota_exceeded", m),
            EphemeralRefusal::Unavailable(m) => {
                (StatusCode::SERVICE_UNAVAILABLE, "ephemeral_unavailable", m)
            }
            EphemeralRefusal::Disabled => (
                StatusCode::SERVICE_UNAVAILABLE,
                "ephemeral_disabled",
                "ephemeral queues are disabled on this broker (ephemeral_enabled)".into(),
            ),
        };
        EphError {
            status,
            code: code.into(),
            error,
        }
    }
}

impl IntoResponse for EphError {
    fn into_response(self) -> Response {
        let mut resp = (
            self.status,
            Json(json!({"error": self.error, "code": self.code})),
        )
            .into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut()
                .insert("retry-after", HeaderValue::from_static("1"));
        }
        resp
    }
}

type Answer = Result<Response, EphError>;

/// The store, once the kill switch is checked and the tenant's declarations are in it.
async fn store(app: &AppState, ctx: &RequestCtx) -> Result<Arc<dyn EphemeralDoor>, EphError> {
    let Some(store) = app.opts.ephemeral.clone() else {
        return Err(crate::ApiError::unsupported("ephemeral queues").into());
    };
    if !store.enabled() {
        return Err(EphemeralRefusal::Disabled.into());
    }
    if !store.loaded(&ctx.tenant) {
        // The declarations are read on the tenant's behalf whatever the caller's roles: a
        // reader must see the declared queues, a writer push into them with their bounds.
        let internal = RequestCtx {
            access: Access::Open,
            ..ctx.clone()
        };
        let cmd = Command::EphemeralConfig(EphemeralConfigReq::List);
        match crate::call(app, internal, cmd).await? {
            Outcome::EphemeralConfig(EphemeralConfigOutcome::List(rows)) => {
                store.seed(&ctx.tenant, rows)
            }
            other => return Err(crate::render::unexpected(&other).into()),
        }
    }
    Ok(store)
}

async fn json_body(
    app: &AppState,
    headers: &HeaderMap,
    b: Body,
) -> Result<Map<String, Value>, EphError> {
    let bytes = body::read(headers, b, &app.opts).await?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(bad("the body must be a JSON object")),
        Err(e) => Err(bad(format!("the body is not JSON: {e}"))),
    }
}

fn queue_of(m: &Map<String, Value>) -> Result<String, EphError> {
    let q = m
        .get("queue")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("queue (a string) is required"))?;
    check_ephemeral_name(q).map_err(|e| bad(e.message))?;
    Ok(q.to_string())
}

fn uint(v: &Value, name: &str) -> Result<u64, EphError> {
    v.as_u64()
        .ok_or_else(|| bad(format!("{name} must be a non-negative integer")))
}

fn small(v: &Value, name: &str) -> Result<u32, EphError> {
    u32::try_from(uint(v, name)?).map_err(|_| bad(format!("{name} is out of range")))
}

/// The given options over the defaults; an unknown key or a value out of range is refused.
fn options(v: Option<&Value>) -> Result<EphemeralOptions, EphError> {
    let mut o = EphemeralOptions::default();
    let Some(v) = v else { return Ok(o) };
    if v.is_null() {
        return Ok(o);
    }
    let m = v
        .as_object()
        .ok_or_else(|| bad("options must be an object"))?;
    for (k, v) in m {
        match k.as_str() {
            "maxBytes" => o.max_bytes = uint(v, k)?,
            "maxLength" => o.max_length = small(v, k)?,
            "policy" => {
                o.drop_oldest = match v.as_str() {
                    Some("reject") => false,
                    Some("dropOldest") => true,
                    _ => return Err(bad("policy must be \"reject\" or \"dropOldest\"")),
                }
            }
            "ttlSeconds" => o.ttl_seconds = small(v, k)?,
            "leaseSeconds" => o.lease_seconds = small(v, k)?,
            "retryLimit" => o.retry_limit = small(v, k)?,
            "windowBuffer" => {
                let w = v
                    .as_object()
                    .ok_or_else(|| bad("windowBuffer must be {ms, count}"))?;
                for (wk, wv) in w {
                    match wk.as_str() {
                        "ms" => o.window_ms = small(wv, "windowBuffer.ms")?,
                        "count" => o.window_count = small(wv, "windowBuffer.count")?,
                        other => return Err(bad(format!("unknown windowBuffer key {other}"))),
                    }
                }
            }
            other => return Err(bad(format!("unknown ephemeral option {other}"))),
        }
    }
    o.check().map_err(|e| bad(e.message))?;
    Ok(o)
}

fn options_json(o: &EphemeralOptions) -> Value {
    json!({
        "maxBytes": o.max_bytes,
        "maxLength": o.max_length,
        "policy": if o.drop_oldest { "dropOldest" } else { "reject" },
        "ttlSeconds": o.ttl_seconds,
        "leaseSeconds": o.lease_seconds,
        "retryLimit": o.retry_limit,
        "windowBuffer": {"ms": o.window_ms, "count": o.window_count},
    })
}

pub async fn configure(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Answer {
    let m = json_body(&app, &headers, b).await?;
    let queue = queue_of(&m)?;
    let o = options(m.get("options"))?;
    let store = store(&app, &ctx).await?;
    let tenant = ctx.tenant.clone();
    let cmd = Command::EphemeralConfig(EphemeralConfigReq::Set {
        queue: queue.clone(),
        options: o,
    });
    match crate::call(&app, ctx, cmd).await? {
        Outcome::EphemeralConfig(EphemeralConfigOutcome::Set) => {
            store.declare(&tenant, &queue, o);
            Ok(
                Json(json!({"queue": queue, "declared": true, "options": options_json(&o)}))
                    .into_response(),
            )
        }
        other => Err(crate::render::unexpected(&other).into()),
    }
}

pub async fn reset(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Answer {
    let m = json_body(&app, &headers, b).await?;
    let queue = queue_of(&m)?;
    let store = store(&app, &ctx).await?;
    let dropped = store.reset(&ctx.tenant, &queue);
    Ok(Json(json!({"dropped": dropped})).into_response())
}

pub async fn delete(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path(queue): Path<String>,
) -> Answer {
    check_ephemeral_name(&queue).map_err(|e| bad(e.message))?;
    let store = store(&app, &ctx).await?;
    let tenant = ctx.tenant.clone();
    let cmd = Command::EphemeralConfig(EphemeralConfigReq::Delete {
        queue: queue.clone(),
    });
    match crate::call(&app, ctx, cmd).await? {
        Outcome::EphemeralConfig(EphemeralConfigOutcome::Deleted(held)) => {
            let existed = store.forget(&tenant, &queue);
            Ok(Json(json!({"deleted": held || existed})).into_response())
        }
        other => Err(crate::render::unexpected(&other).into()),
    }
}

pub async fn push(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Answer {
    let m = json_body(&app, &headers, b).await?;
    let queue = queue_of(&m)?;
    let partition = optional_name(&m, "partition")?;
    let messages = capped_list(&m, "messages", "push")?;
    let payloads = messages
        .iter()
        .enumerate()
        .map(|(i, msg)| {
            msg.as_object()
                .and_then(|o| o.get("payload"))
                .map(Value::to_string)
                .ok_or_else(|| bad(format!("messages[{i}] must be an object with a payload")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let store = store(&app, &ctx).await?;
    let pushed = store.push(&ctx.tenant, &queue, partition.as_deref(), payloads)?;
    Ok((StatusCode::CREATED, Json(json!({"pushed": pushed}))).into_response())
}

#[derive(serde::Deserialize)]
pub struct PopParams {
    queue: Option<String>,
    partition: Option<String>,
    batch: Option<String>,
    wait: Option<String>,
    timeout: Option<String>,
    group: Option<String>,
    #[serde(rename = "autoAck")]
    auto_ack: Option<String>,
}

fn flag(v: &Option<String>, name: &str) -> Result<bool, EphError> {
    match v.as_deref() {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(bad(format!("{name} must be true or false"))),
    }
}

fn bounded(
    v: &Option<String>,
    name: &str,
    default: u64,
    lo: u64,
    hi: u64,
) -> Result<u64, EphError> {
    let Some(s) = v else { return Ok(default) };
    match s.parse::<u64>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(bad(format!("{name} must be an integer in {lo}..={hi}"))),
    }
}

pub async fn pop(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Query(p): Query<PopParams>,
) -> Answer {
    let queue = p.queue.clone().ok_or_else(|| bad("queue is required"))?;
    check_ephemeral_name(&queue).map_err(|e| bad(e.message))?;
    for (name, v) in [("partition", &p.partition), ("group", &p.group)] {
        if let Some(v) = v {
            check_ephemeral_field(name, v).map_err(|e| bad(e.message))?;
        }
    }
    let batch = bounded(&p.batch, "batch", 1, 1, MAX_BATCH)? as usize;
    let wait = flag(&p.wait, "wait")?;
    let timeout = bounded(&p.timeout, "timeout", DEFAULT_TIMEOUT_MS, 0, MAX_TIMEOUT_MS)?;
    let auto_ack = flag(&p.auto_ack, "autoAck")?;
    let store = store(&app, &ctx).await?;
    let ask = PopAsk {
        queue: &queue,
        partition: p.partition.as_deref(),
        group: p.group.as_deref(),
        batch,
        auto_ack,
        existing: false,
    };
    let got = if wait {
        crate::ephemeral_wait::pop_waiting(&*store, &ctx.tenant, &ask, timeout).await?
    } else {
        store.pop(&ctx.tenant, &ask)?
    };
    let messages: Vec<Value> = got
        .into_iter()
        .map(|m| {
            json!({
                "id": m.id,
                "partition": m.partition,
                "payload": serde_json::from_str::<Value>(&m.payload).unwrap_or(Value::Null),
                "attempts": m.attempts,
            })
        })
        .collect();
    Ok(Json(json!({"queue": queue, "messages": messages})).into_response())
}

pub async fn ack(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Answer {
    let m = json_body(&app, &headers, b).await?;
    let queue = queue_of(&m)?;
    let group = optional_name(&m, "group")?;
    let list = capped_list(&m, "acks", "call")?;
    let acks = list
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let id = a
                .get("id")
                .and_then(Value::as_str)
                .filter(|id| id.len() <= 2 * queenmq_protocol::ephemeral::MAX_EPHEMERAL_NAME_BYTES)
                .ok_or_else(|| bad(format!("acks[{i}].id must be a message id")))?;
            let status = match a.get("status").and_then(Value::as_str) {
                None | Some("completed") => AckStatus::Completed,
                Some("failed") => AckStatus::Failed,
                Some("retry") => AckStatus::Retry,
                Some(s) => {
                    return Err(bad(format!(
                        "acks[{i}].status {s:?} is not completed, failed or retry"
                    )))
                }
            };
            Ok((id.to_string(), status))
        })
        .collect::<Result<Vec<_>, EphError>>()?;
    let store = store(&app, &ctx).await?;
    let outcomes = store.ack(&ctx.tenant, &queue, group.as_deref(), &acks);
    let results: Vec<Value> = acks
        .iter()
        .zip(outcomes)
        .map(|((id, _), o)| json!({"id": id, "outcome": o.as_str()}))
        .collect();
    Ok(Json(json!({"results": results})).into_response())
}

pub async fn queues(State(app): State<AppState>, Extension(ctx): Extension<RequestCtx>) -> Answer {
    let store = store(&app, &ctx).await?;
    Ok(Json(store.queues(&ctx.tenant)).into_response())
}

pub async fn depth(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path(queue): Path<String>,
) -> Answer {
    check_ephemeral_name(&queue).map_err(|e| bad(e.message))?;
    let store = store(&app, &ctx).await?;
    let d = store
        .depth(&ctx.tenant, &queue)
        .ok_or(EphemeralRefusal::NotFound)?;
    Ok(Json(d).into_response())
}

/// An optional name field (`partition`, `group`): absent or null is none; a string must pass
/// the ephemeral name rules.
fn optional_name(m: &Map<String, Value>, key: &str) -> Result<Option<String>, EphError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(v)) => {
            check_ephemeral_field(key, v).map_err(|e| bad(e.message))?;
            Ok(Some(v.clone()))
        }
        Some(_) => Err(bad(format!("{key} must be a string"))),
    }
}

/// A required array field of at most `MAX_ITEMS` items (`per` names the call in the refusal).
fn capped_list<'a>(
    m: &'a Map<String, Value>,
    key: &str,
    per: &str,
) -> Result<&'a Vec<Value>, EphError> {
    let list = m
        .get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| bad(format!("{key} (an array) is required")))?;
    if list.len() > MAX_ITEMS {
        return Err(bad(format!(
            "{} {key}; at most {MAX_ITEMS} per {per}",
            list.len()
        )));
    }
    Ok(list)
}
