//! Push: implicit queue and partition creation, per-partition transactionId dedup, one Append
//! effect per partition per command (so a request becomes visible atomically, in order).
//!
//! Planned in two steps: [`Planner::prepare_push`] decides every item (ids of the queues and
//! partitions it would create included) and emits nothing, so a refusal found at any item
//! (a dedup frame that cannot be read) leaves no queue or partition behind;
//! [`Planner::commit_push`] then emits the creates and the appends.

use std::collections::HashMap;

use queenmq_protocol::{ErrorCode, PushItem, PushResult, PushStatus, QueenError};

use super::{check_name, id_space, Planner};
use crate::entry::Effect;
use crate::state::config::{QueueConfig, IMPLICIT_LEASE_SECONDS};
use crate::state::frame::{write_frame_ref, FrameRef};
use crate::state::model::secs_us;
use crate::state::{FindError, State};

struct PendingAppend {
    pid: u64,
    base: u64,
    hashes: Vec<u64>,
    frames: Vec<u8>,
    /// hash → index in the results of messages in this command, for in-request dedup.
    txns: HashMap<u64, usize>,
}

/// A push decided but not yet emitted: results index-aligned with the items.
pub struct PreparedPush {
    pub results: Vec<PushResult>,
    /// Queues to create, (id, name), in id order.
    new_queues: Vec<(u64, String)>,
    /// Partitions to create, (queue id, partition id, name), in id order.
    new_partitions: Vec<(u64, u64, String)>,
    pending: Vec<PendingAppend>,
}

/// Ids handed to the queues and partitions a request creates, in the order apply assigns them.
struct NewIds {
    next_queue: u64,
    next_partition: u64,
    queues: HashMap<String, u64>,
    partitions: HashMap<(u64, String), u64>,
}

impl NewIds {
    /// The (queue, partition) ids of an item, handing out new ones where the queue or the
    /// partition does not exist yet. Refused, when an id would pass what a checkpoint holds,
    /// before anything is handed out: no queue is created for a partition that cannot be.
    fn assign(
        &mut self,
        st: &State,
        item: &PushItem,
        new_queues: &mut Vec<(u64, String)>,
        new_partitions: &mut Vec<(u64, u64, String)>,
    ) -> Result<(u64, u64), QueenError> {
        let known_qid = st
            .queue_by_name
            .get(&item.queue)
            .or_else(|| self.queues.get(&item.queue))
            .copied();
        let known_pid = known_qid.and_then(|qid| {
            st.queues
                .get(&qid)
                .and_then(|q| q.partitions.get(&item.partition, &st.partitions))
                .or_else(|| self.partitions.get(&(qid, item.partition.clone())).copied())
        });
        if known_qid.is_none() {
            id_space::new_queue(self.next_queue)?;
        }
        if known_pid.is_none() {
            id_space::new_partition(self.next_partition)?;
        }
        let qid = known_qid.unwrap_or_else(|| {
            let id = self.next_queue;
            self.next_queue = id.saturating_add(1);
            self.queues.insert(item.queue.clone(), id);
            new_queues.push((id, item.queue.clone()));
            id
        });
        let pid = known_pid.unwrap_or_else(|| {
            let id = self.next_partition;
            self.next_partition = id.saturating_add(1);
            self.partitions.insert((qid, item.partition.clone()), id);
            new_partitions.push((qid, id, item.partition.clone()));
            id
        });
        Ok((qid, pid))
    }
}

