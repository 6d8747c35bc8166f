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
    if let Some(len) = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > limit as u64 {
            return Err(too_large());
        }
    }
    let limited = http_body_util::Limited::new(body, limit);
    let collected = match tokio::time::timeout(timeout, limited.collect()).await {
        Ok(r) => r,
        Err(_) => return Err(too_slow(timeout)),
    };
    match collected {
        Ok(c) => Ok(c.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(too_large())
        }
        Err(e) => Err(ApiError::bad(format!("bad body: {e}"))),
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
