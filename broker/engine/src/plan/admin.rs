//! Catalog and group administration: configure, delete, traces, group delete/seek/subscription.

use queenmq_protocol::{
    ConfigureReq, Configured, GroupAdminOutcome, GroupAdminReq, QueenError, QueueDeleted,
    TraceOutcome, TraceReq,
};

use super::{check_name, id_space, queue_uuid, Planner};
use crate::entry::Effect;
use crate::state::config::QueueConfig;
use crate::state::model::CursorRow;

impl Planner<'_> {
    pub fn plan_configure(&mut self, req: &ConfigureReq) -> Result<Configured, QueenError> {
        check_name("queue", &req.queue)?;
        let existing = self.st.queue_named(&req.queue);
        if existing.is_none() {
            // A new queue grows the state that cannot be evicted.
            if let Some(m) = self.memory.filter(|m| m.pressed()) {
                return Err(m.refusal());
            }
        }
        let base = match existing {
            Some(q) if !req.replace && q.configured => q.config.clone(),
            _ => QueueConfig::default(),
        };
        let config = base.merge(&req.options);
        // Never accept a queue whose payloads would have to be stored in plain text.
        if config.encryption_enabled && self.seal.is_none() {
            return Err(super::push::no_key(&req.queue));
        }
        let pick = |given: &Option<String>, old: Option<&String>| -> String {
            match given {
                Some(s) if !s.is_empty() => s.clone(),
                _ => old.cloned().unwrap_or_default(),
            }
        };
        let namespace = pick(&req.namespace, existing.map(|q| &q.namespace));
        let task = pick(&req.task, existing.map(|q| &q.task));
        let qid = existing.map_or(self.st.next_queue_id.max(1), |q| q.id);
        if existing.is_none() {
            id_space::new_queue(qid)?;
        }
        let options = config.settings();
        self.emit(Effect::QueueUpsert {
            qid,
            name: &req.queue,
            namespace: &namespace,
            task: &task,
            configured: true,
            config,
        });
        Ok(Configured {
            queue_id: queue_uuid(qid),
            queue: req.queue.clone(),
            namespace,
            task,
            options,
        })
    }

    pub fn plan_delete_queue(&mut self, queue: &str) -> QueueDeleted {
        let qid = self.st.queue_named(queue).map(|q| q.id);
        if let Some(qid) = qid {
            self.emit(Effect::QueueDelete { qid });
        }
        QueueDeleted {
            queue: queue.to_string(),
            existed: qid.is_some(),
        }
    }

    pub fn plan_trace(&mut self, req: &TraceReq) -> Result<TraceOutcome, QueenError> {
        check_trace(req)?;
        let Some(pid) = self.partition_id(&req.partition_id) else {
            return Ok(TraceOutcome::MessageNotFound);
        };
        // A message traced is usually being worked on: the group's range in flight is read
        // before a search by time may refuse the trace (review s34 d H2).
        let group = if req.group.is_empty() {
            queenmq_protocol::QUEUE_MODE_GROUP
        } else {
            req.group.as_str()
        };
        let in_flight = self
            .st
            .partitions
            .get(&pid)
            .and_then(|p| self.st.queues.get(&p.queue()))
            .and_then(|q| q.groups.get(group))
            .and_then(|gid| self.st.groups.get(gid))
            .and_then(|g| g.cursors.get(&pid))
            .and_then(|c| c.in_flight());
        if self
            .resolve_txn_or(pid, &req.transaction_id, None, in_flight)?
            .is_none()
        {
            return Ok(TraceOutcome::MessageNotFound);
        }
        let data = String::from_utf8_lossy(&req.data).into_owned();
        let names: Vec<&str> = req.names.iter().map(String::as_str).collect();
        self.emit(Effect::TraceAppend {
            pid,
            txn: &req.transaction_id,
            group: &req.group,
            names,
            event_type: &req.event_type,
            data: &data,
        });
        Ok(TraceOutcome::Recorded {
            trace_id: uuid::Uuid::now_v7().to_string(),
        })
    }

    pub fn plan_group_admin(
        &mut self,
        req: &GroupAdminReq,
    ) -> Result<GroupAdminOutcome, QueenError> {
        match req {
            GroupAdminReq::Delete {
                group,
                queue,
                delete_metadata,
            } => {
                let gids = self.groups_named(group, queue.as_deref());
                let mut partitions = 0;
                for (gid, _) in &gids {
                    partitions += self.st.groups.get(gid).map_or(0, |g| g.cursors.len());
                    self.emit(Effect::GroupDelete { gid: *gid });
                }
                Ok(GroupAdminOutcome::Deleted {
                    group: group.clone(),
                    partitions,
                    metadata_deleted: *delete_metadata,
                    queues: gids.len(),
                })
            }
            GroupAdminReq::Seek {
                group,
                queue,
                to_end,
                timestamp_us,
            } => {
                if !to_end && timestamp_us.is_none() {
                    return Err(QueenError::bad_request(
                        "seek needs toEnd: true or a timestamp",
                    ));
                }
                let Some(q) = self.st.queue_named(queue) else {
                    return Err(QueenError::not_found(format!("Queue {queue} not found")));
                };
                let Some(gid) = q.groups.get(group).copied() else {
                    return Err(QueenError::not_found(format!(
                        "Consumer group {group} has not consumed queue {queue}"
                    )));
                };
                // Shares the id chunks rather than copying every id (8 MB at a million
                // partitions) under the lock (review s26 ckpt L3).
                let pids = q.partition_order.clone();
                let mut updated = 0;
                for pid in &pids {
                    let Some(p) = self.st.partitions.get(&pid) else {
                        continue;
                    };
                    let committed = match timestamp_us {
                        Some(t) if !to_end => p.first_offset_at_or_after(*t),
                        _ => p.next_offset,
                    };
                    let old = self
                        .st
                        .groups
                        .get(&gid)
                        .and_then(|g| g.cursors.get(&pid))
                        .copied()
                        .unwrap_or_default();
                    self.emit(Effect::CursorPut {
                        gid,
                        pid,
                        row: CursorRow {
                            committed,
                            lease: None,
                            failures: 0,
                            attempt: 0,
                            delivered_end: old.delivered_end.max(committed),
                        },
                    });
                    updated += 1;
                }
                // The instant sent is kept: the group's detail shows it back (spec
                // native-api §2.19 bullet 5), and a partition created after the seek starts
                // from it. Clamped to the node's clock: a later instant (a client clock
                // ahead, a unit slip) would start such partitions at their end, so their
                // messages would never reach this group and completed-retention would
                // count them done. A seek to the end reads from now on.
                let now = self.now();
                let start_from_us = match timestamp_us {
                    Some(t) if !to_end => (*t).min(now),
                    _ => now,
                };
                self.emit(Effect::GroupStartFrom { gid, start_from_us });
                Ok(GroupAdminOutcome::Seeked {
                    group: group.clone(),
                    queue: queue.clone(),
                    to_end: *to_end,
                    target_us: *timestamp_us,
                    partitions_updated: updated,
                })
            }
            GroupAdminReq::Subscription {
                group,
                timestamp_us,
            } => {
                let gids = self.groups_named(group, None);
                // Each group is registered again under a new id: refused before any is
                // deleted when the ids would run out part way.
                let last = self
                    .st
                    .next_group_id
                    .max(1)
                    .saturating_add(gids.len().saturating_sub(1) as u64);
                if !gids.is_empty() {
                    id_space::new_group(last)?;
                }
                for (gid, qid) in &gids {
                    self.emit(Effect::GroupDelete { gid: *gid });
                    let new_gid = self.st.next_group_id.max(1);
                    self.emit(Effect::GroupRegister {
                        qid: *qid,
                        gid: new_gid,
                        name: group,
                        start_from_us: *timestamp_us,
                    });
                }
                Ok(GroupAdminOutcome::Resubscribed {
                    group: group.clone(),
                    at_us: *timestamp_us,
                    groups: gids.len(),
                })
            }
        }
    }
}

