//! The broker's side of `/api/v1/cluster` (native-api `cluster_admin`): the `default`
//! group's membership read from its Raft node and changed through it (docs/cluster.md
//! "Membership operations"). Membership is openraft's own entry: nothing of the engine's
//! state or checkpoint changes.

use std::collections::BTreeSet;
use std::sync::Arc;

use queenmq_native_api::cluster_admin::{Answer, ClusterAdmin, Known, Listing, MembershipOp};
use queenmq_protocol::{ErrorCode, QueenError, DEFAULT_TENANT};
use queenmq_raft::{Change, ChangeRefusal, MembershipView, RaftError, RaftNode};
use serde_json::{json, Value};

use crate::group::Registry;

pub struct GroupMembership {
    pub groups: Arc<Registry>,
    pub node_id: u64,
    /// `peer_http`: the first boot's members' HTTP addresses, which their membership entries
    /// do not carry; a learner added at one of them is a duplicate (review s21 M10).
    pub peer_http: std::collections::BTreeMap<u64, String>,
    /// `cluster_tenant_groups`: the routes carry each change to every tenant's group.
    pub tenant_groups: bool,
    /// The node's data directory, where the hosted records of the tenants' groups are.
    pub data_dir: std::path::PathBuf,
    /// Held by a route's carry to the groups (`ClusterAdmin::carry_lock`).
    pub carrying: tokio::sync::Mutex<()>,
}

/// How long the tenants' listing waits for `default`'s read barrier (its leadership
/// confirmed by a majority and everything it committed applied): past it the listing is
/// behind and the route answers 503, never a 200 that skipped a tenant.
const BARRIER_BOUND: std::time::Duration = std::time::Duration::from_secs(5);

impl std::fmt::Debug for GroupMembership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupMembership")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

impl GroupMembership {
    fn node(&self) -> Result<RaftNode, QueenError> {
        self.node_of(DEFAULT_TENANT)
    }

    fn node_of(&self, name: &str) -> Result<RaftNode, QueenError> {
        let group = self.groups.get(name).ok_or_else(|| {
            QueenError::unavailable(format!(
                "the group of {name:?} is not running on this node (not declared, or still \
                 starting); retry"
            ))
        })?;
        let live = group.live.get().map_err(|why| {
            QueenError::unavailable(format!(
                "the group of {name:?} is not running: {why}; retry"
            ))
        })?;
        Ok(live.node)
    }

    /// What is left of `op` on `node`'s group, run; the group's view with `already` (nothing
    /// was left) or the change's index and term.
    async fn change_left(&self, node: &RaftNode, op: MembershipOp) -> Result<Value, QueenError> {
        // Only the group's leader may judge what is left: an outsider's view is empty and a
        // follower's may lag, so "already" there would report a change never made (review
        // s32 t2 H1). Refused before anything runs, naming the leader this node knows.
        let status = node.status();
        if status.role != "leader" {
            return Err(not_led_here(status.leader));
        }
        let mut view = node.membership().await.map_err(answer_error)?;
        if view.in_progress {
            // A joint left by a cut change lists the removed voter still (the union of its
            // configs): what is left is judged against the membership it was heading for
            // (review s31 member M1).
            node.finish_joint().await.map_err(answer_error)?;
            view = node.membership().await.map_err(answer_error)?;
        }
        let Some(op) = crate::cluster_group_change::remaining(&view, op) else {
            let mut answer = self.render(node).await?;
            if let Value::Object(m) = &mut answer {
                m.insert("already".into(), json!(true));
            }
            return Ok(answer);
        };
        if let MembershipOp::Promote(ids) = &op {
            // `matched` is known on the leader only (review s31 member L1): checked above.
            let last = node.status().last_log_index.unwrap_or(0);
            if let Some(why) = crate::cluster_group_change::not_caught_up(&view, ids, last) {
                return Err(QueenError::new(ErrorCode::Conflict, why));
            }
        }
        let (index, term) = node
            .change(change_of(op), self.peer_http.clone())
            .await
            .map_err(answer_error)?;
        let mut answer = self.render(node).await?;
        if let Value::Object(m) = &mut answer {
            m.insert("index".into(), json!(index));
            m.insert("term".into(), json!(term));
            m.insert("already".into(), json!(false));
        }
        Ok(answer)
    }

