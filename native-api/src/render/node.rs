//! /health, /ready and /metrics documents.

use queenmq_protocol::{GroupCounts, HealthView, MetricsView, RaftView};
use serde_json::{json, Value};

pub const STATS_LIVE: &str = "statistics are live; nothing to refresh";

fn raft(r: &RaftView) -> Value {
    json!({
        "role": r.role, "term": r.term, "leader": r.leader,
        "lastLogIndex": r.last_log_index, "committed": r.committed, "applied": r.applied,
        "commit": r.committed, "lag": r.committed.saturating_sub(r.applied),
    })
}

fn groups(g: &GroupCounts) -> Value {
    json!({"running": g.running, "rebuilding": g.rebuilding})
}

/// The document and whether the node is healthy.
pub fn health(h: &HealthView) -> (bool, Value) {
    match h {
        HealthView::NoStorage {
            error,
            uptime_seconds,
            version,
            groups: g,
        } => (
            false,
            json!({
                "status": "unhealthy",
                "storageReady": false,
                "error": error,
                "uptimeSeconds": uptime_seconds,
                "version": version,
                "groups": groups(g),
            }),
        ),
        HealthView::Reloading {
            reason,
            uptime_seconds,
            version,
            groups: g,
        } => (
            true,
            json!({
                "status": "reloading",
                "storageReady": false,
                "reason": reason,
                "uptimeSeconds": uptime_seconds,
                "version": version,
                "groups": groups(g),
            }),
        ),
        HealthView::Running {
            healthy,
            storage_ready,
            uptime_seconds,
            version,
            raft: r,
            groups: g,
        } => (
            *healthy,
            json!({
                "status": if *healthy { "healthy" } else { "unhealthy" },
                "storageReady": storage_ready,
                "uptimeSeconds": uptime_seconds,
                "version": version,
                "raft": raft(r),
                "groups": groups(g),
            }),
        ),
    }
}

/// How far apply may trail the commit a node knows and it still counts as ready: commit
/// always moves before apply, so a node under steady writes is behind by a few entries at
/// any moment, and a probe without slack would flap (review s16 B3).
const READY_APPLY_SLACK: u64 = 1000;

/// Ready when this node leads (so writes are accepted) and has applied what it committed.
pub fn ready(h: &HealthView) -> (bool, Value) {
    match h {
        HealthView::NoStorage { .. } | HealthView::Reloading { .. } => {
            (false, json!({"ready": false, "raft": null}))
        }
        HealthView::Running {
            healthy, raft: r, ..
        } => {
            // A cluster leader is ready while a majority acknowledges it (one cut off from the
            // majority stays leader in openraft 0.9 but plans nothing: review s16 B1) and it
            // has applied its whole log, or trails it only by its own entry in flight: under
            // writes one is appended and not yet applied at almost any moment, so "applied
            // everything", the planner's own rule, would make the only writable node flap
            // (review s17 C1); but a proposal older than the lease is stuck (its own disk
            // hangs, while the followers elect another leader: review s17 lead M1), and a
            // leader just elected that is still applying serves nothing. A follower once a
            // leader is known and it is close behind the commit it knows; a single node while
            // it leads and is close behind its own commit.
            let close = r.applied.saturating_add(READY_APPLY_SLACK) >= r.committed;
            let ok = if r.clustered && r.role == "leader" {
                *healthy && r.quorum_contact && (r.applied >= r.last_log_index || r.proposal_fresh)
            } else if r.clustered {
                *healthy && r.leader.is_some() && close
            } else {
                *healthy && close
            };
            (ok, json!({"ready": ok, "raft": raft(r)}))
        }
    }
}

