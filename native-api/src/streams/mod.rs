//! The streams runtime (spec/native-api.md §2.17): a query registry and per-(query,
//! partition, key) state rows, kept as KV rows of the read-only namespace [`STREAMS_NS`] so
//! they are replicated, checkpointed and capped exactly as KV is, and a cycle is one
//! transaction (state rows as its `kv` rider, sink pushes, the source ack).
//!
//! Rows of the namespace:
//! * `query/<name>` → `{"query_id","config_hash","source_queue","sink_queue"}`
//! * `id/<query_id>` → `{"name","source_queue"}`: the fence a cycle checks; a reset replaces
//!   the query id, so a cycle of the old id is refused and the old rows are no one's.
//! * `purging/<query_id>` → `{}`: written by the reset that fenced the id; the engine deletes
//!   the id's rows a page per cycle, then this marker (plan/streams_purge.rs).
//! * `row/<query_id>/<partition_id>/<key>` → the operator's JSON value.

mod cycle;
mod queries;
mod state_get;

pub use cycle::cycle;
pub use queries::queries;
pub use state_get::state_get;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use queenmq_protocol::limits::{self, MAX_KV_KEY_BYTES};
use queenmq_protocol::{
    Command, KvOp, KvOutcome, KvReq, KvResult, KvRowView, Outcome, RequestCtx, STREAMS_NS,
};
use serde_json::json;

use crate::error::ApiError;
use crate::AppState;

fn query_key(name: &str) -> String {
    format!("query/{name}")
}

fn id_key(query_id: &str) -> String {
    format!("id/{query_id}")
}

fn rows_prefix(query_id: &str, partition_id: &str) -> String {
    format!(
        "{}{partition_id}/",
        queenmq_protocol::streams_rows_prefix(query_id)
    )
}

fn purge_key(query_id: &str) -> String {
    format!("{}{query_id}", queenmq_protocol::STREAMS_PURGE_PREFIX)
}

/// A query id is one this door minted (a UUID), so it can sit inside a row key unescaped.
fn check_query_id(id: &str) -> Result<(), StreamsError> {
    uuid::Uuid::parse_str(id)
        .map(|_| ())
        .map_err(|_| StreamsError::bad(format!("query_id {id:?} is not a query id")))
}

/// The pop's `partitionId`; a `/` would let one partition's prefix cover another's rows.
/// A number is taken only in its canonical decimal form: the engine reads `"07"` and `" 7"`
/// as partition 7, and each spelling would key its own state rows.
fn check_partition_id(id: &str) -> Result<(), StreamsError> {
    limits::check_name("partition_id", id).map_err(|e| StreamsError::bad(e.message))?;
    let aliased = id.trim().parse::<u64>().is_ok_and(|n| n.to_string() != id);
    if id.is_empty() || id.contains('/') || aliased {
        return Err(StreamsError::bad(format!(
            "partition_id {id:?} is not a partition id"
        )));
    }
    Ok(())
}

/// A partition id an ack can name: the canonical decimal form the pop answers.
fn check_acked_partition_id(id: &str) -> Result<(), StreamsError> {
    match id.parse::<u64>() {
        Ok(n) if n.to_string() == id => Ok(()),
        _ => Err(StreamsError::bad(format!(
            "partition_id {id:?}: an ack names a partition by its number"
        ))),
    }
}

/// A state key as stored: the row prefix and the operator's key within the KV key limit.
fn row_key(prefix: &str, key: &str) -> Result<String, StreamsError> {
    if key.is_empty() || key.contains('\0') {
        return Err(StreamsError::bad(
            "a state key is a non-empty string without NUL",
        ));
    }
    let room = MAX_KV_KEY_BYTES.saturating_sub(prefix.len());
    if key.len() > room {
        return Err(StreamsError::too_large(format!(
            "a state key of {} bytes; the limit is {room}",
            key.len()
        )));
    }
    Ok(format!("{prefix}{key}"))
}

