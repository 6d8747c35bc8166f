//! POST /api/v1/transaction (JSON).

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use queenmq_protocol::{limits, Command, Outcome, RequestCtx, TxnOp, TxnOpResult, TxnReq};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::ack::AckJson;
use crate::capped::{self, Capped};
use crate::error::{too_many, ApiError};
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
    items: Capped<ItemJson<'a>>,
}

#[derive(Deserialize)]
struct TxnJson<'a> {
    #[serde(borrow)]
    operations: Capped<&'a RawValue>,
    #[serde(default, rename = "requiredLeases")]
    required_leases: Capped<String>,
    #[serde(default)]
    kv: Option<Value>,
    #[serde(default, borrow)]
    timers: Option<&'a RawValue>,
}

pub async fn transaction(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, ApiError> {
    body::require_json(&headers)?;
    let bytes = body::read(&headers, b, &app.opts).await?;
    let max_ops = app.opts.max_txn_ops;
    let t: TxnJson<'_> = capped::with_cap(max_ops, || body::json_borrowed(&bytes))?;
    let operations = match t.operations {
        Capped::Within(ops) => ops,
        Capped::Over(n) => {
            return Err(too_many(
                "operations in one transaction",
                n,
                max_ops,
                "max_txn_ops",
            ))
        }
    };
    let required_leases = match t.required_leases {
        Capped::Within(l) => l,
        Capped::Over(n) => {
            return Err(too_many(
                "requiredLeases in one transaction",
                n,
                max_ops,
                "max_txn_ops",
            ))
        }
    };
    for l in &required_leases {
        limits::check_name("requiredLeases[]", l)?;
    }
    // Push items of all operations share one budget: a transaction is no way around a push cap.
    let max_items = app.opts.max_push_items;
    let mut items_left = max_items;
    let mut ops = Vec::with_capacity(operations.len());
    for op in operations {
        let raw = op.get().as_bytes();
        let kind: OpKind = body::json_borrowed(raw)?;
        match kind.kind.as_str() {
            "ack" => {
                let a: AckJson = body::json_borrowed(raw)?;
                ops.push(TxnOp::Ack(a.into_item()?));
            }
            "push" => {
                let p: PushOpJson<'_> = capped::with_cap(items_left, || body::json_borrowed(raw))?;
                let items = match p.items {
                    Capped::Within(items) => items,
                    Capped::Over(_) => {
                        return Err(too_many(
                            "push items in one transaction (or more)",
                            max_items.saturating_add(1),
                            max_items,
                            "max_push_items",
                        ))
                    }
                };
                items_left -= items.len();
                for i in &items {
                    i.check()?;
                }
                ops.push(TxnOp::Push(
                    items.into_iter().map(|i| i.into_item(&bytes)).collect(),
                ));
            }
            other => return Err(ApiError::bad(format!("unknown operation type {other:?}"))),
        }
    }
    let has_riders = |v: &Option<Value>| {
        v.as_ref()
            .is_some_and(|v| v.as_array().is_none_or(|a| !a.is_empty()))
    };
    let timers = match t.timers {
        None => Vec::new(),
        Some(raw) => match crate::timers::parse_ops(raw.get().as_bytes()) {
            Ok(ops) => ops,
            Err(e) => return Ok(e.into_response()),
        },
    };
    let req = TxnReq {
        ops,
        required_leases,
        has_unsupported_riders: has_riders(&t.kv),
        timers,
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
                            "error": p.error.as_ref().map(|e| &e.message)})
                    }
                    TxnOpResult::Ack(a) => {
                        all_ok &= a.success;
                        json!({"index": i, "type": "ack", "success": a.success,
                            "transactionId": a.transaction_id, "error": a.error.as_ref().map(|e| &e.message), "dlq": a.dlq})
                    }
                    // A verdict, not a failure: `absent` leaves the bundle a success.
                    TxnOpResult::Timer(t) => {
                        let mut v = crate::timers::result_json(t);
                        v["index"] = json!(i);
                        v["type"] = json!("timer");
                        v["success"] = json!(true);
                        v
                    }
                })
                .collect();
            Ok(Json(
                json!({"transactionId": r.transaction_id, "success": all_ok, "results": results}),
            )
            .into_response())
        }
        other => Err(crate::render::unexpected(&other)),
    }
}
