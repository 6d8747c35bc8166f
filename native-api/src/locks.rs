//! POST /api/v1/locks (spec §2.14): a lock op is read and bounded here, planned by the engine
//! into KV writes on the permit rows, and answered with the permit's `guard` op.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use queenmq_protocol::limits::{
    MAX_KV_TTL_SECONDS, MAX_LOCK_LIMIT, MAX_LOCK_NAME_BYTES, MAX_LOCK_OWNER_BYTES,
};
use queenmq_protocol::{
    permit_key, Command, LockHolder, LockOp, LockReq, LockResult, Outcome, RequestCtx, LOCKS_NS,
};
use serde_json::{json, Map, Value};

use crate::kv::KvApiError;
use crate::{body, iso_ms, AppState};

pub async fn locks(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, KvApiError> {
    let bytes = body::read(&headers, b, &app.opts).await?;
    // Read like a KV call: the list capped while parsed, each op a tree only once it is in.
    let list = crate::kv_ops::read_list(&bytes).map_err(|e| bad(&e.detail))?;
    let ops = list
        .iter()
        .enumerate()
        .map(|(i, o)| parse_op(o).map_err(|e| bad(&format!("operations[{i}]: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let heads: Vec<(&'static str, String)> = ops
        .iter()
        .map(|o| (op_name(o), o.name().to_string()))
        .collect();
    match crate::call(&app, ctx, Command::Locks(LockReq { ops })).await? {
        Outcome::Locks(results) => {
            let rendered: Vec<Value> = results
                .into_iter()
                .zip(heads)
                .enumerate()
                .map(|(i, (r, (op, name)))| render(i, op, &name, r))
                .collect();
            Ok(Json(json!({"results": rendered})).into_response())
        }
        other => Err(crate::render::unexpected(&other).into()),
    }
}

fn bad(detail: &str) -> KvApiError {
    KvApiError {
        status: axum::http::StatusCode::BAD_REQUEST,
        error: "lock_bad_request",
        reason: "lock_bad_request",
        detail: detail.to_string(),
    }
}

fn op_name(op: &LockOp) -> &'static str {
    match op {
        LockOp::Acquire { .. } => "acquire",
        LockOp::Renew { .. } => "renew",
        LockOp::Release { .. } => "release",
        LockOp::Get { .. } => "get",
    }
}

fn text(
    m: &Map<String, Value>,
    field: &str,
    max: usize,
    forbid_hash: bool,
) -> Result<String, String> {
    let s = m
        .get(field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("{field} is a non-empty string"))?;
    if s.len() > max {
        return Err(format!("{field} is {} bytes; the limit is {max}", s.len()));
    }
    if s.chars().any(char::is_control) || (forbid_hash && s.contains('#')) {
        return Err(format!(
            "{field} must not hold control characters{}",
            if forbid_hash { " or '#'" } else { "" }
        ));
    }
    Ok(s.to_string())
}

fn uint(
    m: &Map<String, Value>,
    field: &str,
    range: std::ops::RangeInclusive<u64>,
) -> Result<Option<u64>, String> {
    match m.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| range.contains(n))
            .map(Some)
            .ok_or_else(|| {
                format!(
                    "{field} is an integer in {}..={}",
                    range.start(),
                    range.end()
                )
            }),
    }
}

fn parse_op(o: &Value) -> Result<LockOp, String> {
    let m = o.as_object().ok_or("an op is an object")?;
    let name = text(m, "name", MAX_LOCK_NAME_BYTES, true)?;
    let owner = match m.get("owner") {
        None | Some(Value::Null) => None,
        Some(_) => Some(text(m, "owner", MAX_LOCK_OWNER_BYTES, false)?),
    };
    let ttl = || {
        uint(m, "ttlSeconds", 1..=MAX_KV_TTL_SECONDS)?
            .ok_or_else(|| "ttlSeconds is required".to_string())
    };
    let token = || uint(m, "token", 1..=u64::MAX)?.ok_or_else(|| "token is required".to_string());
    let slot = || uint(m, "slot", 0..=u64::from(MAX_LOCK_LIMIT) - 1).map(|s| s.unwrap_or(0) as u32);
    Ok(match m.get("op").and_then(Value::as_str).unwrap_or("") {
        "acquire" => LockOp::Acquire {
            name,
            ttl_seconds: ttl()?,
            // An owner-less acquire is its own holder: a resend of it is another holder.
            owner: owner.unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            limit: uint(m, "limit", 1..=u64::from(MAX_LOCK_LIMIT))?.unwrap_or(1) as u32,
        },
        "renew" => LockOp::Renew {
            name,
            token: token()?,
            ttl_seconds: ttl()?,
            slot: slot()?,
            owner,
        },
        "release" => LockOp::Release {
            name,
            token: token()?,
            slot: slot()?,
        },
        "get" => LockOp::Get { name },
        other => return Err(format!("unknown lock op {other:?}")),
    })
}

fn guard(name: &str, slot: u32, token: u64) -> Value {
    json!({"op": "check", "ns": LOCKS_NS, "key": permit_key(name, slot), "expect": token,
        "required": true})
}

fn holders_json(holders: &[LockHolder]) -> Value {
    Value::Array(
        holders
            .iter()
            .map(|h| {
                json!({"slot": h.slot, "owner": h.owner, "token": h.token,
                    "since": iso_ms(h.since_us), "expiresAt": h.expires_at_us.map(iso_ms),
                    "renewedAt": iso_ms(h.renewed_at_us)})
            })
            .collect(),
    )
}

fn render(index: usize, op: &str, name: &str, r: LockResult) -> Value {
    let mut v = json!({"index": index, "op": op, "name": name});
    let extra = match r {
        LockResult::Acquired {
            slot,
            token,
            owner,
            already,
        } => {
            let mut e = json!({"acquired": true, "slot": slot, "token": token, "owner": owner,
                "guard": guard(name, slot, token)});
            if already {
                e["already"] = json!(true);
            }
            e
        }
        LockResult::Refused { contended, holders } => json!({"acquired": false,
            "reason": if contended { "contended" } else { "held" },
            "holders": holders_json(&holders)}),
        LockResult::Renewed { slot, token } => json!({"renewed": true, "slot": slot,
            "token": token, "guard": guard(name, slot, token)}),
        LockResult::Lost { holders } => json!({"renewed": false, "reason": "lost",
            "holders": holders_json(&holders)}),
        LockResult::Released { released, slot } => {
            let mut e = json!({"released": released, "slot": slot});
            if !released {
                e["reason"] = json!("lost");
            }
            e
        }
        LockResult::Holders(holders) => json!({"held": !holders.is_empty(),
            "holders": holders_json(&holders)}),
    };
    if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
        m.extend(e);
    }
    v
}
