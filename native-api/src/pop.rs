//! GET /api/v1/pop…: query parameters → PopReq; 204 when nothing is delivered.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use queenmq_protocol::{Command, Outcome, PopReq, PopResult, PopSource, RequestCtx, Subscription};
use serde_json::json;

use crate::error::ApiError;
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
    if flag(p, "conflation")? {
        return Err(ApiError::unsupported("conflation (last-value delivery)"));
    }
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
    let batch = num(p, "batch")?.unwrap_or(0).min(100_000) as u32;
    let partitions = num(p, "partitions")?.unwrap_or(0).min(10_000) as u32;
    let timeout_ms = num(p, "timeout")?.unwrap_or(30_000).min(300_000);
    Ok(PopReq {
        source,
        group: p.get("consumerGroup").filter(|g| !g.is_empty()).cloned(),
        batch,
        partitions,
        wait: flag(p, "wait")?,
        timeout_ms,
        auto_ack: flag(p, "autoAck")?,
        subscription,
        lease_seconds: num(p, "leaseSeconds")?,
        autopilot: flag(p, "autopilot")?,
    })
}

async fn answer(app: AppState, ctx: RequestCtx, req: PopReq) -> Result<Response, ApiError> {
    match call(&app, ctx, Command::Pop(req)).await? {
        Outcome::Popped(r) if r.messages.is_empty() => Ok(StatusCode::NO_CONTENT.into_response()),
        Outcome::Popped(r) => Ok((
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            render(&r),
        )
            .into_response()),
        _ => Err(ApiError::bad("unexpected outcome")),
    }
}

fn s(v: &str) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "\"\"".into())
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
    out.push_str(&format!(
        "{{\"success\":true,\"queue\":{},\"partition\":{},\"partitionId\":{},\"leaseId\":{},\"consumerGroup\":{},\"partitionsClaimed\":{},",
        s(&r.queue), s(&first.partition), s(&first.partition_id.to_string()), s(&r.lease_id),
        s(&r.consumer_group), r.partitions_claimed
    ));
    if let Some((p, b, w)) = r.autopilot {
        out.push_str(&format!(
            "\"autopilot\":{},",
            json!({"partitions": p, "batch": b, "waitMs": w})
        ));
    }
    out.push_str("\"messages\":[");
    for (i, m) in r.messages.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let payload = std::str::from_utf8(&m.payload).unwrap_or("null");
        out.push_str(&format!(
            "{{\"id\":{},\"transactionId\":{},\"traceId\":{},\"data\":{},\"producerSub\":{},\"createdAt\":{},\"queue\":{},\"partitionId\":{},\"partition\":{},\"leaseId\":{},\"consumerGroup\":{},\"offset\":{},\"deliveryAttempt\":{}}}",
            s(&m.id), s(&m.transaction_id),
            m.trace_id.as_deref().map_or("null".to_string(), s),
            if payload.is_empty() { "null" } else { payload },
            m.producer_sub.as_deref().map_or("null".to_string(), s),
            s(&iso_ms(m.created_at_us)), s(&m.queue), s(&m.partition_id.to_string()), s(&m.partition),
            s(&m.lease_id), s(&m.consumer_group), m.offset, m.delivery_attempt
        ));
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
    answer(app, ctx, req).await
}

pub async fn pop_partition(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path((q, part)): Path<(String, String)>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    let req = request(PopSource::Partition(q, part), &p)?;
    answer(app, ctx, req).await
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
    answer(app, ctx, req).await
}
