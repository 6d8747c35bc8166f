//! Consumer-group documents.

use queenmq_protocol::QueenError;
use serde_json::{json, Value};

use super::committed_of;
use crate::state::model::Group;
use crate::state::State;
use crate::time::iso_ms;

/// How far a group is behind on its queue: the messages it has not committed, and when the
/// oldest of them was written.
pub struct GroupLag {
    pub messages: u64,
    pub oldest_pending_us: Option<i64>,
}

/// None when the group's queue is gone.
pub fn group_lag(st: &State, g: &Group) -> Option<GroupLag> {
    let q = st.queues.get(&g.queue)?;
    let mut lag = GroupLag {
        messages: 0,
        oldest_pending_us: None,
    };
    for pid in &q.partition_order {
        let Some(p) = st.partitions.get(pid) else {
            continue;
        };
        let c = committed_of(g, p);
        lag.messages += p.next_offset.saturating_sub(c);
        if c < p.next_offset {
            if let Some(t) = p.created_of(c) {
                lag.oldest_pending_us = Some(lag.oldest_pending_us.map_or(t, |o| o.min(t)));
            }
        }
    }
    Some(lag)
}

fn group_queue_json(st: &State, g: &Group) -> Value {
    let (Some(q), Some(lag)) = (st.queues.get(&g.queue), group_lag(st, g)) else {
        return Value::Null;
    };
    let lag_seconds = lag
        .oldest_pending_us
        .map_or(0, |t| (st.last_now_us - t).max(0) / 1_000_000);
    json!({
        "queue": q.name, "pending": lag.messages, "lagSeconds": lag_seconds,
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
