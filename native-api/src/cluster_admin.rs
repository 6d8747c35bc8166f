//! `/api/v1/cluster` (docs/cluster.md "Membership operations"): the membership of the
//! `default` group read, and changed one operation at a time (add a learner, promote
//! learners, remove a member). Admin only; a follower relays a change to the leader like any
//! write, and the leader answers once the membership entry committed. The view is answered
//! by the node asked, from its own log, leader or not (review s21 membership M9).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use queenmq_protocol::{ErrorCode, QueenError, RequestCtx};
use serde_json::Value;

use crate::cluster_carry::{carry, change_one, group_of, is_carried, Relay};
use crate::error::ApiError;
use crate::forward::Forwarder;
use crate::{body, AppState};

/// The most learners one promotion names: a cluster is a handful of nodes.
const MAX_PROMOTE: usize = 16;
/// The longest address accepted (a DNS name is at most 253 bytes, plus scheme and port).
const MAX_ADDR: usize = 300;

pub type Answer<'a> = Pin<Box<dyn Future<Output = Result<Value, QueenError>> + Send + 'a>>;
/// `ClusterAdmin::tenant_groups`'s answer.
pub type Listing<'a> =
    Pin<Box<dyn Future<Output = Option<Result<Vec<String>, QueenError>>> + Send + 'a>>;
/// `ClusterAdmin::was_member`'s answer.
pub type Known<'a> = Pin<Box<dyn Future<Output = bool> + Send + 'a>>;

/// One membership operation, checked for form at the door.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MembershipOp {
    AddLearner {
        id: u64,
        cluster_addr: String,
        http: String,
        /// Its Kafka port's advertised `host:port`, named to Kafka clients (optional).
        kafka: Option<String>,
    },
    Promote(Vec<u64>),
    Remove(u64),
}

/// What the broker does for these routes (it owns the Raft node).
pub trait ClusterAdmin: Send + Sync + std::fmt::Debug {
    /// This node's id, role and known leader, and the membership in its own log (each
    /// member's matched index when it leads); never relayed.
    fn view(&self) -> Answer<'_>;
    /// Runs `op`; answers once its membership entry committed.
    fn change(&self, op: MembershipOp) -> Answer<'_>;
    /// The tenants whose groups exist besides `default`, in name order: those `default`'s
    /// state declares once it has applied all it committed (a read barrier on its leader),
    /// with the groups running or recorded here; an error when the barrier failed (the
    /// listing is behind). None without `cluster_tenant_groups`, where the routes act on
    /// `default` alone as before.
    fn tenant_groups(&self) -> Listing<'_> {
        Box::pin(async { None })
    }
    /// Whether node `id` was a member of `default` in a membership this node still keeps
    /// (its recent membership history): a removal of an id in no group is `already` done
    /// only then, else the id is unknown (404).
    fn was_member(&self, _id: u64) -> Known<'_> {
        Box::pin(async { false })
    }
    /// Held by the carry of a membership route on this node from its first step to its
    /// last: a second route meanwhile waits a moment, then is refused 409 (review s31
    /// member L6: interleaved, two routes could leave the groups in different states).
    fn carry_lock(&self) -> &tokio::sync::Mutex<()>;
    /// Whether the routes carry each change to the tenants' groups (`tenant_groups` is
    /// Some), without listing them.
    fn carries(&self) -> bool {
        false
    }
    /// `view` of `group`'s membership (`default` included), from this node's own log.
    fn view_group<'a>(&'a self, group: &'a str) -> Answer<'a>;
    /// Runs what is left of `op` on `group`, which this node must lead; answers with
    /// `"already": true` when nothing is (a rerun of a route cut halfway).
    fn change_group<'a>(&'a self, group: &'a str, op: MembershipOp) -> Answer<'a>;
}

/// The broker's side, for a caller whose token names no tenant: the membership is every
/// tenant's (review s21 membership M3: an admin token scoped to one tenant could reshape the
/// whole cluster), as the node's Prometheus page is.
fn admin<'a>(app: &'a AppState, ctx: &RequestCtx) -> Result<&'a Arc<dyn ClusterAdmin>, ApiError> {
    node_wide(ctx)?;
    app.opts
        .cluster
        .as_ref()
        .ok_or_else(|| ApiError::unsupported("membership operations on a single node"))
}

fn node_wide(ctx: &RequestCtx) -> Result<(), ApiError> {
    if ctx.tenant == queenmq_protocol::DEFAULT_TENANT {
        return Ok(());
    }
    Err(ApiError(QueenError::new(
        ErrorCode::Forbidden,
        "the cluster's membership serves every tenant: it is read and changed with a token \
         without a tenant claim",
    )))
}

pub async fn view(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let admin = admin(&app, &ctx)?;
    let answer = match group_of(uri.query())? {
        Some(g) if g != queenmq_protocol::DEFAULT_TENANT && !admin.carries() => {
            return Err(no_groups(&g))
        }
        Some(g) => admin.view_group(&g).await?,
        None => admin.view().await?,
    };
    Ok(Json(answer).into_response())
}

