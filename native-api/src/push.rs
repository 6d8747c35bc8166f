//! POST /api/v1/push (JSON, or the QPB1 binary body). The answer is index-aligned with `items`.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bytes::Bytes;
use queenmq_protocol::{
    limits, Command, Outcome, PushItem, PushReq, PushResult, PushStatus, RequestCtx,
    DEFAULT_PARTITION,
};
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;

use crate::capped::{self, Capped};
use crate::error::{too_many, ApiError};
use crate::json_out::{self, key, num, str_lit};
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
    items: Capped<ItemJson<'a>>,
}

impl ItemJson<'_> {
    /// Names and ids are bounded before anything is stored under them.
    pub fn check(&self) -> Result<(), ApiError> {
        limits::check_name("queue", &self.queue)?;
        if let Some(p) = &self.partition {
            limits::check_name("partition", p)?;
        }
        if let Some(t) = &self.transaction_id {
            limits::check_name("transactionId", t)?;
        }
        if let Some(t) = &self.trace_id {
            limits::check_name("traceId", t)?;
        }
        Ok(())
    }

    /// `payload`, else `data`; an absent or null payload is stored as JSON null.
    /// `body` is the buffer the item was parsed from, so the payload is shared, not copied.
    pub fn into_item(self, body: &Bytes) -> PushItem {
        let raw = self.payload.or(self.data).map_or("null", |r| r.get());
        PushItem {
            queue: self.queue,
            partition: self
                .partition
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| DEFAULT_PARTITION.to_string()),
            payload: slice_of(body, raw.as_bytes()),
            transaction_id: self.transaction_id.filter(|t| !t.is_empty()),
            trace_id: self
                .trace_id
                .and_then(|t| uuid::Uuid::parse_str(&t).ok())
                .map(|u| *u.as_bytes()),
        }
    }
}

/// One element of the push answer (the SDKs read both spellings of the transaction id).
fn write_result(out: &mut String, i: usize, r: &PushResult) {
    out.push('{');
    key(out, "index");
    num(out, i);
    out.push(',');
    key(out, "message_id");
    str_lit(out, &r.message_id);
    out.push(',');
    key(out, "transaction_id");
    str_lit(out, &r.transaction_id);
    out.push(',');
    key(out, "transactionId");
    str_lit(out, &r.transaction_id);
    out.push(',');
    key(out, "queueName");
    str_lit(out, &r.queue);
    out.push(',');
    key(out, "partitionId");
    out.push('"');
    num(out, r.partition_id);
    out.push_str("\",");
    key(out, "offset");
    num(out, r.offset);
    out.push(',');
    key(out, "status");
    str_lit(out, r.status.as_str());
    if let Some(e) = &r.error {
        out.push(',');
        key(out, "error");
        str_lit(out, &e.message);
    }
    out.push('}');
}

/// `part` as a view of `body` when it lies inside it (a borrowed JSON value does), else a copy.
fn slice_of(body: &Bytes, part: &[u8]) -> Bytes {
    let (b, p) = (body.as_ptr() as usize, part.as_ptr() as usize);
    if p >= b && p + part.len() <= b + body.len() {
        body.slice(p - b..p - b + part.len())
    } else {
        Bytes::copy_from_slice(part)
    }
}

pub fn results_json(results: &[PushResult]) -> String {
    let mut out = String::with_capacity(16 + results.len() * 256);
    out.push('[');
    for (i, r) in results.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_result(&mut out, i, r);
    }
    out.push(']');
    out
}

pub async fn push(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, ApiError> {
    let bytes = body::read(&headers, b, &app.opts).await?;
    if body::is_binary(&headers) {
        return push_binary(app, ctx, bytes).await;
    }
    let max = app.opts.max_push_items;
    let parsed: PushBody<'_> = capped::with_cap(max, || body::json_borrowed(&bytes))?;
    let items = match parsed.items {
        Capped::Within(items) => items,
        Capped::Over(n) => return Err(too_many("items in one push", n, max, "max_push_items")),
    };
    for i in &items {
        i.check()?;
    }
    let items: Vec<PushItem> = items.into_iter().map(|i| i.into_item(&bytes)).collect();
    if items.is_empty() {
        return Ok((StatusCode::CREATED, Json(json!([]))).into_response());
    }
    match call(&app, ctx, Command::Push(PushReq { items })).await? {
        Outcome::Pushed(results) => Ok(json_out::response(
            StatusCode::CREATED,
            results_json(&results),
        )),
        other => Err(crate::render::unexpected(&other)),
    }
}

/// Checks what the JSON path checks (names, payloads) on decoded binary items.
pub fn check_binary_items(items: &[PushItem]) -> Result<(), ApiError> {
    for i in items {
        limits::check_name("queue", &i.queue)?;
        limits::check_name("partition", &i.partition)?;
        if let Some(t) = &i.transaction_id {
            limits::check_name("transactionId", t)?;
        }
        body::check_json_payload(&i.payload)?;
    }
    Ok(())
}

/// The QPB1 body: the same items the JSON body gives, so the engine sees no difference.
async fn push_binary(app: AppState, ctx: RequestCtx, bytes: Bytes) -> Result<Response, ApiError> {
    let decoded = crate::binary_body::push(&app, bytes).await?;
    let (counts, items) = (decoded.body.counts, decoded.body.items);
    let results = match items.is_empty() {
        true => Vec::new(),
        false => match call(&app, ctx, Command::Push(PushReq { items })).await? {
            Outcome::Pushed(results) => results,
            other => return Err(crate::render::unexpected(&other)),
        },
    };
    let text = match counts {
        true => counts_json(&results),
        false => results_json(&results),
    };
    Ok(json_out::response(StatusCode::CREATED, text))
}

/// The answer to flag 2: how many items were queued, duplicates, refused.
fn counts_json(results: &[PushResult]) -> String {
    let n = |s: PushStatus| results.iter().filter(|r| r.status == s).count();
    json!({
        "count": results.len(),
        "queued": n(PushStatus::Queued),
        "duplicate": n(PushStatus::Duplicate),
        "error": n(PushStatus::Failed),
    })
    .to_string()
}
