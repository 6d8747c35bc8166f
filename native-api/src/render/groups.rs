//! Consumer-group documents.

use queenmq_protocol::{GroupQueueLag, GroupView, LaggingRow};
use serde_json::{json, Value};

use crate::iso_ms;

fn lag(l: &GroupQueueLag) -> Value {
    json!({
        "queue": l.queue, "pending": l.pending, "lagSeconds": l.lag_seconds,
        "partitions": l.partitions,
        "subscribedAt": iso_ms(l.subscribed_us),
    })
}

pub fn one(g: &GroupView) -> Value {
    // A registration whose queue is gone shows as null, as it always did.
    let queues: Vec<Value> = g
        .queues
        .iter()
        .map(|q| q.as_ref().map_or(Value::Null, lag))
        .collect();
    json!({"name": g.name, "queues": queues})
}

pub fn list(gs: &[GroupView]) -> Value {
    let rows: Vec<Value> = gs.iter().map(one).collect();
    json!({ "consumerGroups": rows })
}

/// A bare array: the dashboard and the other official clients read the rows directly.
pub fn lagging(rows: &[LaggingRow]) -> Value {
    let rows: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut v = lag(&r.lag);
            v["consumerGroup"] = json!(r.group);
            v
        })
        .collect();
    Value::Array(rows)
}