/// One KV call on the streams namespace.
async fn kv(app: &AppState, ctx: &RequestCtx, ops: Vec<KvOp>) -> Result<KvOutcome, StreamsError> {
    match crate::call(app, ctx.clone(), Command::Kv(KvReq { ops })).await? {
        Outcome::Kv(o) => Ok(o),
        other => Err(crate::render::unexpected(&other).into()),
    }
}

/// The live row at `key`, if any.
async fn get(
    app: &AppState,
    ctx: &RequestCtx,
    key: String,
) -> Result<Option<KvRowView>, StreamsError> {
    let op = KvOp::Get {
        ns: STREAMS_NS.to_string(),
        key,
    };
    match kv(app, ctx, vec![op]).await? {
        KvOutcome::Results(mut r) => match r.pop() {
            Some(KvResult::Get(row)) => Ok(row),
            _ => Err(StreamsError::internal("a get answered no row verdict")),
        },
        KvOutcome::Precondition(_) => Err(StreamsError::internal("a get lost a precondition")),
    }
}

/// One page of the rows under `prefix`: the rows, whether more follow, and where they resume.
async fn list_page(
    app: &AppState,
    ctx: &RequestCtx,
    prefix: String,
    after: Option<String>,
    limit: usize,
    keys_only: bool,
) -> Result<(Vec<KvRowView>, bool, Option<String>), StreamsError> {
    let op = KvOp::GetPrefix {
        ns: STREAMS_NS.to_string(),
        prefix,
        after,
        limit,
        keys_only,
    };
    match kv(app, ctx, vec![op]).await? {
        KvOutcome::Results(mut r) => match r.pop() {
            Some(KvResult::GetPrefix {
                rows,
                truncated,
                next_after,
            }) => Ok((rows, truncated, next_after)),
            _ => Err(StreamsError::internal("a listing answered no rows")),
        },
        KvOutcome::Precondition(_) => Err(StreamsError::internal("a listing lost a precondition")),
    }
}

/// The fence row of a query id: absent for an unknown (or reset) query.
async fn fence(
    app: &AppState,
    ctx: &RequestCtx,
    query_id: &str,
) -> Result<KvRowView, StreamsError> {
    check_query_id(query_id)?;
    get(app, ctx, id_key(query_id))
        .await?
        .ok_or(StreamsError::NotFound)
}

/// A streams refusal: `{"success":false,"error"}` (the client raises on either), and for an
/// unknown query the spec's bare 404 `{"error":"not found"}`.
#[derive(Debug)]
pub enum StreamsError {
    NotFound,
    Refused(StatusCode, String),
}

impl StreamsError {
    fn bad(msg: impl Into<String>) -> Self {
        StreamsError::Refused(StatusCode::BAD_REQUEST, msg.into())
    }
    fn too_large(msg: impl Into<String>) -> Self {
        StreamsError::Refused(StatusCode::PAYLOAD_TOO_LARGE, msg.into())
    }
    fn internal(msg: impl Into<String>) -> Self {
        StreamsError::Refused(StatusCode::INTERNAL_SERVER_ERROR, msg.into())
    }
}

impl From<ApiError> for StreamsError {
    fn from(e: ApiError) -> Self {
        StreamsError::Refused(crate::error::status_of(e.0.code), e.0.message)
    }
}

impl IntoResponse for StreamsError {
    fn into_response(self) -> Response {
        match self {
            StreamsError::NotFound => {
                (StatusCode::NOT_FOUND, Json(json!({"error": "not found"}))).into_response()
            }
            StreamsError::Refused(status, msg) => {
                let mut resp =
                    (status, Json(json!({"success": false, "error": msg}))).into_response();
                // The client retries these with backoff; say when.
                if status == StatusCode::SERVICE_UNAVAILABLE {
                    resp.headers_mut()
                        .insert("retry-after", axum::http::HeaderValue::from_static("1"));
                }
                resp
            }
        }
    }
}
