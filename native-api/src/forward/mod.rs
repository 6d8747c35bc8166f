//! A cluster follower relays the requests it may not answer to the leader of the tenant's
//! group and hands the leader's answer back, so clients may use any node (docs/cluster.md
//! "Forwarding"). The decision is taken at the door from the node's Raft role
//! ([`decide::decide`]), never by submitting to the engine first; the relay is one pooled
//! HTTP/1 client per process with bounded waits and a cap on requests in flight
//! ([`relay`]). Without a cluster no [`Forwarder`] exists and every route is answered here.

mod decide;
mod relay;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use queenmq_protocol::{CommandMeta, RequestCtx, DEFAULT_TENANT};

#[cfg(test)]
pub(crate) use decide::relayed_headers;
pub use decide::{Leader, CARRIED, FORWARDED};
pub(crate) use relay::{register_series, Forwarder};

use crate::error::ApiError;

/// Who leads a tenant's group, as this node knows it now (the broker reads its Raft status).
pub trait LeaderLookup: Send + Sync + std::fmt::Debug {
    fn leader_of(&self, tenant: &str) -> Leader;
}

/// What a cluster member's door needs to relay requests to the leader.
#[derive(Clone, Debug)]
pub struct ForwardOptions {
    /// This node's id, sent in [`FORWARDED`].
    pub node_id: u64,
    pub leaders: Arc<dyn LeaderLookup>,
    /// Relayed requests in flight at once (`forward_max_inflight`); past it 503 `unavailable`.
    pub max_inflight: usize,
    /// How long to wait for a connection to the leader.
    pub connect_timeout: Duration,
    /// The leader's own bound on an answer plus the way there and back; a long poll adds its
    /// wait on top.
    pub answer_margin: Duration,
}

/// The per-route check, after [`crate::auth::needs`]: relays, refuses, or lets the route's
/// handler answer. A route without a forwarder in the request (a single node) runs as before.
pub(crate) async fn layer(
    State(row): State<&'static CommandMeta>,
    req: Request,
    next: Next,
) -> Response {
    let Some(fwd) = req.extensions().get::<Arc<Forwarder>>().cloned() else {
        return next.run(req).await;
    };
    let tenant = req
        .extensions()
        .get::<RequestCtx>()
        .map_or(DEFAULT_TENANT, |ctx| ctx.tenant.as_str())
        .to_string();
    // A membership route naming a tenant's group goes to that group's leader, not to the
    // caller's tenant's (docs/cluster.md "Membership with tenant groups"); a malformed name
    // is the handler's to refuse.
    let tenant = crate::cluster_carry::routed_group(req.uri().path(), req.uri().query(), tenant);
    let forwarded = req.headers().contains_key(FORWARDED);
    let decision = decide::decide(row.class, req.uri().path(), forwarded, || {
        fwd.leader_of(&tenant)
    });
    let id = match decision {
        decide::Decision::Local => return next.run(req).await,
        decide::Decision::Refuse(e) => {
            let unread = crate::auth::carries_body(&req);
            return close_if_unread(ApiError(e).into_response(), unread);
        }
        decide::Decision::Forward { id, .. } => id,
    };
    let (parts, body) = req.into_parts();
    let read = match fwd.read(&parts.headers, body, id).await {
        Ok(r) => r,
        Err(refused) => return refused,
    };
    // The upload may have taken up to the body timeout, through an election: ask again who
    // leads, so the body goes to the leader of now (review s19 forward L3).
    match decide::decide(row.class, parts.uri.path(), forwarded, || {
        fwd.leader_of(&tenant)
    }) {
        decide::Decision::Forward { id, url } => fwd.send(parts, read, id, url, false).await,
        decide::Decision::Refuse(e) => ApiError(e).into_response(),
        decide::Decision::Local => {
            // This node leads now: its own handler answers, the body kept counted meanwhile.
            let req = Request::from_parts(parts, axum::body::Body::from(read.bytes.clone()));
            let resp = next.run(req).await;
            drop(read);
            resp
        }
    }
}

/// An answer sent before the request's body was read: hyper closes the connection rather
/// than read the rest, so the client is told not to reuse it (as `auth` does).
fn close_if_unread(mut resp: Response, unread: bool) -> Response {
    if unread {
        resp.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    resp
}

#[cfg(test)]
mod relay_tests;