/// Most bytes of one trace's `data`, names per trace, and bytes of each name or label.
pub const MAX_TRACE_DATA: usize = 64 * 1024;
pub const MAX_TRACE_NAMES: usize = 32;
pub const MAX_TRACE_LABEL: usize = 255;

/// Traces are kept in memory and in every checkpoint: one may not carry a body-sized blob.
fn check_trace(req: &TraceReq) -> Result<(), QueenError> {
    if req.data.len() > MAX_TRACE_DATA {
        return Err(QueenError::new(
            queenmq_protocol::ErrorCode::PayloadTooLarge,
            format!(
                "trace data is {} bytes, above the {MAX_TRACE_DATA}-byte limit per trace",
                req.data.len()
            ),
        ));
    }
    if req.names.len() > MAX_TRACE_NAMES {
        return Err(QueenError::bad_request(format!(
            "a trace may carry at most {MAX_TRACE_NAMES} traceNames, this one has {}",
            req.names.len()
        )));
    }
    let long = req
        .names
        .iter()
        .map(|n| ("traceName", n.len()))
        .chain([
            ("eventType", req.event_type.len()),
            ("consumerGroup", req.group.len()),
        ])
        .find(|(_, len)| *len > MAX_TRACE_LABEL);
    if let Some((what, len)) = long {
        return Err(QueenError::bad_request(format!(
            "{what} is {len} bytes, longer than {MAX_TRACE_LABEL}"
        )));
    }
    Ok(())
}

impl Planner<'_> {
    /// (group id, queue id) of every registration of `group`, on one queue or all.
    fn groups_named(&self, group: &str, queue: Option<&str>) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self
            .st
            .queues
            .values()
            .filter(|q| queue.is_none_or(|n| q.name == n))
            .filter_map(|q| q.groups.get(group).map(|g| (*g, q.id)))
            .collect();
        v.sort_unstable();
        v
    }
}
