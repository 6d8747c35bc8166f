//! Read routes: each builds a ReadReq (or a trace write) and returns the engine's document.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bytes::Bytes;
use queenmq_protocol::{
    limits, AnalyticsInterval, AnalyticsQuery, Command, DlqQuery, Outcome, Page, ReadReq,
    RequestCtx, TraceReq,
};
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::reserve::{self, Reserved};
use crate::{body, call, parse_iso, render, AppState};

pub(crate) type Params = HashMap<String, String>;

async fn read(app: AppState, ctx: RequestCtx, req: ReadReq) -> Result<Response, ApiError> {
    match call(&app, ctx, Command::Read(req)).await? {
        Outcome::Read(a) => Ok(Json(render::read(&a)).into_response()),
        other => Err(render::unexpected(&other)),
    }
}

/// A read whose answer holds stored messages: up to `rows` of them. The engine builds its
/// document in its cycle and this handler its JSON text, so room is reserved before the
/// engine is asked (reads never park) and rides the answer until the door has counted it.
async fn read_messages(
    app: AppState,
    ctx: RequestCtx,
    req: ReadReq,
    rows: usize,
) -> Result<Response, ApiError> {
    let bound = reserve::page_bound(rows, app.opts.max_body_bytes);
    let reserved = app.room.take(bound).await?;
    let mut resp = read(app, ctx, req).await?;
    Reserved::ride(reserved, &mut resp);
    Ok(resp)
}

/// Largest page any listing answers; a bigger `limit` is clamped to it (as the reference broker
/// clamps), so one read never renders more rows than this.
pub const MAX_PAGE: usize = 10_000;

fn limit(p: &Params, default: usize) -> Result<usize, ApiError> {
    match p.get("limit") {
        None => Ok(default),
        Some(v) => v
            .parse::<usize>()
            .map(|n| n.clamp(1, MAX_PAGE))
            .map_err(|_| ApiError::bad("limit must be a positive integer")),
    }
}

fn offset(p: &Params) -> Result<usize, ApiError> {
    match p.get("offset") {
        None => Ok(0),
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| ApiError::bad("offset must be a non-negative integer")),
    }
}

macro_rules! simple {
    ($name:ident, $req:expr) => {
        pub async fn $name(
            State(app): State<AppState>,
            Extension(ctx): Extension<RequestCtx>,
        ) -> Result<Response, ApiError> {
            read(app, ctx, $req).await
        }
    };
}

simple!(queues, ReadReq::Queues);
simple!(overview, ReadReq::Overview);
simple!(namespaces, ReadReq::Namespaces);
simple!(tasks, ReadReq::Tasks);
simple!(groups, ReadReq::ConsumerGroups);
simple!(status, ReadReq::Status);
simple!(status_queues, ReadReq::StatusQueues);

/// Queue detail and depth list partitions: a page of 1000 unless asked otherwise.
fn partition_page(p: &Params) -> Result<Page, ApiError> {
    Ok(Page {
        limit: limit(p, 1_000)?,
        offset: offset(p)?,
    })
}

pub async fn queue(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path(queue): Path<String>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    let page = partition_page(&p)?;
    read(app, ctx, ReadReq::Queue { queue, page }).await
}

pub async fn status_queue(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path(queue): Path<String>,
) -> Result<Response, ApiError> {
    read(app, ctx, ReadReq::StatusQueue { queue }).await
}

pub async fn depth(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path(queue): Path<String>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    read(
        app,
        ctx,
        ReadReq::QueueDepth {
            queue,
            group: p.get("group").cloned(),
            page: partition_page(&p)?,
        },
    )
    .await
}

pub async fn partitions(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    let req = ReadReq::Partitions {
        queue: p.get("queue").cloned(),
        limit: limit(&p, 100)?,
        offset: offset(&p)?,
    };
    read(app, ctx, req).await
}

pub async fn messages(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    let rows = limit(&p, 100)?;
    let req = ReadReq::Messages {
        queue: p.get("queue").cloned(),
        limit: rows,
        offset: offset(&p)?,
    };
    read_messages(app, ctx, req, rows).await
}

