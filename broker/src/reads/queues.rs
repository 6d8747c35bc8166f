//! Queue, partition and status documents.

use queenmq_protocol::{Page, QueenError, QUEUE_MODE_GROUP};
use serde_json::{json, Value};

use super::committed_of;
use crate::engine::plan_queue_uuid;
use crate::state::model::Queue;
use crate::state::State;
use crate::time::iso_ms;

struct Counts {
    total: u64,
    pending: u64,
    processing: u64,
}

/// Totals of a queue as its slowest named group (or queue mode) sees them.
fn counts(st: &State, q: &Queue, group: Option<&str>) -> Counts {
    let now = st.last_now_us;
    let total: u64 = q
        .partition_order
        .iter()
        .filter_map(|p| st.partitions.get(p))
        .map(|p| p.next_offset)
        .sum();
    let mut worst: Option<(u64, u64)> = None;
    for (name, gid) in &q.groups {
        if group.is_some_and(|g| g != name) {
            continue;
        }
        let Some(g) = st.groups.get(gid) else {
            continue;
        };
        let (mut pending, mut processing) = (0u64, 0u64);
        for pid in &q.partition_order {
            let Some(p) = st.partitions.get(pid) else {
                continue;
            };
            let committed = committed_of(g, p);
            pending += p.next_offset.saturating_sub(committed);
            if let Some(l) = g.cursors.get(pid).and_then(|c| c.live_lease(now)) {
                processing += l.end.saturating_sub(committed);
            }
        }
        if worst.is_none_or(|w| pending > w.0) {
            worst = Some((pending, processing));
        }
    }
    let (pending, processing) = worst.unwrap_or((if group.is_some() { 0 } else { total }, 0));
    Counts {
        total,
        pending,
        processing,
    }
}

/// Messages of the queue its slowest consumer group has not completed (every message while no
/// group reads it): the "pending" + "processing" of the queue documents.
pub fn queue_depth(st: &State, q: &Queue) -> u64 {
    counts(st, q, None).pending
}

fn messages_json(st: &State, q: &Queue) -> Value {
    let c = counts(st, q, None);
    json!({
        "total": c.total, "pending": c.pending.saturating_sub(c.processing),
        "processing": c.processing, "completed": c.total.saturating_sub(c.pending),
        "failed": q.counters.failed, "deadLetter": q.dlq.len(),
    })
}

fn queue_json(st: &State, q: &Queue) -> Value {
    let bytes: u64 = q
        .partition_order
        .iter()
        .filter_map(|p| st.partitions.get(p))
        .map(|p| p.bytes)
        .sum();
    json!({
        "id": plan_queue_uuid(q.id), "name": q.name, "queue": q.name,
        "namespace": q.namespace, "task": q.task, "storage": "segments",
        "partitions": q.partition_order.len(),
        "messages": messages_json(st, q),
        "retainedBytes": bytes,
        "options": q.config.to_json(&q.namespace, &q.task),
        "createdAt": iso_ms(q.created_us),
    })
}

