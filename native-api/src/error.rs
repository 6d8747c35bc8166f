//! Errors at the HTTP edge: stable codes to statuses, always a JSON body with `error` and `code`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use queenmq_protocol::{ErrorCode, QueenError};
use serde_json::json;

#[derive(Debug)]
pub struct ApiError(pub QueenError);

impl ApiError {
    pub fn bad(msg: impl Into<String>) -> Self {
        ApiError(QueenError::bad_request(msg))
    }
    pub fn unsupported(what: &str) -> Self {
        ApiError(QueenError::new(
            ErrorCode::Unsupported,
            format!("unsupported: {what} is not implemented by this broker yet"),
        ))
    }
}

impl From<QueenError> for ApiError {
    fn from(e: QueenError) -> Self {
        ApiError(e)
    }
}

/// 413 for a list over its configured cap, naming the count, the cap and the setting.
pub fn too_many(what: &str, count: usize, max: usize, setting: &str) -> ApiError {
    ApiError(QueenError::new(
        ErrorCode::PayloadTooLarge,
        format!("{count} {what}; the limit is {max} (setting {setting})"),
    ))
}

pub fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::BadRequest | ErrorCode::BadName => StatusCode::BAD_REQUEST,
        ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::NoSuchRoute | ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorCode::Forbidden => StatusCode::FORBIDDEN,
        ErrorCode::Unavailable | ErrorCode::NotLeader => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Unsupported => StatusCode::NOT_IMPLEMENTED,
        ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorCode::TransactionRolledBack => StatusCode::OK,
        ErrorCode::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
        ErrorCode::Conflict => StatusCode::CONFLICT,
        ErrorCode::StorageFull => StatusCode::INSUFFICIENT_STORAGE,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let e = self.0;
        let status = status_of(e.code);
        let mut body = json!({"error": e.message, "code": e.code.as_str()});
        if e.code == ErrorCode::TransactionRolledBack {
            body["success"] = json!(false);
        }
        if let Some(l) = &e.leader {
            body["leader"] = json!(l.id);
            body["leaderUrl"] = json!(l.url);
        } else if e.code == ErrorCode::NotLeader {
            body["leader"] = serde_json::Value::Null;
            body["leaderUrl"] = serde_json::Value::Null;
        }
        let mut resp = (status, axum::Json(body)).into_response();
        if status == StatusCode::REQUEST_TIMEOUT {
            // The body was not read to its end: the connection cannot carry another request.
            resp.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        // Both clear by themselves (a rebuild, freed space): tell the client when to retry.
        if status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::INSUFFICIENT_STORAGE {
            resp.headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        resp
    }
}
