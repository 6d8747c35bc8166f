//! Message, DLQ and trace documents.

use queenmq_protocol::{
    DlqPage, MessageDoc, MessagePage, MessageStatus, TraceNames, TraceView, TracesPage,
};
use serde_json::{json, Value};

use super::queues::settings;
use super::raw_json;
use crate::iso_ms;

pub fn doc(m: &MessageDoc) -> Value {
    let groups: Vec<Value> = m
        .consumer_groups
        .iter()
        .map(|g| {
            json!({
                "name": g.name,
                "consumed": g.consumed,
                "leaseExpiresAt": g.lease_expires_us.map(iso_ms),
            })
        })
        .collect();
    let data = raw_json(&m.data);
    let status = match m.status {
        MessageStatus::DeadLetter => "dead_letter",
        MessageStatus::Processing => "processing",
        MessageStatus::Completed => "completed",
        MessageStatus::Pending => "pending",
    };
    json!({
        "id": m.id, "transactionId": m.transaction_id, "partitionId": m.partition_id.to_string(),
        "queue": m.queue, "partition": m.partition, "offset": m.offset,
        "namespace": m.namespace, "task": m.task,
        "queuePath": format!("{}/{}/{}", m.namespace, m.task, m.queue),
        "status": status, "retryCount": m.retry_count,
        "queueConfig": settings(&m.queue_config, &m.namespace, &m.task),
        "payload": data.clone(), "data": data, "producerSub": m.producer_sub,
        "traceId": m.trace_id,
        "createdAt": iso_ms(m.created_us), "consumerGroups": groups,
    })
}

pub fn page(p: &MessagePage) -> Value {
    let rows: Vec<Value> = p
        .messages
        .iter()
        .map(|m| {
            json!({
                "id": m.id, "transactionId": m.transaction_id, "queue": m.queue,
                "partition": m.partition, "partitionId": m.partition_id.to_string(),
                "offset": m.offset, "data": raw_json(&m.data), "createdAt": iso_ms(m.created_us),
            })
        })
        .collect();
    json!({ "messages": rows, "total": p.messages.len(), "limit": p.limit, "offset": p.offset })
}

pub fn dlq(p: &DlqPage) -> Value {
    let rows: Vec<Value> = p
        .messages
        .iter()
        .map(|d| {
            json!({
                "id": d.id, "transactionId": d.transaction_id,
                "partitionId": d.partition_id.to_string(),
                "queue": d.queue, "partition": d.partition, "consumerGroup": d.consumer_group,
                "errorMessage": d.error, "retryCount": d.retry_count, "data": raw_json(&d.data),
                "producerSub": d.producer_sub, "createdAt": iso_ms(d.created_us),
                "failedAt": iso_ms(d.failed_us),
            })
        })
        .collect();
    json!({ "messages": rows, "total": p.page.total, "limit": p.page.limit,
        "offset": p.page.offset })
}

pub fn trace_names(t: &TraceNames) -> Value {
    let rows: Vec<Value> = t
        .names
        .iter()
        .map(|n| json!({"traceName": n.name, "count": n.count}))
        .collect();
    json!({ "trace_names": rows, "total": t.page.total, "limit": t.page.limit,
        "offset": t.page.offset })
}

pub fn traces(ts: &[TraceView]) -> Vec<Value> {
    ts.iter()
        .map(|t| {
            json!({
                "transactionId": t.transaction_id, "partitionId": t.partition_id.to_string(),
                "queue": t.queue, "consumerGroup": t.consumer_group, "traceNames": t.names,
                "eventType": t.event_type, "data": raw_json(t.data.as_bytes()),
                "createdAt": iso_ms(t.at_us),
            })
        })
        .collect()
}

pub fn traces_page(p: &TracesPage) -> Value {
    json!({ "traces": traces(&p.traces), "limit": p.limit, "offset": p.offset })
}
