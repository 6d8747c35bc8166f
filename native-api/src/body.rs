//! Request bodies: the size limit is checked (declared length first, then while reading)
//! before anything is buffered past it; JSON is parsed into typed shapes with clear errors.

use axum::body::Body;
use axum::http::HeaderMap;
use bytes::Bytes;
use http_body_util::BodyExt;
use queenmq_protocol::{ErrorCode, QueenError};
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::ApiOptions;

/// Reads the whole body within `max_body_bytes` and `body_timeout`; a body still arriving at the
/// deadline is answered 408 and its connection closed (a slow sender holds no buffer for long).
pub async fn read(headers: &HeaderMap, body: Body, opts: &ApiOptions) -> Result<Bytes, ApiError> {
    read_within(headers, body, opts.max_body_bytes, opts.body_timeout).await
}

/// [`read`] with the limit and the deadline given.
pub async fn read_within(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<Bytes, ApiError> {
    let too_large = || too_large(limit);
    let deadline = tokio::time::Instant::now() + timeout;
    let mut body = body;
    if let Some(len) = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        // Refused before a byte of it is read, not drained: a client that asked
        // `Expect: 100-continue` (curl does past 1 MB) then never sends it.
        if len > limit as u64 {
            return Err(too_large());
        }
    }
    let mut buf = bytes::BytesMut::new();
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(too_slow(timeout)),
            Ok(None) => return Ok(buf.freeze()),
            Ok(Some(Err(e))) => return Err(ApiError::bad(format!("bad body: {e}"))),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if data.len() > limit.saturating_sub(buf.len()) {
            drain(&mut body, deadline).await;
            return Err(too_large());
        }
        buf.extend_from_slice(&data);
    }
}

/// What of a refused body is still read, at most, before the 413 goes out.
const DRAIN_BYTES: usize = 64 * 1024;
/// How long that read may take at most (and never past the body's deadline).
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_millis(500);

/// Reads and drops the rest of a body refused as too large, bounded in bytes and time: a
/// connection closed with request bytes still unread is reset by the kernel, and a reset
/// throws away the 413 the client had not read yet (seen under load in CI, session 34, with
/// a chunked body a few hundred bytes past the limit). A body that ends inside the bound
/// gets its 413 read; one that goes on past it is cut off as before.
async fn drain(body: &mut Body, deadline: tokio::time::Instant) {
    let until = deadline.min(tokio::time::Instant::now() + DRAIN_TIME);
    let mut left = DRAIN_BYTES;
    while let Ok(Some(Ok(frame))) = tokio::time::timeout_at(until, body.frame()).await {
        let n = frame.data_ref().map_or(0, |d| d.len());
        if n >= left {
            return;
        }
        left -= n;
    }
}

/// 413: a body past `limit` bytes (declared, or as read).
pub(crate) fn too_large(limit: usize) -> ApiError {
    ApiError(QueenError::new(
        ErrorCode::PayloadTooLarge,
        format!("request body exceeds the limit of {limit} bytes"),
    ))
}

/// 408: a body still arriving at the deadline.
pub(crate) fn too_slow(timeout: std::time::Duration) -> ApiError {
    ApiError(QueenError::new(
        ErrorCode::RequestTimeout,
        format!(
            "request body not received within {} ms (http_body_timeout_ms)",
            timeout.as_millis()
        ),
    ))
}

pub fn json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad(format!("bad body: {e}")))
}

/// Like [`json`], for shapes that borrow from the body (raw payloads are not copied twice).
pub fn json_borrowed<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad(format!("bad body: {e}")))
}

/// Whether the body is a binary one (QPB1 or QTB1), by its `Content-Type`.
pub fn is_binary(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with(queenmq_protocol::binary::PUSH_CONTENT_TYPE))
}

/// The caps a binary body of this broker is held to: the JSON body's.
pub fn binary_limits(opts: &ApiOptions) -> queenmq_protocol::binary::Limits {
    queenmq_protocol::binary::Limits {
        max_bytes: opts.max_body_bytes,
        max_items: opts.max_push_items,
    }
}

/// A payload is stored and later written into JSON answers as it is: it must be one JSON
/// document of valid UTF-8. The JSON body's payloads are read as `&RawValue` (push.rs
/// `ItemJson`), and so are the binary body's here: one parse, one rule for both. (`IgnoredAny`
/// would not do: it skips strings without checking their UTF-8.)
pub fn check_json_payload(payload: &[u8]) -> Result<(), ApiError> {
    serde_json::from_slice::<&serde_json::value::RawValue>(payload)
        .map(|_| ())
        .map_err(|e| ApiError::bad(format!("malformed binary body: a payload is not JSON: {e}")))
}