impl Planner<'_> {
    /// Checks an item without changing anything (used before a transaction executes).
    pub fn check_push_item(item: &PushItem) -> Result<(), QueenError> {
        check_name("queue", &item.queue)?;
        check_name("partition", &item.partition)?;
        if let Some(t) = &item.transaction_id {
            if t.len() > usize::from(u16::MAX) {
                return Err(QueenError::bad_request(
                    "transactionId is longer than 65535 bytes",
                ));
            }
        }
        Ok(())
    }

    /// Plans and emits a push. An Err (a stored frame the dedup check needs could not be
    /// read) emits nothing at all: the push is not accepted as new on a guess, no queue or
    /// partition is created for it, and the client may retry.
    pub fn plan_push(
        &mut self,
        items: &[PushItem],
        producer: Option<&str>,
    ) -> Result<Vec<PushResult>, QueenError> {
        let prepared = self.prepare_push(items, producer)?;
        Ok(self.commit_push(prepared))
    }

    /// Decides every item of a push against the state, emitting nothing.
    pub fn prepare_push(
        &mut self,
        items: &[PushItem],
        producer: Option<&str>,
    ) -> Result<PreparedPush, QueenError> {
        self.prepare_push_as(items, producer, None)
    }

    /// [`Self::prepare_push`] with the message ids given (index-aligned with `items`), for
    /// messages whose id was promised before they were pushed (a timer's).
    pub fn prepare_push_as(
        &mut self,
        items: &[PushItem],
        producer: Option<&str>,
        ids_given: Option<&[uuid::Uuid]>,
    ) -> Result<PreparedPush, QueenError> {
        let mut results: Vec<PushResult> = Vec::with_capacity(items.len());
        let mut pending: Vec<PendingAppend> = Vec::new();
        let mut by_pid: HashMap<u64, usize> = HashMap::new();
        let mut ids = NewIds {
            next_queue: self.st.next_queue_id.max(1),
            next_partition: self.st.next_partition_id.max(1),
            queues: HashMap::new(),
            partitions: HashMap::new(),
        };
        let mut new_queues = Vec::new();
        let mut new_partitions = Vec::new();
        let producer = producer.filter(|p| p.len() <= usize::from(u16::MAX));
        for (i, item) in items.iter().enumerate() {
            if let Err(e) = Self::check_push_item(item) {
                results.push(failed(item, e));
                continue;
            }
            let (qid, pid) = match ids.assign(self.st, item, &mut new_queues, &mut new_partitions) {
                Ok(ids) => ids,
                Err(e) => {
                    results.push(failed(item, e));
                    continue;
                }
            };
            // A queue this push creates is never encrypted (only configure turns it on).
            let encrypted = self
                .st
                .queues
                .get(&qid)
                .is_some_and(|q| q.config.encryption_enabled);
            if encrypted && self.seal.is_none() {
                results.push(failed(item, no_key(&item.queue)));
                continue;
            }
            let slot = *by_pid.entry(pid).or_insert_with(|| {
                let base = self.st.partitions.get(&pid).map_or(0, |p| p.next_offset);
                pending.push(PendingAppend {
                    pid,
                    base,
                    hashes: Vec::new(),
                    frames: Vec::new(),
                    txns: HashMap::new(),
                });
                pending.len() - 1
            });
            let id = ids_given
                .and_then(|ids| ids.get(i).copied())
                .unwrap_or_else(|| super::ids::message_id(self.now()));
            let id_text = id.to_string();
            let given = item.transaction_id.clone().filter(|t| !t.is_empty());
            // An id minted here is new by construction: looking it up could only cost the
            // search (review s34 d H1 (a): by time past the hour, a batch's whole budget).
            // Ids handed in (`ids_given`: a timer's promised ids) can repeat after a crash.
            let minted = given.is_none() && ids_given.is_none();
            let txn = given.unwrap_or_else(|| id_text.clone());
            let hash = xxhash_rust::xxh3::xxh3_64(txn.as_bytes());
            let dup = if minted {
                None
            } else {
                self.find_duplicate(pid, &txn, hash, &pending[slot], &results)?
            };
            if let Some(dup) = dup {
                results.push(PushResult {
                    message_id: dup.1,
                    transaction_id: txn,
                    queue: item.queue.clone(),
                    partition_id: pid,
                    offset: dup.0,
                    status: PushStatus::Duplicate,
                    error: None,
                });
                continue;
            }
            let sealed = match self.seal.filter(|_| encrypted) {
                Some(seal) => match seal.seal(id.as_bytes(), &item.payload) {
                    Ok(b) => Some(b),
                    Err(e) => {
                        tracing::error!(queue = %item.queue, error = %e, "sealing a payload failed");
                        results.push(failed(
                            item,
                            QueenError::unavailable(format!("encrypting the payload failed: {e}")),
                        ));
                        continue;
                    }
                },
                None => None,
            };
            let pa = &mut pending[slot];
            let offset = pa.base + pa.hashes.len() as u64;
            write_frame_ref(
                &mut pa.frames,
                &FrameRef {
                    id: *id.as_bytes(),
                    trace: item.trace_id,
                    txn: &txn,
                    producer,
                    encrypted: sealed.is_some(),
                    payload: sealed.as_deref().unwrap_or(&item.payload),
                },
            );
            pa.hashes.push(hash);
            pa.txns.insert(hash, results.len());
            results.push(PushResult {
                message_id: id_text,
                transaction_id: txn,
                queue: item.queue.clone(),
                partition_id: pid,
                offset,
                status: PushStatus::Queued,
                error: None,
            });
        }
        Ok(PreparedPush {
            results,
            new_queues,
            new_partitions,
            pending,
        })
    }

    /// Emits a prepared push: its queues and partitions, then one Append per partition. Nothing
    /// may be emitted between the prepare and this (the planned ids and offsets assume it).
    pub fn commit_push(&mut self, prepared: PreparedPush) -> Vec<PushResult> {
        let PreparedPush {
            results,
            new_queues,
            new_partitions,
            pending,
        } = prepared;
        for (qid, name) in &new_queues {
            debug_assert_eq!(*qid, self.st.next_queue_id.max(1));
            let config = QueueConfig {
                lease_time: IMPLICIT_LEASE_SECONDS,
                ..QueueConfig::default()
            };
            // Decided here, carried by the entry: replay never re-derives a label.
            let (namespace, task) = dotted_labels(name);
            self.emit(Effect::QueueUpsert {
                qid: *qid,
                name,
                namespace,
                task,
                configured: false,
                config,
            });
        }
        for (qid, pid, name) in &new_partitions {
            debug_assert_eq!(*pid, self.st.next_partition_id.max(1));
            self.emit(Effect::PartitionCreate {
                qid: *qid,
                pid: *pid,
                name,
            });
        }
        for pa in pending {
            if pa.hashes.is_empty() {
                continue;
            }
            self.emit(Effect::Append {
                pid: pa.pid,
                base_offset: pa.base,
                hashes: pa.hashes,
                frames: &pa.frames,
            });
        }
        metrics_for(self.tenant, &results);
        results
    }

    /// (offset, message id) of an earlier message with this transactionId inside the dedup window.
    fn find_duplicate(
        &mut self,
        pid: u64,
        txn: &str,
        hash: u64,
        pending: &PendingAppend,
        results: &[PushResult],
    ) -> Result<Option<(u64, String)>, QueenError> {
        if let Some(r) = pending.txns.get(&hash).and_then(|i| results.get(*i)) {
            if r.transaction_id == txn {
                return Ok(Some((r.offset, r.message_id.clone())));
            }
        }
        let Some(p) = self.st.partitions.get(&pid) else {
            return Ok(None);
        };
        let Some(q) = self.st.queues.get(&p.queue()) else {
            return Ok(None);
        };
        let window_us = secs_us(q.config.dedup_window_seconds);
        if window_us <= 0 {
            return Ok(None);
        }
        let horizon = self.now().saturating_sub(window_us);
        let now = self.now();
        let hot = self.st.txn_ids.get(pid, hash);
        let spill = self.st.txn_spill.as_deref();
        let mut reader = super::MessageReader {
            pending: self.cycle.entry.bytes(),
            cache: self.cache,
            log: self.log,
            seal: self.seal,
        };
        let mut unreadable = None;
        let mut found = None;
        // The hot table first, then the id files the filters name (state/txn_spill.rs); each
        // candidate is confirmed against its frame.
        let mut check = |off: u64| -> bool {
            if p.created_of(off).is_none_or(|c| c < horizon) {
                return false;
            }
            match reader.frame_meta(p, off) {
                Ok(Some((id, t))) if t == txn => {
                    found = Some((off, uuid::Uuid::from_bytes(id).to_string()));
                    true
                }
                Ok(_) => false,
                Err(e) => {
                    unreadable = Some((off, e.to_string()));
                    true
                }
            }
        };
        let hit = hot.is_some_and(&mut check);
        let lookup = match spill {
            Some(s) if !hit => s.find(
                pid,
                hash,
                now,
                window_us,
                &mut self.cycle.dedup_by_time_left,
                &mut check,
            ),
            _ => Ok(None),
        };
        // Fail closed: a frame or an id file that cannot be read might be this very message,
        // so the push is neither accepted as new nor called a duplicate.
        if let Some((off, e)) = unreadable {
            tracing::warn!(partition = pid, offset = off, error = %e, "dedup lookup could not read a stored message");
            return Err(QueenError::unavailable(format!(
                "could not check transactionId {txn} against the stored message it may repeat \
                 ({e}); nothing was written, retry the push"
            )));
        }
        if let Err(e @ FindError::OverBudget { .. }) = lookup {
            return Err(QueenError::unavailable(format!(
                "could not check transactionId {txn} against the id files in this cycle ({e}); \
                 nothing was written, retry the push"
            )));
        }
        if let Err(e) = lookup {
            tracing::warn!(partition = pid, error = %e, "dedup lookup could not read an id file");
            return Err(QueenError::unavailable(format!(
                "could not check transactionId {txn} against the id files ({e}); nothing was \
                 written, retry the push"
            )));
        }
        Ok(found)
    }
}

