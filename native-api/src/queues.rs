//! Configure and delete queues.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use queenmq_protocol::{limits, Command, ConfigureReq, Outcome, RequestCtx};
use serde_json::Value;

use crate::error::ApiError;
use crate::{body, call, render, AppState};

pub async fn configure(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, ApiError> {
    let bytes = body::read(&headers, b, &app.opts).await?;
    let v: Value = body::json(&bytes)?;
    let obj = v
        .as_object()
        .ok_or_else(|| ApiError::bad("bad body: expected a JSON object"))?;
    let queue = match obj.get("queue") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::String(_)) | None | Some(Value::Null) => {
            return Err(ApiError::bad("queue is required"))
        }
        Some(_) => return Err(ApiError::bad("queue must be a string")),
    };
    let opts = obj.get("options").and_then(Value::as_object);
    // A label may come top-level or inside `options` (the official clients put a `.config()`
    // label there and send the top-level one as null): a top-level label counts only when it
    // is a non-empty string, so a null or "" beside it never clears what `options` gives.
    let label = |k: &str| -> Result<Option<String>, ApiError> {
        let inner = match opts.and_then(|o| o.get(k)) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(ApiError::bad(format!("options.{k} must be a string"))),
        };
        match obj.get(k) {
            Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
            None | Some(Value::Null) | Some(Value::String(_)) => Ok(inner),
            Some(_) => Err(ApiError::bad(format!("{k} must be a string"))),
        }
    };
    let namespace = label("namespace")?;
    let task = label("task")?;
    limits::check_name("queue", &queue)?;
    limits::check_name("namespace", namespace.as_deref().unwrap_or(""))?;
    limits::check_name("task", task.as_deref().unwrap_or(""))?;
    let replace = match obj.get("mode") {
        None | Some(Value::Null) => false,
        Some(Value::String(m)) if m == "merge" => false,
        Some(Value::String(m)) if m == "replace" => true,
        Some(_) => return Err(ApiError::bad("mode must be \"merge\" or \"replace\"")),
    };
    let options: Vec<(String, Value)> = match obj.get("options") {
        Some(Value::Object(m)) => m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        Some(Value::Null) | None => obj
            .iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "queue" | "options" | "mode" | "namespace" | "task"
                )
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        Some(_) => return Err(ApiError::bad("options must be an object")),
    };
    let options = crate::queue_options::parse(&options)?;
    let req = ConfigureReq {
        queue,
        namespace,
        task,
        options,
        replace,
    };
    match call(&app, ctx, Command::Configure(req)).await? {
        Outcome::Configured(c) => Ok(Json(render::configured(&c)).into_response()),
        other => Err(render::unexpected(&other)),
    }
}

pub async fn delete(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path(queue): Path<String>,
) -> Result<Response, ApiError> {
    match call(&app, ctx, Command::DeleteQueue { queue }).await? {
        Outcome::Deleted(d) => Ok(Json(render::deleted(&d)).into_response()),
        other => Err(render::unexpected(&other)),
    }
}