pub async fn message(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path((partition_id, transaction_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let req = ReadReq::Message {
        partition_id,
        transaction_id,
    };
    read_messages(app, ctx, req, 1).await
}

pub async fn group(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path(group): Path<String>,
) -> Result<Response, ApiError> {
    read(app, ctx, ReadReq::ConsumerGroup { group }).await
}

pub async fn lagging(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    let min_lag_seconds = match p.get("minLagSeconds") {
        None => 60,
        Some(v) => v
            .parse::<i64>()
            .map_err(|_| ApiError::bad("minLagSeconds must be an integer"))?,
    };
    read(app, ctx, ReadReq::LaggingGroups { min_lag_seconds }).await
}

pub async fn dlq(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    let q = dlq_query(&p)?;
    let rows = q.limit;
    read_messages(app, ctx, ReadReq::Dlq(q), rows).await
}

pub async fn analytics(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    let time = |k: &str| -> Result<Option<i64>, ApiError> {
        match p.get(k).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => parse_iso(v)
                .map(Some)
                .ok_or_else(|| ApiError::bad(format!("{k} is not an ISO-8601 time"))),
        }
    };
    let interval = match p.get("interval").map(String::as_str) {
        None | Some("") => AnalyticsInterval::Hour,
        Some(v) => AnalyticsInterval::parse(v).ok_or_else(|| {
            ApiError::bad(format!("interval must be minute, hour or day, got {v:?}"))
        })?,
    };
    let label = |k: &str| -> Result<Option<String>, ApiError> {
        match p.get(k).filter(|v| !v.is_empty()) {
            Some(v) => {
                limits::check_name(k, v)?;
                Ok(Some(v.clone()))
            }
            None => Ok(None),
        }
    };
    let q = AnalyticsQuery {
        from_us: time("from")?,
        to_us: time("to")?,
        interval,
        queue: label("queue")?,
        namespace: label("namespace")?,
        task: label("task")?,
    };
    read(app, ctx, ReadReq::Analytics(q)).await
}

/// The DLQ filter of a listing, which a purge takes too.
pub fn dlq_query(p: &Params) -> Result<DlqQuery, ApiError> {
    let time = |k: &str| -> Result<Option<i64>, ApiError> {
        match p.get(k) {
            None => Ok(None),
            Some(v) => parse_iso(v)
                .map(Some)
                .ok_or_else(|| ApiError::bad(format!("{k} is not an ISO-8601 time"))),
        }
    };
    Ok(DlqQuery {
        queue: p.get("queue").cloned(),
        group: p.get("consumerGroup").cloned(),
        partition: p.get("partition").cloned(),
        limit: limit(p, 100)?,
        offset: offset(p)?,
        from_us: time("from")?,
        to_us: time("to")?,
    })
}

pub async fn trace_names(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    read(
        app,
        ctx,
        ReadReq::TraceNames {
            limit: limit(&p, 100)?,
            offset: offset(&p)?,
        },
    )
    .await
}

pub async fn traces_by_name(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path(name): Path<String>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    read(
        app,
        ctx,
        ReadReq::TracesByName {
            name,
            limit: limit(&p, 100)?,
            offset: offset(&p)?,
        },
    )
    .await
}

pub async fn traces_for(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path((partition_id, transaction_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    read(
        app,
        ctx,
        ReadReq::TracesForMessage {
            partition_id,
            transaction_id,
        },
    )
    .await
}

#[derive(Deserialize)]
struct TraceJson {
    #[serde(rename = "transactionId")]
    transaction_id: String,
    #[serde(rename = "partitionId")]
    partition_id: Value,
    #[serde(default, rename = "consumerGroup")]
    consumer_group: Option<String>,
    #[serde(default, rename = "traceNames")]
    trace_names: Option<Vec<String>>,
    #[serde(default, rename = "eventType")]
    event_type: Option<String>,
    #[serde(default)]
    data: Option<Value>,
}

pub async fn trace(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, ApiError> {
    let bytes = body::read(&headers, b, &app.opts).await?;
    let t: TraceJson = body::json(&bytes)?;
    let partition_id = crate::ack::partition_id_text(&t.partition_id)?;
    limits::check_name("transactionId", &t.transaction_id)?;
    limits::check_name("partitionId", &partition_id)?;
    limits::check_name("consumerGroup", t.consumer_group.as_deref().unwrap_or(""))?;
    limits::check_name("eventType", t.event_type.as_deref().unwrap_or(""))?;
    let names = t.trace_names.unwrap_or_default();
    if names.len() > limits::MAX_TRACE_NAMES {
        return Err(ApiError::bad(format!(
            "traceNames has {} names; the limit is {}",
            names.len(),
            limits::MAX_TRACE_NAMES
        )));
    }
    for n in &names {
        limits::check_name("traceNames[]", n)?;
    }
    let data = t.data.unwrap_or(Value::Null).to_string();
    let max = app.opts.max_trace_bytes;
    if data.len() > max {
        return Err(ApiError(queenmq_protocol::QueenError::new(
            queenmq_protocol::ErrorCode::PayloadTooLarge,
            format!(
                "trace data is {} bytes as JSON; the limit is {max} bytes (setting max_trace_bytes)",
                data.len()
            ),
        )));
    }
    let req = TraceReq {
        transaction_id: t.transaction_id,
        partition_id,
        group: t
            .consumer_group
            .unwrap_or_else(|| queenmq_protocol::QUEUE_MODE_GROUP.into()),
        names,
        event_type: t.event_type.unwrap_or_else(|| "info".into()),
        data: Bytes::from(data),
    };
    match call(&app, ctx, Command::Trace(req)).await? {
        Outcome::Traced(t) => Ok((StatusCode::CREATED, Json(render::traced(&t))).into_response()),
        other => Err(render::unexpected(&other)),
    }
}
