//! HS256 JWT authentication and per-route role levels (spec/native-api.md §1.2).

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jsonwebtoken::{decode, Algorithm, DecodingKey, Validation};
use queenmq_protocol::{ErrorCode, QueenError, RequestCtx};
use serde::Deserialize;

use crate::error::ApiError;
use crate::AppState;

#[derive(Deserialize)]
struct Claims {
    sub: Option<String>,
    role: Option<String>,
    roles: Option<Vec<String>>,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    ReadOnly,
    WriteOnly,
    ReadWrite,
    Admin,
}

/// Probes stay open so orchestrators need no token; the metrics pages name every queue and
/// group, so they are open only when `metrics_require_auth` is off.
fn is_public(path: &str, metrics_open: bool) -> bool {
    match path {
        "/" | "/health" | "/ready" => true,
        "/metrics" | "/metrics/prometheus" => metrics_open,
        _ => false,
    }
}

fn required(method: &Method, path: &str) -> Level {
    let admin = path.starts_with("/api/v1/system/")
        || path.starts_with("/internal/")
        || (method == Method::DELETE
            && (path.starts_with("/api/v1/consumer-groups/")
                || path.starts_with("/api/v1/resources/queues/")
                || path == "/api/v1/dlq"))
        || path == "/api/v1/stats/refresh";
    if admin {
        return Level::Admin;
    }
    if method == Method::POST && (path == "/api/v1/push" || path == "/api/v1/ephemeral/push") {
        return Level::WriteOnly;
    }
    let reads = [
        "/metrics",
        "/api/v1/status",
        "/api/v1/analytics",
        "/api/v1/resources",
        "/api/v1/messages",
        "/api/v1/consumer-groups",
        "/api/v1/dlq",
        "/api/v1/traces",
        "/api/v1/ephemeral/queues",
    ];
    if method == Method::GET && reads.iter().any(|r| path.starts_with(r)) {
        return Level::ReadOnly;
    }
    Level::ReadWrite
}

fn allows(roles: &[String], need: Level) -> bool {
    let have = roles.iter().map(|r| match r.as_str() {
        "admin" => Level::Admin,
        "read-write" => Level::ReadWrite,
        "write-only" => Level::WriteOnly,
        _ => Level::ReadOnly,
    });
    have.into_iter().any(|h| match (h, need) {
        (Level::Admin, _) => true,
        (Level::ReadWrite, n) => n != Level::Admin,
        (Level::WriteOnly, Level::WriteOnly) => true,
        (Level::ReadOnly, Level::ReadOnly) => true,
        _ => false,
    })
}

/// HS256 with `exp` and `nbf` checked (30 s leeway for clock skew); `aud` must match the
/// configured audience when one is set, and is ignored when none is (tokens minted for several
/// services carry one).
fn validation(audience: Option<&str>) -> Validation {
    let mut v = Validation::new(Algorithm::HS256);
    v.required_spec_claims.clear();
    v.leeway = 30;
    v.validate_exp = true;
    v.validate_nbf = true;
    match audience {
        Some(aud) => {
            v.set_audience(&[aud]);
            v.required_spec_claims.insert("aud".to_string());
        }
        None => v.validate_aud = false,
    }
    v
}

fn refuse(code: ErrorCode, msg: &str) -> Response {
    ApiError(QueenError::new(code, msg)).into_response()
}

