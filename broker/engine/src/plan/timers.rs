//! Timers (spec/native-api.md §2.15): schedule, reschedule and cancel as `TimerPut` /
//! `TimerDelete` effects, and the fire, planned by the engine's cycle: an ordinary push of
//! the timer's payload with the timer's `TimerDelete` in the same entry, so a timer fires
//! once (both or neither are in the log, whatever crashes).

use std::collections::HashSet;

use bytes::Bytes;
use queenmq_protocol::{
    ErrorCode, PushItem, PushStatus, QueenError, TimerOp, TimerResult, TimerSchedule, TimerStatus,
    TimersReq, MAX_TIMERS_PER_TENANT, MAX_TIMER_BYTES_PER_TENANT, MAX_TIMER_DELAY_MS,
    MAX_TIMER_KEY_BYTES, MAX_TIMER_PAYLOAD_BYTES, TIMERS_QUOTA_REFUSAL,
};
use uuid::Uuid;

use super::{check_name, Planner};
use crate::entry::Effect;
use crate::state::timers::{TimerRow, SEALED_TIMER};

/// What one fired timer adds to the entry besides its payload and names (the QueueUpsert and
/// PartitionUpsert a fire may imply, the Append and TimerDelete headers, the frame's id and
/// fields).
const FIRE_OVERHEAD: usize = 512;

/// A refused fire's timer is moved this far forward, so it stops holding the head of the due
/// index (and the cycle's fire budget) while the cause lasts.
const REFUSED_FIRE_RETRY_US: i64 = 10_000_000;

/// An upper bound of the bytes firing this timer adds to an entry: the queue name may be in a
/// QueueUpsert, the PartitionUpsert, the Append and the TimerDelete; the partition in the
/// PartitionUpsert and the Append.
pub fn fire_bound(queue: &str, key: &str, partition: &str, txn: &str, payload: usize) -> usize {
    FIRE_OVERHEAD
        .saturating_add(4 * queue.len())
        .saturating_add(2 * partition.len())
        .saturating_add(key.len())
        .saturating_add(txn.len())
        .saturating_add(payload)
}

/// Fires per cycle while the memory budget refuses writes that grow the state.
const FIRED_PER_CYCLE_UNDER_PRESSURE: usize = 16;

/// Checks one op alone (bounds every field a client sends), before anything is planned.
pub fn check_op(op: &TimerOp) -> Result<(), QueenError> {
    let (queue, key) = match op {
        TimerOp::Schedule(s) => {
            check_name("partition", &s.partition)?;
            if s.txn.is_empty() || s.txn.len() > usize::from(u16::MAX) {
                return Err(QueenError::bad_request("txn must be 1 to 65535 bytes"));
            }
            if s.payload.first() == Some(&SEALED_TIMER) {
                return Err(QueenError::bad_request(
                    "the timer payload is not JSON text (it starts with NUL)",
                ));
            }
            if s.payload.len() > MAX_TIMER_PAYLOAD_BYTES {
                return Err(QueenError::new(
                    ErrorCode::PayloadTooLarge,
                    format!(
                        "the timer payload is {} bytes decoded; the limit is {MAX_TIMER_PAYLOAD_BYTES}",
                        s.payload.len()
                    ),
                ));
            }
            if s.delay_ms > MAX_TIMER_DELAY_MS {
                return Err(QueenError::new(
                    ErrorCode::Forbidden,
                    format!(
                        "delayMs {} is past the timer horizon of {MAX_TIMER_DELAY_MS} ms (365 days)",
                        s.delay_ms
                    ),
                ));
            }
            (&s.queue, &s.key)
        }
        TimerOp::Cancel { queue, key, txn } => {
            if txn
                .as_ref()
                .is_some_and(|t| t.len() > usize::from(u16::MAX))
            {
                return Err(QueenError::bad_request("txn is longer than 65535 bytes"));
            }
            (queue, key)
        }
    };
    check_name("queue", queue)?;
    check_key(key)
}

fn check_key(key: &str) -> Result<(), QueenError> {
    if key.is_empty() {
        return Err(QueenError::bad_request("timerKey is required"));
    }
    if key.len() > MAX_TIMER_KEY_BYTES {
        return Err(QueenError::bad_request(format!(
            "timerKey is longer than {MAX_TIMER_KEY_BYTES} bytes"
        )));
    }
    if key.chars().any(char::is_control) {
        return Err(QueenError::bad_request(
            "timerKey contains control characters",
        ));
    }
    Ok(())
}

/// Checks a whole call: each op, and each (queue, key) at most once.
pub fn check_ops(ops: &[TimerOp]) -> Result<(), QueenError> {
    let mut seen = HashSet::with_capacity(ops.len());
    for op in ops {
        check_op(op)?;
        let k = match op {
            TimerOp::Schedule(s) => (&s.queue, &s.key),
            TimerOp::Cancel { queue, key, .. } => (queue, key),
        };
        if !seen.insert(k) {
            return Err(QueenError::bad_request(format!(
                "timer {}/{} appears more than once in one call",
                k.0, k.1
            )));
        }
    }
    Ok(())
}