fn sorted_queues(st: &State) -> Vec<&Queue> {
    let mut v: Vec<&Queue> = st.queues.values().collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

pub fn list(st: &State) -> Value {
    let queues: Vec<Value> = sorted_queues(st)
        .into_iter()
        .map(|q| queue_json(st, q))
        .collect();
    json!({"queues": queues, "kvRows": 0, "kvBytes": 0, "timerRows": 0, "timerBytes": 0})
}

/// The page's rows as `{limit, offset, total}`, so a client can ask for the next one.
fn page_json(page: Page, total: usize) -> Value {
    json!({"limit": page.limit, "offset": page.offset, "total": total})
}

pub fn one(st: &State, name: &str, page: Page) -> Result<Value, QueenError> {
    let q = st
        .queue_named(name)
        .ok_or_else(|| QueenError::not_found("Queue not found"))?;
    let mut doc = queue_json(st, q);
    let parts: Vec<Value> = q
        .partition_order
        .iter()
        .skip(page.offset)
        .take(page.limit)
        .filter_map(|pid| st.partitions.get(pid))
        .map(|p| {
            json!({
                "id": p.id.to_string(), "name": p.name, "createdAt": iso_ms(p.created_us),
                "messages": {"total": p.next_offset},
                "lastActivity": iso_ms(p.last_write_us),
                "oldestMessage": p.runs.first().map(|r| iso_ms(r.created_us)),
                "newestMessage": p.runs.last().map(|r| iso_ms(r.created_us)),
                "retainedBytes": p.bytes,
            })
        })
        .collect();
    doc["partitions"] = Value::Array(parts);
    doc["partitionsPage"] = page_json(page, q.partition_order.len());
    doc["totals"] = messages_json(st, q);
    Ok(doc)
}

pub fn depth(st: &State, name: &str, group: Option<&str>, page: Page) -> Result<Value, QueenError> {
    let q = st
        .queue_named(name)
        .ok_or_else(|| QueenError::not_found("Queue not found"))?;
    let gname = group.unwrap_or(QUEUE_MODE_GROUP);
    let g = q.groups.get(gname).and_then(|g| st.groups.get(g));
    let now = st.last_now_us;
    let mut parts = Vec::new();
    let (mut pending, mut processing, mut pp, mut pr) = (0u64, 0u64, 0u64, 0u64);
    for (i, pid) in q.partition_order.iter().enumerate() {
        let Some(p) = st.partitions.get(pid) else {
            continue;
        };
        let committed = g.map_or(0, |g| committed_of(g, p));
        let pend = p.next_offset.saturating_sub(committed);
        let proc_ = g
            .and_then(|g| g.cursors.get(pid))
            .and_then(|c| c.live_lease(now))
            .map_or(0, |l| l.end.saturating_sub(committed));
        let ready = if proc_ > 0 { 0 } else { pend };
        pending += pend;
        processing += proc_;
        pp += u64::from(pend > 0);
        pr += u64::from(ready > 0);
        // Totals cover every partition; only the listed rows are paged.
        if i >= page.offset && parts.len() < page.limit {
            parts.push(
                json!({"partition": p.name, "pending": pend, "processing": proc_, "ready": ready}),
            );
        }
    }
    let ready = pending.saturating_sub(processing);
    Ok(json!({
        "queue": name, "group": gname, "pending": pending, "processing": processing,
        "ready": ready, "partitionsPending": pp, "partitionsReady": pr, "conflation": false,
        "effectivePending": pending, "effectiveReady": ready, "partitions": parts,
        "partitionsPage": page_json(page, q.partition_order.len()),
    }))
}

pub fn overview(st: &State) -> Value {
    let (mut total, mut pending, mut processing, mut dlq) = (0u64, 0u64, 0u64, 0u64);
    for q in st.queues.values() {
        let c = counts(st, q, None);
        total += c.total;
        pending += c.pending;
        processing += c.processing;
        dlq += q.dlq.len() as u64;
    }
    let namespaces: std::collections::HashSet<&str> = st
        .queues
        .values()
        .map(|q| q.namespace.as_str())
        .filter(|s| !s.is_empty())
        .collect();
    let tasks: std::collections::HashSet<&str> = st
        .queues
        .values()
        .map(|q| q.task.as_str())
        .filter(|s| !s.is_empty())
        .collect();
    json!({
        "queues": st.queues.len(), "partitions": st.partitions.len(),
        "namespaces": namespaces.len(), "tasks": tasks.len(),
        "messages": {"total": total, "pending": pending.saturating_sub(processing),
            "processing": processing, "completed": total.saturating_sub(pending),
            "failed": 0, "deadLetter": dlq},
        "timestamp": iso_ms(crate::time::wall_clock_us()), "statsAge": 0,
    })
}

pub fn labels(st: &State, namespaces: bool) -> Value {
    let mut map: std::collections::BTreeMap<&str, (u64, u64, u64, u64)> = Default::default();
    for q in st.queues.values() {
        let label = if namespaces { &q.namespace } else { &q.task };
        if label.is_empty() {
            continue;
        }
        let c = counts(st, q, None);
        let e = map.entry(label.as_str()).or_default();
        e.0 += 1;
        e.1 += q.partition_order.len() as u64;
        e.2 += c.total;
        e.3 += c.pending;
    }
    let key = if namespaces { "namespace" } else { "task" };
    let rows: Vec<Value> = map
        .into_iter()
        .map(|(k, (qs, ps, t, p))| {
            json!({key: k, "queues": qs, "partitions": ps, "messages": {"total": t, "pending": p}})
        })
        .collect();
    if namespaces {
        json!({ "namespaces": rows })
    } else {
        json!({ "tasks": rows })
    }
}

pub fn partitions(st: &State, queue: Option<&str>, limit: usize, offset: usize) -> Value {
    let mut rows = Vec::new();
    let (mut total, mut skipped) = (0usize, 0usize);
    for q in sorted_queues(st) {
        if queue.is_some_and(|n| n != q.name) {
            continue;
        }
        total += q.partition_order.len();
        for pid in &q.partition_order {
            if rows.len() >= limit {
                break;
            }
            if skipped < offset {
                skipped += 1;
                continue;
            }
            if let Some(p) = st.partitions.get(pid) {
                rows.push(json!({
                    "id": p.id.to_string(), "name": p.name, "queue": q.name,
                    "messages": p.next_offset, "createdAt": iso_ms(p.created_us),
                    "lastActivity": iso_ms(p.last_write_us),
                }));
            }
        }
    }
    json!({ "partitions": rows, "limit": limit, "offset": offset, "total": total })
}

pub fn status(st: &State, only: Option<&str>) -> Value {
    let queues: Vec<Value> = sorted_queues(st)
        .into_iter()
        .filter(|q| only.is_none_or(|n| n == q.name))
        .map(|q| {
            json!({
                "queue": q.name, "namespace": q.namespace, "task": q.task,
                "partitions": q.partition_order.len(), "messages": messages_json(st, q),
                "consumerGroups": q.groups.len(),
            })
        })
        .collect();
    json!({ "queues": queues, "overview": overview(st) })
}
