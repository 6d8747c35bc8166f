//! Kafka's transaction coordinator (docs/kafka-transactions.md): InitProducerId with a
//! transactional id, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn and the
//! timeout sweep. Each request is judged against the tenant's rows and emits effects 55–59;
//! an EndTxn's markers, group offsets and end are one entry.

use std::collections::BTreeSet;

use queenmq_protocol::kafka_groups::{
    valid_group_id, KafkaPartitionResult, MAX_KAFKA_OFFSETS_PER_REQUEST,
};
use queenmq_protocol::kafka_producers::MAX_PRODUCER_ID;
use queenmq_protocol::kafka_txns::*;
use queenmq_protocol::{ErrorCode, QueenError};

use super::Planner;
use crate::entry::Effect;
use crate::entry_kafka_txns::TxnEffect;
use crate::state::frame::{marker_id, write_frame};
use crate::state::kafka_groups::{group_bytes, offset_bytes};
use crate::state::kafka_txns::{
    TxnEnd, TxnResult, TxnRow, TxnState, LAST_EPOCH, MAX_TRANSACTIONAL_ID_BYTES,
};

/// The payload of a control record's message: never delivered (readers skip markers).
const MARKER_PAYLOAD: &[u8] = b"null";

/// Kafka's check of the producer a request names against the transactional id's row.
fn check_producer(row: Option<&TxnRow>, producer_id: i64, epoch: i16) -> TxnCode {
    match row {
        None => TxnCode::InvalidMapping,
        Some(r) if r.producer_id != producer_id => TxnCode::InvalidMapping,
        Some(r) if r.epoch != epoch => TxnCode::Fenced,
        Some(_) => TxnCode::None,
    }
}

/// One marker's bytes in the entry: its frame (fixed part, empty transaction id, payload),
/// its hash and its Append's header and 16 bytes in the end effect, rounded up (an over-
/// estimate since markers stopped carrying a generated transaction id; kept as the bound).
const MARKER_BYTES: usize = 160;
/// One effect's fixed part (kind, ids, epochs, counts, lengths), rounded up.
const TXN_EFFECT: usize = 64;

/// The bytes ending `row`'s open transaction may add to an entry: its markers, its pending
/// offsets, the end and the re-init of a fenced epoch.
fn end_bound(txn_id: &str, row: &TxnRow) -> usize {
    let offsets: usize = row
        .pending
        .iter()
        .map(|((g, t, _), v)| TXN_EFFECT + g.len() + t.len() + v.metadata.len())
        .sum();
    row.partitions
        .len()
        .saturating_mul(MARKER_BYTES)
        .saturating_add(offsets)
        .saturating_add(3 * (TXN_EFFECT + txn_id.len()))
}

/// An upper bound of the bytes `req` adds to an entry (crate::limits), from the request and
/// the row it names.
pub fn entry_bound(st: &crate::state::State, req: &KafkaTxnReq) -> usize {
    let ending = |txn_id: &str| {
        st.kafka_txns
            .get(txn_id)
            .map_or(0, |r| end_bound(txn_id, r))
    };
    match req {
        KafkaTxnReq::Init { txn_id, .. } => ending(txn_id) + 4 * (TXN_EFFECT + txn_id.len()),
        KafkaTxnReq::AddPartitions {
            txn_id, partitions, ..
        } => partitions
            .iter()
            .map(|p| TXN_EFFECT + p.topic.len() + 16)
            .sum::<usize>()
            .saturating_add(TXN_EFFECT + txn_id.len()),
        KafkaTxnReq::AddOffsets { txn_id, group, .. } => {
            2 * TXN_EFFECT + txn_id.len() + group.len()
        }
        KafkaTxnReq::OffsetCommit {
            txn_id,
            group,
            offsets,
            ..
        } => offsets
            .iter()
            .map(|o| TXN_EFFECT + txn_id.len() + group.len() + o.topic.len() + o.metadata.len())
            .sum(),
        KafkaTxnReq::End { txn_id, .. } => ending(txn_id),
    }
}