    /// The tenants' groups, in name order: `default`'s declarations once its read barrier
    /// passed within `bound` (review s31 member M3 B: a leader just elected has committed
    /// declarations it has not applied, and no hosted record of them yet), with the groups
    /// running here and the hosted records (a group whose start failed here is still listed,
    /// so the route reports it rather than skip it). Any failure is the listing's, reported
    /// behind by the carry.
    pub(crate) async fn list_tenants(
        &self,
        bound: std::time::Duration,
    ) -> Result<Vec<String>, QueenError> {
        let default = self
            .groups
            .get(DEFAULT_TENANT)
            .ok_or_else(|| QueenError::unavailable("the default group is not running here"))?;
        let live = default.live.get().map_err(|why| {
            QueenError::unavailable(format!("the default group is not running: {why}"))
        })?;
        let raft = live.node.raft_handle();
        match tokio::time::timeout(bound, raft.ensure_linearizable()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(QueenError::unavailable(format!(
                    "the tenants did not list: this node could not confirm it leads the \
                     default group with everything it committed applied ({e}); rerun the \
                     route"
                )))
            }
            Err(_) => {
                return Err(QueenError::unavailable(format!(
                    "the tenants did not list: the default group's read barrier did not pass \
                     within {} s; rerun the route",
                    bound.as_secs()
                )))
            }
        }
        let mut names: BTreeSet<String> = live.shared.lock().tenants.keys().cloned().collect();
        names.extend(self.groups.running().iter().map(|g| g.tenant.to_string()));
        let dir = self.data_dir.clone();
        let records = tokio::task::spawn_blocking(move || crate::group::hosted::read_all(&dir))
            .await
            .map_err(|e| QueenError::unavailable(format!("the hosted records: {e}")))?;
        match records {
            Ok(records) => names.extend(records.into_iter().map(|(t, _)| t)),
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "the hosted records do not list");
                return Err(QueenError::unavailable(format!(
                    "the hosted records do not list ({e:#}): the tenants' groups are not \
                     known; rerun the route"
                )));
            }
        }
        names.remove(DEFAULT_TENANT);
        Ok(names.into_iter().collect())
    }

    async fn render(&self, node: &RaftNode) -> Result<Value, QueenError> {
        let view = node.membership().await.map_err(answer_error)?;
        let status = node.status();
        Ok(render(self.node_id, status.role, status.leader, &view))
    }
}

/// The membership as the routes answer it: this node's view (its role, the leader it knows
/// if any, the membership in its log), whoever leads.
fn render(node_id: u64, role: &str, leader: Option<u64>, v: &MembershipView) -> Value {
    let member = |voter: bool| -> Vec<Value> {
        v.members
            .iter()
            .filter(|m| m.voter == voter)
            .map(|m| {
                json!({
                    "id": m.id,
                    "clusterAddr": m.cluster_addr,
                    "httpAddr": m.http,
                    "kafkaAddr": m.kafka,
                    "matched": m.matched,
                })
            })
            .collect()
    };
    json!({
        "nodeId": node_id,
        "role": role,
        "leader": leader,
        "voters": member(true),
        "learners": member(false),
        "changeInProgress": v.in_progress,
    })
}

/// A change that reached a node not leading its group: nothing was run.
fn not_led_here(leader: Option<u64>) -> QueenError {
    QueenError::unavailable(format!(
        "this node does not lead this group ({}); nothing was changed here: rerun the route",
        leader.map_or("no leader known here".to_string(), |l| format!(
            "node {l} leads"
        ))
    ))
}

/// The HTTP answer of a refused or failed membership operation.
fn answer_error(e: RaftError) -> QueenError {
    match e {
        RaftError::ChangeRefused { kind, message } => QueenError::new(
            match kind {
                ChangeRefusal::BadRequest => ErrorCode::BadRequest,
                ChangeRefusal::UnknownId => ErrorCode::NotFound,
                ChangeRefusal::Duplicate
                | ChangeRefusal::LastVoter
                | ChangeRefusal::InProgress
                | ChangeRefusal::Unsafe => ErrorCode::Conflict,
            },
            message,
        ),
        // openraft's own refusals (a change still in progress, a learner not found) and the
        // widening guard (a leader that reclaimed log): nothing changed.
        RaftError::Membership(m) => QueenError::new(ErrorCode::Conflict, m),
        // The relay already took the request to the node it believed led; it no longer does.
        RaftError::NotLeader { leader } => QueenError::unavailable(format!(
            "this node no longer leads ({}); the change may or may not be done: read \
             GET /api/v1/cluster and retry",
            leader.map_or("no leader known".to_string(), |l| format!("node {l} leads"))
        )),
        other => QueenError::unavailable(format!(
            "the membership change failed ({other}); it may or may not be done: read GET \
             /api/v1/cluster and retry"
        )),
    }
}

