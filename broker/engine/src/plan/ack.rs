//! Ack as an offset commit (spec/native-api.md §2.6): completing message N commits everything
//! before it; a nack releases the lease and rewinds to the nacked message; retries are charged
//! and exhausted ones dead-lettered; later items of a partition nacked in the same call are
//! clamped (never committed past a nack) and judged against the lease as the call began
//! (§2.19: a batch nack of a whole claim succeeds for every item).

use std::collections::HashMap;

use queenmq_protocol::{AckItem, AckResult, AckStatus, ErrorCode, QueenError};

use super::{group_name, parse_lease, Planner};
use crate::entry::Effect;
use crate::state::model::{secs_us, CursorRow};

/// Bytes of a dead-letter row's error text kept (the rest is cut at a character boundary):
/// rows live in memory and in every checkpoint.
pub const MAX_DLQ_ERROR: usize = 4096;

fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn status_name(s: AckStatus) -> &'static str {
    match s {
        AckStatus::Completed => "completed",
        AckStatus::Failed => "failed",
        AckStatus::Retry => "retry",
        AckStatus::Dlq => "dlq",
    }
}

/// Cursor rows of the partitions an ack call has nacked so far, each with the lease it had
/// when the call began; keyed by (group id, partition id).
pub type Rewound = HashMap<(u64, u64), CursorRow>;

/// Where an ack lands, once resolved and checked.
pub struct ResolvedAck {
    pub gid: u64,
    pub pid: u64,
    pub offset: u64,
    pub row: CursorRow,
}

