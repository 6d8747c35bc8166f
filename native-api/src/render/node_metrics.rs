//! `/api/v1/analytics/system-metrics` and `/worker-metrics` in the reference broker's shapes
//! (its dashboard reads them: `replicas[].timeSeries[].metrics.cpu.user_us.avg`, ...). What
//! has no meaning here (a database pool, a thread pool, message lag at pop) is null, never a
//! made-up 0; what is ours alone sits under `broker` (docs/api.md "Node metrics").

use queenmq_protocol::{Gauge, NodeCounts, NodePoint, NodeSeries};
use serde_json::{json, Value};

use crate::iso_ms;

const WORKER: &str = "worker-0";

fn leaf(g: &Gauge) -> Value {
    json!({"avg": g.avg, "min": g.min, "max": g.max, "last": g.last})
}

fn known(g: &Option<Gauge>) -> Value {
    g.as_ref().map_or_else(absent, leaf)
}

fn absent() -> Value {
    json!({"avg": null, "min": null, "max": null, "last": null})
}

/// `YYYY-MM-DDTHH:MM:SSZ`, the seconds form of the worker series.
fn iso_s(us: i64) -> String {
    let ms = iso_ms(us);
    match ms.get(..19) {
        Some(head) if ms.len() > 19 => format!("{head}Z"),
        _ => ms,
    }
}

fn time_range(s: &NodeSeries) -> Value {
    json!({"from": iso_ms(s.from_us), "to": iso_ms(s.to_us)})
}

fn system_point(p: &NodePoint) -> Value {
    json!({
        "timestamp": iso_ms(p.bucket_us),
        "sampleCount": p.samples,
        "metrics": {
            "cpu": {"user_us": known(&p.cpu_user), "system_us": known(&p.cpu_system)},
            "memory": {"rss_bytes": known(&p.rss_bytes), "virtual_bytes": known(&p.virtual_bytes)},
            "database": {"pool_size": absent(), "pool_idle": absent(), "pool_active": absent()},
            "threadpool": {
                "db": {"pool_size": absent(), "queue_size": absent()},
                "system": {"pool_size": absent(), "queue_size": absent()},
            },
            // Requests waiting for an engine's cycle: the broker's pending answers.
            "registries": {"response": leaf(&p.engine_queued)},
            "broker": {
                "threads": known(&p.threads),
                "http_connections": leaf(&p.http_connections),
                "engine_queued": leaf(&p.engine_queued),
                "loop_lag_ms": leaf(&p.loop_lag_ms),
            },
        },
    })
}

pub fn system(s: &NodeSeries) -> Value {
    let series: Vec<Value> = s.points.iter().map(system_point).collect();
    let replicas = if series.is_empty() {
        vec![]
    } else {
        vec![json!({
            "hostname": s.hostname, "port": s.port, "workerId": WORKER, "timeSeries": series,
        })]
    };
    json!({
        "timeRange": time_range(s),
        "replicaCount": replicas.len(),
        "replicas": replicas,
        "bucketMinutes": s.bucket_minutes,
        "pointCount": s.points.len(),
        "sampleSeconds": s.sample_seconds,
    })
}

fn rate(n: u64, bucket_minutes: u32) -> f64 {
    let secs = f64::from(bucket_minutes.max(1)) * 60.0;
    (n as f64 / secs * 100.0).round() / 100.0
}

fn worker_point(p: &NodePoint, bucket_minutes: u32) -> Value {
    let c = &p.counts;
    json!({
        "timestamp": iso_s(p.bucket_us),
        "pushMessages": c.push_messages, "popMessages": c.pop_messages,
        "ackMessages": c.ack_messages, "pushRequests": c.push_requests,
        "popRequests": c.pop_requests, "ackRequests": c.ack_requests,
        "jobsDone": c.push_requests, "transactions": c.transactions,
        "otherRequests": c.other_requests, "errors": c.errors,
        "pushPerSecond": rate(c.push_messages, bucket_minutes),
        "popPerSecond": rate(c.pop_messages, bucket_minutes),
        "ackPerSecond": rate(c.ack_messages, bucket_minutes),
        "avgEventLoopLagMs": p.loop_lag_ms.avg.round(),
        "maxEventLoopLagMs": p.loop_lag_ms.max.round(),
        "avgFreeSlots": null, "minFreeSlots": null, "dbConnections": null,
        "avgJobQueueSize": p.engine_queued.avg, "maxJobQueueSize": p.engine_queued.max,
        "backoffSize": null, "avgLagMs": null, "maxLagMs": null, "lagCount": null,
        "dbErrors": null, "ackSuccess": c.ack_success, "ackFailed": c.ack_failed,
        "dlqCount": null,
    })
}

fn summary(t: &NodeCounts) -> Value {
    json!({
        "totalPushMessages": t.push_messages, "totalPopMessages": t.pop_messages,
        "totalAckMessages": t.ack_messages, "totalPushRequests": t.push_requests,
        "totalPopRequests": t.pop_requests, "totalAckRequests": t.ack_requests,
        "totalTransactions": t.transactions, "totalErrors": t.errors,
        "totalDbErrors": null, "totalAckFailed": t.ack_failed, "totalDlq": null,
        "pendingMessages": t.push_messages as i64 - t.pop_messages as i64,
    })
}

pub fn worker(s: &NodeSeries) -> Value {
    // Newest first, as the reference answers.
    let series: Vec<Value> = s
        .points
        .iter()
        .rev()
        .map(|p| worker_point(p, s.bucket_minutes))
        .collect();
    let workers: Vec<Value> = s
        .recent
        .iter()
        .map(|r| {
            json!({
                "hostname": s.hostname, "workerId": 0,
                "avgEventLoopLagMs": r.loop_lag_ms.avg.round(),
                "maxEventLoopLagMs": r.loop_lag_ms.max.round(),
                "freeSlots": null, "dbConnections": null,
                "jobQueueSize": r.engine_queued.last, "backoffSize": null,
                "messagesProcessed": r.counts.push_messages + r.counts.ack_messages,
                "lastSeen": s.recent_last_us.map(iso_s),
            })
        })
        .collect();
    json!({
        "timeRange": time_range(s),
        "bucketMinutes": s.bucket_minutes,
        "pointCount": series.len(),
        "timeSeries": series,
        "workers": workers,
        "queues": [],
        "summary": summary(&s.totals),
        "sampleSeconds": s.sample_seconds,
    })
}
