//! Queue, partition, depth and status documents.

use queenmq_protocol::{
    LabelRow, MessageTotals, Overview, PartitionRows, QueueDepth, QueueDoc, QueueSettings,
    QueueView, Spread, StatusView,
};
use serde_json::{json, Map, Value};

use super::page;
use crate::iso_ms;

/// Every option of a queue with its labels: the configure echo and the `options` of reads.
pub fn settings(s: &QueueSettings, namespace: &str, task: &str) -> Value {
    let mut m = Map::new();
    m.insert("namespace".into(), json!(namespace));
    m.insert("task".into(), json!(task));
    for (k, v) in [
        ("priority", s.priority),
        ("leaseTime", s.lease_time),
        ("retryLimit", s.retry_limit),
        ("retryDelay", s.retry_delay),
        ("maxSize", s.max_size),
        ("maxQueueSize", s.max_size),
        ("ttl", s.ttl),
        ("delayedProcessing", s.delayed_processing),
        ("windowBuffer", s.window_buffer),
        ("retentionSeconds", s.retention_seconds),
        ("completedRetentionSeconds", s.completed_retention_seconds),
        ("maxWaitTimeSeconds", s.max_wait_time_seconds),
        ("minPopWaitTime", s.min_pop_wait_time),
        ("dedupWindowSeconds", s.dedup_window_seconds),
        (
            "retentionSinkHoldMaxSeconds",
            s.retention_sink_hold_max_seconds,
        ),
    ] {
        m.insert(k.into(), json!(v));
    }
    for (k, v) in [
        ("deadLetterQueue", s.dead_letter_queue),
        ("dlqAfterMaxRetries", s.dlq_after_max_retries),
        ("retentionEnabled", s.retention_enabled),
        ("encryptionEnabled", s.encryption_enabled),
    ] {
        m.insert(k.into(), json!(v));
    }
    m.insert("retentionSinkHold".into(), json!(s.retention_sink_hold));
    Value::Object(m)
}

fn totals(t: &MessageTotals) -> Value {
    json!({
        "total": t.total, "pending": t.pending, "processing": t.processing,
        "completed": t.completed, "failed": t.failed, "deadLetter": t.dead_letter,
    })
}

fn queue(q: &QueueView) -> Value {
    json!({
        "id": q.id, "name": q.name, "queue": q.name,
        "namespace": q.namespace, "task": q.task, "storage": "segments",
        "partitions": q.partitions,
        "messages": totals(&q.messages),
        // What is stored, consumed or not: a client waits on it to see a push land.
        "segments": {"messages": q.messages.total},
        "retainedBytes": q.retained_bytes,
        "options": settings(&q.options, &q.namespace, &q.task),
        "createdAt": iso_ms(q.created_us),
    })
}

pub fn list(qs: &[QueueView]) -> Value {
    let queues: Vec<Value> = qs.iter().map(queue).collect();
    json!({"queues": queues, "kvRows": 0, "kvBytes": 0, "timerRows": 0, "timerBytes": 0})
}

pub fn doc(d: &QueueDoc) -> Value {
    let mut doc = queue(&d.queue);
    let parts: Vec<Value> = d
        .partitions
        .iter()
        .map(|p| {
            json!({
                "id": p.id.to_string(), "name": p.name, "createdAt": iso_ms(p.created_us),
                "messages": {"total": p.messages},
                "lastActivity": iso_ms(p.last_write_us),
                "oldestMessage": p.oldest_us.map(iso_ms),
                "newestMessage": p.newest_us.map(iso_ms),
                "retainedBytes": p.retained_bytes,
                "stats": totals(&p.stats),
                // Batches are not counted by this broker: null, never a made-up 0.
                // The slowest group's cursor: it counts what retention removed since, so it
                // does not shrink under retention as `stats.completed` does (a new group from
                // the beginning or a seek back still moves it down: docs/api.md).
                "cursor": {"totalConsumed": p.consumed, "batchesConsumed": null},
            })
        })
        .collect();
    doc["partitions"] = Value::Array(parts);
    doc["partitionsPage"] = page(d.page);
    doc["totals"] = totals(&d.queue.messages);
    doc
}

