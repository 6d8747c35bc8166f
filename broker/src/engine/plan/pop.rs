//! Pop: register the group on first contact, claim whole partitions under one lease, read the
//! claimed messages. A claim is a CursorPut in the cycle's entry, so it is durable before the
//! answer leaves.

use std::cmp::Reverse;
use std::sync::Arc;

use queenmq_protocol::{
    PopReq, PopResult, PopSource, PoppedMessage, QueenError, Subscription, QUEUE_MODE_GROUP,
};

use super::{group_name, lease_text, Planner};
use crate::entry::Effect;
use crate::state::model::{cursor_start, CursorRow, LeaseRow};

/// Server defaults when the client leaves batch/partitions to the broker.
pub const DEFAULT_BATCH: u32 = 200;
const AUTOPILOT_PARTITIONS: u32 = 32;
const AUTOPILOT_WAIT_MS: u64 = 100;

pub enum PopPlan {
    Delivered(PopResult),
    /// Nothing deliverable now.
    Empty,
}

impl Planner<'_> {
    pub fn plan_pop(&mut self, req: &PopReq) -> Result<PopPlan, QueenError> {
        let group = group_name(&req.group).to_string();
        if req.group.is_some() && group.len() > 255 {
            return Err(QueenError::bad_request(
                "consumerGroup is longer than 255 bytes",
            ));
        }
        let batch = if req.batch == 0 {
            DEFAULT_BATCH
        } else {
            req.batch
        };
        let max_parts = match (req.partitions, req.autopilot) {
            (0, true) => AUTOPILOT_PARTITIONS,
            (0, false) => 1,
            (n, _) => n,
        };
        let queues: Vec<u64> = match &req.source {
            PopSource::Queue(q) | PopSource::Partition(q, _) => {
                self.st.queue_by_name.get(q).copied().into_iter().collect()
            }
            PopSource::Labels { namespace, task } => {
                let mut v: Vec<u64> = self
                    .st
                    .queues
                    .values()
                    .filter(|q| namespace.as_ref().is_none_or(|n| &q.namespace == n))
                    .filter(|q| task.as_ref().is_none_or(|t| &q.task == t))
                    .map(|q| q.id)
                    .collect();
                v.sort_unstable();
                v
            }
        };
        let lease_id = uuid::Uuid::now_v7().as_u128();
        let mut out = PopResult {
            consumer_group: group.clone(),
            lease_id: if req.auto_ack {
                String::new()
            } else {
                lease_text(lease_id)
            },
            ..Default::default()
        };
        let mut remaining = batch;
        for qid in queues {
            if remaining == 0 || out.partitions_claimed >= max_parts {
                break;
            }
            let partition = match &req.source {
                PopSource::Partition(_, p) => Some(p.as_str()),
                _ => None,
            };
            self.claim_in_queue(
                qid,
                &group,
                partition,
                req,
                lease_id,
                max_parts,
                &mut remaining,
                &mut out,
            )?;
        }
        if req.autopilot {
            out.autopilot = Some((max_parts, batch, AUTOPILOT_WAIT_MS));
        }
        if out.messages.is_empty() {
            return Ok(PopPlan::Empty);
        }
        metrics::counter!("queen_messages_popped_total", "queue" => out.queue.clone())
            .increment(out.messages.len() as u64);
        Ok(PopPlan::Delivered(out))
    }

    fn group_id(&mut self, qid: u64, group: &str, sub: &Subscription) -> u64 {
        if let Some(gid) = self.st.queues.get(&qid).and_then(|q| q.groups.get(group)) {
            return *gid;
        }
        let now = self.now();
        let start_from_us = if group == QUEUE_MODE_GROUP {
            i64::MIN
        } else {
            match sub {
                Subscription::All => i64::MIN,
                Subscription::New | Subscription::Default => now,
                Subscription::From(t) => *t,
            }
        };
        let gid = self.st.next_group_id.max(1);
        self.emit(Effect::GroupRegister {
            qid,
            gid,
            name: group,
            start_from_us,
        });
        gid
    }

    #[allow(clippy::too_many_arguments)]
    fn claim_in_queue(
        &mut self,
        qid: u64,
        group: &str,
        partition: Option<&str>,
        req: &PopReq,
        lease_id: u128,
        max_parts: u32,
        remaining: &mut u32,
        out: &mut PopResult,
    ) -> Result<(), QueenError> {
        let gid = self.group_id(qid, group, &req.subscription);
        let now = self.now();
        let Some(q) = self.st.queues.get(&qid) else {
            return Ok(());
        };
        let cfg = q.config.clone();
        let qname = q.name.clone();
        let named_pid = match partition {
            Some(p) => match q.partitions.get(p, &self.st.partitions) {
                Some(pid) => Some(pid),
                None => return Ok(()),
            },
            None => None,
        };
        let Some(g) = self.st.groups.get_mut(&gid) else {
            return Ok(());
        };
        while let Some(Reverse((t, pid))) = g.wake.peek().copied() {
            if t > now {
                break;
            }
            g.wake.pop();
            g.mark_ready(pid);
        }
        let lease_secs = match req.lease_seconds {
            Some(s) if s > 0 => s,
            _ if cfg.lease_time > 0 => cfg.lease_time as u64,
            _ => 60,
        };
        let mut tried = 0usize;
        loop {
            if *remaining == 0 || out.partitions_claimed >= max_parts {
                break;
            }
            let pid = match named_pid {
                Some(pid) if tried == 0 => pid,
                Some(_) => break,
                None => {
                    let Some(g) = self.st.groups.get_mut(&gid) else {
                        break;
                    };
                    match g.ready.pop_front() {
                        Some(pid) => {
                            g.in_ready.remove(&pid);
                            pid
                        }
                        None => break,
                    }
                }
            };
            tried += 1;
            let Some(p) = self.st.partitions.get(&pid) else {
                continue;
            };
            let Some(g) = self.st.groups.get_mut(&gid) else {
                break;
            };
            let row = g.cursors.get(&pid).copied().unwrap_or_else(|| CursorRow {
                committed: cursor_start(p, g.start_from_us),
                ..Default::default()
            });
            if row.live_lease(now).is_some() {
                continue;
            }
            let mut end = p.next_offset;
            if cfg.delayed_processing > 0 {
                let delay = cfg.delayed_processing * 1_000_000;
                end = p.first_offset_at_or_after(now - delay + 1);
                if end < p.next_offset {
                    if let Some(c) = p.created_of(end) {
                        g.wake.push(Reverse((c + delay, pid)));
                    }
                }
            }
            if cfg.window_buffer > 0 {
                let until = p.last_write_us + cfg.window_buffer * 1_000_000;
                if until > now && row.committed < p.next_offset {
                    g.wake.push(Reverse((until, pid)));
                    continue;
                }
            }
            if row.committed >= end {
                continue;
            }
            let start = row.committed;
            let claim_end = end.min(start + u64::from(*remaining));
            let attempt = if start < row.delivered_end {
                row.attempt.saturating_add(1).max(2)
            } else {
                1
            };
            let first_time_end = row.delivered_end;
            let new_row = CursorRow {
                committed: if req.auto_ack { claim_end } else { start },
                lease: (!req.auto_ack).then_some(LeaseRow {
                    id: lease_id,
                    end: claim_end,
                    expires_us: now + (lease_secs as i64) * 1_000_000,
                    seconds: lease_secs as u32,
                }),
                failures: if req.auto_ack { 0 } else { row.failures },
                attempt,
                delivered_end: row.delivered_end.max(claim_end),
            };
            let pname = p.name.clone();
            let msgs = {
                let p = match self.st.partitions.get(&pid) {
                    Some(p) => p,
                    None => continue,
                };
                let mut reader = super::MessageReader {
                    pending: self.cycle.entry.bytes(),
                    cache: self.cache,
                    log: self.log,
                };
                reader
                    .read(p, start, claim_end)
                    .map_err(|e| QueenError::new(queenmq_protocol::ErrorCode::Internal, e))?
            };
            self.emit(Effect::CursorPut {
                gid,
                pid,
                row: new_row,
            });
            if out.queue.is_empty() {
                out.queue = qname.clone();
            }
            out.partitions_claimed += 1;
            *remaining -= msgs.len() as u32;
            let (queue, partition): (Arc<str>, Arc<str>) = (qname.as_str().into(), pname.into());
            let lease: Arc<str> = out.lease_id.as_str().into();
            let consumer_group: Arc<str> = group.into();
            for m in msgs {
                out.messages.push(PoppedMessage {
                    id: m.id_text(),
                    trace_id: m.trace.map(|t| uuid::Uuid::from_bytes(t).to_string()),
                    transaction_id: m.txn,
                    payload: m.payload,
                    producer_sub: m.producer,
                    created_at_us: m.created_us,
                    queue: queue.clone(),
                    partition: partition.clone(),
                    partition_id: pid,
                    lease_id: lease.clone(),
                    consumer_group: consumer_group.clone(),
                    offset: m.offset,
                    delivery_attempt: if m.offset < first_time_end {
                        attempt
                    } else {
                        1
                    },
                });
            }
        }
        Ok(())
    }
}
