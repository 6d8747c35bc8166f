//! GET /api/v1/pop…: query parameters → PopReq; 204 when nothing is delivered.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use queenmq_protocol::{
    limits, Command, Outcome, PopReq, PopResult, PopSource, RequestCtx, Subscription,
    QUEUE_MODE_GROUP,
};
use serde_json::json;

use crate::error::ApiError;
use crate::json_out::{self as jo, key, opt_str, str_lit};
use crate::{call, iso_ms, parse_iso, AppState};

type Params = HashMap<String, String>;

fn flag(p: &Params, k: &str) -> Result<bool, ApiError> {
    match p.get(k).map(String::as_str) {
        None | Some("") => Ok(false),
        Some("true") | Some("1") => Ok(true),
        Some("false") | Some("0") => Ok(false),
        Some(v) => Err(ApiError::bad(format!(
            "{k} must be true or false, got {v:?}"
        ))),
    }
}

fn num(p: &Params, k: &str) -> Result<Option<u64>, ApiError> {
    match p.get(k).map(String::as_str) {
        None | Some("") => Ok(None),
        Some(v) => v
            .parse::<u64>()
            .map(Some)
            .map_err(|_| ApiError::bad(format!("{k} must be a non-negative integer, got {v:?}"))),
    }
}

fn request(source: PopSource, p: &Params) -> Result<PopReq, ApiError> {
    let conflation = flag(p, "conflation")?;
    let subscription = match (
        p.get("subscriptionMode").map(String::as_str),
        p.get("subscriptionFrom").map(String::as_str),
    ) {
        (_, Some("now")) => Subscription::New,
        (_, Some(ts)) if !ts.is_empty() => Subscription::From(parse_iso(ts).ok_or_else(|| {
            ApiError::bad(format!("subscriptionFrom is not an ISO-8601 time: {ts:?}"))
        })?),
        (Some("new") | Some("new-only"), _) => Subscription::New,
        (Some(m), _) if !m.is_empty() => Subscription::All,
        _ => Subscription::Default,
    };
    let capped = |k: &str, max: u64, unit: &str| -> Result<Option<u64>, ApiError> {
        match num(p, k)? {
            Some(v) => Ok(Some(limits::check_max(k, v, max, unit)?)),
            None => Ok(None),
        }
    };
    // Each fits u32 once capped (the caps are far below u32::MAX).
    let batch = capped("batch", limits::MAX_POP_BATCH, "messages")?.unwrap_or(0) as u32;
    let partitions =
        capped("partitions", limits::MAX_POP_PARTITIONS, "partitions")?.unwrap_or(0) as u32;
    let timeout_ms = capped("timeout", limits::MAX_WAIT_MS, "ms")?.unwrap_or(30_000);
    let lease_seconds = capped("leaseSeconds", limits::MAX_LEASE_SECONDS, "seconds")?;
    match &source {
        PopSource::Queue(q) => limits::check_name("queue", q)?,
        PopSource::Partition(q, part) => {
            limits::check_name("queue", q)?;
            limits::check_name("partition", part)?;
        }
        PopSource::Labels { namespace, task } => {
            limits::check_name("namespace", namespace.as_deref().unwrap_or(""))?;
            limits::check_name("task", task.as_deref().unwrap_or(""))?;
        }
    }
    let group = p.get("consumerGroup").filter(|g| !g.is_empty()).cloned();
    limits::check_name("consumerGroup", group.as_deref().unwrap_or(""))?;
    let auto_ack = flag(p, "autoAck")?;
    // Last-value delivery is a policy of a named group (§2.5.4). A conflating claim retires
    // everything behind the newest value; committed at delivery as well, that value too would
    // be gone with a consumer that dies before handling it, so the two are refused together.
    if conflation && group.as_deref().is_none_or(|g| g == QUEUE_MODE_GROUP) {
        return Err(ApiError::bad("conflation needs a consumerGroup"));
    }
    if conflation && auto_ack {
        return Err(ApiError::bad("conflation cannot be combined with autoAck"));
    }
    Ok(PopReq {
        source,
        group,
        batch,
        partitions,
        wait: flag(p, "wait")?,
        timeout_ms,
        auto_ack,
        subscription,
        lease_seconds,
        autopilot: flag(p, "autopilot")?,
        conflation,
        parked_echo: Default::default(),
    })
}

async fn answer(
    app: AppState,
    ctx: RequestCtx,
    req: PopReq,
    p: &Params,
) -> Result<Response, ApiError> {
    let frames = flag(p, "frames")?;
    match call(&app, ctx, Command::Pop(req)).await? {
        // A conflating answer carries its echo even when empty: the client reads a bodiless
        // 204 as a broker that ignored the policy (§2.5.4).
        Outcome::Popped(r) if r.messages.is_empty() && (r.echo.conflation || r.echo.conflict) => {
            Ok(crate::json_out::response(StatusCode::OK, empty_echo(&r)))
        }
        Outcome::Popped(r) if r.messages.is_empty() => Ok(StatusCode::NO_CONTENT.into_response()),
        Outcome::Popped(r) => match frames.then(|| framed(&r)).flatten() {
            Some(bytes) => Ok((
                StatusCode::OK,
                [(
                    axum::http::header::CONTENT_TYPE,
                    queenmq_protocol::binary::POP_CONTENT_TYPE,
                )],
                bytes,
            )
                .into_response()),
            None => Ok(crate::json_out::response(StatusCode::OK, render(&r))),
        },
        other => Err(crate::render::unexpected(&other)),
    }
}

