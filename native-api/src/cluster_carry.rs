//! A membership operation carried from `default` to every tenant's group
//! (`cluster_tenant_groups`; docs/cluster.md "Membership with tenant groups"). Each group is
//! changed through its own leader: here when this node leads it, else by a request relayed
//! to that leader with `?group=<name>`. The answer lists each group's outcome; a group that
//! failed does not fail the request (a rerun finishes it, the others answer `already`).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request};
use queenmq_protocol::{check_tenant_name, ErrorCode, QueenError};
use serde_json::{json, Value};

use crate::cluster_admin::{ClusterAdmin, MembershipOp};
use crate::forward::{Forwarder, Leader, CARRIED, FORWARDED};

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

/// The group whose leader the door relays a request to: the one a membership route names
/// with `?group=`, else the caller's `tenant`'s. A malformed name is the handler's to refuse.
pub(crate) fn routed_group(path: &str, query: Option<&str>, tenant: String) -> String {
    match path.starts_with("/api/v1/cluster") {
        true => group_of(query).ok().flatten().unwrap_or(tenant),
        false => tenant,
    }
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

/// How long one tenant group's step may take before the carry goes on to the next one,
/// reporting it behind (review s31 member M6): one stuck group (a stalled disk, a dead
/// leader's connect) must not keep the others from the change. A step cut here may still
/// finish (a joint change is owned by a task of its own); a rerun answers `already` then.
pub(crate) const GROUP_BOUND: Duration = Duration::from_secs(10);

/// `default`'s step may take this many group bounds (30 s): a joint change commits twice,
/// and past it no tenant group is touched, so it is given more than a group's step.
const DEFAULT_STEPS: u32 = 3;

/// The whole carry may take this many group bounds (2 min), `default`'s step included:
/// the groups not reached by then are listed behind and the lock is freed (review s33 t
/// M3: 500 hung groups held it 500 x 10 s).
const TOTAL_STEPS: u32 = 12;

/// Runs `op` on `default` (what is left of it: a rerun answers `already`), then on each
/// tenant group, listed after `default`'s change (a tenant declared meanwhile names the
/// new voters already, or is listed). `default`'s answer with `groups`, one outcome per
/// tenant group, `complete` and `behind` (the groups whose outcome is not 200, and
/// `<listing>` when the groups did not list). A refusal on `default` is the request's own:
/// no tenant group is touched then.
/// The carry runs in a task of its own, which holds the carry lock (review s32 t2 L1): a
/// client that leaves (or a relay that times out) drops only its wait for the answer, so the
/// lock is held until the last group's step is done, and a second route meanwhile is still
/// refused busy.
pub(crate) async fn carry(
    admin: Arc<dyn ClusterAdmin>,
    fwd: Option<Arc<Forwarder>>,
    op: MembershipOp,
    relay: Relay,
) -> Result<Value, QueenError> {
    carry_bounded(admin, fwd, op, relay, GROUP_BOUND).await
}

async fn carry_bounded(
    admin: Arc<dyn ClusterAdmin>,
    fwd: Option<Arc<Forwarder>>,
    op: MembershipOp,
    relay: Relay,
    bound: Duration,
) -> Result<Value, QueenError> {
    owned(async move { carry_within(&*admin, fwd, op, relay, bound).await }).await
}

/// A `?group=` change (`group`, `op`): under the carry lock, as a carry is (review s32 t2
/// L1: it ran beside a carry and could interleave a remove and a re-add of one id), in a
/// task of its own that holds it. `carried`: the request is a carry's own step relayed to
/// this group's leader (`is_carried`), which runs under the carry's lock on its node and
/// must not wait on this one (two nodes carrying at once would refuse each other's steps).
pub(crate) async fn change_one(
    admin: Arc<dyn ClusterAdmin>,
    group: String,
    op: MembershipOp,
    carried: bool,
) -> Result<Value, QueenError> {
    owned(async move {
        let _held = match carried {
            true => None,
            false => Some(hold(&*admin).await?),
        };
        admin.change_group(&group, op).await
    })
    .await
}

/// Runs `work` in a task of its own; this future only waits for its answer.
async fn owned(
    work: impl std::future::Future<Output = Result<Value, QueenError>> + Send + 'static,
) -> Result<Value, QueenError> {
    tokio::spawn(work).await.unwrap_or_else(|e| {
        Err(QueenError::unavailable(format!(
            "the membership change's task stopped ({e}); it may or may not be done: rerun the \
             route"
        )))
    })
}

/// The carry lock, waited for at most `CARRY_WAIT`; then 409 busy, nothing changed.
async fn hold(admin: &dyn ClusterAdmin) -> Result<tokio::sync::MutexGuard<'_, ()>, QueenError> {
    tokio::time::timeout(CARRY_WAIT, admin.carry_lock().lock())
        .await
        .map_err(|_| {
            QueenError::new(
                ErrorCode::Conflict,
                "busy, retry: another membership route is being carried to the groups on this \
                 node; nothing was changed by this one",
            )
        })
}

