//! POST /api/v1/transaction (JSON, or the QTB1 binary body: a JSON head without the pushes,
//! then the pushed messages as frames; their results follow the head's operations).

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bytes::Bytes;
use queenmq_protocol::{
    limits, Command, Outcome, PushStatus, RequestCtx, TxnOp, TxnOpResult, TxnReq,
};
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
    #[serde(borrow, default)]
    kv: Option<&'a RawValue>,
    #[serde(default, borrow)]
    timers: Option<&'a RawValue>,
}

pub async fn transaction(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, ApiError> {
    let body_bytes = body::read(&headers, b, &app.opts).await?;
    // `_room` is held until the transaction is done with the decoded messages.
    let (bytes, pushed, counts, _room) = match body::is_binary(&headers) {
        true => {
            let decoded = crate::binary_body::transaction(&app, body_bytes).await?;
            let t = decoded.body;
            let head = match t.head.is_empty() {
                true => Bytes::from_static(b"{\"operations\":[]}"),
                false => t.head,
            };
            (head, t.items, t.counts, decoded._room)
        }
        false => (body_bytes, Vec::new(), false, None),
    };
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
    if !pushed.is_empty() {
        if pushed.len() > items_left {
            return Err(too_many(
                "push items in one transaction",
                max_items - items_left + pushed.len(),
                max_items,
                "max_push_items",
            ));
        }
        ops.push(TxnOp::Push(pushed));
    }
    let kv_ops = match t.kv {
        Some(raw) => {
            let list = crate::kv_ops::read_list(raw.get().as_bytes()).map_err(rider_error)?;
            crate::kv_ops::parse_list(&list, true).map_err(rider_error)?
        }
        None => Vec::new(),
    };
    let kv_heads: Vec<(&'static str, String)> = kv_ops
        .iter()
        .map(|o| (crate::kv::op_name(o), o.ns_key().1.to_string()))
        .collect();
    let timers = match t.timers {
        None => Vec::new(),
        Some(raw) => match crate::timers::parse_ops(raw.get().as_bytes()) {
            Ok(ops) => ops,
            Err(e) => return Ok(e.into_response()),
        },
    };
    let reserved = match kv_ops.is_empty() {
        true => None,
        false => app.room.take(crate::kv::answer_bound(&kv_ops)).await?,
    };
    let req = TxnReq {
        ops,
        required_leases,
        kv: kv_ops,
        timers,
        ..Default::default()
    };
    match call(&app, ctx, Command::Transaction(req)).await? {
        Outcome::Transaction(r) if r.kv_precondition.is_some() => {
            let mut base = serde_json::Map::new();
            base.insert("transactionId".into(), json!(r.transaction_id));
            base.insert("success".into(), json!(false));
            base.insert("error".into(), json!("QKV"));
            base.insert("results".into(), json!([]));
            let p = r
                .kv_precondition
                .as_ref()
                .map(|p| crate::kv::precondition(p, base));
            Ok(Json(p.unwrap_or(Value::Null)).into_response())
        }
        Outcome::Transaction(r) => {
            // KV results follow the pushes and acks (and timer results follow them).
            let flat_before = r
                .results
                .iter()
                .filter(|x| matches!(x, TxnOpResult::Push(_) | TxnOpResult::Ack(_)))
                .count();
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
                    TxnOpResult::Kv(k) => {
                        let at = i - flat_before;
                        let (op, key) = kv_heads.get(at).map_or(("", ""), |(o, k)| (*o, k.as_str()));
                        let mut v = crate::kv::render_result(i, op, key, k.clone());
                        v["opIndex"] = json!(at);
                        v["type"] = json!("kv");
                        v
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
            let answer = match counts {
                true => counted(&r.results, results, r.transaction_id, all_ok),
                false => {
                    json!({"transactionId": r.transaction_id, "success": all_ok, "results": results})
                }
            };
            let mut resp = Json(answer).into_response();
            crate::reserve::Reserved::ride(reserved, &mut resp);
            Ok(resp)
        }
        other => Err(crate::render::unexpected(&other)),
    }
}

/// The QTB1 flag-2 answer: the pushes and acks counted, the riders' results kept.
fn counted(raw: &[TxnOpResult], rendered: Vec<Value>, txn_id: String, all_ok: bool) -> Value {
    let (mut pushed, mut duplicate, mut acked) = (0usize, 0usize, 0usize);
    let mut riders = Vec::new();
    for (r, v) in raw.iter().zip(rendered) {
        match r {
            TxnOpResult::Push(p) if p.status == PushStatus::Duplicate => duplicate += 1,
            TxnOpResult::Push(p) if p.error.is_none() => pushed += 1,
            TxnOpResult::Push(_) => {}
            TxnOpResult::Ack(a) => acked += usize::from(a.success),
            TxnOpResult::Kv(_) | TxnOpResult::Timer(_) => riders.push(v),
        }
    }
    json!({"transactionId": txn_id, "success": all_ok, "pushed": pushed,
        "duplicate": duplicate, "acked": acked, "results": riders})
}

/// A refused `kv` rider keeps its KV reason and status (413 for a too large key or value).
fn rider_error(e: crate::kv::KvApiError) -> ApiError {
    let code = match e.status {
        axum::http::StatusCode::PAYLOAD_TOO_LARGE => queenmq_protocol::ErrorCode::PayloadTooLarge,
        _ => queenmq_protocol::ErrorCode::BadRequest,
    };
    ApiError(queenmq_protocol::QueenError::new(
        code,
        format!("{}: bad kv rider: {}", e.reason, e.detail),
    ))
}