pub(crate) async fn add_learner(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    fwd: Option<Extension<Arc<Forwarder>>>,
    uri: Uri,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, ApiError> {
    let bytes = body::read(&headers, b, &app.opts).await?;
    let m = object(&bytes)?;
    let op = MembershipOp::AddLearner {
        id: node_id(m.get("id"))?,
        cluster_addr: cluster_addr(m.get("clusterAddr"))?,
        http: http_addr(m.get("httpAddr"))?,
        kafka: kafka_addr(m.get("kafkaAddr"))?,
    };
    let relay = Relay {
        method: Method::POST,
        path: "/api/v1/cluster/learners",
        path_arg: None,
        headers,
        body: bytes,
    };
    run(&app, &ctx, fwd, &uri, op, relay).await
}

pub(crate) async fn promote(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    fwd: Option<Extension<Arc<Forwarder>>>,
    uri: Uri,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, ApiError> {
    let bytes = body::read(&headers, b, &app.opts).await?;
    let m = object(&bytes)?;
    let Some(Value::Array(ids)) = m.get("ids") else {
        return Err(ApiError::bad("ids must be an array of node ids"));
    };
    if ids.is_empty() || ids.len() > MAX_PROMOTE {
        return Err(ApiError::bad(format!(
            "ids must name 1 to {MAX_PROMOTE} learners"
        )));
    }
    let ids = ids
        .iter()
        .map(|v| node_id(Some(v)))
        .collect::<Result<Vec<u64>, ApiError>>()?;
    let relay = Relay {
        method: Method::POST,
        path: "/api/v1/cluster/voters",
        path_arg: None,
        headers,
        body: bytes,
    };
    run(&app, &ctx, fwd, &uri, MembershipOp::Promote(ids), relay).await
}

pub(crate) async fn remove(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    fwd: Option<Extension<Arc<Forwarder>>>,
    uri: Uri,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = id
        .parse::<u64>()
        .ok()
        .filter(|i| (1..=u64::from(u32::MAX)).contains(i))
        .ok_or_else(|| ApiError::bad(format!("{id:?} is not a node id")))?;
    let relay = Relay {
        method: Method::DELETE,
        path: "/api/v1/cluster/members",
        path_arg: Some(id.to_string()),
        headers,
        body: bytes::Bytes::new(),
    };
    run(&app, &ctx, fwd, &uri, MembershipOp::Remove(id), relay).await
}

/// One operation: on the group the query names (the door relayed it to that group's
/// leader); else on `default` alone without tenant groups (as before: a rerun is refused as
/// a duplicate), or on `default` and then every tenant's group (`cluster_carry`).
async fn run(
    app: &AppState,
    ctx: &RequestCtx,
    fwd: Option<Extension<Arc<Forwarder>>>,
    uri: &Uri,
    op: MembershipOp,
    relay: Relay,
) -> Result<Response, ApiError> {
    let admin = admin(app, ctx)?;
    let answer = match (group_of(uri.query())?, admin.carries()) {
        (Some(g), true) => {
            let carried = is_carried(&relay.headers);
            change_one(admin.clone(), g, op, carried).await?
        }
        (Some(g), false) => return Err(no_groups(&g)),
        (None, false) => admin.change(op).await?,
        (None, true) => {
            let answer = carry(admin.clone(), fwd.map(|f| f.0), op, relay).await?;
            if answer.get("complete") == Some(&Value::Bool(false)) {
                // Some group is behind `default`: an error status, so a script that checks
                // the status does not go on to the next step (review s31 member M2/M3);
                // the body keeps every group's outcome and names the ones behind.
                return Ok(
                    (axum::http::StatusCode::SERVICE_UNAVAILABLE, Json(answer)).into_response()
                );
            }
            answer
        }
    };
    Ok(Json(answer).into_response())
}

/// `?group=` names a tenant's group, but there are none (`cluster_tenant_groups` off): a
/// retry never helps (review s31 member L3).
fn no_groups(g: &str) -> ApiError {
    ApiError::bad(format!(
        "?group={g}: this node runs no tenant groups (cluster_tenant_groups is off)"
    ))
}

fn object(bytes: &[u8]) -> Result<serde_json::Map<String, Value>, ApiError> {
    match body::json::<Value>(bytes)? {
        Value::Object(m) => Ok(m),
        _ => Err(ApiError::bad("bad body: expected a JSON object")),
    }
}

/// A node id as the configuration takes it (`node_id`: 1 ..= 2^32 - 1).
fn node_id(v: Option<&Value>) -> Result<u64, ApiError> {
    v.and_then(Value::as_u64)
        .filter(|i| (1..=u64::from(u32::MAX)).contains(i))
        .ok_or_else(|| ApiError::bad("a node id must be a number from 1 to 4294967295"))
}

fn text<'a>(v: Option<&'a Value>, key: &str) -> Result<&'a str, ApiError> {
    let s = v
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad(format!("{key} must be a string")))?;
    // Printable ASCII only: the address is replicated into the membership for good and
    // shown in every Kafka client's Metadata and in logs (review s22 kmeta L1: control
    // characters and terminal escapes passed).
    if s.is_empty() || s.len() > MAX_ADDR || s.contains(|c: char| c == ';' || !c.is_ascii_graphic())
    {
        return Err(ApiError::bad(format!(
            "{key} must be 1 to {MAX_ADDR} bytes of printable ASCII without ';' or blanks"
        )));
    }
    Ok(s)
}

