//! /health, /ready, /metrics, and the answers for routes this broker does not implement yet.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use queenmq_protocol::{Command, MetricsFormat, Outcome, RequestCtx};
use serde_json::json;

use crate::error::ApiError;
use crate::{call, render, AppState};

pub async fn health(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
) -> Response {
    match call(&app, ctx, Command::Health).await {
        Ok(Outcome::Health(h)) => {
            let (ok, v) = render::health(&h);
            let code = if ok {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            (code, Json(v)).into_response()
        }
        Ok(other) => render::unexpected(&other).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Ready when this node leads (so writes are accepted) and has applied what it committed.
pub async fn ready(State(app): State<AppState>, Extension(ctx): Extension<RequestCtx>) -> Response {
    match call(&app, ctx, Command::Health).await {
        Ok(Outcome::Health(h)) => {
            let (ok, v) = render::ready(&h);
            let code = if ok {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            (code, Json(v)).into_response()
        }
        Ok(other) => render::unexpected(&other).into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn metrics_json(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
) -> Response {
    match call(&app, ctx, Command::Metrics(MetricsFormat::Json)).await {
        Ok(Outcome::Metrics(m)) => Json(render::metrics(&m)).into_response(),
        Ok(other) => render::unexpected(&other).into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn metrics_text(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
) -> Response {
    match call(&app, ctx, Command::Metrics(MetricsFormat::Prometheus)).await {
        Ok(Outcome::Text(t)) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; version=0.0.4",
            )],
            t,
        )
            .into_response(),
        Ok(other) => render::unexpected(&other).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Statistics are live counters kept at apply time: the bus answers that there is nothing
/// to refresh (after checking the caller may ask).
pub async fn stats_refresh(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
) -> Response {
    match call(&app, ctx, Command::StatsRefresh).await {
        Ok(Outcome::StatsLive) => {
            Json(json!({"success": true, "message": render::STATS_LIVE})).into_response()
        }
        Ok(other) => render::unexpected(&other).into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn unsupported(req: axum::extract::Request) -> Response {
    let what = format!("{} {}", req.method(), req.uri().path());
    ApiError::unsupported(&what).into_response()
}
