//! Pop: register the group on first contact, claim whole partitions under one lease, read the
//! claimed messages. A claim is a CursorPut in the cycle's entry, so it is durable before the
//! answer leaves.

use std::cmp::Reverse;
use std::sync::Arc;

use queenmq_protocol::{
    ConflationEcho, PopReq, PopResult, PopSource, PoppedMessage, QueenError, Subscription,
    QUEUE_MODE_GROUP,
};

use super::{group_name, lease_text, Planner};
use crate::entry::Effect;
use crate::state::model::{cursor_start, secs_us, CursorRow, LeaseRow};

/// Server defaults when the client leaves batch/partitions to the broker.
pub const DEFAULT_BATCH: u32 = 200;
const AUTOPILOT_PARTITIONS: u32 = 32;
const AUTOPILOT_WAIT_MS: u64 = 100;

/// A group a pop registers once it is decided.
pub struct NewGroup {
    qid: u64,
    gid: u64,
    start_from_us: i64,
    conflation: bool,
}

pub enum PopPlan {
    Delivered(PopResult),
    /// Nothing deliverable now; what the empty answer says about conflation.
    Empty(ConflationEcho),
}

impl Planner<'_> {
    pub fn plan_pop(&mut self, req: &PopReq) -> Result<PopPlan, QueenError> {
        let group = group_name(&req.group).to_string();
        if req.group.is_some() && group.len() > 255 {
            return Err(QueenError::bad_request(
                "consumerGroup is longer than 255 bytes",
            ));
        }
        // The HTTP door refuses these first; the planner holds the rule for every door.
        if req.conflation && (req.group.is_none() || group == QUEUE_MODE_GROUP) {
            return Err(QueenError::bad_request("conflation needs a consumerGroup"));
        }
        if req.conflation && req.auto_ack {
            return Err(QueenError::bad_request(
                "conflation cannot be combined with autoAck",
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
            PopSource::Labels { namespace, task } => self
                .st
                .labels
                .matching(namespace.as_deref(), task.as_deref())
                .unwrap_or_else(|| {
                    let mut v: Vec<u64> = self.st.queues.keys().copied().collect();
                    v.sort_unstable();
                    v
                }),
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
        // Claims and group registrations are emitted only once every claimed partition was
        // read: a read failing after some claims must not leave leases that no answer carries,
        // nor a group registered by a pop that failed.
        let mut claims: Vec<(u64, u64, CursorRow)> = Vec::new();
        let mut new_groups: Vec<NewGroup> = Vec::new();
        let by_labels = matches!(req.source, PopSource::Labels { .. });
        // Under memory pressure a label pop passes over the queues where its group would be
        // new instead of failing whole: its existing groups must still drain, since draining
        // is what relieves the pressure.
        let mut passed_over = false;
        for qid in queues {
            if remaining == 0 || out.partitions_claimed >= max_parts {
                break;
            }
            if by_labels && self.refuses_new_group(qid, &group) {
                passed_over = true;
                continue;
            }
            let partition = match &req.source {
                PopSource::Partition(_, p) => Some(p.as_str()),
                _ => None,
            };
            if let Err(e) = self.claim_in_queue(
                qid,
                &group,
                partition,
                req,
                lease_id,
                max_parts,
                &mut remaining,
                &mut out,
                &mut claims,
                &mut new_groups,
            ) {
                // Nothing was claimed: the partitions taken off the ready lists go back on,
                // and the stand-ins of groups this pop would have registered go away.
                for (gid, pid, _) in claims {
                    if let Some(g) = self.st.groups.get_mut(&gid) {
                        g.mark_ready(pid);
                    }
                }
                for ng in new_groups {
                    self.st.groups.remove(&ng.gid);
                }
                return Err(e);
            }
        }
        for ng in new_groups {
            let Some(stand_in) = self.st.groups.remove(&ng.gid) else {
                continue;
            };
            debug_assert_eq!(ng.gid, self.st.next_group_id.max(1));
            self.emit(Effect::GroupRegister {
                qid: ng.qid,
                gid: ng.gid,
                name: &group,
                start_from_us: ng.start_from_us,
            });
            if ng.conflation {
                self.emit(Effect::GroupConflation { gid: ng.gid });
            }
            // The stand-in's derived lists (partitions taken off the ready list, wake times)
            // are what the planning left: they carry over to the registered group.
            if let Some(g) = self.st.groups.get_mut(&ng.gid) {
                g.ready = stand_in.ready;
                g.in_ready = stand_in.in_ready;
                g.wake = stand_in.wake;
            }
        }
        for (gid, pid, row) in claims {
            self.emit(Effect::CursorPut { gid, pid, row });
        }
        if req.autopilot {
            out.autopilot = Some((max_parts, batch, AUTOPILOT_WAIT_MS));
        }
        // No group met (no such queue yet): the policy asked is the one its registration
        // will store.
        if !out.echo.conflation && !out.echo.conflict {
            out.echo.conflation = req.conflation;
        }
        if out.messages.is_empty() {
            if let (true, Some(m)) = (passed_over, self.memory) {
                return Err(m.refusal());
            }
            return Ok(PopPlan::Empty(out.echo));
        }
        metrics::counter!(
            "queen_messages_popped_total",
            "queue" => out.queue.clone(),
            "tenant" => self.tenant.to_owned()
        )
        .increment(out.messages.len() as u64);
        Ok(PopPlan::Delivered(out))
    }

    /// Bytes this cycle's pops may still take: the connections share of the memory budget,
    /// less what the door holds (answers waiting for their clients), less what the cycle's
    /// earlier pops took, less what the Kafka transaction reads took and, when the cycle's
    /// batch holds such a read, the rest of their share (review s18 kafka M2,
    /// plan/kafka_txn_reads.rs; s19 kafka M2: a cycle without one keeps the whole room).
    /// Their answers reach the door only after the cycle commits, and the door counts them
    /// from then on (native-api answer.rs): this bounds what is built before that. Without a
    /// budget (tests), unbounded.
    pub(crate) fn answer_room(&self) -> usize {
        match self.memory {
            Some(m) => m
                .answer_room()
                .saturating_sub(self.cycle.answer_bytes)
                .saturating_sub(self.admin_reads_held()),
            None => usize::MAX,
        }
    }

    /// What the cycle's Kafka transaction reads hold or may still take from the pops.
    fn admin_reads_held(&self) -> usize {
        if self.cycle.has_admin_reads {
            self.admin_read_share().max(self.cycle.txn_read_bytes)
        } else {
            self.cycle.txn_read_bytes
        }
    }

    /// Whether registering `group` in queue `qid` would be refused for memory now.
    fn refuses_new_group(&self, qid: u64, group: &str) -> bool {
        group != QUEUE_MODE_GROUP
            && self.memory.is_some_and(|m| m.pressed())
            && !self
                .st
                .queues
                .get(&qid)
                .is_some_and(|q| q.groups.contains_key(group))
    }

    /// The group's id in queue `qid`. A group not registered yet gets a stand-in in
    /// `st.groups` under the id its registration will have (recorded in `new_groups`); while
    /// the node refuses writes for memory, a new named group is refused instead (it would
    /// grow the state that cannot be evicted, and clients may name any number of them). The
    /// queue-mode group is not refused: at most one per queue, and without it the messages
    /// of a queue nobody popped yet could not be drained under pressure.
    fn group_id(
        &mut self,
        qid: u64,
        group: &str,
        sub: &Subscription,
        conflation: bool,
        new_groups: &mut Vec<NewGroup>,
    ) -> Result<u64, QueenError> {
        if let Some(gid) = self.st.queues.get(&qid).and_then(|q| q.groups.get(group)) {
            return Ok(*gid);
        }
        if group != QUEUE_MODE_GROUP {
            if let Some(m) = self.memory.filter(|m| m.pressed()) {
                return Err(m.refusal());
            }
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
        let gid = self
            .st
            .next_group_id
            .max(1)
            .saturating_add(new_groups.len() as u64);
        super::id_space::new_group(gid)?;
        if let Some(mut g) = self.st.new_group(qid, gid, group, start_from_us, now) {
            // The policy is stored at the first registration, from the pop that registers.
            g.conflation = conflation;
            self.st.groups.insert(gid, g);
            new_groups.push(NewGroup {
                qid,
                gid,
                start_from_us,
                conflation,
            });
        }
        Ok(gid)
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
        claims: &mut Vec<(u64, u64, CursorRow)>,
        new_groups: &mut Vec<NewGroup>,
    ) -> Result<(), QueenError> {
        let gid = self.group_id(qid, group, &req.subscription, req.conflation, new_groups)?;
        let now = self.now();
        // The stored policy wins over what the pop asked; a mismatch is echoed (§2.5.4).
        let conflation = self.st.groups.get(&gid).is_some_and(|g| g.conflation);
        out.echo.conflation |= conflation;
        out.echo.conflict |= conflation != req.conflation;
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
        // Clamped to what the lease row stores (u32 seconds, ~136 years): a bigger number must
        // not wrap into a short or expired lease.
        let lease_secs: u32 = match req.lease_seconds {
            Some(s) if s > 0 => u32::try_from(s).unwrap_or(u32::MAX),
            _ if cfg.lease_time > 0 => u32::try_from(cfg.lease_time).unwrap_or(u32::MAX),
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
                let delay = secs_us(cfg.delayed_processing);
                end = p.first_offset_at_or_after(now.saturating_sub(delay).saturating_add(1));
                if end < p.next_offset {
                    if let Some(c) = p.created_of(end) {
                        g.wake.push(Reverse((c.saturating_add(delay), pid)));
                        self.st.wakes.insert(c.saturating_add(delay), gid);
                    }
                }
            }
            if cfg.window_buffer > 0 {
                let until = p.last_write_us.saturating_add(secs_us(cfg.window_buffer));
                if until > now && row.committed < p.next_offset {
                    g.wake.push(Reverse((until, pid)));
                    self.st.wakes.insert(until, gid);
                    continue;
                }
            }
            // Kafka transactions (docs/kafka-transactions.md): HTTP stops at the last stable
            // offset. The end's marker Append re-readies a partition this drops meanwhile.
            end = end.min(self.st.kafka_txns.lso(pid, p.low_offset(), p.next_offset));
            // A cursor below the partition's first held offset (messages forgotten after an
            // accepted data loss, state/forget.rs) starts at it: nothing below can be read.
            let mut start = row.committed.max(p.low_offset());
            if start >= end {
                continue;
            }
            // Last-value delivery: only the newest visible message goes out, and the claim's
            // cursor row commits everything behind it (retired for this group only).
            if conflation {
                let last = {
                    let mut reader = super::MessageReader {
                        pending: self.cycle.entry.bytes(),
                        cache: self.cache,
                        log: self.log,
                        seal: self.seal,
                    };
                    let txns = &self.st.kafka_txns;
                    reader.last_visible(p, start, end, |o| txns.hidden_run_start(pid, o))
                };
                let last = match last {
                    Ok(Some(o)) => o,
                    Ok(None) => {
                        // Only hidden records: the cursor passes them, nothing is delivered.
                        claims.push((gid, pid, passed_hidden(row, end)));
                        continue;
                    }
                    Err(e) => return Err(self.unread(gid, pid, e)),
                };
                end = last + 1;
                let retired = end - 1 - start;
                if retired > 0 {
                    metrics::counter!(
                        "queen_messages_conflated_total",
                        "queue" => qname.clone(),
                        "tenant" => self.tenant.to_owned()
                    )
                    .increment(retired);
                }
                start = end - 1;
            }
            // Failures charged to a retired message are not the newest one's.
            let failures = if req.auto_ack || start != row.committed {
                0
            } else {
                row.failures
            };
            let pname: Arc<str> = (&*p.name).into();
            // The answers this cycle's pops build must fit the room answers have; the first
            // message of a pop goes whatever its size, so every pop makes progress.
            let room = self.answer_room();
            if room == 0 && !out.messages.is_empty() {
                if let Some(g) = self.st.groups.get_mut(&gid) {
                    g.mark_ready(pid);
                }
                break;
            }
            let msgs = {
                let p = match self.st.partitions.get(&pid) {
                    Some(p) => p,
                    None => continue,
                };
                let mut reader = super::MessageReader {
                    pending: self.cycle.entry.bytes(),
                    cache: self.cache,
                    log: self.log,
                    seal: self.seal,
                };
                let max_msgs = usize::try_from(*remaining).unwrap_or(usize::MAX);
                // A bounded piece of the index per claim: past it, the next pop goes on.
                let (hidden, upto) =
                    self.st
                        .kafka_txns
                        .hidden_ranges_upto(pid, start, end, HIDDEN_RANGES_PER_CLAIM);
                match reader.read_visible(p, start, upto, room, &hidden, max_msgs) {
                    Ok(m) => m,
                    Err(e) => return Err(self.unread(gid, pid, e)),
                }
            };
            let (msgs, passed) = msgs;
            let Some(last) = msgs.last() else {
                // Every offset it passed is hidden (aborted records, markers): the cursor
                // moves past them with no lease, so they never park a consumer.
                if passed > start {
                    claims.push((gid, pid, passed_hidden(row, passed)));
                }
                continue;
            };
            // The lease covers what is delivered (fewer than asked when the room ran out),
            // never hidden offsets after it: acking the last message must release it.
            let claim_end = last.offset + 1;
            self.cycle.answer_bytes = msgs.iter().fold(self.cycle.answer_bytes, |a, m| {
                a.saturating_add(m.payload.len())
            });
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
                    expires_us: now.saturating_add(secs_us(i64::from(lease_secs))),
                    seconds: lease_secs,
                }),
                failures,
                attempt,
                delivered_end: row.delivered_end.max(claim_end),
            };
            claims.push((gid, pid, new_row));
            if out.queue.is_empty() {
                out.queue = qname.clone();
            }
            out.partitions_claimed += 1;
            *remaining -= msgs.len() as u32;
            let (queue, partition): (Arc<str>, Arc<str>) = (qname.as_str().into(), pname);
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

/// Stretches of a Kafka transaction index one claim looks at (docs/kafka-transactions.md).
const HIDDEN_RANGES_PER_CLAIM: usize = 1024;

/// The cursor row of a claim that met only hidden offsets up to `end`: committed past them,
/// no lease, nothing delivered.
fn passed_hidden(row: CursorRow, end: u64) -> CursorRow {
    CursorRow {
        committed: row.committed.max(end),
        lease: None,
        failures: 0,
        attempt: row.attempt,
        delivered_end: row.delivered_end.max(end),
    }
}

impl Planner<'_> {
    /// A claim's read failed: the partition, taken off the ready list, goes back on.
    fn unread(&mut self, gid: u64, pid: u64, e: crate::reader::ReadError) -> QueenError {
        if let Some(g) = self.st.groups.get_mut(&gid) {
            g.mark_ready(pid);
        }
        QueenError::new(queenmq_protocol::ErrorCode::Internal, e.to_string())
    }
}
