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

fn is_public(path: &str) -> bool {
    matches!(
        path,
        "/" | "/health" | "/ready" | "/metrics" | "/metrics/prometheus"
    )
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

fn refuse(code: ErrorCode, msg: &str) -> Response {
    ApiError(QueenError::new(code, msg)).into_response()
}

pub async fn layer(State(app): State<AppState>, mut req: Request, next: Next) -> Response {
    let mut ctx = RequestCtx {
        tenant: "default".into(),
        principal: None,
    };
    if let Some(secret) = app.opts.jwt_secret.as_deref() {
        let path = req.uri().path().to_string();
        if !is_public(&path) {
            let header = req
                .headers()
                .get(axum::http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let token = header.strip_prefix("Bearer ").unwrap_or(header).trim();
            if token.is_empty() {
                return refuse(ErrorCode::Unauthorized, "Authorization token required");
            }
            let mut v = Validation::new(Algorithm::HS256);
            v.required_spec_claims.clear();
            v.leeway = 30;
            v.validate_exp = true;
            let claims =
                match decode::<Claims>(token, &DecodingKey::from_secret(secret.as_bytes()), &v) {
                    Ok(d) => d.claims,
                    Err(e) => {
                        let msg = match e.kind() {
                            jsonwebtoken::errors::ErrorKind::ExpiredSignature => {
                                "Token has expired".to_string()
                            }
                            _ => format!("Invalid token: {e}"),
                        };
                        return refuse(ErrorCode::Unauthorized, &msg);
                    }
                };
            let mut roles = claims.roles.unwrap_or_default();
            roles.extend(claims.role);
            if roles.is_empty() {
                roles.push("read-write".into());
            }
            if !allows(&roles, required(req.method(), &path)) {
                return refuse(ErrorCode::Forbidden, "Insufficient permissions");
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
    }
}
