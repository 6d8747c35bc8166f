//! `POST /api/v1/fetch` and `POST /api/v1/partitions/changed` (spec/native-api.md §2.12):
//! reads by offset and partition discovery. Every number a client sends is bounded here,
//! before the engine is asked.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use queenmq_protocol::fetch::*;
use queenmq_protocol::{Command, Outcome, ReadAnswer, ReadReq, RequestCtx};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::reserve::Reserved;
use crate::{body, call, parse_iso, render, AppState};

/// The most entries one `partitions/changed` call may hold (the client sends one).
const MAX_CHANGED_ENTRIES: usize = 16;

/// `lastWriteAt`, `safeTime` and `ts`: one fixed-width spelling (microseconds, `Z`), so the
/// client can compare them as strings.
fn iso_us(us: i64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_micros(us)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        .unwrap_or_default()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FetchEntryJson {
    queue: String,
    partition: String,
    #[serde(default)]
    offset: u64,
    #[serde(default, rename = "maxBytes")]
    max_bytes: Option<u64>,
}

#[derive(Deserialize)]
struct FetchJson {
    entries: Vec<FetchEntryJson>,
    #[serde(default, rename = "maxBytes")]
    max_bytes: Option<u64>,
}

/// A client's byte budget: absent is the most, 0 is refused, more than the most is clamped.
fn budget(v: Option<u64>, what: &str) -> Result<usize, ApiError> {
    match v {
        None => Ok(MAX_FETCH_BYTES),
        Some(0) => Err(ApiError::bad(format!("{what} must be a positive integer"))),
        Some(n) => Ok(usize::try_from(n).map_or(MAX_FETCH_BYTES, |n| n.min(MAX_FETCH_BYTES))),
    }
}

fn fetch_req(bytes: &[u8]) -> Result<FetchReq, ApiError> {
    let f: FetchJson = body::json(bytes)?;
    if f.entries.len() > MAX_FETCH_ENTRIES {
        return Err(ApiError::bad(format!(
            "entries has {} entries; the limit is {MAX_FETCH_ENTRIES}",
            f.entries.len()
        )));
    }
    let max_bytes = budget(f.max_bytes, "maxBytes")?;
    let entries = f
        .entries
        .into_iter()
        .map(|e| {
            Ok(FetchEntry {
                max_bytes: budget(e.max_bytes, "entries[].maxBytes")?,
                queue: e.queue,
                partition: e.partition,
                offset: e.offset,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(FetchReq {
        entries,
        max_bytes,
        read_committed: false,
    })
}

/// What the rendered answer of a fetch can weigh: its payloads (parsed into JSON values, which
/// take a few times their text) and each entry's and record's fields.
fn answer_bound(req: &FetchReq) -> usize {
    let records = req.max_bytes / FETCH_RECORD_OVERHEAD + req.entries.len();
    req.max_bytes
        .saturating_mul(4)
        .saturating_add(records.saturating_mul(256))
        .saturating_add(req.entries.len().saturating_mul(256))
}

pub(crate) fn render_fetch(a: &FetchAnswer) -> Value {
    let entries: Vec<Value> = a
        .entries
        .iter()
        .map(|e| {
            let records: Vec<Value> = e
                .records
                .iter()
                .map(|r| {
                    json!({
                        "offset": r.offset, "transactionId": r.transaction_id,
                        "payload": render::raw_json(&r.payload), "ts": iso_us(r.created_us),
                    })
                })
                .collect();
            let mut v = json!({
                "highWatermark": e.high_watermark, "logStartOffset": e.log_start,
                "nextOffset": e.next_offset, "records": records,
            });
            if let Some(err) = e.error {
                v["error"] = json!(err.code());
            }
            v
        })
        .collect();
    json!({ "entries": entries })
}

pub async fn fetch(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, ApiError> {
    let bytes = body::read(&headers, b, &app.opts).await?;
    let req = fetch_req(&bytes)?;
    let reserved = app.room.take(answer_bound(&req)).await?;
    let mut resp = match call(&app, ctx, Command::Read(ReadReq::VisibleFetch(req))).await? {
        Outcome::Read(ReadAnswer::Fetch(a)) => Json(render_fetch(&a)).into_response(),
        other => return Err(render::unexpected(&other)),
    };
    Reserved::ride(reserved, &mut resp);
    Ok(resp)
}

#[derive(Deserialize)]
struct ChangedEntryJson {
    queue: String,
    #[serde(default)]
    limit: Option<u64>,
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    after: Option<String>,
}

#[derive(Deserialize)]
struct ChangedJson {
    entries: Vec<ChangedEntryJson>,
}

fn changed_req(e: ChangedEntryJson) -> Result<ChangedReq, ApiError> {
    let limit = match e.limit {
        None => MAX_CHANGED_PAGE,
        Some(0) => return Err(ApiError::bad("limit must be a positive integer")),
        Some(n) => usize::try_from(n).map_or(MAX_CHANGED_PAGE, |n| n.min(MAX_CHANGED_PAGE)),
    };
    let since_us = match e.since.as_deref() {
        None => None,
        Some(s) => {
            Some(parse_iso(s).ok_or_else(|| ApiError::bad("since is not an ISO-8601 time"))?)
        }
    };
    let after = match e.after.as_deref() {
        None => None,
        Some(a) => Some(
            a.parse::<u64>()
                .map_err(|_| ApiError::bad("after is not a cursor this broker answered"))?,
        ),
    };
    Ok(ChangedReq {
        queue: e.queue,
        limit,
        since_us,
        after,
    })
}

pub(crate) fn render_changed(a: &ChangedAnswer) -> Value {
    if a.unknown {
        return json!({ "partitions": [], "error": FetchError::UnknownPartition.code() });
    }
    let partitions: Vec<Value> = a
        .partitions
        .iter()
        .map(|p| {
            json!({
                "name": p.name, "id": p.id.to_string(), "lastOffset": p.last_offset,
                "logStart": p.log_start, "lastWriteAt": iso_us(p.last_write_us),
            })
        })
        .collect();
    let mut v = json!({ "partitions": partitions });
    if let Some(n) = a.next {
        v["next"] = json!(n.to_string());
    }
    v
}

pub async fn changed(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, ApiError> {
    let bytes = body::read(&headers, b, &app.opts).await?;
    let c: ChangedJson = body::json(&bytes)?;
    if c.entries.len() > MAX_CHANGED_ENTRIES {
        return Err(ApiError::bad(format!(
            "entries has {} entries; the limit is {MAX_CHANGED_ENTRIES}",
            c.entries.len()
        )));
    }
    let reqs = c
        .entries
        .into_iter()
        .map(changed_req)
        .collect::<Result<Vec<_>, ApiError>>()?;
    let mut safe: Option<i64> = None;
    let mut entries = Vec::with_capacity(reqs.len());
    for req in reqs {
        match call(&app, ctx.clone(), Command::Read(ReadReq::Changed(req))).await? {
            Outcome::Read(ReadAnswer::Changed(a)) => {
                // Pages answered at different times: the earliest holds for all of them.
                safe = Some(safe.map_or(a.safe_us, |s| s.min(a.safe_us)));
                entries.push(render_changed(&a));
            }
            other => return Err(render::unexpected(&other)),
        }
    }
    let mut v = json!({ "entries": entries });
    if let Some(s) = safe {
        v["safeTime"] = json!(iso_us(s));
    }
    Ok(Json(v).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_are_clamped_and_zero_refused() {
        assert_eq!(budget(None, "m").ok(), Some(MAX_FETCH_BYTES));
        assert_eq!(budget(Some(u64::MAX), "m").ok(), Some(MAX_FETCH_BYTES));
        assert_eq!(budget(Some(10), "m").ok(), Some(10));
        assert!(budget(Some(0), "m").is_err());
    }

    #[test]
    fn fetch_bodies_are_bounded() {
        let entry = r#"{"queue":"q","partition":"p","offset":0}"#;
        let many = format!(r#"{{"entries":[{}]}}"#, vec![entry; 1025].join(","));
        assert!(fetch_req(many.as_bytes()).is_err());
        let ok = format!(r#"{{"entries":[{}]}}"#, vec![entry; 1024].join(","));
        assert_eq!(
            fetch_req(ok.as_bytes()).map(|r| r.entries.len()).ok(),
            Some(1024)
        );
        let negative = r#"{"entries":[{"queue":"q","partition":"p","offset":-1}]}"#;
        assert!(fetch_req(negative.as_bytes()).is_err());
    }

    #[test]
    fn times_have_one_width() {
        assert_eq!(iso_us(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(iso_us(1_500_000).len(), iso_us(1_700_000_000_123_456).len());
    }
}