fn empty_echo(r: &PopResult) -> String {
    let mut v = json!({"success": true, "messages": [], "partitionsClaimed": 0});
    echo_keys(&mut v, r);
    v.to_string()
}

/// `conflation` only when the stored policy conflates, `conflationConflict` only on a
/// mismatch: the client reads a conflict first, then the echo (§2.5.4).
fn echo_keys(v: &mut serde_json::Value, r: &PopResult) {
    if r.echo.conflation {
        v["conflation"] = json!(true);
    }
    if r.echo.conflict {
        v["conflationConflict"] = json!(true);
    }
}

/// The QPF1 answer (`frames=true`). The claims in it follow runs of messages, so the answer's
/// own `partitionsClaimed` and `autopilot` travel in its JSON keys, which the client merges
/// over what it derives. `None` (a message that cannot travel in frames): the JSON answer.
fn framed(r: &PopResult) -> Option<Vec<u8>> {
    let mut own = json!({"partitionsClaimed": r.partitions_claimed});
    if let Some((p, b, w)) = r.autopilot {
        own["autopilot"] = json!({"partitions": p, "batch": b, "waitMs": w});
    }
    echo_keys(&mut own, r);
    queenmq_protocol::binary::pop_frames::encode(r, &own.to_string())
}

/// Writes the answer by hand so payloads go out as stored, without a parse/serialise round.
fn render(r: &PopResult) -> String {
    let mut out = String::with_capacity(
        256 + r
            .messages
            .iter()
            .map(|m| m.payload.len() + 400)
            .sum::<usize>(),
    );
    let first = &r.messages[0];
    out.push_str("{\"success\":true,");
    key(&mut out, "queue");
    str_lit(&mut out, &r.queue);
    out.push(',');
    key(&mut out, "partition");
    str_lit(&mut out, &first.partition);
    out.push(',');
    key(&mut out, "partitionId");
    out.push('"');
    jo::num(&mut out, first.partition_id);
    out.push_str("\",");
    key(&mut out, "leaseId");
    str_lit(&mut out, &r.lease_id);
    out.push(',');
    key(&mut out, "consumerGroup");
    str_lit(&mut out, &r.consumer_group);
    out.push(',');
    key(&mut out, "partitionsClaimed");
    jo::num(&mut out, r.partitions_claimed);
    out.push(',');
    if let Some((p, b, w)) = r.autopilot {
        key(&mut out, "autopilot");
        out.push_str(&json!({"partitions": p, "batch": b, "waitMs": w}).to_string());
        out.push(',');
    }
    if r.echo.conflation {
        out.push_str("\"conflation\":true,");
    }
    if r.echo.conflict {
        out.push_str("\"conflationConflict\":true,");
    }
    out.push_str("\"messages\":[");
    // Messages of one append share their creation time: format it once per run.
    let mut created: (i64, String) = (i64::MIN, String::new());
    for (i, m) in r.messages.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if created.0 != m.created_at_us {
            created = (m.created_at_us, iso_ms(m.created_at_us));
        }
        let payload = std::str::from_utf8(&m.payload).unwrap_or("null");
        out.push('{');
        key(&mut out, "id");
        str_lit(&mut out, &m.id);
        out.push(',');
        key(&mut out, "transactionId");
        str_lit(&mut out, &m.transaction_id);
        out.push(',');
        key(&mut out, "traceId");
        opt_str(&mut out, m.trace_id.as_deref());
        out.push(',');
        key(&mut out, "data");
        out.push_str(if payload.is_empty() { "null" } else { payload });
        out.push(',');
        key(&mut out, "producerSub");
        opt_str(&mut out, m.producer_sub.as_deref());
        out.push(',');
        key(&mut out, "createdAt");
        str_lit(&mut out, &created.1);
        out.push(',');
        key(&mut out, "queue");
        str_lit(&mut out, &m.queue);
        out.push(',');
        key(&mut out, "partitionId");
        out.push('"');
        jo::num(&mut out, m.partition_id);
        out.push_str("\",");
        key(&mut out, "partition");
        str_lit(&mut out, &m.partition);
        out.push(',');
        key(&mut out, "leaseId");
        str_lit(&mut out, &m.lease_id);
        out.push(',');
        key(&mut out, "consumerGroup");
        str_lit(&mut out, &m.consumer_group);
        out.push(',');
        key(&mut out, "offset");
        jo::num(&mut out, m.offset);
        out.push(',');
        key(&mut out, "deliveryAttempt");
        jo::num(&mut out, m.delivery_attempt);
        out.push('}');
    }
    out.push_str("]}");
    out
}

pub async fn pop_queue(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path(q): Path<String>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    let req = request(PopSource::Queue(q), &p)?;
    answer(app, ctx, req, &p).await
}

pub async fn pop_partition(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path((q, part)): Path<(String, String)>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    let req = request(PopSource::Partition(q, part), &p)?;
    answer(app, ctx, req, &p).await
}

pub async fn pop_labels(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    let namespace = p.get("namespace").filter(|s| !s.is_empty()).cloned();
    let task = p.get("task").filter(|s| !s.is_empty()).cloned();
    if namespace.is_none() && task.is_none() {
        return Err(ApiError::bad(
            "pop needs a queue, or a namespace and/or task",
        ));
    }
    let req = request(PopSource::Labels { namespace, task }, &p)?;
    answer(app, ctx, req, &p).await
}
