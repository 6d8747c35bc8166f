//! `GET /api/v1/analytics/system-metrics` and `/worker-metrics`: the node's sampled series
//! (protocol `NodeMetricsQuery`), with the query the dashboard sends: `from`, `to` (ISO-8601),
//! `hostname`, `workerId` (`worker-0` on system metrics, the integer 0 on worker metrics).
//! `queue` is accepted and ignored, as the reference broker does.

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use queenmq_protocol::{limits, Command, NodeMetricsQuery, NodeSeries, Outcome, RequestCtx};

use crate::error::ApiError;
use crate::reads::Params;
use crate::{call, parse_iso, render, AppState};

fn time(p: &Params, k: &str) -> Result<Option<i64>, ApiError> {
    match p.get(k).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => parse_iso(v)
            .map(Some)
            .ok_or_else(|| ApiError::bad(format!("{k} is not an ISO-8601 time"))),
    }
}

/// A DNS name is at most 253 bytes and a kernel hostname 64: past this the filter names no
/// replica there can be.
const MAX_HOSTNAME_BYTES: usize = 255;

fn text(p: &Params, k: &str) -> Result<Option<String>, ApiError> {
    match p.get(k).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) if k == "hostname" && v.len() > MAX_HOSTNAME_BYTES => Err(ApiError::bad(format!(
            "hostname is {} bytes long; the limit is {MAX_HOSTNAME_BYTES} bytes",
            v.len()
        ))),
        Some(v) => {
            limits::check_name(k, v)?;
            Ok(Some(v.clone()))
        }
    }
}

async fn series(
    app: AppState,
    ctx: RequestCtx,
    q: NodeMetricsQuery,
) -> Result<NodeSeries, ApiError> {
    match call(&app, ctx, Command::NodeMetrics(q)).await? {
        Outcome::NodeMetrics(s) => Ok(s),
        other => Err(render::unexpected(&other)),
    }
}

pub async fn system(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    let q = NodeMetricsQuery {
        from_us: time(&p, "from")?,
        to_us: time(&p, "to")?,
        hostname: text(&p, "hostname")?,
        worker_id: text(&p, "workerId")?,
    };
    Ok(Json(render::node_system(&series(app, ctx, q).await?)).into_response())
}

pub async fn worker(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    // Worker ids are integers here; the node's one worker is 0.
    let worker_id = match p.get("workerId").filter(|v| !v.is_empty()) {
        None => None,
        Some(v) => {
            let n: u32 = v
                .parse()
                .map_err(|_| ApiError::bad(format!("workerId must be an integer, got {v:?}")))?;
            Some(format!("worker-{n}"))
        }
    };
    let q = NodeMetricsQuery {
        from_us: time(&p, "from")?,
        to_us: time(&p, "to")?,
        hostname: text(&p, "hostname")?,
        worker_id,
    };
    Ok(Json(render::node_worker(&series(app, ctx, q).await?)).into_response())
}
