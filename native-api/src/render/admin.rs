//! Answers of configure, delete, trace and group administration.

use queenmq_protocol::{Configured, GroupAdminOutcome, QueueDeleted, TraceOutcome};
use serde_json::{json, Value};

use super::queues::settings;
use crate::iso_ms;

pub fn configured(c: &Configured) -> Value {
    json!({
        "configured": true,
        "queueId": c.queue_id,
        "partitionId": null,
        "queue": c.queue,
        "namespace": c.namespace,
        "task": c.task,
        "storage": "segments",
        "options": settings(&c.options, &c.namespace, &c.task),
    })
}

pub fn deleted(d: &QueueDeleted) -> Value {
    if d.existed {
        json!({"deleted": true, "existed": true, "queue": d.queue})
    } else {
        json!({
            "deleted": false, "existed": false, "queue": d.queue,
            "message": "Queue not found, nothing was deleted"
        })
    }
}

pub fn traced(t: &TraceOutcome) -> Value {
    match t {
        TraceOutcome::Recorded { trace_id } => json!({"success": true, "traceId": trace_id}),
        TraceOutcome::MessageNotFound => json!({"success": false, "error": "Message not found"}),
    }
}

pub fn group_admin(g: &GroupAdminOutcome) -> Value {
    match g {
        GroupAdminOutcome::Deleted {
            group,
            partitions,
            metadata_deleted,
            queues,
        } => json!({
            "success": true, "consumerGroup": group,
            "deletedPartitions": partitions, "metadataDeleted": metadata_deleted,
            "queues": queues,
        }),
        GroupAdminOutcome::Seeked {
            group,
            queue,
            to_end,
            target_us,
            partitions_updated,
        } => json!({
            "success": true, "consumerGroup": group, "queueName": queue,
            "seekToEnd": to_end,
            "targetTimestamp": target_us.map(iso_ms),
            "partitionsUpdated": partitions_updated,
        }),
        GroupAdminOutcome::Resubscribed {
            group,
            at_us,
            groups,
        } => json!({
            "success": true, "consumerGroup": group,
            "newTimestamp": iso_ms(*at_us),
            "rowsUpdated": groups,
        }),
    }
}
