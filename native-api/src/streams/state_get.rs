//! POST /streams/v1/state/get: a partition's state rows of a query, all or the named keys,
//! optionally only those under a key prefix and ripe (`value.windowEnd` ≤ the cutoff).
//!
//! The answer is whole or refused. The official client neither pages nor reads a
//! `truncated` flag, and a reducer treats a row it was not given as absent (it would start
//! the window again from `initial` and emit it twice), so a read whose answer would pass
//! [`STATE_ANSWER_BYTES`] answers 413 and the worker stops loudly.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use queenmq_protocol::limits::{MAX_KV_ANSWER_BYTES, MAX_KV_GET_MANY_KEYS, MAX_KV_PREFIX_LIMIT};
use queenmq_protocol::{KvOp, KvOutcome, KvResult, KvRowView, RequestCtx, STREAMS_NS};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{check_partition_id, fence, kv, list_page, row_key, rows_prefix, StreamsError};
use crate::capped::{self, Capped};
use crate::reserve::Reserved;
use crate::{body, iso_ms, AppState};

#[derive(Deserialize)]
struct GetJson {
    query_id: String,
    partition_id: String,
    #[serde(default)]
    keys: Capped<String>,
    #[serde(default)]
    key_prefix: Option<String>,
    #[serde(default)]
    ripe_at_or_before: Option<f64>,
}

/// The most one state read answers (its rendered JSON): the bound on what a (query,
/// partition) can use, since every cycle of the official client reads the whole state.
pub const STATE_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// What a read holds at most: the answer (past the budget by one row at most: a key of
/// 1 KiB escaped six-fold, a value, the fields) and one engine page (its rows' text within
/// the engine's answer budget plus one row, and their fixed parts) being rendered.
pub(crate) const ANSWER_BOUND: usize = STATE_ANSWER_BYTES
    + ROW_MAX
    + MAX_KV_ANSWER_BYTES
    + ROW_MAX
    + MAX_KV_PREFIX_LIMIT * std::mem::size_of::<KvRowView>();

const ROW_MAX: usize = 6 * queenmq_protocol::limits::MAX_KV_KEY_BYTES
    + queenmq_protocol::limits::MAX_KV_VALUE_BYTES
    + 128;

pub async fn state_get(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, StreamsError> {
    let bytes = body::read(&headers, b, &app.opts).await?;
    let g: GetJson = capped::with_cap(MAX_KV_GET_MANY_KEYS, || body::json(&bytes))?;
    let keys = match g.keys {
        Capped::Within(k) => k,
        Capped::Over(n) => {
            return Err(StreamsError::too_large(format!(
                "{n} keys in one read; the limit is {MAX_KV_GET_MANY_KEYS}"
            )))
        }
    };
    check_partition_id(&g.partition_id)?;
    fence(&app, &ctx, &g.query_id).await?;
    let prefix = rows_prefix(&g.query_id, &g.partition_id);
    let reserved = app.room.take(ANSWER_BOUND).await?;
    let mut answer = Answer::new(&prefix, g.ripe_at_or_before);
    if keys.is_empty() {
        let under = match g.key_prefix.as_deref() {
            Some(p) if !p.is_empty() => row_key(&prefix, p)?,
            _ => prefix.clone(),
        };
        let mut after = None;
        loop {
            let (rows, more, next) = list_page(
                &app,
                &ctx,
                under.clone(),
                after.take(),
                MAX_KV_PREFIX_LIMIT,
                false,
            )
            .await?;
            for r in &rows {
                answer.row(r)?;
            }
            match (more, next) {
                (true, Some(n)) => after = Some(n),
                (true, None) => return Err(StreamsError::internal("a listing lost its place")),
                (false, _) => break,
            }
        }
    } else {
        let keys = keys
            .iter()
            .map(|k| row_key(&prefix, k))
            .collect::<Result<Vec<_>, _>>()?;
        for r in &many(&app, &ctx, keys).await? {
            answer.row(r)?;
        }
    }
    let mut resp = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        answer.finish(),
    )
        .into_response();
    Reserved::ride(reserved, &mut resp);
    Ok(resp)
}

/// The answer's JSON, rendered row by row from the stored text (no value trees: a value of
/// small numbers costs many times its text as a tree).
struct Answer<'p> {
    prefix: &'p str,
    cutoff: Option<f64>,
    out: Vec<u8>,
    rows: usize,
}

/// What the ripe filter reads of a value; the rest is skipped unread.
#[derive(Deserialize)]
struct Ripe {
    #[serde(default, rename = "windowEnd")]
    window_end: Option<f64>,
}