pub fn depth(d: &QueueDepth) -> Value {
    let parts: Vec<Value> = d
        .partitions
        .iter()
        .map(|p| {
            json!({"partition": p.partition, "pending": p.pending, "processing": p.processing,
                "ready": p.ready})
        })
        .collect();
    // The work left, in handler runs: a conflating group runs once per partition that owes.
    let (effective_pending, effective_ready) = if d.conflation {
        (d.partitions_pending, d.partitions_ready)
    } else {
        (d.pending, d.ready)
    };
    json!({
        "queue": d.queue, "group": d.group, "pending": d.pending, "processing": d.processing,
        "ready": d.ready, "partitionsPending": d.partitions_pending,
        "partitionsReady": d.partitions_ready, "conflation": d.conflation,
        "effectivePending": effective_pending, "effectiveReady": effective_ready,
        "partitions": parts, "partitionsPage": page(d.page),
    })
}

fn spread(s: &Spread) -> Value {
    json!({"avg": s.avg, "median": s.median, "min": s.min, "max": s.max})
}

pub fn overview(o: &Overview) -> Value {
    json!({
        "queues": o.queues, "partitions": o.partitions,
        "namespaces": o.namespaces, "tasks": o.tasks,
        "messages": totals(&o.messages),
        "lag": {"time": spread(&o.lag.time), "offset": spread(&o.lag.offset)},
        "timestamp": iso_ms(o.at_us), "statsAge": 0,
    })
}

pub fn labels(rows: &[LabelRow], key: &str) -> Vec<Value> {
    rows.iter()
        .map(|r| {
            json!({key: r.label, "queues": r.queues, "partitions": r.partitions,
                "messages": {"total": r.total, "pending": r.pending}})
        })
        .collect()
}

pub fn partitions(p: &PartitionRows) -> Value {
    let rows: Vec<Value> = p
        .rows
        .iter()
        .map(|r| {
            json!({
                "id": r.id.to_string(), "name": r.name, "queue": r.queue,
                "messages": r.messages, "pending": r.pending, "createdAt": iso_ms(r.created_us),
                "lastActivity": iso_ms(r.last_write_us),
            })
        })
        .collect();
    json!({ "partitions": rows, "limit": p.page.limit, "offset": p.page.offset,
        "total": p.page.total })
}

pub fn status(s: &StatusView) -> Value {
    let queues: Vec<Value> = s
        .queues
        .iter()
        .map(|q| {
            json!({
                "queue": q.queue, "namespace": q.namespace, "task": q.task,
                "partitions": q.partitions, "messages": totals(&q.messages),
                "consumerGroups": q.consumer_groups,
            })
        })
        .collect();
    json!({ "queues": queues, "overview": overview(&s.overview) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_echo_names_every_option() {
        let s = QueueSettings {
            priority: 0,
            lease_time: 300,
            retry_limit: 3,
            retry_delay: 1000,
            max_size: 0,
            ttl: 3600,
            dead_letter_queue: true,
            dlq_after_max_retries: true,
            delayed_processing: 0,
            window_buffer: 0,
            retention_seconds: 0,
            completed_retention_seconds: 0,
            retention_enabled: false,
            encryption_enabled: false,
            max_wait_time_seconds: 0,
            min_pop_wait_time: 0,
            dedup_window_seconds: 3600,
            retention_sink_hold: String::new(),
            retention_sink_hold_max_seconds: 604_800,
        };
        let v = settings(&s, "", "");
        // The 21 options of the reference (namespace and task among them) + the maxQueueSize
        // alias.
        assert_eq!(v.as_object().map(|m| m.len()), Some(22));
        assert_eq!(v["maxQueueSize"], v["maxSize"]);
    }
}
