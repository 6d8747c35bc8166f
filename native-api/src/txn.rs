//! POST /api/v1/transaction (JSON).

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use queenmq_protocol::{Command, Outcome, RequestCtx, TxnOp, TxnOpResult, TxnReq};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::ack::AckJson;
use crate::error::ApiError;
use crate::push::ItemJson;
use crate::{body, call, AppState};

#[derive(Deserialize)]
struct OpKind {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct PushOpJson<'a> {
    #[serde(borrow)]
    items: Vec<ItemJson<'a>>,
}

#[derive(Deserialize)]
struct TxnJson<'a> {
    #[serde(borrow)]
    operations: Vec<&'a RawValue>,
    #[serde(default, rename = "requiredLeases")]
    required_leases: Vec<String>,
    #[serde(default)]
    kv: Option<Value>,
    #[serde(default)]
    timers: Option<Value>,
}

pub async fn transaction(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, ApiError> {
    body::require_json(&headers)?;
    let bytes = body::read(&headers, b, app.opts.max_body_bytes).await?;
    let t: TxnJson<'_> = body::json_borrowed(&bytes)?;
    let mut ops = Vec::with_capacity(t.operations.len());
    for op in t.operations {
        let raw = op.get().as_bytes();
        let kind: OpKind = body::json_borrowed(raw)?;
        match kind.kind.as_str() {
            "ack" => {
                let a: AckJson = body::json_borrowed(raw)?;
                ops.push(TxnOp::Ack(a.into_item()?));
            }
            "push" => {
                let p: PushOpJson<'_> = body::json_borrowed(raw)?;
                ops.push(TxnOp::Push(
                    p.items.into_iter().map(|i| i.into_item(&bytes)).collect(),
                ));
            }
            other => return Err(ApiError::bad(format!("unknown operation type {other:?}"))),
        }
    }
    let has_riders = |v: &Option<Value>| {
        v.as_ref()
            .is_some_and(|v| v.as_array().is_none_or(|a| !a.is_empty()))
    };
    let req = TxnReq {
        ops,
        required_leases: t.required_leases,
        has_unsupported_riders: has_riders(&t.kv) || has_riders(&t.timers),
    };
    match call(&app, ctx, Command::Transaction(req)).await? {
        Outcome::Transaction(r) => {
            let mut all_ok = true;
            let results: Vec<Value> = r
                .results
                .iter()
                .enumerate()
                .map(|(i, res)| match res {
                    TxnOpResult::Push(p) => {
                        all_ok &= p.error.is_none();
                        json!({"index": i, "type": "push", "success": p.error.is_none(),
                            "status": p.status.as_str(),
                            "transactionId": p.transaction_id, "messageId": p.message_id,
                            "partitionId": p.partition_id.to_string(), "queueName": p.queue,
                            "error": p.error})
                    }
                    TxnOpResult::Ack(a) => {
                        all_ok &= a.success;
                        json!({"index": i, "type": "ack", "success": a.success,
                            "transactionId": a.transaction_id, "error": a.error, "dlq": a.dlq})
                    }
                })
                .collect();
            Ok(Json(
                json!({"transactionId": r.transaction_id, "success": all_ok, "results": results}),
            )
            .into_response())
        }
        _ => Err(ApiError::bad("unexpected outcome")),
    }
}
