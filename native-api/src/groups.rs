//! Consumer-group administration.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use queenmq_protocol::{Command, GroupAdminReq, Outcome, RequestCtx};
use serde_json::Value;

use crate::error::ApiError;
use crate::{body, call, parse_iso, render, AppState};

async fn run(app: AppState, ctx: RequestCtx, req: GroupAdminReq) -> Result<Response, ApiError> {
    match call(&app, ctx, Command::GroupAdmin(req)).await? {
        Outcome::GroupAdmin(g) => Ok(Json(render::group_admin(&g)).into_response()),
        other => Err(render::unexpected(&other)),
    }
}

fn delete_metadata(p: &HashMap<String, String>) -> bool {
    p.get("deleteMetadata").is_none_or(|v| v != "false")
}

pub async fn delete_all(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path(group): Path<String>,
    Query(p): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let req = GroupAdminReq::Delete {
        group,
        queue: None,
        delete_metadata: delete_metadata(&p),
    };
    run(app, ctx, req).await
}

pub async fn delete_one(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path((group, queue)): Path<(String, String)>,
    Query(p): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let req = GroupAdminReq::Delete {
        group,
        queue: Some(queue),
        delete_metadata: delete_metadata(&p),
    };
    run(app, ctx, req).await
}

async fn object(
    app: &AppState,
    headers: &HeaderMap,
    b: Body,
) -> Result<serde_json::Map<String, Value>, ApiError> {
    let bytes = body::read(headers, b, &app.opts).await?;
    if bytes.is_empty() {
        return Ok(Default::default());
    }
    match body::json::<Value>(&bytes)? {
        Value::Object(m) => Ok(m),
        _ => Err(ApiError::bad("bad body: expected a JSON object")),
    }
}

fn time_field(m: &serde_json::Map<String, Value>, k: &str) -> Result<Option<i64>, ApiError> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => parse_iso(s)
            .map(Some)
            .ok_or_else(|| ApiError::bad(format!("{k} is not an ISO-8601 time"))),
        Some(_) => Err(ApiError::bad(format!("{k} must be an ISO-8601 string"))),
    }
}

pub async fn seek(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path((group, queue)): Path<(String, String)>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, ApiError> {
    queenmq_protocol::limits::check_name("consumerGroup", &group)?;
    queenmq_protocol::limits::check_name("queue", &queue)?;
    let m = object(&app, &headers, b).await?;
    let to_end = matches!(m.get("toEnd"), Some(Value::Bool(true)));
    let timestamp_us = time_field(&m, "timestamp")?;
    run(
        app,
        ctx,
        GroupAdminReq::Seek {
            group,
            queue,
            to_end,
            timestamp_us,
        },
    )
    .await
}

pub async fn subscription(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path(group): Path<String>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, ApiError> {
    queenmq_protocol::limits::check_name("consumerGroup", &group)?;
    let m = object(&app, &headers, b).await?;
    let timestamp_us = time_field(&m, "subscriptionTimestamp")?
        .ok_or_else(|| ApiError::bad("subscriptionTimestamp is required"))?;
    run(
        app,
        ctx,
        GroupAdminReq::Subscription {
            group,
            timestamp_us,
        },
    )
    .await
}