/// A refusal sent before the body is read: hyper then closes the connection instead of reading
/// the unread body, so tell the client not to reuse it (without the header, a pooled client
/// may send its next request on the closing socket and see "disconnected without a response").
fn refuse_unread(has_body: bool, code: ErrorCode, msg: &str) -> Response {
    let mut resp = refuse(code, msg);
    if has_body {
        resp.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    resp
}

fn carries_body(req: &Request) -> bool {
    let h = req.headers();
    h.contains_key(axum::http::header::TRANSFER_ENCODING)
        || h.get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0")
}

pub async fn layer(State(app): State<AppState>, mut req: Request, next: Next) -> Response {
    let mut ctx = RequestCtx {
        tenant: "default".into(),
        principal: None,
    };
    if let Some(secret) = app.opts.jwt_secret.as_deref() {
        let path = req.uri().path().to_string();
        if !is_public(&path, !app.opts.metrics_require_auth) {
            let header = req
                .headers()
                .get(axum::http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let token = header.strip_prefix("Bearer ").unwrap_or(header).trim();
            if token.is_empty() {
                return refuse_unread(
                    carries_body(&req),
                    ErrorCode::Unauthorized,
                    "Authorization token required",
                );
            }
            let v = validation(app.opts.jwt_audience.as_deref());
            let claims =
                match decode::<Claims>(token, &DecodingKey::from_secret(secret.as_bytes()), &v) {
                    Ok(d) => d.claims,
                    Err(e) => {
                        let msg = match e.kind() {
                            jsonwebtoken::errors::ErrorKind::ExpiredSignature => {
                                "Token has expired".to_string()
                            }
                            jsonwebtoken::errors::ErrorKind::ImmatureSignature => {
                                "Token is not valid yet (nbf)".to_string()
                            }
                            jsonwebtoken::errors::ErrorKind::InvalidAudience => {
                                "Token audience (aud) does not match this broker".to_string()
                            }
                            _ => format!("Invalid token: {e}"),
                        };
                        return refuse_unread(carries_body(&req), ErrorCode::Unauthorized, &msg);
                    }
                };
            let mut roles = claims.roles.unwrap_or_default();
            roles.extend(claims.role);
            // A token that names no role gets the least: it can read, not write or administer.
            if roles.is_empty() {
                roles.push("read-only".into());
            }
            if !allows(&roles, required(req.method(), &path)) {
                return refuse_unread(
                    carries_body(&req),
                    ErrorCode::Forbidden,
                    "Insufficient permissions",
                );
            }
            ctx.principal = claims.sub;
        }
    }
    req.extensions_mut().insert(ctx);
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_levels() {
        assert!(allows(
            &["read-write".into()],
            required(&Method::POST, "/api/v1/push")
        ));
        assert!(allows(
            &["write-only".into()],
            required(&Method::POST, "/api/v1/push")
        ));
        assert!(!allows(
            &["write-only".into()],
            required(&Method::GET, "/api/v1/pop/queue/q")
        ));
        assert!(!allows(
            &["read-write".into()],
            required(&Method::DELETE, "/api/v1/resources/queues/q")
        ));
        assert!(allows(
            &["read-only".into()],
            required(&Method::GET, "/api/v1/dlq")
        ));
        assert!(allows(
            &["read-only".into()],
            required(&Method::GET, "/metrics/prometheus")
        ));
        assert!(is_public("/health", false) && is_public("/ready", false));
        assert!(!is_public("/metrics", false) && is_public("/metrics", true));
    }

    fn token(claims: serde_json::Value) -> String {
        let key = jsonwebtoken::EncodingKey::from_secret(b"s3cret");
        jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap_or_default()
    }

    fn check(claims: serde_json::Value, audience: Option<&str>) -> bool {
        let key = DecodingKey::from_secret(b"s3cret");
        decode::<Claims>(&token(claims), &key, &validation(audience)).is_ok()
    }

    #[test]
    fn nbf_and_audience() {
        let now = chrono::Utc::now().timestamp();
        assert!(check(serde_json::json!({"nbf": now - 5}), None));
        assert!(!check(serde_json::json!({"nbf": now + 3_600}), None));
        assert!(check(serde_json::json!({"aud": "other"}), None));
        assert!(check(serde_json::json!({"aud": "queen"}), Some("queen")));
        assert!(check(
            serde_json::json!({"aud": ["x", "queen"]}),
            Some("queen")
        ));
        assert!(!check(serde_json::json!({"aud": "other"}), Some("queen")));
        assert!(!check(serde_json::json!({}), Some("queen")));
    }
}