impl Planner<'_> {
    /// Plans a call's ops: all of them, or (any refused) none.
    pub fn plan_timers(&mut self, req: &TimersReq) -> Result<Vec<TimerResult>, QueenError> {
        self.check_timers(&req.ops)?;
        Ok(self.commit_timers(&req.ops))
    }

    /// Everything `commit_timers` needs to hold: the ops' bounds, and the tenant's quota and
    /// the memory budget for the rows the schedules add.
    pub fn check_timers(&self, ops: &[TimerOp]) -> Result<(), QueenError> {
        check_ops(ops)?;
        if self.seal.is_none() {
            for op in ops {
                if let TimerOp::Schedule(s) = op {
                    if self.timer_sealed(&s.queue) {
                        return Err(super::push::no_key(&s.queue));
                    }
                }
            }
        }
        let (mut rows, mut bytes) = (self.st.timers.len(), self.st.timers.held_bytes());
        let mut grows = false;
        for op in ops {
            let TimerOp::Schedule(s) = op else { continue };
            let new = TimerRow {
                partition: s.partition.clone(),
                txn: s.txn.clone(),
                message_id: 0,
                deliver_at_us: 0,
                created_us: 0,
                payload: Vec::new(),
            }
            .held_bytes(&s.queue, &s.key)
            .saturating_add(s.payload.len());
            match self.st.timers.get(&s.queue, &s.key) {
                Some(old) => {
                    bytes = bytes.saturating_sub(old.held_bytes(&s.queue, &s.key));
                }
                None => {
                    rows += 1;
                    grows = true;
                }
            }
            bytes = bytes.saturating_add(new);
        }
        if rows > MAX_TIMERS_PER_TENANT || bytes > MAX_TIMER_BYTES_PER_TENANT {
            return Err(QueenError::new(
                ErrorCode::Forbidden,
                format!(
                    "{TIMERS_QUOTA_REFUSAL}the tenant's pending timers would pass their quota \
                     ({MAX_TIMERS_PER_TENANT} timers, {} MiB); nothing was scheduled, retry once \
                     timers fire or are cancelled",
                    MAX_TIMER_BYTES_PER_TENANT >> 20
                ),
            ));
        }
        if grows {
            if let Some(m) = self.memory.filter(|m| m.pressed()) {
                return Err(m.refusal());
            }
        }
        Ok(())
    }

    /// Emits checked ops, in order; answers index-aligned.
    pub fn commit_timers(&mut self, ops: &[TimerOp]) -> Vec<TimerResult> {
        ops.iter().map(|op| self.commit_timer(op)).collect()
    }

    fn commit_timer(&mut self, op: &TimerOp) -> TimerResult {
        match op {
            TimerOp::Schedule(s) => self.schedule(s),
            TimerOp::Cancel { queue, key, txn } => {
                let found = self.st.timers.get(queue, key).map(|r| r.txn.clone());
                let status = if found.is_some() {
                    self.emit(Effect::TimerDelete { queue, key });
                    TimerStatus::Cancelled
                } else {
                    TimerStatus::Absent
                };
                metrics::counter!("queen_timers_total", "op" => status.as_str(), "tenant" => self.tenant.to_owned())
                    .increment(1);
                TimerResult {
                    status,
                    queue: queue.clone(),
                    key: key.clone(),
                    txn: txn.clone().or(found),
                    message_id: None,
                    deliver_at_us: None,
                }
            }
        }
    }

    /// Whether a timer into `queue` keeps its payload sealed: the queue has `encryptionEnabled`
    /// now (one a fire would create is never encrypted).
    fn timer_sealed(&self, queue: &str) -> bool {
        self.st
            .queue_named(queue)
            .is_some_and(|q| q.config.encryption_enabled)
    }

    fn schedule(&mut self, s: &TimerSchedule) -> TimerResult {
        let now = self.now();
        // A negative delay is due now (§2.15): clamped, so the due index never reaches back.
        let deliver_at_us = now.saturating_add(s.delay_ms.max(0).saturating_mul(1000));
        let id = super::ids::message_id(now);
        let replaced = self.st.timers.get(&s.queue, &s.key).is_some();
        // check_timers refused an encrypted queue without a key; the seal can still fail (the
        // OS random source): nothing is stored then, and the answer says the timer is absent.
        let sealed = match self.seal.filter(|_| self.timer_sealed(&s.queue)) {
            Some(seal) => match seal.seal(id.as_bytes(), &s.payload) {
                Ok(env) => Some([&[SEALED_TIMER][..], &env].concat()),
                Err(e) => {
                    tracing::error!(queue = %s.queue, key = %s.key, error = %e, "sealing a timer payload failed; nothing was scheduled");
                    return TimerResult {
                        status: TimerStatus::Absent,
                        queue: s.queue.clone(),
                        key: s.key.clone(),
                        txn: None,
                        message_id: None,
                        deliver_at_us: None,
                    };
                }
            },
            None => None,
        };
        self.emit(Effect::TimerPut {
            queue: &s.queue,
            key: &s.key,
            partition: &s.partition,
            txn: &s.txn,
            message_id: id.as_u128(),
            deliver_at_us,
            payload: sealed.as_deref().unwrap_or(&s.payload),
        });
        let status = if replaced {
            TimerStatus::Rescheduled
        } else {
            TimerStatus::Scheduled
        };
        metrics::counter!("queen_timers_total", "op" => status.as_str(), "tenant" => self.tenant.to_owned())
            .increment(1);
        TimerResult {
            status,
            queue: s.queue.clone(),
            key: s.key.clone(),
            txn: Some(s.txn.clone()),
            message_id: Some(id.to_string()),
            deliver_at_us: Some(deliver_at_us),
        }
    }

    /// Fires up to `max` due timers while the entry stays under `cycle_bytes`: each is a push
    /// (creating its queue and partition if need be) and the row's removal, in this entry.
    /// The first fire of an empty entry may take up to `max_entry_bytes` (the first-job rule
    /// of the cycle: a timer larger than the cycle cap must still fire). A fire the push
    /// refuses (an id past what a checkpoint holds, a stored frame the dedup check could not
    /// read) moves its timer forward for a later cycle. Returns how many fired.
    pub fn fire_timers(&mut self, max: usize, cycle_bytes: usize, max_entry_bytes: usize) -> usize {
        if self.st.timers.is_empty() {
            return 0;
        }
        // A fire removes the row that holds the payload it pushes, so it frees about what it
        // adds: pressure must not freeze every tenant's timers, only slow them (the cap bounds
        // the queues and partitions fires may create while the budget is short).
        let max = if self.memory.is_some_and(|m| m.pressed()) {
            max.min(FIRED_PER_CYCLE_UNDER_PRESSURE)
        } else {
            max
        };
        let mut fired = 0;
        for (queue, key) in self.st.timers.due(self.now(), max) {
            let Some(row) = self.st.timers.get(&queue, &key).cloned() else {
                continue;
            };
            let size = fire_bound(&queue, &key, &row.partition, &row.txn, row.payload.len());
            let room = if self.cycle.entry.is_empty() {
                max_entry_bytes
            } else {
                cycle_bytes
            };
            if self.cycle.entry.len().saturating_add(size) > room {
                break;
            }
            let payload = match self.timer_payload(&row) {
                Ok(p) => p,
                Err(e) => {
                    tracing::error!(queue, key, error = %e, "a due timer's sealed payload did not open; it is retried");
                    metrics::counter!("queen_payload_decrypt_failures_total").increment(1);
                    self.retry_later(&queue, &key, &row);
                    continue;
                }
            };
            let item = PushItem {
                queue: queue.clone(),
                partition: row.partition.clone(),
                payload,
                transaction_id: Some(row.txn.clone()),
                trace_id: None,
            };
            let id = Uuid::from_u128(row.message_id);
            let prepared = match self.prepare_push_as(
                std::slice::from_ref(&item),
                None,
                Some(&[id]),
            ) {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(queue, key, error = %e, "a due timer could not fire; it is retried");
                    self.retry_later(&queue, &key, &row);
                    continue;
                }
            };
            if let Some(e) = prepared
                .results
                .first()
                .filter(|r| r.status == PushStatus::Failed)
                .and_then(|r| r.error.as_ref())
            {
                tracing::warn!(queue, key, error = %e, "a due timer's push was refused; it is retried");
                self.retry_later(&queue, &key, &row);
                continue;
            }
            self.commit_push(prepared);
            self.emit(Effect::TimerDelete {
                queue: &queue,
                key: &key,
            });
            fired += 1;
        }
        if fired > 0 {
            metrics::counter!("queen_timers_fired_total", "tenant" => self.tenant.to_owned())
                .increment(fired as u64);
        }
        fired
    }

    /// The JSON text a fire pushes: a sealed row's envelope opened (the push seals it again,
    /// with a new nonce, if the queue is still encrypted).
    fn timer_payload(&self, row: &TimerRow) -> Result<Bytes, String> {
        if !row.sealed() {
            return Ok(Bytes::copy_from_slice(&row.payload));
        }
        let seal = self
            .seal
            .ok_or("the timer's payload is encrypted and this broker has no encryption_key")?;
        let id = Uuid::from_u128(row.message_id);
        seal.open(id.as_bytes(), row.stored_payload())
            .map(Bytes::from)
            .map_err(|e| e.to_string())
    }

    /// Moves a timer whose fire was refused forward (same id, txn and payload), so the rows
    /// due behind it fire meanwhile. Its put is smaller than the fire it replaces.
    fn retry_later(&mut self, queue: &str, key: &str, row: &TimerRow) {
        self.emit(Effect::TimerPut {
            queue,
            key,
            partition: &row.partition,
            txn: &row.txn,
            message_id: row.message_id,
            deliver_at_us: self.now().saturating_add(REFUSED_FIRE_RETRY_US),
            payload: &row.payload,
        });
    }
}