impl<'p> Answer<'p> {
    fn new(prefix: &'p str, cutoff: Option<f64>) -> Self {
        let mut out = Vec::new();
        out.extend_from_slice(br#"{"success":true,"rows":["#);
        Answer {
            prefix,
            cutoff,
            out,
            rows: 0,
        }
    }

    /// Appends one stored row (a row of another prefix or of a value not JSON is skipped);
    /// refuses once the answer passes its budget.
    fn row(&mut self, r: &KvRowView) -> Result<(), StreamsError> {
        let (Some(text), Some(key)) = (r.value.as_deref(), r.key.strip_prefix(self.prefix)) else {
            return Ok(());
        };
        let Ok(value) = serde_json::from_str::<&RawValue>(text) else {
            return Ok(());
        };
        if let Some(cut) = self.cutoff {
            // Only an object's windowEnd counts (a struct would also read an array).
            if !value.get().starts_with('{') {
                return Ok(());
            }
            match serde_json::from_str::<Ripe>(value.get()) {
                Ok(Ripe {
                    window_end: Some(end),
                }) if end <= cut => {}
                _ => return Ok(()),
            }
        }
        if self.rows > 0 {
            self.out.push(b',');
        }
        self.rows += 1;
        self.out.extend_from_slice(br#"{"key":"#);
        push_str(&mut self.out, key)?;
        self.out.extend_from_slice(br#","value":"#);
        self.out.extend_from_slice(value.get().as_bytes());
        self.out.extend_from_slice(br#","updated_at":"#);
        push_str(&mut self.out, &iso_ms(r.updated_at_us))?;
        self.out.push(b'}');
        if self.out.len() > STATE_ANSWER_BYTES {
            return Err(StreamsError::too_large(format!(
                "this partition's state passes {STATE_ANSWER_BYTES} bytes, what one read \
                 answers; nothing is answered rather than a part (read named keys, or reset \
                 the query)"
            )));
        }
        Ok(())
    }

    fn finish(mut self) -> Vec<u8> {
        self.out.extend_from_slice(b"]}");
        self.out
    }
}

fn push_str(out: &mut Vec<u8>, s: &str) -> Result<(), StreamsError> {
    serde_json::to_writer(out, s).map_err(|e| StreamsError::internal(e.to_string()))
}

/// The named rows, all of them or a refusal (the engine cuts a read at its answer budget).
async fn many(
    app: &AppState,
    ctx: &RequestCtx,
    keys: Vec<String>,
) -> Result<Vec<KvRowView>, StreamsError> {
    let op = KvOp::GetMany {
        ns: STREAMS_NS.to_string(),
        keys,
    };
    match kv(app, ctx, vec![op]).await? {
        KvOutcome::Results(mut r) => match r.pop() {
            Some(KvResult::GetMany {
                truncated: true, ..
            }) => Err(StreamsError::too_large(format!(
                "the named rows pass {MAX_KV_ANSWER_BYTES} bytes, what one read of named keys \
                 answers; name fewer"
            ))),
            Some(KvResult::GetMany { rows, .. }) => Ok(rows),
            _ => Err(StreamsError::internal("a read answered no rows")),
        },
        KvOutcome::Precondition(_) => Err(StreamsError::internal("a read lost a precondition")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &str, value: &str) -> KvRowView {
        KvRowView {
            key: key.to_string(),
            value: Some(value.to_string()),
            version: 1,
            expires_at_us: None,
            updated_at_us: 0,
        }
    }

    #[test]
    fn number_dense_values_render_within_the_reserved_bound() {
        // A value of small numbers is the costliest as a tree; rendered from its text it
        // costs its text.
        let value = format!("[{}0]", "0,".repeat(100 * 1024));
        let mut a = Answer::new("row/q/7/", None);
        let mut text = 0;
        for i in 0..32 {
            let r = row(&format!("row/q/7/k{i}"), &value);
            text += r.key.len() + value.len();
            a.row(&r).expect("within the budget");
        }
        let out = a.finish();
        assert!(
            out.len() < text + 32 * 128,
            "{} bytes for {text}",
            out.len()
        );
        assert!(out.len() + text <= ANSWER_BOUND);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        assert_eq!(v["rows"].as_array().map(Vec::len), Some(32));
    }

    #[test]
    fn an_answer_past_its_budget_is_refused_not_cut() {
        let value = format!("\"{}\"", "x".repeat(200 * 1024));
        let mut a = Answer::new("row/q/7/", None);
        let over = (0..200).find_map(|i| a.row(&row(&format!("row/q/7/k{i}"), &value)).err());
        assert!(matches!(
            over,
            Some(StreamsError::Refused(s, _)) if s == axum::http::StatusCode::PAYLOAD_TOO_LARGE
        ));
    }

    #[test]
    fn the_ripe_filter_reads_an_objects_window_end_only() {
        let mut a = Answer::new("row/q/7/", Some(10.0));
        for (k, v) in [
            ("a", r#"{"windowEnd":5,"acc":[1,2]}"#),
            ("b", r#"{"windowEnd":50}"#),
            ("c", "[5]"),
            ("d", r#"{"acc":1}"#),
            ("e", r#"{"windowEnd":"5"}"#),
        ] {
            a.row(&row(&format!("row/q/7/{k}"), v)).expect("small");
        }
        let v: serde_json::Value = serde_json::from_slice(&a.finish()).expect("valid JSON");
        let keys: Vec<&str> = v["rows"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["key"].as_str())
            .collect();
        assert_eq!(keys, ["a"]);
    }
}