/// Whether a `?group=` request is a carry's relayed step: relayed (`FORWARDED`) and marked
/// [`CARRIED`], which only a carry's own relay sets (review s33 t L1: a client's
/// `carried=1` in the query was relayed as sent and skipped the lock). A request sent
/// straight to the group's leader with both headers forged still skips it: nodes do not
/// authenticate each other's HTTP requests (docs/cluster.md).
pub(crate) fn is_carried(headers: &HeaderMap) -> bool {
    headers.contains_key(FORWARDED) && headers.get(CARRIED).is_some_and(|v| v == "1")
}

async fn carry_within(
    admin: &dyn ClusterAdmin,
    fwd: Option<Arc<Forwarder>>,
    op: MembershipOp,
    relay: Relay,
    bound: Duration,
) -> Result<Value, QueenError> {
    let _carrying = hold(admin).await?;
    let remove = match &op {
        MembershipOp::Remove(id) => Some(*id),
        _ => None,
    };
    // The whole carry is bounded (review s33 t M3): it holds the carry lock, which no
    // client can release, so a step that never ends (a leader cut off from its majority
    // keeps leading and its change waits on a commit that never comes) would refuse every
    // later membership route on this node until a restart.
    let deadline = tokio::time::Instant::now() + bound.saturating_mul(TOTAL_STEPS);
    let mut answer = tokio::time::timeout(
        bound.saturating_mul(DEFAULT_STEPS),
        admin.change_group(queenmq_protocol::DEFAULT_TENANT, op.clone()),
    )
    .await
    .map_err(|_| {
        QueenError::unavailable(format!(
            "the change on default did not finish within {} s; it may or may not be done (a \
             joint change goes on by itself); no tenant group was changed: rerun the route",
            bound.saturating_mul(DEFAULT_STEPS).as_secs()
        ))
    })??;
    let mut outcomes = Vec::new();
    let mut behind = Vec::new();
    let tenants = match admin.tenant_groups().await {
        Some(Ok(t)) => t,
        Some(Err(e)) => {
            let mut o = failed(e);
            o["group"] = json!(LISTING);
            outcomes.push(o);
            behind.push(LISTING.to_string());
            Vec::new()
        }
        None => Vec::new(),
    };
    for t in tenants {
        let leader = fwd.as_ref().map_or(Leader::Here, |f| f.leader_of(&t));
        let step = async {
            match leader {
                Leader::Here => outcome_of(admin.change_group(&t, op.clone()).await),
                Leader::Other { id, url: Some(url) } if url.starts_with("http://") => match &fwd {
                    Some(f) => relayed(f, &relay, &t, id, url).await,
                    None => failed(QueenError::not_leader(None)),
                },
                Leader::Other { id, url } => failed(QueenError::unavailable(unreachable(
                    &relay,
                    &t,
                    id,
                    url.as_deref(),
                ))),
                Leader::Unknown => failed(QueenError::unavailable(
                    "this group has no leader known here (an election?); rerun the route",
                )),
            }
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let mut outcome = match left.is_zero() {
            true => failed(QueenError::unavailable(format!(
                "not reached: the carry's {} s were spent on the groups before it; nothing \
                 was changed here by this route: rerun the route",
                bound.saturating_mul(TOTAL_STEPS).as_secs()
            ))),
            false => tokio::time::timeout(bound.min(left), step)
                .await
                .unwrap_or_else(|_| {
                    failed(QueenError::unavailable(format!(
                        "this group's step did not finish within its bound ({} s, or what \
                         was left of the carry's {} s); the carry went on; the change may or \
                         may not be done here: rerun the route",
                        bound.as_secs(),
                        bound.saturating_mul(TOTAL_STEPS).as_secs()
                    )))
                }),
        };
        if outcome["status"] != 200 {
            behind.push(t.clone());
        }
        if let Value::Object(m) = &mut outcome {
            m.insert("group".into(), json!(t));
        }
        outcomes.push(outcome);
    }
    if let Some(id) = remove {
        if behind.is_empty() && nowhere(&answer, &outcomes) && !admin.was_member(id).await {
            // In no group, and no membership kept here ever held it: a mistyped id, not a
            // removal done (review s31 member L2).
            return Err(QueenError::new(
                ErrorCode::NotFound,
                format!(
                    "node {id} is a member of no group, and this node's recent membership \
                     history holds no removal of it"
                ),
            ));
        }
    }
    if let Value::Object(m) = &mut answer {
        m.insert("groups".into(), Value::Array(outcomes));
        m.insert("complete".into(), json!(behind.is_empty()));
        if !behind.is_empty() {
            m.insert("code".into(), json!(ErrorCode::Unavailable.as_str()));
            m.insert(
                "error".into(),
                json!(format!(
                    "the change is done on default but not (or not known to be) on: {}; \
                     rerun the route (done groups answer `already`)",
                    behind.join(", ")
                )),
            );
        }
        m.insert("behind".into(), json!(behind));
    }
    Ok(answer)
}

/// Whether `default` (`answer`) and every group's outcome found nothing to do.
fn nowhere(answer: &Value, outcomes: &[Value]) -> bool {
    answer["already"] == true && outcomes.iter().all(|o| o["answer"]["already"] == true)
}

/// How long a route waits for another route's carry on this node before it is refused.
const CARRY_WAIT: Duration = Duration::from_secs(1);

/// The `group` of the outcome that stands for the tenants' listing when it failed.
const LISTING: &str = "<listing>";

/// Why group `t`, led by node `id` at `url` (not http://, or none known), was not reached,
/// and what works: the route with `?group=` sent to that node itself. Sent without it, the
/// route is relayed to `default`'s leader again and fails the same way (review s31 M7).
fn unreachable(relay: &Relay, t: &str, id: u64, url: Option<&str>) -> String {
    let path = match &relay.path_arg {
        Some(arg) => format!("{}/{arg}?group={t}", relay.path),
        None => format!("{}?group={t}", relay.path),
    };
    let at = url.map_or("its address (not known here)".to_string(), |u| {
        u.to_string()
    });
    format!(
        "node {id} leads this group and this node relays over http:// only; send {} {path} \
         with the same body to node {id} at {at}",
        relay.method
    )
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
    answer_of(f.send(parts, read, id, url, true).await).await
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

    #[test]
    fn a_membership_route_naming_a_group_goes_to_that_groups_leader() {
        let r = |p: &str, q: Option<&str>| routed_group(p, q, "caller".into());
        assert_eq!(r("/api/v1/cluster/members/3", Some("group=acme")), "acme");
        assert_eq!(r("/api/v1/cluster", Some("group=acme")), "acme");
        assert_eq!(r("/api/v1/cluster/voters", None), "caller");
        // Malformed: left to the handler's refusal, routed as the caller's.
        assert_eq!(r("/api/v1/cluster/voters", Some("group=A")), "caller");
        // Only the membership routes: another route's `group` is not a tenant's group.
        assert_eq!(r("/api/v1/queues/q", Some("group=acme")), "caller");
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

    /// A fake broker: `default` and tenant groups that answer, fail or hang; the listing
    /// gains `late` once `default` has changed (a tenant declared during the change).
    #[derive(Debug, Default)]
    struct Fake {
        changed: std::sync::Mutex<Vec<String>>,
        listing_fails: bool,
        /// Every group answers `already` (the id is in none), over the one tenant `ok`.
        nowhere: bool,
        /// What `was_member` answers.
        member_before: bool,
        carrying: tokio::sync::Mutex<()>,
        /// `default`'s step never ends (a leader cut off from its majority).
        default_hangs: bool,
        /// The listing is this many groups whose steps never end.
        hung: usize,
    }

    impl ClusterAdmin for Fake {
        fn view(&self) -> crate::cluster_admin::Answer<'_> {
            Box::pin(async { Ok(json!({})) })
        }
        fn change(&self, _: MembershipOp) -> crate::cluster_admin::Answer<'_> {
            Box::pin(async { Ok(json!({})) })
        }
        fn carries(&self) -> bool {
            true
        }
        fn tenant_groups(&self) -> crate::cluster_admin::Listing<'_> {
            Box::pin(async move {
                if self.listing_fails {
                    return Some(Err(QueenError::unavailable("no listing")));
                }
                if self.nowhere {
                    return Some(Ok(vec!["ok".to_string()]));
                }
                if self.hung > 0 {
                    return Some(Ok((0..self.hung).map(|i| format!("hangs-{i}")).collect()));
                }
                let done = self.changed.lock().unwrap();
                let mut t = vec!["hangs".to_string(), "ok".into(), "refuses".into()];
                if done.iter().any(|g| g == "default") {
                    t.push("late".into());
                }
                Some(Ok(t))
            })
        }
        fn was_member(&self, _: u64) -> crate::cluster_admin::Known<'_> {
            Box::pin(async move { self.member_before })
        }
        fn carry_lock(&self) -> &tokio::sync::Mutex<()> {
            &self.carrying
        }
        fn view_group<'a>(&'a self, _: &'a str) -> crate::cluster_admin::Answer<'a> {
            Box::pin(async { Ok(json!({})) })
        }
        fn change_group<'a>(
            &'a self,
            group: &'a str,
            _: MembershipOp,
        ) -> crate::cluster_admin::Answer<'a> {
            Box::pin(async move {
                if self.nowhere {
                    return Ok(json!({"already": true}));
                }
                match group {
                    "default" if self.default_hangs => std::future::pending().await,
                    g if g.starts_with("hangs") => std::future::pending().await,
                    "refuses" => Err(QueenError::new(ErrorCode::Conflict, "in progress")),
                    _ => {
                        self.changed.lock().unwrap().push(group.to_string());
                        Ok(json!({"already": false}))
                    }
                }
            })
        }
    }

    fn relay() -> Relay {
        Relay {
            method: Method::DELETE,
            path: "/api/v1/cluster/members",
            path_arg: Some("3".into()),
            headers: HeaderMap::new(),
            body: bytes::Bytes::new(),
        }
    }

    #[tokio::test]
    async fn a_hung_or_failed_group_is_behind_and_the_others_are_changed() {
        let fake = Fake::default();
        let started = std::time::Instant::now();
        let a = carry_within(
            &fake,
            None,
            MembershipOp::Remove(3),
            relay(),
            Duration::from_millis(200),
        )
        .await
        .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the hung group blocked"
        );
        assert_eq!(a["complete"], false, "{a}");
        assert_eq!(a["behind"], json!(["hangs", "refuses"]), "{a}");
        assert_eq!(a["code"], "unavailable");
        assert!(
            a["error"].as_str().unwrap().contains("hangs, refuses"),
            "{a}"
        );
        let groups = a["groups"].as_array().unwrap();
        assert_eq!(groups.len(), 4, "{a}");
        assert_eq!(groups[0]["status"], 503);
        assert_eq!(groups[2]["status"], 409);
        // The later groups were reached past the hung one, and the group listed only once
        // `default` had changed is carried too.
        assert_eq!(
            *fake.changed.lock().unwrap(),
            vec!["default".to_string(), "ok".into(), "late".into()]
        );
    }

    /// Review s33 t M3: `default`'s step never ends. The carry answers within its bound
    /// (503, may or may not be done), touches no tenant group, and frees the lock.
    #[tokio::test]
    async fn a_default_step_that_never_ends_frees_the_lock_within_its_bound() {
        let fake = Arc::new(Fake {
            default_hangs: true,
            ..Fake::default()
        });
        let bound = Duration::from_millis(100);
        let first = carry_bounded(fake.clone(), None, MembershipOp::Remove(3), relay(), bound);
        let first = tokio::time::timeout(Duration::from_secs(10), first).await;
        let e = first.expect("the carry held on").unwrap_err();
        assert_eq!(e.code, ErrorCode::Unavailable, "{e:?}");
        assert!(
            e.message.contains("may or may not be done"),
            "{}",
            e.message
        );
        assert!(fake.changed.lock().unwrap().is_empty());
        let a = change_one(fake.clone(), "solo".into(), MembershipOp::Remove(4), false).await;
        assert!(a.is_ok(), "the lock was kept: {a:?}");
    }

    /// Review s33 t M3: many groups whose steps never end. The carry ends by its total
    /// bound, lists every group behind (those past the bound not tried), frees the lock.
    #[tokio::test]
    async fn many_hung_groups_end_the_carry_by_its_total_bound() {
        let fake = Arc::new(Fake {
            hung: 40,
            ..Fake::default()
        });
        let bound = Duration::from_millis(100);
        let started = std::time::Instant::now();
        let first = carry_bounded(fake.clone(), None, MembershipOp::Remove(3), relay(), bound);
        let a = tokio::time::timeout(Duration::from_secs(30), first)
            .await
            .expect("the carry held on")
            .unwrap();
        // 12 bounds, not 40.
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(a["complete"], false, "{a}");
        assert_eq!(a["behind"].as_array().unwrap().len(), 40, "{a}");
        let last = &a["groups"][39]["error"]["message"];
        assert!(last.as_str().unwrap().contains("not reached"), "{a}");
        let a = change_one(fake.clone(), "solo".into(), MembershipOp::Remove(4), false).await;
        assert!(a.is_ok(), "the lock was kept: {a:?}");
    }

    #[tokio::test]
    async fn a_listing_that_fails_is_behind_not_a_silent_skip() {
        let fake = Arc::new(Fake {
            listing_fails: true,
            ..Fake::default()
        });
        let a = carry(fake, None, MembershipOp::Remove(3), relay())
            .await
            .unwrap();
        assert_eq!(a["complete"], false, "{a}");
        assert_eq!(a["behind"], json!([LISTING]), "{a}");
    }

    #[tokio::test]
    async fn a_second_route_during_a_carry_is_refused_busy_and_changes_nothing() {
        let fake = Arc::new(Fake::default());
        let first = carry_within(
            &*fake,
            None,
            MembershipOp::Remove(3),
            relay(),
            Duration::from_secs(3),
        );
        let second = async {
            // Once the first holds the carry (it is waiting on the hung group).
            tokio::time::sleep(Duration::from_millis(200)).await;
            let started = std::time::Instant::now();
            let r = carry(fake.clone(), None, MembershipOp::Remove(4), relay()).await;
            (r, started.elapsed())
        };
        let (first, (second, waited)) = tokio::join!(first, second);
        assert_eq!(first.unwrap()["behind"], json!(["hangs", "refuses"]));
        let e = second.unwrap_err();
        assert_eq!(e.code, ErrorCode::Conflict, "{e:?}");
        assert!(e.message.contains("busy, retry"), "{}", e.message);
        assert!(waited < Duration::from_secs(2), "waited {waited:?}");
        // Only the first route's steps ran (default, ok, late), none of the second's.
        assert_eq!(fake.changed.lock().unwrap().len(), 3);
        // Once the first is done, the next route runs.
        let again = carry_within(
            &*fake,
            None,
            MembershipOp::Remove(4),
            relay(),
            Duration::from_millis(200),
        );
        let again = tokio::time::timeout(Duration::from_secs(30), again).await;
        assert!(again.is_ok_and(|a| a.is_ok()));
    }

    #[tokio::test]
    async fn removing_an_id_no_group_holds_nor_ever_held_is_not_found() {
        let fake = Arc::new(Fake {
            nowhere: true,
            ..Fake::default()
        });
        let e = carry(fake, None, MembershipOp::Remove(33), relay())
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::NotFound, "{e:?}");
        assert!(e.message.contains("node 33"), "{}", e.message);
        // A removal done before (the kept history holds the id): `already`, complete.
        let fake = Arc::new(Fake {
            nowhere: true,
            member_before: true,
            ..Fake::default()
        });
        let a = carry(fake, None, MembershipOp::Remove(3), relay())
            .await
            .unwrap();
        assert_eq!(a["complete"], true, "{a}");
        // Other operations are not judged so: a promotion of voters is `already`.
        let fake = Arc::new(Fake {
            nowhere: true,
            ..Fake::default()
        });
        let a = carry(fake, None, MembershipOp::Promote(vec![1]), relay())
            .await
            .unwrap();
        assert_eq!(a["complete"], true, "{a}");
    }

    /// Waits (at most 10 s) until `fake` has changed `group`.
    async fn changed(fake: &Fake, group: &str) -> bool {
        for _ in 0..200 {
            if fake.changed.lock().unwrap().iter().any(|g| g == group) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Review s32 t2 L1: the first route's client leaves once `default` changed, while its
    /// carry is still in the hung group's step; the lock stays held by the carry, so the
    /// second route is refused, and the first route's later groups are still changed.
    #[tokio::test]
    async fn a_route_whose_client_left_holds_the_carry_until_its_last_group() {
        let fake = Arc::new(Fake::default());
        let first = carry_bounded(
            fake.clone(),
            None,
            MembershipOp::Remove(3),
            relay(),
            Duration::from_secs(3),
        );
        // The client leaves once `default` has changed: its future is dropped.
        let cut = async {
            tokio::select! {
                _ = first => panic!("the first route ended before its hung group's bound"),
                seen = changed(&fake, "default") => seen,
            }
        };
        assert!(cut.await, "default was never changed");
        let e = carry(fake.clone(), None, MembershipOp::Remove(4), relay())
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::Conflict, "{e:?}");
        // The first route's carry went on past the hung group to the later ones.
        assert!(
            changed(&fake, "late").await,
            "the carry stopped with its client"
        );
        assert_eq!(
            *fake.changed.lock().unwrap(),
            vec!["default".to_string(), "ok".into(), "late".into()]
        );
    }

    /// Review s32 t2 L1: a `?group=` change waits on the carry lock like a route, unless it
    /// is a carry's own relayed step.
    #[tokio::test]
    async fn a_group_change_during_a_carry_is_busy_unless_it_is_the_carrys_step() {
        let fake = Arc::new(Fake::default());
        let first = tokio::spawn(carry_bounded(
            fake.clone(),
            None,
            MembershipOp::Remove(3),
            relay(),
            Duration::from_secs(3),
        ));
        assert!(changed(&fake, "default").await);
        let e = change_one(fake.clone(), "solo".into(), MembershipOp::Remove(4), false)
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::Conflict, "{e:?}");
        assert!(!fake.changed.lock().unwrap().iter().any(|g| g == "solo"));
        let a = change_one(fake.clone(), "solo".into(), MembershipOp::Remove(4), true).await;
        assert!(a.is_ok(), "{a:?}");
        assert!(fake.changed.lock().unwrap().iter().any(|g| g == "solo"));
        assert!(first.await.unwrap().is_ok());
        // Once the carry is done, a client's `?group=` change runs.
        let a = change_one(fake.clone(), "solo2".into(), MembershipOp::Remove(4), false).await;
        assert!(a.is_ok(), "{a:?}");
    }

    #[test]
    fn only_a_relayed_and_marked_request_is_a_carrys_step() {
        let h = |pairs: &[(&axum::http::HeaderName, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert((*k).clone(), v.parse().unwrap());
            }
            m
        };
        assert!(is_carried(&h(&[(&FORWARDED, "4"), (&CARRIED, "1")])));
        assert!(!is_carried(&h(&[(&CARRIED, "1")])));
        assert!(!is_carried(&h(&[(&FORWARDED, "4")])));
        assert!(!is_carried(&h(&[(&FORWARDED, "4"), (&CARRIED, "10")])));
        assert!(!is_carried(&HeaderMap::new()));
    }

    /// Review s33 t L1: a client's mark is never relayed by a door; only the carry sets it.
    #[test]
    fn a_door_never_relays_a_clients_carried_mark() {
        let mut client = HeaderMap::new();
        client.insert(CARRIED, "1".parse().unwrap());
        client.insert(FORWARDED, "9".parse().unwrap());
        let out = crate::forward::relayed_headers(&client, 4);
        assert!(!out.contains_key(CARRIED), "{out:?}");
        assert!(!is_carried(&out));
    }

    #[test]
    fn an_unreached_leader_is_named_with_the_route_that_works() {
        let m = unreachable(&relay(), "acme", 2, Some("https://n2:8443"));
        assert!(
            m.contains("DELETE /api/v1/cluster/members/3?group=acme")
                && m.contains("node 2 at https://n2:8443"),
            "{m}"
        );
        assert!(unreachable(&relay(), "acme", 2, None).contains("not known here"));
    }
}
