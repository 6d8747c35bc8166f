//! What a cluster follower does with a request at the door, decided from the node's Raft
//! role before anything reaches the engine: answer it here, relay it to the leader, or refuse
//! it as the engine would (503 `not_leader`). Pure: no I/O, so every branch is unit-tested.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use queenmq_protocol::{limits, CommandClass, LeaderHint, QueenError};

/// Carried by a relayed request, naming the node that relayed it. A node that does not lead
/// answers such a request itself (503 `not_leader`) instead of relaying it again, so a
/// request crosses at most one hop whatever the nodes believe about the leader. A client
/// that sets it only turns forwarding off for its own request.
pub const FORWARDED: HeaderName = HeaderName::from_static("x-queen-forwarded");

/// Set by a membership carry on its step relayed to a tenant group's leader (with
/// [`FORWARDED`]): that step runs under the carry's lock on the carrying node. Never copied
/// from a client by [`relayed_headers`], so a client's request relayed by a door never has it
/// (review s33 t L1: the mark was a query parameter, which the door relays as sent).
pub const CARRIED: HeaderName = HeaderName::from_static("x-queen-carried");

/// Ephemeral queues live in one node's memory and are never replicated: their routes are
/// answered by the node the client reached (docs/cluster.md).
const NODE_LOCAL_PREFIX: &str = "/api/v1/ephemeral/";

/// The request headers the leader needs to judge the request as the client sent it: its
/// body's type and encoding and the caller's token (which also names the tenant). Everything
/// else (hop-by-hop headers, the client's `host`, cookies) stays on this hop.
const RELAYED_REQUEST_HEADERS: [HeaderName; 3] = [
    axum::http::header::CONTENT_TYPE,
    axum::http::header::CONTENT_ENCODING,
    axum::http::header::AUTHORIZATION,
];

/// The answer headers handed back: the body's type, and when to retry a 503/507.
pub(crate) const RELAYED_ANSWER_HEADERS: [HeaderName; 2] = [
    axum::http::header::CONTENT_TYPE,
    axum::http::header::RETRY_AFTER,
];

/// Who leads the group of a request's tenant, as this node knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leader {
    /// This node leads, or the tenant's group is not clustered, or its state is unknown here
    /// (a group being rebuilt): the request is answered here as before.
    Here,
    /// Another node leads; its HTTP address when `peer_http` names it.
    Other { id: u64, url: Option<String> },
    /// No leader is known (an election is running).
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Local,
    Forward { id: u64, url: String },
    Refuse(QueenError),
}

/// The decision for a request of command class `class` on `path`. Node-local rows (probes,
/// metrics) and the ephemeral routes are answered here, without asking who leads; so is
/// everything while this node leads. A request that was relayed already, or whose leader
/// cannot be reached over plain HTTP, gets the engine's refusal without going through the
/// engine.
pub fn decide(
    class: CommandClass,
    path: &str,
    forwarded: bool,
    leader: impl FnOnce() -> Leader,
) -> Decision {
    if class == CommandClass::NodeLocal || path.starts_with(NODE_LOCAL_PREFIX) {
        return Decision::Local;
    }
    match leader() {
        Leader::Here => Decision::Local,
        Leader::Unknown => Decision::Refuse(QueenError::not_leader(None)),
        Leader::Other { id, url } => match url {
            // Only plain HTTP is relayed: this node has no client certificate store for a
            // leader served over TLS (docs/cluster.md).
            Some(u) if !forwarded && u.starts_with("http://") => Decision::Forward { id, url: u },
            url => Decision::Refuse(QueenError::not_leader(Some(LeaderHint { id, url }))),
        },
    }
}

/// The headers of the relayed request: the ones the leader needs, copied as sent, and
/// [`FORWARDED`] naming this node. Any `x-queen-forwarded` of the client is not copied (the
/// request would not be relayed had it carried one).
pub fn relayed_headers(client: &HeaderMap, node_id: u64) -> HeaderMap {
    let mut out = HeaderMap::new();
    for name in RELAYED_REQUEST_HEADERS {
        for v in client.get_all(&name) {
            out.append(name.clone(), v.clone());
        }
    }
    out.insert(FORWARDED, HeaderValue::from(node_id));
    out
}