/// The refusal of an encrypted queue's payload on a broker without a key: never stored in plain.
pub fn no_key(queue: &str) -> QueenError {
    QueenError::new(
        ErrorCode::Unsupported,
        format!(
            "queue {queue} has encryptionEnabled but this broker has no encryption_key \
             (QUEEN_ENCRYPTION_KEY): its payloads are not stored in plain text"
        ),
    )
}

fn failed(item: &PushItem, error: QueenError) -> PushResult {
    PushResult {
        message_id: String::new(),
        transaction_id: item.transaction_id.clone().unwrap_or_default(),
        queue: item.queue.clone(),
        partition_id: 0,
        offset: 0,
        status: PushStatus::Failed,
        error: Some(error),
    }
}

fn metrics_for(tenant: &str, results: &[PushResult]) {
    let mut per_queue: HashMap<&str, u64> = HashMap::new();
    for r in results {
        if r.status == PushStatus::Queued {
            *per_queue.entry(r.queue.as_str()).or_default() += 1;
        }
    }
    for (q, n) in per_queue {
        metrics::counter!(
            "queen_messages_pushed_total",
            "queue" => q.to_string(),
            "tenant" => tenant.to_owned()
        )
        .increment(n);
    }
}

/// Labels of a queue a push creates (spec/native-api.md §2.19): a dotted name `A.B.rest` gets
/// namespace `A` and task `B`; an undotted one gets none.
pub fn dotted_labels(name: &str) -> (&str, &str) {
    let mut parts = name.split('.');
    match (parts.next(), parts.next()) {
        (Some(namespace), Some(task)) => (namespace, task),
        _ => ("", ""),
    }
}