fn busy(why: &str) -> QueenError {
    QueenError::new(ErrorCode::Unavailable, format!("kafka transaction: {why}"))
}

impl Planner<'_> {
    pub fn plan_kafka_txn(&mut self, req: &KafkaTxnReq) -> Result<KafkaTxnOutcome, QueenError> {
        match req {
            KafkaTxnReq::Init {
                txn_id,
                timeout_ms,
                current,
                limits,
            } => self.txn_init(txn_id, *timeout_ms, *current, limits),
            KafkaTxnReq::AddPartitions {
                txn_id,
                producer_id,
                epoch,
                partitions,
                limits,
            } => Ok(KafkaTxnOutcome::Codes(self.txn_add_partitions(
                txn_id,
                *producer_id,
                *epoch,
                partitions,
                limits,
            ))),
            KafkaTxnReq::AddOffsets {
                txn_id,
                producer_id,
                epoch,
                group,
                limits,
            } => {
                if !valid_group_id(group) {
                    return Err(QueenError::bad_request(
                        "kafka transaction: invalid group id",
                    ));
                }
                let mut code = self.txn_open(txn_id, *producer_id, *epoch, limits);
                let groups = self.st.kafka_txns.get(txn_id).map(|r| &r.groups);
                let new = groups.is_some_and(|g| !g.contains(group.as_str()));
                let held = groups.map_or(0, |g| g.len());
                if code == TxnCode::None && new && held as u64 >= limits.max_partitions {
                    code = TxnCode::TooMany;
                }
                if code == TxnCode::None {
                    self.emit(Effect::KafkaTxn(TxnEffect::Add {
                        txn_id,
                        producer_id: *producer_id,
                        epoch: *epoch,
                        pids: Vec::new(),
                        groups: vec![group],
                    }));
                }
                Ok(KafkaTxnOutcome::Codes(vec![code]))
            }
            KafkaTxnReq::OffsetCommit {
                txn_id,
                producer_id,
                epoch,
                group,
                offsets,
                limits,
            } => Ok(KafkaTxnOutcome::Codes(self.txn_offsets(
                txn_id,
                *producer_id,
                *epoch,
                group,
                offsets,
                limits,
            )?)),
            KafkaTxnReq::End {
                txn_id,
                producer_id,
                epoch,
                commit,
                may_commit_offsets,
                limits: _,
            } => {
                let code = self.txn_end_request(
                    txn_id,
                    *producer_id,
                    *epoch,
                    *commit,
                    *may_commit_offsets,
                )?;
                Ok(KafkaTxnOutcome::Codes(vec![code]))
            }
        }
    }

    fn txn_init(
        &mut self,
        txn_id: &str,
        timeout_ms: i32,
        current: Option<(i64, i16)>,
        limits: &TxnLimits,
    ) -> Result<KafkaTxnOutcome, QueenError> {
        let refused = |code| KafkaTxnOutcome::Init {
            code,
            producer_id: -1,
            epoch: -1,
        };
        if txn_id.is_empty() || txn_id.len() > MAX_TRANSACTIONAL_ID_BYTES {
            return Err(QueenError::bad_request(
                "transactional id empty or longer than 1024 bytes",
            ));
        }
        let timeout = u32::try_from(timeout_ms).unwrap_or(0);
        if timeout == 0 || timeout > limits.max_timeout_ms {
            return Ok(refused(TxnCode::InvalidTimeout));
        }
        let row = self.st.kafka_txns.get(txn_id).cloned();
        if let (Some((id, epoch)), Some(r)) = (current, &row) {
            if (id, epoch) != (r.producer_id, r.epoch) {
                // KIP-360: the retry of a bump whose answer was lost names the pair it bumped
                // from; it gets the pair it was given, unchanged (Kafka's lastProducerEpoch).
                if r.state == TxnState::Empty && r.bumped_from == Some((id, epoch)) {
                    return Ok(KafkaTxnOutcome::Init {
                        code: TxnCode::None,
                        producer_id: r.producer_id,
                        epoch: r.epoch,
                    });
                }
                return Ok(refused(TxnCode::Fenced));
            }
        }
        if row.is_none() && self.st.kafka_txns.len() as u64 >= limits.max_ids {
            count_refusal("ids_cap");
            return Ok(refused(TxnCode::Busy));
        }
        // The previous incarnation's open transaction ends before the new epoch begins.
        if row.as_ref().is_some_and(|r| r.state == TxnState::Ongoing) {
            self.txn_finish(txn_id, false)?;
        }
        let (producer_id, epoch) = match &row {
            Some(r) if r.epoch < LAST_EPOCH => (r.producer_id, r.epoch + 1),
            _ => {
                let id = self.st.kafka_producers.next_id();
                if id > MAX_PRODUCER_ID {
                    return Ok(refused(TxnCode::Busy));
                }
                self.emit(Effect::KafkaProducerIdTaken { producer_id: id });
                (id, 0)
            }
        };
        // The producer row's epoch fences the old epoch's idempotent batches.
        self.emit(Effect::KafkaProducerInit { producer_id, epoch });
        self.emit(Effect::KafkaTxn(TxnEffect::Init {
            txn_id,
            producer_id,
            epoch,
            timeout_ms: timeout,
        }));
        if let (Some((named_id, named_epoch)), Some(_)) = (current, &row) {
            self.emit(Effect::KafkaTxn(TxnEffect::BumpedFrom {
                txn_id,
                producer_id: named_id,
                epoch: named_epoch,
            }));
        }
        Ok(KafkaTxnOutcome::Init {
            code: TxnCode::None,
            producer_id,
            epoch,
        })
    }

    /// The checks of a request that opens the transaction if it is not open.
    fn txn_open(&self, txn_id: &str, producer_id: i64, epoch: i16, limits: &TxnLimits) -> TxnCode {
        let row = self.st.kafka_txns.get(txn_id);
        let code = check_producer(row, producer_id, epoch);
        if code != TxnCode::None {
            return code;
        }
        let opening = row.is_some_and(|r| r.state == TxnState::Empty);
        if opening && self.st.kafka_txns.open_count() as u64 >= limits.max_open {
            count_refusal("open_cap");
            return TxnCode::Busy;
        }
        TxnCode::None
    }

    /// AddPartitionsToTxn: all or nothing, as Kafka (a failed partition makes the others
    /// OPERATION_NOT_ATTEMPTED). A partition below the topic's shown count that was never
    /// written is created, so that the transaction can name it; `admit` bounds how many one
    /// request creates (max_new_partitions_per_request).
    fn txn_add_partitions(
        &mut self,
        txn_id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[TxnPartition],
        limits: &TxnLimits,
    ) -> Vec<TxnCode> {
        let code = self.txn_open(txn_id, producer_id, epoch, limits);
        if code != TxnCode::None {
            return vec![code; partitions.len()];
        }
        let held = self
            .st
            .kafka_txns
            .get(txn_id)
            .map_or(0, |r| r.partitions.len());
        let mut codes = Vec::with_capacity(partitions.len());
        let mut found = Vec::with_capacity(partitions.len());
        let mut aborted_full = false;
        for (n, p) in partitions.iter().enumerate() {
            let qid = self.st.queue_by_name.get(&p.topic).copied();
            let shown = p.count.min(MAX_KAFKA_TOPIC_PARTITIONS);
            let code = if qid.is_none() || !u32::try_from(p.index).is_ok_and(|i| i < shown) {
                TxnCode::UnknownPartition
            } else if (held + n) as u64 >= limits.max_partitions {
                TxnCode::TooMany
            } else if self.aborted_index_full(qid, p.index, txn_id, limits.max_aborted) {
                aborted_full = true;
                TxnCode::Busy
            } else {
                TxnCode::None
            };
            codes.push(code);
            found.push(qid);
        }
        // Once per request, however many of its partitions are full (review s16 kafka L3):
        // the metric counts refused requests.
        if aborted_full {
            count_refusal("aborted_cap");
        }
        if codes.iter().any(|c| *c != TxnCode::None) {
            return codes
                .into_iter()
                .map(|c| {
                    if c == TxnCode::None {
                        TxnCode::NotAttempted
                    } else {
                        c
                    }
                })
                .collect();
        }
        // Every partition to create is judged before the first is: a refusal halfway would
        // leave the earlier PartitionCreate effects in the entry behind a Busy answer.
        let mut fresh: BTreeSet<(u64, String)> = BTreeSet::new();
        for (p, qid) in partitions.iter().zip(&found) {
            let Some(qid) = qid else { continue };
            let name = p.index.to_string();
            let known = self
                .st
                .queues
                .get(qid)
                .map(|q| q.partitions.get(&name, &self.st.partitions).is_some());
            match known {
                None => return vec![TxnCode::Busy; partitions.len()],
                Some(false) => {
                    fresh.insert((*qid, name));
                }
                Some(true) => {}
            }
        }
        let next = self.st.next_partition_id.max(1);
        let last = next.saturating_add(fresh.len() as u64);
        if !fresh.is_empty() && super::id_space::new_partition(last - 1).is_err() {
            return vec![TxnCode::Busy; partitions.len()];
        }
        let mut pids = Vec::with_capacity(partitions.len());
        for (p, qid) in partitions.iter().zip(found) {
            let Some(qid) = qid else { continue };
            match self.txn_partition(qid, &p.index.to_string()) {
                Some(pid) => pids.push(pid),
                None => return vec![TxnCode::Busy; partitions.len()],
            }
        }
        pids.sort_unstable();
        pids.dedup();
        self.emit(Effect::KafkaTxn(TxnEffect::Add {
            txn_id,
            producer_id,
            epoch,
            pids,
            groups: Vec::new(),
        }));
        codes
    }

    /// The engine partition `name` of queue `qid`, created if it does not exist yet.
    fn txn_partition(&mut self, qid: u64, name: &str) -> Option<u64> {
        let q = self.st.queues.get(&qid)?;
        if let Some(pid) = q.partitions.get(name, &self.st.partitions) {
            return Some(pid);
        }
        let pid = self.st.next_partition_id.max(1);
        super::id_space::new_partition(pid).ok()?;
        self.emit(Effect::PartitionCreate { qid, pid, name });
        Some(pid)
    }

    fn txn_offsets(
        &mut self,
        txn_id: &str,
        producer_id: i64,
        epoch: i16,
        group: &str,
        offsets: &[TxnOffset],
        limits: &TxnLimits,
    ) -> Result<Vec<TxnCode>, QueenError> {
        if !valid_group_id(group) || offsets.len() > MAX_KAFKA_OFFSETS_PER_REQUEST {
            return Err(QueenError::bad_request(
                "kafka transaction: invalid group id or too many offsets",
            ));
        }
        let row = self.st.kafka_txns.get(txn_id);
        let mut code = check_producer(row, producer_id, epoch);
        // Kafka answers a TxnOffsetCommit before AddOffsetsToTxn as a state error too.
        let joined = row.is_some_and(|r| r.state == TxnState::Ongoing && r.groups.contains(group));
        if code == TxnCode::None && !joined {
            code = TxnCode::InvalidState;
        }
        if code != TxnCode::None {
            return Ok(vec![code; offsets.len()]);
        }
        // A key already pending is replaced and costs no room under the cap.
        let mut keys: BTreeSet<(&str, i32)> = BTreeSet::new();
        let pending = row.map(|r| &r.pending);
        let mut held = row.map_or(0, |r| r.pending.len());
        let mut codes = Vec::with_capacity(offsets.len());
        for o in offsets {
            // Every check a plain OffsetCommit makes (plan/kafka_groups.rs).
            match self.kafka_offset_check(o) {
                KafkaPartitionResult::Ok => {}
                KafkaPartitionResult::InvalidTopic => {
                    codes.push(TxnCode::InvalidTopic);
                    continue;
                }
                KafkaPartitionResult::MetadataTooLarge => {
                    codes.push(TxnCode::MetadataTooLarge);
                    continue;
                }
            }
            let key = (group.to_owned(), o.topic.clone(), o.partition);
            let known = pending.is_some_and(|p| p.contains_key(&key))
                || !keys.insert((o.topic.as_str(), o.partition));
            if !known {
                if held as u64 >= limits.max_partitions {
                    codes.push(TxnCode::TooMany);
                    continue;
                }
                held += 1;
            }
            codes.push(TxnCode::None);
        }
        let taken: Vec<&TxnOffset> = offsets
            .iter()
            .zip(&codes)
            .filter(|(_, c)| **c == TxnCode::None)
            .map(|(o, _)| o)
            .collect();
        if self.txn_room_for_offsets(row, group, &taken).is_err() {
            // Retriable: the client sends them again once groups free room.
            return Ok(codes
                .into_iter()
                .map(|c| if c == TxnCode::None { TxnCode::Busy } else { c })
                .collect());
        }
        for (o, code) in offsets.iter().zip(&codes) {
            if *code == TxnCode::None {
                self.emit(Effect::KafkaTxn(TxnEffect::Offset {
                    txn_id,
                    group,
                    topic: &o.topic,
                    partition: o.partition,
                    offset: o.offset,
                    leader_epoch: o.leader_epoch,
                    metadata: &o.metadata,
                }));
            }
        }
        Ok(codes)
    }

    fn txn_end_request(
        &mut self,
        txn_id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        may_commit_offsets: bool,
    ) -> Result<TxnCode, QueenError> {
        let row = self.st.kafka_txns.get(txn_id);
        let code = check_producer(row, producer_id, epoch);
        if code != TxnCode::None {
            return Ok(code);
        }
        let Some(row) = row else {
            return Ok(TxnCode::InvalidMapping);
        };
        if row.state == TxnState::Empty {
            // A retry of the EndTxn that ended it is answered as it was.
            let same = matches!(
                (row.last_result, commit),
                (TxnResult::Committed, true) | (TxnResult::Aborted, false)
            );
            return Ok(if same {
                TxnCode::None
            } else {
                TxnCode::InvalidState
            });
        }
        // Committing moves group offsets: a producer-only caller may end a transaction that
        // holds none, or abort one that does, but not commit it.
        if commit && !row.pending.is_empty() && !may_commit_offsets {
            return Ok(TxnCode::GroupAuthorization);
        }
        // No cap is judged here (review F2): an open transaction that could not end would
        // hold the last stable offset of every partition it wrote. The caps are met where
        // a transaction takes room: its partitions (AddPartitionsToTxn, against the aborted
        // index) and its pending offsets (TxnOffsetCommit, against the group caps).
        self.txn_finish(txn_id, commit)?;
        Ok(TxnCode::None)
    }

    /// Whether partition `index` of queue `qid` already remembers `max_aborted` aborted
    /// transactions and `txn_id`'s open transaction does not hold it yet: a transaction
    /// that may abort there is not begun, so that every abort of one that was begun fits
    /// (the index holds at most `max_aborted` plus the open transactions' rows).
    fn aborted_index_full(&self, qid: Option<u64>, index: i32, txn_id: &str, max: u64) -> bool {
        let Some(pid) = qid
            .and_then(|q| self.st.queues.get(&q))
            .and_then(|q| q.partitions.get(&index.to_string(), &self.st.partitions))
        else {
            return false;
        };
        let held = self
            .st
            .kafka_txns
            .get(txn_id)
            .is_some_and(|r| r.partitions.contains_key(&pid));
        !held && self.st.kafka_txns.aborted_count(pid) as u64 >= max
    }

    /// Whether the tenant's group caps take `row`'s pending offsets with `group`'s `new`
    /// ones, as `kafka_commit` judges a plain OffsetCommit: judged when the offsets are
    /// sent, so that their commit is never refused (review F2).
    fn txn_room_for_offsets(
        &self,
        row: Option<&TxnRow>,
        group: &str,
        new: &[&TxnOffset],
    ) -> Result<(), QueenError> {
        let mut grow = 0usize;
        let mut new_groups: BTreeSet<&str> = BTreeSet::new();
        let pending = row
            .into_iter()
            .flat_map(|r| &r.pending)
            .map(|((g, t, _), v)| (g.as_str(), t.as_str(), v.metadata.as_str()));
        let sent = new
            .iter()
            .map(|o| (group, o.topic.as_str(), o.metadata.as_str()));
        for (group, topic, metadata) in pending.chain(sent) {
            grow = grow.saturating_add(offset_bytes(topic, metadata));
            if self.st.kafka_groups.get(group).is_none() && new_groups.insert(group) {
                grow = grow.saturating_add(group_bytes(group, "", ""));
            }
        }
        if grow == 0 {
            return Ok(());
        }
        self.kafka_room_for_groups(new_groups.len())?;
        self.kafka_room_for_bytes(grow)
    }

    /// Ends the open transaction of `txn_id`: a marker appended to each partition it wrote,
    /// its pending offsets committed (commit only), then its end, in this entry. No cap
    /// refuses it: the room it takes was judged when the transaction took it.
    fn txn_finish(&mut self, txn_id: &str, commit: bool) -> Result<(), QueenError> {
        let Some(row) = self.st.kafka_txns.get(txn_id).cloned() else {
            return Err(busy("no such transactional id"));
        };
        let mut marks: Vec<(u64, u64)> = Vec::new();
        for (pid, first) in &row.partitions {
            if first.is_none() {
                continue;
            }
            // Deleting a queue takes its partitions out of every row, so a written partition
            // is always there; were it not, apply would refuse an end without its marker,
            // and nothing is emitted for it (review K15).
            let Some(p) = self
                .st
                .partitions
                .get(pid)
                .filter(|p| self.st.queues.contains_key(&p.queue()))
            else {
                tracing::error!(txn_id, pid, "a written partition of a transaction is gone");
                return Err(QueenError::new(
                    ErrorCode::Internal,
                    "kafka transaction: a partition it wrote is gone",
                ));
            };
            marks.push((*pid, p.next_offset));
        }
        // Markers are written here, not pushed: their frame is the reserved control frame
        // (never a minted id), and they take no dedup transaction id of their own.
        let mut frame = Vec::with_capacity(64);
        write_frame(
            &mut frame,
            &marker_id(commit),
            None,
            "",
            None,
            MARKER_PAYLOAD,
        );
        let hash = xxhash_rust::xxh3::xxh3_64(b"");
        for (pid, offset) in &marks {
            self.emit(Effect::Append {
                pid: *pid,
                base_offset: *offset,
                hashes: vec![hash],
                frames: &frame,
            });
        }
        if commit {
            for ((group, topic, partition), v) in &row.pending {
                self.emit(Effect::KafkaOffsetPut {
                    group,
                    topic,
                    partition: *partition,
                    offset: v.offset,
                    leader_epoch: v.leader_epoch,
                    metadata: &v.metadata,
                });
            }
        }
        self.emit(Effect::KafkaTxn(TxnEffect::End {
            txn_id,
            how: if commit {
                TxnEnd::Commit
            } else {
                TxnEnd::Abort
            },
            markers: marks,
        }));
        // Apply refuses an end the state does not take (markers not matching the written
        // partitions): answering NONE then would leave the transaction open behind it.
        if self
            .st
            .kafka_txns
            .get(txn_id)
            .is_some_and(|r| r.state != TxnState::Empty)
        {
            tracing::error!(txn_id, "a transaction's end did not apply");
            return Err(QueenError::new(
                ErrorCode::Internal,
                "kafka transaction: its end did not apply",
            ));
        }
        Ok(())
    }

    /// Aborts up to [`TXN_TIMEOUTS_PER_SWEEP`] transactions open past their timeout and
    /// fences each one's producer with a new epoch, as Kafka's coordinator does. Returns how
    /// many it aborted; one whose marker cannot be written now waits for the next sweep.
    /// An abort whose bytes would take the entry past `max_entry_bytes` is skipped (logged)
    /// and retried at the next sweep; no cap refuses one (review F2).
    pub fn sweep_kafka_txns(&mut self, max_entry_bytes: usize) -> usize {
        let due = self.st.kafka_txns.due(self.now(), TXN_TIMEOUTS_PER_SWEEP);
        let mut aborted = 0;
        for txn_id in due {
            let bound = self
                .st
                .kafka_txns
                .get(&txn_id)
                .map_or(0, |r| end_bound(&txn_id, r));
            if self.cycle.entry.len().saturating_add(bound) > max_entry_bytes {
                // A big abort waits for room; a smaller one behind it need not (review K10).
                tracing::debug!(
                    txn_id,
                    bound,
                    "a timed-out transaction waits for entry room"
                );
                continue;
            }
            if let Err(e) = self.txn_finish(&txn_id, false) {
                tracing::warn!(txn_id, error = %e, "a timed-out transaction could not be aborted yet");
                continue;
            }
            aborted += 1;
            let Some(r) = self.st.kafka_txns.get(&txn_id) else {
                continue;
            };
            let (mut producer_id, timeout_ms) = (r.producer_id, r.timeout_ms);
            let epoch = if r.epoch < LAST_EPOCH {
                r.epoch + 1
            } else {
                // No epoch is left to fence with: the row moves to a new producer id, handed
                // to no one, so the zombie's (id, epoch) maps to nothing. Its next
                // InitProducerId bumps from there.
                let id = self.st.kafka_producers.next_id();
                if id > MAX_PRODUCER_ID {
                    continue;
                }
                self.emit(Effect::KafkaProducerIdTaken { producer_id: id });
                producer_id = id;
                0
            };
            self.emit(Effect::KafkaProducerInit { producer_id, epoch });
            self.emit(Effect::KafkaTxn(TxnEffect::Init {
                txn_id: &txn_id,
                producer_id,
                epoch,
                timeout_ms,
            }));
        }
        aborted
    }

    /// Forgets up to [`TXN_EXPIRIES_PER_SWEEP`] transactional ids with no open transaction
    /// and nothing done for `expiration_ms` (Kafka's `transactional.id.expiration.ms`),
    /// judged against this entry's time, so that every replica and every replay forgets the
    /// same ones. Returns how many. A full scan of the rows (bounded by
    /// `kafka_max_transactional_ids`): the engine calls it seldom, not every cycle.
    pub fn expire_kafka_txn_ids(&mut self, max_entry_bytes: usize, expiration_ms: u64) -> usize {
        let expiration_us = i64::try_from(expiration_ms.saturating_mul(1000)).unwrap_or(i64::MAX);
        let cutoff = self.now().saturating_sub(expiration_us);
        let idle = self
            .st
            .kafka_txns
            .idle_before(cutoff, TXN_EXPIRIES_PER_SWEEP);
        let mut expired = 0;
        for txn_id in idle {
            let bound = TXN_EFFECT + txn_id.len();
            if self.cycle.entry.len().saturating_add(bound) > max_entry_bytes {
                break;
            }
            self.emit(Effect::KafkaTxn(TxnEffect::End {
                txn_id: &txn_id,
                how: TxnEnd::Expire,
                markers: Vec::new(),
            }));
            expired += 1;
        }
        expired
    }
}

/// Counts a request refused by one of the coordinator's bounds (`queen_kafka_txn_refused_total`,
/// docs/metrics.md), so an operator sees which bound a retrying client is stuck behind.
pub(crate) fn count_refusal(reason: &'static str) {
    metrics::counter!("queen_kafka_txn_refused_total", "reason" => reason).increment(1);
}