/// How long the leader may take to answer a relayed request: `margin` (the leader's own
/// bound on an answer, and the way there and back) plus the long poll the request asks for,
/// read as the leader's pop handler reads it (`wait=true` with `timeout` ms, 30 s when
/// absent, at most [`limits::MAX_WAIT_MS`]). A malformed value adds nothing: the leader
/// refuses it at once.
pub fn answer_timeout(path: &str, query: Option<&str>, margin: Duration) -> Duration {
    if !path.starts_with("/api/v1/pop") {
        return margin;
    }
    let mut wait = false;
    let mut timeout_ms = 30_000u64;
    // Decoded as the pop route's own query parser decodes it (review s19 forward L1:
    // `wait=%74rue` is a long poll at the leader, so it must be one here too).
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match k.as_ref() {
            "wait" => wait = v == "true" || v == "1",
            "timeout" => timeout_ms = v.parse().unwrap_or(0),
            _ => {}
        }
    }
    if !wait {
        return margin;
    }
    margin.saturating_add(Duration::from_millis(timeout_ms.min(limits::MAX_WAIT_MS)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use queenmq_protocol::ErrorCode;

    fn other(url: Option<&str>) -> Leader {
        Leader::Other {
            id: 1,
            url: url.map(str::to_string),
        }
    }

    const URL: &str = "http://10.0.0.1:6632";

    #[test]
    fn a_follower_forwards_every_engine_request_to_a_known_leader() {
        for class in [
            CommandClass::ReplicatedWrite,
            CommandClass::Consumption,
            CommandClass::LinearizableRead,
        ] {
            assert_eq!(
                decide(class, "/api/v1/push", false, || other(Some(URL))),
                Decision::Forward {
                    id: 1,
                    url: URL.into()
                }
            );
        }
    }

    #[test]
    fn a_leader_and_node_local_routes_answer_here() {
        let push = CommandClass::ReplicatedWrite;
        assert_eq!(
            decide(push, "/api/v1/push", false, || Leader::Here),
            Decision::Local
        );
        assert_eq!(
            decide(push, "/api/v1/push", true, || Leader::Here),
            Decision::Local,
            "a relayed request reaching the leader is served"
        );
        assert_eq!(
            decide(CommandClass::NodeLocal, "/health", false, || unreachable!()),
            Decision::Local
        );
        assert_eq!(
            decide(push, "/api/v1/ephemeral/push", false, || unreachable!()),
            Decision::Local,
            "ephemeral queues are node-local"
        );
    }

    #[test]
    fn a_relayed_request_is_never_relayed_again() {
        let d = decide(CommandClass::Consumption, "/api/v1/ack", true, || {
            other(Some(URL))
        });
        let Decision::Refuse(e) = d else {
            panic!("{d:?}")
        };
        assert_eq!(e.code, ErrorCode::NotLeader);
        let hint = e.leader.as_ref().map(|l| (l.id, l.url.as_deref()));
        assert_eq!(hint, Some((1, Some(URL))));
    }

    #[test]
    fn without_a_reachable_leader_the_follower_refuses_as_the_engine_would() {
        for (leader, hint) in [
            (Leader::Unknown, None),
            (other(None), Some((1, None))),
            (
                other(Some("https://10.0.0.1:6632")),
                Some((1, Some("https://10.0.0.1:6632"))),
            ),
        ] {
            let d = decide(CommandClass::ReplicatedWrite, "/api/v1/kv", false, || {
                leader
            });
            let Decision::Refuse(e) = d else {
                panic!("{d:?}")
            };
            assert_eq!(e.code, ErrorCode::NotLeader);
            let got = e.leader.as_ref().map(|l| (l.id, l.url.as_deref()));
            assert_eq!(got, hint);
        }
    }

    #[test]
    fn only_the_headers_the_leader_needs_are_relayed() {
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("application/json"));
        h.insert("content-encoding", HeaderValue::from_static("gzip"));
        h.insert("authorization", HeaderValue::from_static("Bearer t"));
        h.insert("host", HeaderValue::from_static("follower:6632"));
        h.insert("connection", HeaderValue::from_static("keep-alive"));
        h.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        h.insert("cookie", HeaderValue::from_static("a=b"));
        h.insert(FORWARDED, HeaderValue::from_static("7"));
        let out = relayed_headers(&h, 2);
        let mut names: Vec<&str> = out.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "authorization",
                "content-encoding",
                "content-type",
                "x-queen-forwarded"
            ]
        );
        assert_eq!(out[FORWARDED], "2");
        assert_eq!(out["authorization"], "Bearer t");
    }

    #[test]
    fn a_long_poll_gets_its_own_wait_on_top_of_the_margin() {
        let m = Duration::from_secs(35);
        let pop = "/api/v1/pop/queue/q";
        assert_eq!(answer_timeout("/api/v1/push", None, m), m);
        assert_eq!(answer_timeout(pop, Some("wait=false&timeout=9000"), m), m);
        assert_eq!(
            answer_timeout(pop, Some("batch=5&wait=true&timeout=9000"), m),
            m + Duration::from_secs(9)
        );
        assert_eq!(
            answer_timeout("/api/v1/pop", Some("wait=true"), m),
            m + Duration::from_secs(30)
        );
        assert_eq!(
            answer_timeout(pop, Some("wait=true&timeout=999999999"), m),
            m + Duration::from_millis(limits::MAX_WAIT_MS)
        );
        assert_eq!(answer_timeout(pop, Some("wait=1&timeout=x"), m), m);
        // Percent-encoded as the route decodes it (review s19 forward L1).
        assert_eq!(
            answer_timeout(pop, Some("wait=%74rue&timeout=%39000"), m),
            m + Duration::from_secs(9)
        );
    }
}
