//! Consumer-group documents.

use queenmq_protocol::QueenError;
use serde_json::{json, Value};

use super::committed_of;
use crate::state::model::Group;
use crate::state::State;
use crate::time::iso_ms;

fn group_queue_json(st: &State, g: &Group) -> Value {
    let Some(q) = st.queues.get(&g.queue) else {
        return Value::Null;
    };
    let mut lag = 0u64;
    let mut oldest_pending: Option<i64> = None;
    for pid in &q.partition_order {
        let Some(p) = st.partitions.get(pid) else {
            continue;
        };
        let c = committed_of(g, p);
        lag += p.next_offset.saturating_sub(c);
        if c < p.next_offset {
            if let Some(t) = p.created_of(c) {
                oldest_pending = Some(oldest_pending.map_or(t, |o| o.min(t)));
            }
        }
    }
    let lag_seconds = oldest_pending.map_or(0, |t| (st.last_now_us - t).max(0) / 1_000_000);
    json!({
        "queue": q.name, "pending": lag, "lagSeconds": lag_seconds,
        "partitions": g.cursors.len(),
        "subscribedAt": iso_ms(g.created_us),
    })
}

pub fn list(st: &State) -> Value {
    let mut by_name: std::collections::BTreeMap<&str, Vec<Value>> = Default::default();
    for g in st.groups.values() {
        by_name
            .entry(g.name.as_str())
            .or_default()
            .push(group_queue_json(st, g));
    }
    let rows: Vec<Value> = by_name
        .into_iter()
        .map(|(name, queues)| json!({"name": name, "queues": queues}))
        .collect();
    json!({ "consumerGroups": rows })
}

pub fn one(st: &State, name: &str) -> Result<Value, QueenError> {
    let queues: Vec<Value> = st
        .groups
        .values()
        .filter(|g| g.name == name)
        .map(|g| group_queue_json(st, g))
        .collect();
    if queues.is_empty() {
        return Err(QueenError::not_found(format!(
            "Consumer group {name} not found"
        )));
    }
    Ok(json!({"name": name, "queues": queues}))
}

pub fn lagging(st: &State, min_lag_seconds: i64) -> Value {
    let rows: Vec<Value> = st
        .groups
        .values()
        .map(|g| (g, group_queue_json(st, g)))
        .filter(|(_, v)| {
            v["lagSeconds"].as_i64().unwrap_or(0) >= min_lag_seconds
                && v["pending"].as_u64().unwrap_or(0) > 0
        })
        .map(|(g, mut v)| {
            v["consumerGroup"] = json!(g.name);
            v
        })
        .collect();
    json!({ "lagging": rows })
}
