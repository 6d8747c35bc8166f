//! POST /api/v1/ack, /api/v1/ack/batch and lease renewal.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use queenmq_protocol::{
    limits, AckItem, AckReq, AckResult, AckStatus, Command, Outcome, RequestCtx,
};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::capped::{self, Capped};
use crate::error::{too_many, ApiError};
use crate::json_out::{self, key, num, opt_str, str_lit};
use crate::{body, call, iso_ms, AppState};

#[derive(Deserialize)]
pub struct AckJson {
    #[serde(rename = "transactionId")]
    pub transaction_id: String,
    #[serde(rename = "partitionId")]
    pub partition_id: Value,
    #[serde(default)]
    pub status: Option<Value>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default, rename = "leaseId")]
    pub lease_id: Option<String>,
    #[serde(default, rename = "consumerGroup")]
    pub consumer_group: Option<String>,
}

#[derive(Deserialize)]
struct BatchJson {
    acknowledgments: Capped<AckJson>,
    #[serde(default, rename = "consumerGroup")]
    consumer_group: Option<String>,
}

pub fn status(v: &Option<Value>) -> Result<AckStatus, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(AckStatus::Completed),
        Some(Value::Bool(true)) => Ok(AckStatus::Completed),
        Some(Value::Bool(false)) => Ok(AckStatus::Failed),
        Some(Value::String(s)) => match s.to_ascii_lowercase().as_str() {
            "completed" | "complete" | "success" | "ack" => Ok(AckStatus::Completed),
            "failed" | "fail" | "nack" => Ok(AckStatus::Failed),
            "retry" => Ok(AckStatus::Retry),
            "dlq" => Ok(AckStatus::Dlq),
            other => Err(ApiError::bad(format!("unknown ack status {other:?}"))),
        },
        Some(_) => Err(ApiError::bad("status must be a string")),
    }
}

/// `partitionId` as the SDKs send it: the decimal text the broker gave out, or a bare number.
pub fn partition_id_text(v: &Value) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        _ => Err(ApiError::bad("partitionId must be a string")),
    }
}

impl AckJson {
    pub fn into_item(self) -> Result<AckItem, ApiError> {
        let partition_id = partition_id_text(&self.partition_id)?;
        limits::check_name("transactionId", &self.transaction_id)?;
        limits::check_name("partitionId", &partition_id)?;
        if let Some(l) = &self.lease_id {
            limits::check_name("leaseId", l)?;
        }
        if let Some(g) = &self.consumer_group {
            limits::check_name("consumerGroup", g)?;
        }
        if let Some(e) = &self.error {
            if e.len() > limits::MAX_ERROR_TEXT_BYTES {
                return Err(ApiError::bad(format!(
                    "error is {} bytes long; the limit is {} bytes",
                    e.len(),
                    limits::MAX_ERROR_TEXT_BYTES
                )));
            }
        }
        Ok(AckItem {
            status: status(&self.status)?,
            transaction_id: self.transaction_id,
            partition_id,
            error: self.error,
            lease_id: self.lease_id.filter(|l| !l.is_empty()),
            group: self.consumer_group.filter(|g| !g.is_empty()),
        })
    }
}

fn results_json(rs: &[AckResult]) -> String {
    let mut out = String::with_capacity(16 + rs.len() * 160);
    out.push('[');
    for (i, r) in rs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('{');
        key(&mut out, "index");
        num(&mut out, i);
        out.push(',');
        key(&mut out, "transactionId");
        str_lit(&mut out, &r.transaction_id);
        out.push(',');
        key(&mut out, "success");
        num(&mut out, r.success);
        out.push(',');
        key(&mut out, "error");
        opt_str(&mut out, r.error.as_ref().map(|e| e.message.as_str()));
        out.push(',');
        key(&mut out, "leaseReleased");
        num(&mut out, r.lease_released);
        out.push(',');
        key(&mut out, "dlq");
        num(&mut out, r.dlq);
        out.push(',');
        key(&mut out, "noop");
        num(&mut out, r.noop);
        out.push('}');
    }
    out.push(']');
    out
}

async fn run(app: AppState, ctx: RequestCtx, req: AckReq) -> Result<Response, ApiError> {
    match call(&app, ctx, Command::Ack(req)).await? {
        Outcome::Acked(rs) => Ok(json_out::response(StatusCode::OK, results_json(&rs))),
        other => Err(crate::render::unexpected(&other)),
    }
}

pub async fn ack_one(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, ApiError> {
    let bytes = body::read(&headers, b, &app.opts).await?;
    let a: AckJson = body::json(&bytes)?;
    let group = a.consumer_group.clone().filter(|g| !g.is_empty());
    let item = a.into_item()?;
    run(
        app,
        ctx,
        AckReq {
            items: vec![item],
            group,
        },
    )
    .await
}

pub async fn ack_batch(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, ApiError> {
    let bytes = body::read(&headers, b, &app.opts).await?;
    let max = app.opts.max_ack_items;
    let batch: BatchJson = capped::with_cap(max, || body::json(&bytes))?;
    let acks = match batch.acknowledgments {
        Capped::Within(a) => a,
        Capped::Over(n) => {
            return Err(too_many(
                "acknowledgments in one batch",
                n,
                max,
                "max_ack_items",
            ))
        }
    };
    let items = acks
        .into_iter()
        .map(AckJson::into_item)
        .collect::<Result<Vec<_>, _>>()?;
    let group = batch.consumer_group.filter(|g| !g.is_empty());
    limits::check_name("consumerGroup", group.as_deref().unwrap_or(""))?;
    run(app, ctx, AckReq { items, group }).await
}

pub async fn extend(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path(lease_id): Path<String>,
) -> Result<Response, ApiError> {
    limits::check_name("leaseId", &lease_id)?;
    match call(&app, ctx, Command::ExtendLease { lease_id }).await? {
        Outcome::LeaseExtended(r) => {
            let at = r.expires_at_us.map(iso_ms);
            Ok(Json(json!({
                "leaseId": r.lease_id, "success": r.renewed > 0, "renewed": r.renewed,
                "newExpiresAt": at, "expiresAt": at, "lease_expires_at": at,
            }))
            .into_response())
        }
        other => Err(crate::render::unexpected(&other)),
    }
}