fn change_of(op: MembershipOp) -> Change {
    match op {
        MembershipOp::AddLearner {
            id,
            cluster_addr,
            http,
            kafka,
        } => Change::AddLearner {
            id,
            cluster_addr,
            http,
            kafka,
        },
        MembershipOp::Promote(ids) => Change::Promote(ids.into_iter().collect::<BTreeSet<_>>()),
        MembershipOp::Remove(id) => Change::Remove(id),
    }
}

impl ClusterAdmin for GroupMembership {
    fn view(&self) -> Answer<'_> {
        Box::pin(async move {
            let node = self.node()?;
            self.render(&node).await
        })
    }

    fn change(&self, op: MembershipOp) -> Answer<'_> {
        Box::pin(async move {
            let node = self.node()?;
            let (index, term) = node
                .change(change_of(op), self.peer_http.clone())
                .await
                .map_err(answer_error)?;
            let mut answer = self.render(&node).await?;
            if let Value::Object(m) = &mut answer {
                m.insert("index".into(), json!(index));
                m.insert("term".into(), json!(term));
            }
            Ok(answer)
        })
    }

    fn carries(&self) -> bool {
        self.tenant_groups
    }

    fn tenant_groups(&self) -> Listing<'_> {
        Box::pin(async move {
            if !self.tenant_groups {
                return None;
            }
            Some(self.list_tenants(BARRIER_BOUND).await)
        })
    }

    fn was_member(&self, id: u64) -> Known<'_> {
        Box::pin(async move {
            let Ok(node) = self.node() else {
                return false;
            };
            tokio::task::spawn_blocking(move || node.past_members().contains(&id))
                .await
                .unwrap_or(false)
        })
    }

    fn carry_lock(&self) -> &tokio::sync::Mutex<()> {
        &self.carrying
    }

    fn view_group<'a>(&'a self, group: &'a str) -> Answer<'a> {
        Box::pin(async move {
            let node = self.node_of(group)?;
            let mut answer = self.render(&node).await?;
            if let Value::Object(m) = &mut answer {
                m.insert("group".into(), json!(group));
            }
            Ok(answer)
        })
    }

    fn change_group<'a>(&'a self, group: &'a str, op: MembershipOp) -> Answer<'a> {
        Box::pin(async move {
            let node = self.node_of(group)?;
            let mut answer = self.change_left(&node, op).await?;
            if let Value::Object(m) = &mut answer {
                m.insert("group".into(), json!(group));
            }
            Ok(answer)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_has_its_status() {
        let code = |kind| {
            answer_error(RaftError::ChangeRefused {
                kind,
                message: "m".into(),
            })
            .code
        };
        assert_eq!(code(ChangeRefusal::UnknownId), ErrorCode::NotFound);
        assert_eq!(code(ChangeRefusal::Duplicate), ErrorCode::Conflict);
        assert_eq!(code(ChangeRefusal::LastVoter), ErrorCode::Conflict);
        assert_eq!(code(ChangeRefusal::InProgress), ErrorCode::Conflict);
        assert_eq!(code(ChangeRefusal::Unsafe), ErrorCode::Conflict);
        assert_eq!(code(ChangeRefusal::BadRequest), ErrorCode::BadRequest);
        let reclaimed = answer_error(RaftError::Membership("deleted its log".into()));
        assert_eq!(reclaimed.code, ErrorCode::Conflict);
        let moved = answer_error(RaftError::NotLeader { leader: Some(3) });
        assert_eq!(moved.code, ErrorCode::Unavailable);
        assert!(
            moved.message.contains("may or may not"),
            "{}",
            moved.message
        );
    }

    #[test]
    fn the_view_splits_voters_and_learners() {
        let v = MembershipView {
            members: vec![
                queenmq_raft::MemberView {
                    id: 1,
                    voter: true,
                    cluster_addr: "h:1".into(),
                    http: None,
                    kafka: None,
                    matched: Some(9),
                },
                queenmq_raft::MemberView {
                    id: 4,
                    voter: false,
                    cluster_addr: "h:4".into(),
                    http: Some("http://h:5".into()),
                    kafka: Some("h:9092".into()),
                    matched: None,
                },
            ],
            in_progress: false,
        };
        let r = render(1, "leader", Some(1), &v);
        assert_eq!(r["role"], "leader");
        assert_eq!(r["voters"][0]["matched"], 9);
        assert_eq!(r["learners"][0]["httpAddr"], "http://h:5");
        assert_eq!(r["learners"][0]["kafkaAddr"], "h:9092");
        assert_eq!(r["voters"][0]["kafkaAddr"], serde_json::Value::Null);
        assert_eq!(r["leader"], 1);
        // A node that knows no leader still answers its view (review s21 membership M9).
        let r = render(2, "candidate", None, &v);
        assert!(r["leader"].is_null());
        assert_eq!(r["nodeId"], 2);
    }
}
