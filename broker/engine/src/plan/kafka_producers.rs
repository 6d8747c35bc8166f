//! Kafka idempotent producers (protocol/src/kafka_producers.rs): InitProducerId hands out
//! ids; a produce's idempotent batches are judged against each partition's last batches and
//! appended in the same step, so the check and the append are one decision of one entry.
//!
//! The judgement is Kafka's (ProducerStateManager / ProducerAppendInfo): a repeat of one of
//! the last five batches of the same epoch is answered with its first offset and nothing is
//! appended; an older epoch is fenced; a newer epoch must start at sequence 0; otherwise the
//! batch must follow the last one (wrapping at `i32::MAX`). A partition with no state for
//! the producer (first write, or expired) takes any sequence, as Kafka does.

use std::collections::HashSet;

use queenmq_protocol::kafka_producers::*;
use queenmq_protocol::{ErrorCode, PushItem, PushResult, PushStatus, QueenError};

use super::kafka_batch_bound::Oversized;
use super::push::PreparedPush;
use super::Planner;
use crate::entry::Effect;
use crate::state::kafka_producers::{PartitionSeqs, ProducerRow};

/// A batch's fate against what the partition holds for its producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    Append,
    /// A repeat of this earlier batch (its base offset).
    Duplicate(u64),
    OutOfOrder,
    Fenced,
}

/// Kafka's order: the duplicate check (same epoch, same sequence range), the epoch, then the
/// sequence. `seqs` is the partition's state for the producer, if any.
pub fn check_batch(seqs: Option<&PartitionSeqs>, b: &ProducerBatch) -> Check {
    let Some(p) = seqs else {
        return Check::Append;
    };
    if b.epoch == p.epoch {
        if let Some(d) = p
            .batches
            .iter()
            .find(|x| x.first_seq == b.first_seq && x.last_seq == b.last_seq)
        {
            return Check::Duplicate(d.base_offset);
        }
    }
    if b.epoch < p.epoch {
        return Check::Fenced;
    }
    if b.epoch > p.epoch {
        return if b.first_seq == 0 {
            Check::Append
        } else {
            Check::OutOfOrder
        };
    }
    match p.batches.back() {
        Some(last) if !in_sequence(last.last_seq, b.first_seq) => Check::OutOfOrder,
        _ => Check::Append,
    }
}

fn ms_us(ms: u64) -> i64 {
    i64::try_from(ms.saturating_mul(1000)).unwrap_or(i64::MAX)
}

/// The bad-request refusal of a guard the door should never have sent.
fn bad_guard(why: &str) -> QueenError {
    QueenError::bad_request(format!("kafka produce guard out of bounds: {why}"))
}

/// The door's checks again (docs/kafka-compat.md "Idempotent producers"): KafkaProduce is a
/// bus command, and what it says about a batch is remembered for a day.
fn check_guards(req: &KafkaProduceReq) -> Result<(), QueenError> {
    let mut next = 0usize;
    let mut seen = HashSet::new();
    for g in &req.guards {
        if g.start < next || g.end < g.start || g.end > req.items.len() {
            return Err(bad_guard("item ranges overlap or pass the items"));
        }
        next = g.end;
        let b = &g.batch;
        if b.records != g.end - g.start || b.records == 0 {
            return Err(bad_guard("batch records do not add up to the items"));
        }
        if !(0..=MAX_PRODUCER_ID).contains(&b.producer_id)
            || b.epoch < 0
            || b.first_seq < 0
            || b.last_seq < 0
        {
            return Err(bad_guard("a producer id, epoch or sequence out of range"));
        }
        let span = i32::try_from(b.records - 1).ok();
        if span.map(|n| increment_sequence(b.first_seq, n)) != Some(b.last_seq) {
            return Err(bad_guard("the sequence range disagrees with the records"));
        }
        if !seen.insert((g.queue.as_str(), g.partition.as_str())) {
            return Err(bad_guard("a partition named twice"));
        }
        if req.items[g.start..g.end]
            .iter()
            .any(|i| i.queue != g.queue || i.partition != g.partition)
        {
            return Err(bad_guard("items of another partition"));
        }
    }
    // A transactional produce appends only transactional batches: an item outside every
    // guard would be visible at once, and no abort could hide it (review K5 c).
    let guarded: usize = req.guards.iter().map(|g| g.end - g.start).sum();
    if req.transactional_id.is_some() && guarded != req.items.len() {
        return Err(bad_guard(
            "a transactional produce holds items outside its transactional batches",
        ));
    }
    Ok(())
}

