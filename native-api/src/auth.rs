//! HS256 JWT authentication, and the early per-route check of the command table's roles
//! (spec/native-api.md §1.2).

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jsonwebtoken::{decode, Algorithm, DecodingKey, Validation};
use queenmq_protocol::{Access, CommandMeta, ErrorCode, QueenError, RequestCtx, Role};
use serde::Deserialize;

use crate::error::ApiError;
use crate::AppState;

#[derive(Deserialize)]
struct Claims {
    sub: Option<String>,
    role: Option<String>,
    roles: Option<Vec<String>>,
    /// Selects the caller's group (and on first use creates it); absent means `default`.
    tenant: Option<String>,
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

/// The roles a token names (claim `role` and/or `roles`). A token that names none gets the
/// least: it can read, not write or administer.
fn roles_of(claims: Claims) -> Vec<Role> {
    let mut roles: Vec<Role> = claims
        .roles
        .unwrap_or_default()
        .iter()
        .map(|r| Role::parse(r))
        .collect();
    roles.extend(claims.role.as_deref().map(Role::parse));
    if roles.is_empty() {
        roles.push(Role::ReadOnly);
    }
    roles
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

pub(crate) fn carries_body(req: &Request) -> bool {
    let h = req.headers();
    h.contains_key(axum::http::header::TRANSFER_ENCODING)
        || h.get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0")
}

/// Who the caller is: every request but the public probes needs a valid token when a secret is
/// configured (401 otherwise). What the caller may do is decided per command by its row of the
/// command table: [`needs`] on each route, and the bus again for every command.
pub async fn layer(State(app): State<AppState>, mut req: Request, next: Next) -> Response {
    let mut ctx = RequestCtx {
        tenant: queenmq_protocol::DEFAULT_TENANT.into(),
        principal: None,
        access: Access::Open,
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
            if let Some(tenant) = claims.tenant.clone() {
                // The name becomes a directory: a token naming a bad one is not a valid token.
                if let Err(why) = queenmq_protocol::check_tenant_name(&tenant) {
                    return refuse_unread(
                        carries_body(&req),
                        ErrorCode::Unauthorized,
                        &format!("Invalid token: {why}"),
                    );
                }
                ctx.tenant = tenant;
            }
            ctx.principal = claims.sub.clone();
            ctx.access = Access::Roles(roles_of(claims));
        }
    }
    req.extensions_mut().insert(ctx);
    next.run(req).await
}

/// A route's early check: the caller's roles against the row of the command the route sends,
/// before its body is read, so a refused client cannot make the node read (and hold) a large
/// body first. The bus checks the same row again for the command the handler builds.
pub async fn needs(State(row): State<&'static CommandMeta>, req: Request, next: Next) -> Response {
    // Without the identity `layer` puts on every request, nothing is allowed.
    let refused = match req.extensions().get::<RequestCtx>() {
        Some(ctx) => ctx.authorize(row),
        None => Err(QueenError::new(
            ErrorCode::Forbidden,
            "the request carries no checked identity",
        )),
    };
    match refused {
        Ok(()) => next.run(req).await,
        Err(e) => refuse_unread(carries_body(&req), e.code, &e.message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_roles_and_public_paths() {
        let claims = |role: Option<&str>, roles: Option<Vec<&str>>| Claims {
            sub: None,
            role: role.map(str::to_string),
            roles: roles.map(|r| r.into_iter().map(str::to_string).collect()),
            tenant: None,
        };
        assert_eq!(roles_of(claims(None, None)), vec![Role::ReadOnly]);
        assert_eq!(roles_of(claims(Some("admin"), None)), vec![Role::Admin]);
        assert_eq!(
            roles_of(claims(Some("write-only"), Some(vec!["read-only"]))),
            vec![Role::ReadOnly, Role::WriteOnly]
        );
        assert!(is_public("/health", false) && is_public("/ready", false));
        assert!(!is_public("/metrics", false) && is_public("/metrics", true));
        assert!(!is_public("/api/v1/push", true));
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
