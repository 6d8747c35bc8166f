//! POST /api/v1/push (JSON). The answer is index-aligned with `items`.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bytes::Bytes;
use queenmq_protocol::{
    Command, Outcome, PushItem, PushReq, PushResult, RequestCtx, DEFAULT_PARTITION,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::{body, call, AppState};

#[derive(Deserialize)]
pub struct ItemJson<'a> {
    pub queue: String,
    #[serde(default)]
    pub partition: Option<String>,
    #[serde(default, borrow)]
    pub payload: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub data: Option<&'a RawValue>,
    #[serde(default, rename = "transactionId")]
    pub transaction_id: Option<String>,
    #[serde(default, rename = "traceId")]
    pub trace_id: Option<String>,
}

#[derive(Deserialize)]
struct PushBody<'a> {
    #[serde(borrow)]
    items: Vec<ItemJson<'a>>,
}

impl ItemJson<'_> {
    /// `payload`, else `data`; an absent or null payload is stored as JSON null.
    pub fn into_item(self) -> PushItem {
        let raw = self.payload.or(self.data).map_or("null", |r| r.get());
        PushItem {
            queue: self.queue,
            partition: self
                .partition
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| DEFAULT_PARTITION.to_string()),
            payload: Bytes::copy_from_slice(raw.as_bytes()),
            transaction_id: self.transaction_id.filter(|t| !t.is_empty()),
            trace_id: self
                .trace_id
                .and_then(|t| uuid::Uuid::parse_str(&t).ok())
                .map(|u| *u.as_bytes()),
        }
    }
}

pub fn result_json(i: usize, r: &PushResult) -> Value {
    let mut v = json!({
        "index": i,
        "message_id": r.message_id,
        "transaction_id": r.transaction_id,
        "transactionId": r.transaction_id,
        "queueName": r.queue,
        "partitionId": r.partition_id.to_string(),
        "offset": r.offset,
        "status": r.status.as_str(),
    });
    if let Some(e) = &r.error {
        v["error"] = json!(e);
    }
    v
}

pub async fn push(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, ApiError> {
    body::require_json(&headers)?;
    let bytes = body::read(&headers, b, app.opts.max_body_bytes).await?;
    let parsed: PushBody<'_> = body::json_borrowed(&bytes)?;
    let items: Vec<PushItem> = parsed.items.into_iter().map(ItemJson::into_item).collect();
    if items.is_empty() {
        return Ok((StatusCode::CREATED, Json(json!([]))).into_response());
    }
    match call(&app, ctx, Command::Push(PushReq { items })).await? {
        Outcome::Pushed(results) => {
            let arr: Vec<Value> = results
                .iter()
                .enumerate()
                .map(|(i, r)| result_json(i, r))
                .collect();
            Ok((StatusCode::CREATED, Json(Value::Array(arr))).into_response())
        }
        _ => Err(ApiError::bad("unexpected outcome")),
    }
}