impl Planner<'_> {
    /// Resolves an ack and checks it against the cursor and lease, changing nothing.
    pub fn check_ack(
        &mut self,
        item: &AckItem,
        group: &str,
    ) -> Result<(ResolvedAck, bool), QueenError> {
        self.check_ack_over(item, group, None, None)
    }

    /// [`Self::check_ack`] against the state as a transaction's earlier steps would leave it:
    /// `scratch` overlays cursor rows, `pushed` maps (partition, transactionId) to the offset
    /// of a message pushed earlier in the bundle (the newest message of that id).
    pub fn check_ack_over(
        &mut self,
        item: &AckItem,
        group: &str,
        scratch: Option<&HashMap<(u64, u64), CursorRow>>,
        pushed: Option<&HashMap<(u64, String), u64>>,
    ) -> Result<(ResolvedAck, bool), QueenError> {
        let now = self.now();
        let pid = self.partition_id(&item.partition_id).ok_or_else(|| {
            QueenError::not_found(format!("unresolvable partitionId {}", item.partition_id))
        })?;
        let qid = self.st.partitions.get(&pid).map(|p| p.queue()).unwrap_or(0);
        let gid = self
            .st
            .queues
            .get(&qid)
            .and_then(|q| q.groups.get(group))
            .copied()
            .ok_or_else(|| {
                QueenError::not_found(format!(
                    "unresolvable: consumer group {group} has not consumed this partition"
                ))
            })?;
        let row = match scratch.and_then(|s| s.get(&(gid, pid))) {
            Some(r) => *r,
            None => self
                .st
                .groups
                .get(&gid)
                .and_then(|g| g.cursors.get(&pid))
                .copied()
                .unwrap_or_default(),
        };
        let scan = row.lease.map(|l| (row.committed, l.end));
        let in_bundle = pushed.and_then(|m| m.get(&(pid, item.transaction_id.clone())));
        let resolved = match in_bundle.copied() {
            Some(off) => Some(off),
            // A cursor without a lease still has what it delivered: read there before a
            // search by time refuses the ack (review s34 d H2).
            None => self.resolve_txn_or(pid, &item.transaction_id, scan, row.in_flight())?,
        };
        let Some(offset) = resolved else {
            // A message retention removed (maxWaitTimeSeconds takes leased ones too) is gone
            // with its lease: under a lease that is no longer live the answer is the expired
            // lease's, as for any ack that came too late.
            let lease_ended = item.lease_id.as_deref().is_some_and(|given| {
                let given = parse_lease(given);
                given.is_none() || given != row.live_lease(now).map(|l| l.id)
            });
            if lease_ended {
                return Err(conflict("invalid or expired lease"));
            }
            return Err(QueenError::not_found(format!(
                "unresolvable transactionId {} in partition {pid}",
                item.transaction_id
            )));
        };
        if offset < row.committed {
            return match item.status {
                AckStatus::Completed => Ok((
                    ResolvedAck {
                        gid,
                        pid,
                        offset,
                        row,
                    },
                    true,
                )),
                _ => Err(conflict(format!(
                    "message {offset} is already committed: a nack below the cursor cannot be honoured"
                ))),
            };
        }
        if let Some(given) = &item.lease_id {
            let live = row.live_lease(now);
            match (parse_lease(given), live) {
                (Some(id), Some(l)) if l.id == id => {
                    if offset >= l.end {
                        return Err(conflict(format!(
                            "message {offset} is outside the range of lease {given}"
                        )));
                    }
                }
                _ => return Err(conflict("invalid or expired lease")),
            }
        } else if offset >= row.delivered_end {
            return Err(conflict(format!(
                "message {offset} has not been delivered to group {group}"
            )));
        } else if item.status != AckStatus::Completed && row.live_lease(now).is_some() {
            // A nack rewinds the partition and releases its lease: without the lease id it
            // would take the partition from the consumer that holds it now.
            return Err(conflict(format!(
                "partition {pid} is leased to a consumer now: a {} ack needs that leaseId",
                status_name(item.status)
            )));
        }
        Ok((
            ResolvedAck {
                gid,
                pid,
                offset,
                row,
            },
            false,
        ))
    }

    pub fn plan_acks(&mut self, items: &[AckItem], call_group: &Option<String>) -> Vec<AckResult> {
        let mut rewound: Rewound = HashMap::new();
        let mut out = Vec::with_capacity(items.len());
        // Counted per (partition, status) and labelled per queue once per call: a metrics
        // lookup per acked message is measurable at 100k msg/s.
        let mut counts: HashMap<(u64, AckStatus), (u64, u64)> = HashMap::new();
        for item in items {
            let group = group_name(if item.group.is_some() {
                &item.group
            } else {
                call_group
            });
            let (res, pid) = self.plan_one_ack(item, group, &mut rewound);
            if let Some(pid) = pid {
                let c = counts.entry((pid, item.status)).or_default();
                c.0 += 1;
                c.1 += u64::from(res.dlq);
            }
            out.push(res);
        }
        self.record_ack_metrics(counts);
        out
    }

    /// Acked and dead-lettered counters, labelled per queue once per call: a metrics lookup
    /// per acked message is measurable at 100k msg/s.
    pub fn record_ack_metrics(&self, counts: HashMap<(u64, AckStatus), (u64, u64)>) {
        for ((pid, status), (acked, dlq)) in counts {
            let Some(queue) = self
                .st
                .partitions
                .get(&pid)
                .and_then(|p| self.st.queues.get(&p.queue()))
                .map(|q| q.name.clone())
            else {
                continue;
            };
            let status = status_name(status);
            if dlq > 0 {
                metrics::counter!(
                    "queen_messages_dead_lettered_total",
                    "queue" => queue.clone(),
                    "tenant" => self.tenant.to_owned()
                )
                .increment(dlq);
            }
            metrics::counter!(
                "queen_messages_acked_total",
                "queue" => queue,
                "status" => status,
                "tenant" => self.tenant.to_owned()
            )
            .increment(acked);
        }
    }

    /// One item of an ack call. `rewound` holds the partitions an earlier item of the call
    /// nacked: the later items of such a partition are checked against its row with the lease
    /// it had when the call began, so the nack's own release does not refuse them.
    pub fn plan_one_ack(
        &mut self,
        item: &AckItem,
        group: &str,
        rewound: &mut Rewound,
    ) -> (AckResult, Option<u64>) {
        let mut res = AckResult {
            transaction_id: item.transaction_id.clone(),
            ..Default::default()
        };
        let (ack, noop) = match self.check_ack_over(item, group, Some(rewound), None) {
            Ok(v) => v,
            Err(e) => {
                res.error = Some(e);
                return (res, None);
            }
        };
        if noop {
            res.success = true;
            res.noop = true;
            return (res, None);
        }
        if rewound.contains_key(&(ack.gid, ack.pid)) {
            // The cursor stays clamped at the call's first nack: a later failed or retry item
            // comes back with it (its lease was valid when the call began), while a later
            // completion or dead-letter would need the cursor past that nack.
            if matches!(item.status, AckStatus::Failed | AckStatus::Retry) {
                res.success = true;
                return (res, Some(ack.pid));
            }
            res.error = Some(conflict(
                "not committed: an earlier nack in this call rewound the partition",
            ));
            return (res, None);
        }
        let (row, dlq) = self.next_row(&ack, item);
        if item.status != AckStatus::Completed {
            let lease = ack.row.lease;
            rewound.insert((ack.gid, ack.pid), CursorRow { lease, ..row });
        }
        res.success = true;
        res.lease_released = ack.row.lease.is_some() && row.lease.is_none();
        res.dlq = dlq;
        self.emit_ack(&ack, row, dlq, item);
        (res, Some(ack.pid))
    }

    /// The effects of a checked ack: its dead-letter row, if any, and the new cursor row.
    pub fn emit_ack(&mut self, ack: &ResolvedAck, row: CursorRow, dlq: bool, item: &AckItem) {
        if dlq {
            let error = truncate_utf8(item.error.as_deref().unwrap_or_default(), MAX_DLQ_ERROR);
            self.emit(Effect::DlqInsert {
                gid: ack.gid,
                pid: ack.pid,
                offset: ack.offset,
                retries: ack.row.failures,
                error,
            });
        }
        self.emit(Effect::CursorPut {
            gid: ack.gid,
            pid: ack.pid,
            row,
        });
    }

    /// The cursor row after this ack, and whether the message goes to the dead-letter queue.
    pub fn next_row(&self, ack: &ResolvedAck, item: &AckItem) -> (CursorRow, bool) {
        let mut row = ack.row;
        let off = ack.offset;
        let cfg = self
            .st
            .partitions
            .get(&ack.pid)
            .and_then(|p| self.st.queues.get(&p.queue()))
            .map(|q| q.config.clone())
            .unwrap_or_default();
        match item.status {
            AckStatus::Completed => {
                row.committed = row.committed.max(off + 1);
                row.failures = 0;
                if row.lease.is_some_and(|l| row.committed >= l.end) {
                    row.lease = None;
                }
                (row, false)
            }
            AckStatus::Retry => {
                row.failures = if off == row.committed {
                    row.failures
                } else {
                    0
                };
                row.committed = off;
                row.lease = None;
                (row, false)
            }
            AckStatus::Failed => {
                let failures = if off == row.committed {
                    row.failures + 1
                } else {
                    1
                };
                row.committed = off;
                row.lease = None;
                if i64::from(failures) > cfg.retry_limit {
                    row.committed = off + 1;
                    row.failures = 0;
                    // Spec §2.19: either switch keeps the dead-letter queue on; only both
                    // off drop the exhausted message.
                    let dlq = cfg.dead_letter_queue || cfg.dlq_after_max_retries;
                    (row, dlq)
                } else {
                    row.failures = failures;
                    (row, false)
                }
            }
            AckStatus::Dlq => {
                row.committed = off + 1;
                row.failures = 0;
                row.lease = None;
                (row, true)
            }
        }
    }

    pub fn plan_extend(&mut self, lease: &str) -> (u32, Option<i64>) {
        let now = self.now();
        let Some(id) = parse_lease(lease) else {
            return (0, None);
        };
        let holders = self.st.leases.get(&id).cloned().unwrap_or_default();
        let mut renewed = 0;
        let mut expires = None;
        for (gid, pid) in holders {
            let Some(row) = self
                .st
                .groups
                .get(&gid)
                .and_then(|g| g.cursors.get(&pid))
                .copied()
            else {
                continue;
            };
            let Some(mut l) = row.live_lease(now).copied().filter(|l| l.id == id) else {
                continue;
            };
            l.expires_us = now.saturating_add(secs_us(i64::from(l.seconds)));
            expires = Some(l.expires_us);
            renewed += 1;
            self.emit(Effect::CursorPut {
                gid,
                pid,
                row: CursorRow {
                    lease: Some(l),
                    ..row
                },
            });
        }
        (renewed, expires)
    }
}

fn conflict(message: impl Into<String>) -> QueenError {
    QueenError::new(ErrorCode::Conflict, message)
}