/// `host:port` with a port above 0, as `peers` takes it.
fn host_port(s: &str) -> bool {
    s.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok_and(|p| p > 0)
    })
}

fn cluster_addr(v: Option<&Value>) -> Result<String, ApiError> {
    let s = text(v, "clusterAddr")?;
    if !host_port(s) {
        return Err(ApiError::bad(format!(
            "clusterAddr {s:?} is not host:port with a port above 0"
        )));
    }
    Ok(s.to_string())
}

/// `host:port` with a port above 0, as `peer_kafka` takes it; absent or null: none.
fn kafka_addr(v: Option<&Value>) -> Result<Option<String>, ApiError> {
    if matches!(v, None | Some(Value::Null)) {
        return Ok(None);
    }
    let s = text(v, "kafkaAddr")?;
    if !host_port(s) {
        return Err(ApiError::bad(format!(
            "kafkaAddr {s:?} is not host:port with a port above 0"
        )));
    }
    Ok(Some(s.to_string()))
}

/// `http://host:port` (or `https://`), nothing after the port, as `peer_http` takes it.
fn http_addr(v: Option<&Value>) -> Result<String, ApiError> {
    let s = text(v, "httpAddr")?;
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"));
    if !rest.is_some_and(host_port) {
        return Err(ApiError::bad(format!(
            "httpAddr {s:?} is not http://host:port (a port, no path)"
        )));
    }
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Review s21 membership M3: a token scoped to a tenant never reaches the membership.
    #[test]
    fn a_tenants_token_is_refused() {
        let ctx = |tenant: &str| RequestCtx {
            tenant: tenant.into(),
            principal: None,
            access: queenmq_protocol::Access::Roles(vec![queenmq_protocol::Role::Admin]),
        };
        assert!(node_wide(&ctx(queenmq_protocol::DEFAULT_TENANT)).is_ok());
        let refused = node_wide(&ctx("acme")).unwrap_err();
        assert_eq!(refused.0.code, ErrorCode::Forbidden);
    }

    #[test]
    fn addresses_and_ids_are_checked_for_form() {
        assert_eq!(node_id(Some(&json!(4))).unwrap(), 4);
        for bad in [
            json!(0),
            json!(-1),
            json!(1u64 << 32),
            json!("4"),
            json!(1.5),
        ] {
            assert!(node_id(Some(&bad)).is_err(), "{bad}");
        }
        assert!(node_id(None).is_err());
        assert_eq!(
            cluster_addr(Some(&json!("10.0.0.4:7100"))).unwrap(),
            "10.0.0.4:7100"
        );
        for bad in [
            "10.0.0.4",
            "h:0",
            ":7100",
            "h:7100;x",
            "h: 7100",
            "",
            "http://h:1",
            "h\u{0}x:7100",
            "h\u{1b}[2J:7100",
            "hé:7100",
        ] {
            assert!(cluster_addr(Some(&json!(bad))).is_err(), "{bad}");
            assert!(kafka_addr(Some(&json!(bad))).is_err(), "{bad}");
        }
        assert!(http_addr(Some(&json!("http://10.0.0.4:6632"))).is_ok());
        assert!(http_addr(Some(&json!("https://h:443"))).is_ok());
        for bad in ["10.0.0.4:6632", "http://h", "http://h:1/x", "ftp://h:1"] {
            assert!(http_addr(Some(&json!(bad))).is_err(), "{bad}");
        }
        let long = format!("http://{}:1", "h".repeat(MAX_ADDR));
        assert!(http_addr(Some(&json!(long))).is_err());
        assert_eq!(kafka_addr(None).unwrap(), None);
        assert_eq!(kafka_addr(Some(&Value::Null)).unwrap(), None);
        assert_eq!(
            kafka_addr(Some(&json!("10.0.0.4:9092")))
                .unwrap()
                .as_deref(),
            Some("10.0.0.4:9092")
        );
        for bad in ["10.0.0.4", "http://h:1", "h:0", ""] {
            assert!(kafka_addr(Some(&json!(bad))).is_err(), "{bad}");
        }
        assert!(kafka_addr(Some(&json!(9092))).is_err());
    }
}
