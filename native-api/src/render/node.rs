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

/// Ready when this node leads (so writes are accepted) and has applied what it committed.
pub fn ready(h: &HealthView) -> (bool, Value) {
    match h {
        HealthView::NoStorage { .. } => (false, json!({"ready": false, "raft": null})),
        HealthView::Running {
            healthy, raft: r, ..
        } => {
            // A cluster member is ready once a leader is known and it has applied all it knows
            // committed; a single node while it leads and is close behind its own commit.
            let ok = if r.clustered {
                *healthy && r.leader.is_some() && r.applied >= r.committed
            } else {
                *healthy && r.applied.saturating_add(1000) >= r.committed
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