impl Planner<'_> {
    /// A producer's row unless it has been idle past the expiration (then it is as gone as
    /// the sweep will make it).
    fn live_producer(&self, id: i64, expiration_us: i64) -> Option<&ProducerRow> {
        let cutoff = self.now().saturating_sub(expiration_us);
        self.st
            .kafka_producers
            .get(id)
            .filter(|r| r.last_us >= cutoff)
    }

    /// Forgets producers idle past the expiration, a bounded number per command.
    fn expire_producers(&mut self, expiration_us: i64) {
        let cutoff = self.now().saturating_sub(expiration_us);
        for id in self
            .st
            .kafka_producers
            .idle_before(cutoff, PRODUCER_EXPIRY_PER_COMMAND)
        {
            self.emit(Effect::KafkaProducerExpire { producer_id: id });
        }
    }

    pub fn plan_kafka_producers(
        &mut self,
        req: &KafkaProducersReq,
    ) -> Result<InitProducerOutcome, QueenError> {
        let KafkaProducersReq::InitProducerId {
            current,
            expiration_ms,
        } = req;
        let expiration_us = ms_us(*expiration_ms);
        // KIP-360: the producer names its id and current epoch to have the epoch bumped;
        // past the last epoch, or when the id has no state or the epoch is stale, it gets a
        // new id (which is what Kafka's coordinator always gives a producer without a
        // transactional id).
        if let Some((id, epoch)) = *current {
            let live = self.live_producer(id, expiration_us).map(|r| r.epoch);
            // An id a transactional id owns is bumped only by its coordinator (the
            // transactional InitProducerId): a plain one would fence the transactional
            // producer behind the coordinator's back. The caller gets a new id instead.
            let owned = self.st.kafka_txns.by_producer(id).is_some();
            if live == Some(epoch) && !owned && (0..i16::MAX - 1).contains(&epoch) {
                let epoch = epoch + 1;
                self.emit(Effect::KafkaProducerInit {
                    producer_id: id,
                    epoch,
                });
                return Ok(InitProducerOutcome::Granted {
                    producer_id: id,
                    epoch,
                });
            }
        }
        self.expire_producers(expiration_us);
        // A new id is only the counter: a producer that never writes holds no state, so
        // short-lived producers cannot fill `kafka_max_producer_ids`.
        let id = self.st.kafka_producers.next_id();
        if id > MAX_PRODUCER_ID {
            return Ok(InitProducerOutcome::Full);
        }
        self.emit(Effect::KafkaProducerIdTaken { producer_id: id });
        Ok(InitProducerOutcome::Granted {
            producer_id: id,
            epoch: 0,
        })
    }

    /// The engine partition a guard names, if it exists.
    fn guard_partition(&self, g: &ProducerGuard) -> Option<u64> {
        let qid = self.st.queue_by_name.get(&g.queue)?;
        self.st
            .queues
            .get(qid)?
            .partitions
            .get(&g.partition, &self.st.partitions)
    }

    /// Judges one guard's batch against the partition's state. `named` holds the producers
    /// of the guards judged before, so one request cannot name more than the cap holds.
    fn judge_guard(
        &self,
        g: &ProducerGuard,
        req: &KafkaProduceReq,
        named: &mut HashSet<i64>,
    ) -> GuardVerdict {
        let b = &g.batch;
        let row = self.live_producer(b.producer_id, ms_us(req.expiration_ms));
        if row.is_none() && b.producer_id >= self.st.kafka_producers.next_id() {
            return GuardVerdict::UnknownProducer;
        }
        if !named.contains(&b.producer_id) && named.len() as u64 >= req.max_producers {
            return GuardVerdict::Full;
        }
        if let Some(txn_id) = &req.transactional_id {
            if let Some(v) = self.judge_transactional(txn_id, g) {
                return v;
            }
        } else if self.st.kafka_txns.by_producer(b.producer_id).is_some() {
            // A transactional producer's batch outside its transaction would be visible at
            // once and survive an abort (Kafka: INVALID_TXN_STATE).
            return GuardVerdict::NotInTransaction;
        }
        let held = row
            .zip(self.guard_partition(g))
            .and_then(|(r, pid)| r.partitions.get(&pid));
        let verdict = match check_batch(held, b) {
            Check::Append => GuardVerdict::Appended,
            Check::Duplicate(base_offset) => GuardVerdict::Duplicate { base_offset },
            Check::OutOfOrder => GuardVerdict::OutOfOrder,
            Check::Fenced => GuardVerdict::Fenced,
        };
        if verdict == GuardVerdict::Appended {
            named.insert(b.producer_id);
        }
        verdict
    }

    /// A transactional batch's refusal, if any: the transactional id must name this producer
    /// at this epoch (an older epoch is fenced) with an open transaction that added the
    /// partition.
    fn judge_transactional(&self, txn_id: &str, g: &ProducerGuard) -> Option<GuardVerdict> {
        let b = &g.batch;
        let Some(row) = self.st.kafka_txns.get(txn_id) else {
            return Some(GuardVerdict::NotInTransaction);
        };
        if row.producer_id != b.producer_id {
            return Some(GuardVerdict::NotInTransaction);
        }
        if b.epoch < row.epoch {
            return Some(GuardVerdict::Fenced);
        }
        let pid = self.guard_partition(g);
        let written = pid.and_then(|pid| row.partitions.get(&pid));
        let open = row.state == crate::state::kafka_txns::TxnState::Ongoing;
        if b.epoch != row.epoch || !open || written.is_none() {
            return Some(GuardVerdict::NotInTransaction);
        }
        let next = pid.and_then(|pid| self.st.partitions.get(&pid).map(|p| (pid, p.next_offset)));
        let room = next.is_none_or(|(pid, next)| {
            self.st.kafka_txns.stretch_room(
                pid,
                row.producer_id,
                row.epoch,
                next,
                written.is_some_and(Option::is_some),
                crate::state::kafka_txns::MAX_STRETCHES_PER_PARTITION,
            )
        });
        if !room {
            super::kafka_txns::count_refusal("stretch_cap");
        }
        (!room).then_some(GuardVerdict::TxnIndexFull)
    }

    /// Makes room for the request's new producers (Appended, no live state) at the cap:
    /// picks, in one walk of the idle index, the states to evict, only among those idle at
    /// least `evict_min_idle_ms`, not named by the request, and at most
    /// [`PRODUCER_EVICT_PER_COMMAND`]. Above a lowered cap the picks also trim toward it. A new
    /// producer there is no room for is turned `Full` (retriable): evicting a state that may
    /// still be retrying would let its retry append again. Emits nothing.
    fn plan_evictions(
        &self,
        req: &KafkaProduceReq,
        verdicts: &mut [GuardVerdict],
        named: &HashSet<i64>,
    ) -> Vec<i64> {
        let expiration_us = ms_us(req.expiration_ms);
        let mut seen = HashSet::new();
        let fresh: Vec<i64> = req
            .guards
            .iter()
            .zip(verdicts.iter())
            .filter(|(_, v)| **v == GuardVerdict::Appended)
            .map(|(g, _)| g.batch.producer_id)
            .filter(|id| self.live_producer(*id, expiration_us).is_none() && seen.insert(*id))
            .collect();
        let producers = &self.st.kafka_producers;
        // Stale rows of the request are expired before their new state is made.
        let stale = fresh
            .iter()
            .filter(|id| producers.get(**id).is_some())
            .count();
        let held = producers.len().saturating_sub(stale);
        let max = usize::try_from(req.max_producers).unwrap_or(usize::MAX);
        let need = held
            .saturating_add(fresh.len())
            .saturating_sub(max)
            .min(PRODUCER_EVICT_PER_COMMAND);
        let victims = if need == 0 {
            Vec::new()
        } else {
            let cutoff = self.now().saturating_sub(ms_us(req.evict_min_idle_ms));
            producers.evictable(cutoff, need, named)
        };
        let room = max.saturating_sub(held.saturating_sub(victims.len()));
        let refused: HashSet<i64> = fresh.into_iter().skip(room).collect();
        if !refused.is_empty() {
            for (g, v) in req.guards.iter().zip(verdicts.iter_mut()) {
                if *v == GuardVerdict::Appended && refused.contains(&g.batch.producer_id) {
                    *v = GuardVerdict::Full;
                }
            }
        }
        victims
    }

    /// Evicts the next planned victim (see [`Self::plan_evictions`]), counted in
    /// `queen_kafka_producer_evictions_total`. False when none is left.
    fn evict_next(&mut self, victims: &mut std::vec::IntoIter<i64>) -> bool {
        let Some(victim) = victims.next() else {
            return false;
        };
        self.emit(Effect::KafkaProducerExpire {
            producer_id: victim,
        });
        metrics::counter!("queen_kafka_producer_evictions_total", "tenant" => self.tenant.to_owned())
            .increment(1);
        true
    }

    /// Prepares the push of the items no guard keeps out. A guard whose items would be
    /// queued only in part is failed whole and the push prepared again without it: a batch
    /// is remembered only when all its records were appended, and one partly appended and
    /// unremembered would be appended again by the producer's retry.
    fn prepare_guarded_push(
        &mut self,
        req: &KafkaProduceReq,
        verdicts: &[GuardVerdict],
        oversized: &[Oversized],
        producer: Option<&str>,
    ) -> Result<(Vec<PushResult>, PreparedPush), QueenError> {
        let mut skip = vec![false; req.items.len()];
        for (g, v) in req.guards.iter().zip(verdicts) {
            if *v != GuardVerdict::Appended {
                skip[g.start..g.end].iter_mut().for_each(|s| *s = true);
            }
        }
        let mut failed: Vec<Option<PushResult>> = vec![None; req.items.len()];
        for (start, end, why) in oversized {
            for i in *start..*end {
                skip[i] = true;
                let mut r = not_pushed(&req.items[i]);
                r.error = Some(why.clone());
                failed[i] = Some(r);
            }
        }
        // Failing a guard only removes items, so a second pass finds no new partial guard
        // unless an item's fate depends on another's; then the produce is refused whole.
        for attempt in 0..2 {
            let kept: Vec<PushItem> = req
                .items
                .iter()
                .zip(&skip)
                .filter(|(_, s)| !**s)
                .map(|(i, _)| i.clone())
                .collect();
            let prepared = self.prepare_push(&kept, producer)?;
            let mut pushed = prepared.results.iter();
            let results: Vec<PushResult> = req
                .items
                .iter()
                .zip(&skip)
                .enumerate()
                .map(|(i, (item, s))| match (s, &failed[i]) {
                    (_, Some(r)) => r.clone(),
                    (false, None) => pushed.next().cloned().unwrap_or_else(|| not_pushed(item)),
                    (true, None) => not_pushed(item),
                })
                .collect();
            let mut partial = false;
            for (g, v) in req.guards.iter().zip(verdicts) {
                let rs = &results[g.start..g.end];
                let queued = rs.iter().filter(|r| r.status == PushStatus::Queued).count();
                if *v != GuardVerdict::Appended || queued == 0 || queued == rs.len() {
                    continue;
                }
                partial = true;
                let error = rs.iter().find_map(|r| r.error.clone());
                for i in g.start..g.end {
                    skip[i] = true;
                    let mut r = not_pushed(&req.items[i]);
                    r.error = error.clone().or_else(|| {
                        Some(QueenError::bad_request(
                            "part of this batch was refused, so none of it was appended",
                        ))
                    });
                    failed[i] = Some(r);
                }
            }
            if !partial {
                return Ok((results, prepared));
            }
            if attempt == 1 {
                break;
            }
        }
        Err(QueenError::new(
            ErrorCode::Internal,
            "kafka produce: an idempotent batch would be appended in part",
        ))
    }

    /// Judges every guard, pushes the items of the partitions that pass (and of the
    /// partitions without idempotent batches), and remembers each appended batch.
    pub fn plan_kafka_produce(
        &mut self,
        req: &KafkaProduceReq,
        producer: Option<&str>,
    ) -> Result<KafkaProduceOutcome, QueenError> {
        check_guards(req)?;
        let oversized = self.oversized_batches(req)?;
        if req.guards.is_empty() && oversized.is_empty() {
            // No idempotent batch and none over its bound: the plain push it always was.
            let results = self.plan_push(&req.items, producer)?;
            return Ok(KafkaProduceOutcome {
                results,
                verdicts: Vec::new(),
            });
        }
        let expiration_us = ms_us(req.expiration_ms);
        self.expire_producers(expiration_us);
        let mut named = HashSet::new();
        // A set, not a scan per guard: a request of many partitions, all idempotent and many
        // over their bound, stays linear (review s21 kafka M2).
        let too_large: HashSet<usize> = oversized.iter().map(|(start, _, _)| *start).collect();
        let mut verdicts: Vec<GuardVerdict> = req
            .guards
            .iter()
            .map(|g| {
                // Refused before judged: a batch over its bound does not advance a sequence.
                if too_large.contains(&g.start) {
                    GuardVerdict::TooLarge
                } else {
                    self.judge_guard(g, req, &mut named)
                }
            })
            .collect();
        let victims = self.plan_evictions(req, &mut verdicts, &named);
        let (results, prepared) =
            self.prepare_guarded_push(req, &verdicts, &oversized, producer)?;
        // Nothing may be emitted between a prepare and its commit.
        self.commit_push(prepared);
        let max = usize::try_from(req.max_producers).unwrap_or(usize::MAX);
        let mut victims = victims.into_iter();
        for (g, v) in req.guards.iter().zip(&verdicts) {
            let rs = &results[g.start..g.end];
            if *v != GuardVerdict::Appended || !rs.iter().all(|r| r.status == PushStatus::Queued) {
                continue;
            }
            let Some(first) = rs.first() else { continue };
            let b = &g.batch;
            let stale = self.st.kafka_producers.get(b.producer_id).is_some()
                && self.live_producer(b.producer_id, expiration_us).is_none();
            if stale {
                // Judged as gone: its old partitions must not meet the new batches.
                self.emit(Effect::KafkaProducerExpire {
                    producer_id: b.producer_id,
                });
            }
            if self.st.kafka_producers.get(b.producer_id).is_none() {
                while self.st.kafka_producers.len() >= max && self.evict_next(&mut victims) {}
            }
            self.emit(Effect::KafkaProducerBatch {
                producer_id: b.producer_id,
                pid: first.partition_id,
                epoch: b.epoch,
                first_seq: b.first_seq,
                last_seq: b.last_seq,
                base_offset: first.offset,
                records: u32::try_from(b.records).unwrap_or(u32::MAX),
            });
            if let Some(txn_id) = &req.transactional_id {
                self.emit(Effect::KafkaTxn(
                    crate::entry_kafka_txns::TxnEffect::Records {
                        txn_id,
                        pid: first.partition_id,
                        base_offset: first.offset,
                        count: u32::try_from(b.records).unwrap_or(u32::MAX),
                    },
                ));
            }
        }
        // Above a lowered cap the rest of the picks trim toward it.
        while self.st.kafka_producers.len() > max && self.evict_next(&mut victims) {}
        Ok(KafkaProduceOutcome { results, verdicts })
    }
}

/// The result slot of an item its guard kept out of the push.
fn not_pushed(item: &PushItem) -> PushResult {
    PushResult {
        message_id: String::new(),
        transaction_id: String::new(),
        queue: item.queue.clone(),
        partition_id: 0,
        offset: 0,
        status: PushStatus::Failed,
        error: None,
    }
}
