//! A membership operation carried from `default` to every tenant's group
//! (`cluster_tenant_groups`; docs/cluster.md "Membership with tenant groups"). Each group is
//! changed through its own leader: here when this node leads it, else by a request relayed
//! to that leader with `?group=<name>`. The answer lists each group's outcome; a group that
//! failed does not fail the request (a rerun finishes it, the others answer `already`).

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request};
use queenmq_protocol::{check_tenant_name, ErrorCode, QueenError};
use serde_json::{json, Value};

use crate::cluster_admin::{ClusterAdmin, MembershipOp};
use crate::forward::{Forwarder, Leader};

/// The most a relayed group's answer may hold: a membership view of a handful of members.
const MAX_GROUP_ANSWER: usize = 256 << 10;

/// The `group` of a membership route's query, checked as a tenant name (it is put into the
/// relayed request's query unescaped, so only a name's own characters pass). None: absent.
pub(crate) fn group_of(query: Option<&str>) -> Result<Option<String>, QueenError> {
    let mut found = None;
    for pair in query.unwrap_or("").split('&') {
        let Some(v) = pair.strip_prefix("group=") else {
            continue;
        };
        if found.is_some() {
            return Err(QueenError::bad_request("group is named more than once"));
        }
        check_tenant_name(v).map_err(|e| QueenError::bad_request(format!("group: {e}")))?;
        found = Some(v.to_string());
    }
    Ok(found)
}

/// What a route relays to another group's leader: its method, path and body, and the
/// caller's headers (its token).
pub(crate) struct Relay {
    pub method: Method,
    pub path: &'static str,
    pub path_arg: Option<String>,
    pub headers: HeaderMap,
    pub body: bytes::Bytes,
}

/// Runs `op` on `default` (what is left of it: a rerun answers `already`), then on each
/// tenant group; `default`'s answer with `groups`, one outcome per tenant group. A refusal
/// on `default` is the request's own: no tenant group is touched then.
pub(crate) async fn carry(
    admin: &dyn ClusterAdmin,
    fwd: Option<Arc<Forwarder>>,
    tenants: Vec<String>,
    op: MembershipOp,
    relay: Relay,
) -> Result<Value, QueenError> {
    let mut answer = admin
        .change_group(queenmq_protocol::DEFAULT_TENANT, op.clone())
        .await?;
    let mut outcomes = Vec::with_capacity(tenants.len());
    for t in tenants {
        let leader = fwd.as_ref().map_or(Leader::Here, |f| f.leader_of(&t));
        let outcome = match leader {
            Leader::Here => outcome_of(admin.change_group(&t, op.clone()).await),
            Leader::Other { id, url: Some(url) } if url.starts_with("http://") => match &fwd {
                Some(f) => relayed(f, &relay, &t, id, url).await,
                None => failed(QueenError::not_leader(None)),
            },
            Leader::Other { id, .. } => failed(QueenError::unavailable(format!(
                "node {id} leads this group and this node knows no http:// address of it; \
                 rerun the route on node {id}"
            ))),
            Leader::Unknown => failed(QueenError::unavailable(
                "this group has no leader known here (an election?); rerun the route",
            )),
        };
        let mut outcome = outcome;
        if let Value::Object(m) = &mut outcome {
            m.insert("group".into(), json!(t));
        }
        outcomes.push(outcome);
    }
    if let Value::Object(m) = &mut answer {
        m.insert("groups".into(), Value::Array(outcomes));
    }
    Ok(answer)
}

fn outcome_of(r: Result<Value, QueenError>) -> Value {
    match r {
        Ok(v) => json!({"status": 200, "answer": v}),
        Err(e) => failed(e),
    }
}

fn failed(e: QueenError) -> Value {
    json!({
        "status": crate::error::status_of(e.code).as_u16(),
        "error": {"code": e.code.as_str(), "message": e.message},
    })
}

/// The route relayed to group `t`'s leader (node `id` at `url`) with `?group=t`; its answer
/// as an outcome. The relay marks the request forwarded, so that node answers it itself.
async fn relayed(f: &Forwarder, relay: &Relay, t: &str, id: u64, url: String) -> Value {
    let path = match &relay.path_arg {
        Some(arg) => format!("{}/{arg}?group={t}", relay.path),
        None => format!("{}?group={t}", relay.path),
    };
    let mut req = Request::new(Body::empty());
    *req.method_mut() = relay.method.clone();
    *req.headers_mut() = relay.headers.clone();
    match path.parse() {
        Ok(uri) => *req.uri_mut() = uri,
        Err(e) => return failed(QueenError::bad_request(format!("group path: {e}"))),
    }
    let (parts, _) = req.into_parts();
    let read = match f
        .read(&parts.headers, Body::from(relay.body.clone()), id)
        .await
    {
        Ok(r) => r,
        Err(refused) => return answer_of(refused).await,
    };
    answer_of(f.send(parts, read, id, url).await).await
}

async fn answer_of(resp: axum::response::Response) -> Value {
    let status = resp.status().as_u16();
    let body = match axum::body::to_bytes(resp.into_body(), MAX_GROUP_ANSWER).await {
        Ok(b) => b,
        Err(e) => {
            return failed(QueenError::unavailable(format!(
                "the group's leader answered {status} and its answer did not read ({e}); the \
                 change may or may not be done: rerun the route"
            )))
        }
    };
    let v: Value = serde_json::from_slice(&body).unwrap_or_else(|_| {
        json!({"code": ErrorCode::Unavailable.as_str(),
               "message": String::from_utf8_lossy(&body[..body.len().min(500)])})
    });
    if status == 200 {
        json!({"status": 200, "answer": v})
    } else {
        json!({"status": status, "error": v})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_group_is_a_tenant_name_or_absent() {
        assert_eq!(group_of(None).unwrap(), None);
        assert_eq!(group_of(Some("x=1")).unwrap(), None);
        assert_eq!(
            group_of(Some("x=1&group=tenant-a")).unwrap().as_deref(),
            Some("tenant-a")
        );
        for bad in [
            "group=",
            "group=A",
            "group=a%2Fb",
            "group=a/b",
            "group=a?b",
            "group=a&group=b",
        ] {
            assert!(group_of(Some(bad)).is_err(), "{bad}");
        }
        let long = format!("group={}", "a".repeat(10_000));
        assert!(group_of(Some(&long)).is_err());
    }

    #[tokio::test]
    async fn a_refusal_is_an_outcome_with_its_status() {
        let e = failed(QueenError::new(ErrorCode::Conflict, "busy"));
        assert_eq!(e["status"], 409);
        assert_eq!(e["error"]["code"], "conflict");
        let resp = axum::response::Response::builder()
            .status(503)
            .body(Body::from("not json"))
            .unwrap();
        let v = answer_of(resp).await;
        assert_eq!(v["status"], 503);
        assert_eq!(v["error"]["message"], "not json");
        let resp = axum::response::Response::builder()
            .status(200)
            .body(Body::from(r#"{"already":true}"#))
            .unwrap();
        assert_eq!(answer_of(resp).await["answer"]["already"], true);
        let huge = axum::response::Response::builder()
            .status(200)
            .body(Body::from(vec![b'x'; MAX_GROUP_ANSWER + 1]))
            .unwrap();
        assert_eq!(answer_of(huge).await["status"], 503);
    }
}