pub fn metrics(m: &MetricsView) -> Value {
    let mut out = match &m.counters {
        Some(c) => {
            let queues: Vec<Value> = c
                .queues
                .iter()
                .map(|q| {
                    json!({
                        "name": q.name, "partitions": q.partitions,
                        "pushed": q.pushed, "acked": q.acked, "deadLettered": q.dead_lettered,
                    })
                })
                .collect();
            json!({
                "messages": {"pushed": c.pushed, "acked": c.acked,
                    "deadLettered": c.dead_lettered},
                "queues": queues,
                "partitions": c.partitions,
                "consumerGroups": c.consumer_groups,
            })
        }
        None => json!({}),
    };
    out["uptime"] = json!(m.uptime_seconds);
    out["raft"] = json!({"role": m.raft.role, "term": m.raft.term,
        "committed": m.raft.committed, "applied": m.raft.applied});
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(r: RaftView) -> HealthView {
        HealthView::Running {
            healthy: true,
            storage_ready: true,
            uptime_seconds: 1,
            version: "test",
            raft: r,
            groups: GroupCounts {
                running: 1,
                rebuilding: 0,
            },
        }
    }

    fn member(role: &'static str, applied: u64, committed: u64, quorum_contact: bool) -> RaftView {
        RaftView {
            role,
            term: 2,
            leader: Some(1),
            last_log_index: committed,
            committed,
            applied,
            clustered: true,
            quorum_contact,
            proposal_fresh: false,
        }
    }

    /// Review s16 B1: a cluster leader cut off from the majority is not ready, whatever its
    /// applied and commit say. Review s17 C1: one with its cycle in flight (appended, not yet
    /// applied) is ready. Review s17 lead M1: not once that proposal is older than the lease
    /// (its own disk hangs), nor while it applies its log without a proposal (just elected).
    #[test]
    fn a_cluster_leader_is_ready_while_a_majority_acknowledges_it() {
        assert!(ready(&running(member("leader", 9, 9, true))).0);
        assert!(!ready(&running(member("leader", 9, 9, false))).0);
        let in_flight = |fresh| {
            let mut r = member("leader", 8, 8, true);
            r.last_log_index = 9;
            r.proposal_fresh = fresh;
            r
        };
        assert!(ready(&running(in_flight(true))).0);
        assert!(!ready(&running(in_flight(false))).0);
        let mut cut_off = in_flight(true);
        cut_off.quorum_contact = false;
        assert!(!ready(&running(cut_off)).0);
    }

    /// Review s17 C2: a node reloading its group after it lost the lead is alive (a liveness
    /// probe must not restart it in the middle of its replay) and not ready.
    #[test]
    fn a_node_reloading_after_a_deposition_is_healthy_and_not_ready() {
        let reloading = HealthView::Reloading {
            reason: "the group is being reloaded: this node lost the lead".into(),
            uptime_seconds: 1,
            version: "test",
            groups: GroupCounts {
                running: 1,
                rebuilding: 1,
            },
        };
        let (healthy, doc) = health(&reloading);
        assert!(healthy);
        assert_eq!(doc["status"], "reloading");
        assert_eq!(doc["storageReady"], false);
        assert!(!ready(&reloading).0);
    }

    /// Review s16 B3: commit moves before apply, so a follower under steady writes trails by
    /// an entry or a few; it stays ready within the slack a single node has, and a leader
    /// without a majority's acknowledgement is not ready.
    #[test]
    fn a_follower_trailing_within_the_slack_is_ready() {
        assert!(ready(&running(member("follower", 8, 9, false))).0);
        assert!(
            ready(&running(member(
                "follower",
                9,
                9 + READY_APPLY_SLACK,
                false
            )))
            .0
        );
        assert!(
            !ready(&running(member(
                "follower",
                8,
                9 + READY_APPLY_SLACK,
                false
            )))
            .0
        );
        let mut unknown = member("follower", 9, 9, false);
        unknown.leader = None;
        assert!(!ready(&running(unknown)).0);
        let mut applying = member("leader", 8, 9, false);
        applying.last_log_index = 9;
        assert!(!ready(&running(applying)).0);
    }
}
