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
use queenmq_protocol::{PushItem, PushResult, PushStatus, QueenError};

use super::Planner;
use crate::entry::Effect;
use crate::state::kafka_producers::{BatchRow, PartitionSeqs, ProducerRow};

/// A batch's fate against what the partition holds for its producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    Append,
    /// A repeat of this earlier batch (its base offset; `None`: one of this same request).
    Duplicate(Option<u64>),
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
            return Check::Duplicate((d.base_offset != PENDING).then_some(d.base_offset));
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

/// The base offset of a batch judged earlier in the same request, not yet appended.
const PENDING: u64 = u64::MAX;

fn ms_us(ms: u64) -> i64 {
    i64::try_from(ms.saturating_mul(1000)).unwrap_or(i64::MAX)
}

/// The bad-request refusal of a guard the door should never have sent.
fn bad_guard(why: &str) -> QueenError {
    QueenError::bad_request(format!("kafka produce guard out of bounds: {why}"))
}

fn check_guards(req: &KafkaProduceReq) -> Result<(), QueenError> {
    let mut next = 0usize;
    let mut seen = HashSet::new();
    for g in &req.guards {
        if g.start < next || g.end < g.start || g.end > req.items.len() {
            return Err(bad_guard("item ranges overlap or pass the items"));
        }
        next = g.end;
        let records = g
            .batches
            .iter()
            .try_fold(0usize, |a, b| a.checked_add(b.records));
        if records != Some(g.end - g.start) || g.batches.is_empty() {
            return Err(bad_guard("batch records do not add up to the items"));
        }
        if g.batches.iter().any(|b| {
            b.producer_id < 0 || b.epoch < 0 || b.first_seq < 0 || b.last_seq < 0 || b.records == 0
        }) {
            return Err(bad_guard("a negative producer id, epoch or sequence"));
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
            max_producers,
        } = req;
        let expiration_us = ms_us(*expiration_ms);
        // KIP-360: the producer names its id and current epoch to have the epoch bumped;
        // past the last epoch, or when the id is unknown or the epoch stale, it gets a new
        // id, as Kafka's coordinator gives every non-transactional producer.
        if let Some((id, epoch)) = *current {
            let live = self.live_producer(id, expiration_us).map(|r| r.epoch);
            if live == Some(epoch) && (0..i16::MAX - 1).contains(&epoch) {
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
        if self.st.kafka_producers.len() as u64 >= *max_producers {
            return Ok(InitProducerOutcome::Full);
        }
        if let Some(m) = self.memory {
            if m.pressed() {
                return Err(m.refusal());
            }
        }
        let id = self.st.kafka_producers.next_id();
        if id == i64::MAX {
            return Ok(InitProducerOutcome::Full);
        }
        self.emit(Effect::KafkaProducerInit {
            producer_id: id,
            epoch: 0,
        });
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

    /// Judges one guard's batches in order against the partition's state and the batches of
    /// the guard judged before them.
    fn judge_guard(&self, g: &ProducerGuard, req: &KafkaProduceReq) -> GuardVerdict {
        let expiration_us = ms_us(req.expiration_ms);
        let pid = self.guard_partition(g);
        let mut new_producers = 0u64;
        let mut local: Vec<(i64, PartitionSeqs)> = Vec::new();
        for b in &g.batches {
            let row = self.live_producer(b.producer_id, expiration_us);
            let seen = local.iter().any(|(id, _)| *id == b.producer_id);
            if row.is_none() && !seen {
                if b.producer_id >= self.st.kafka_producers.next_id() {
                    return GuardVerdict::UnknownProducer;
                }
                new_producers += 1;
                if (self.st.kafka_producers.len() as u64).saturating_add(new_producers)
                    > req.max_producers
                {
                    return GuardVerdict::Full;
                }
            }
            let slot = match local.iter().position(|(id, _)| *id == b.producer_id) {
                Some(i) => i,
                None => {
                    let held = row
                        .zip(pid)
                        .and_then(|(r, pid)| r.partitions.get(&pid))
                        .cloned();
                    local.push((b.producer_id, held.unwrap_or_default()));
                    local.len() - 1
                }
            };
            let seqs = &mut local[slot].1;
            // A partition row always holds a batch: none means no state for this producer.
            let fresh = seqs.batches.is_empty();
            match check_batch((!fresh).then_some(&*seqs), b) {
                Check::Append => {
                    if fresh || seqs.epoch != b.epoch {
                        seqs.epoch = b.epoch;
                        seqs.batches.clear();
                    }
                    seqs.batches.push_back(BatchRow {
                        first_seq: b.first_seq,
                        last_seq: b.last_seq,
                        base_offset: PENDING,
                        records: 0,
                    });
                }
                Check::Duplicate(Some(base_offset)) => {
                    return GuardVerdict::Duplicate { base_offset }
                }
                Check::Duplicate(None) | Check::OutOfOrder => return GuardVerdict::OutOfOrder,
                Check::Fenced => return GuardVerdict::Fenced,
            }
        }
        GuardVerdict::Appended
    }

    /// Judges every guard, pushes the items of the partitions that pass (and of the
    /// partitions without idempotent batches), and remembers each appended batch.
    pub fn plan_kafka_produce(
        &mut self,
        req: &KafkaProduceReq,
        producer: Option<&str>,
    ) -> Result<KafkaProduceOutcome, QueenError> {
        check_guards(req)?;
        self.expire_producers(ms_us(req.expiration_ms));
        let verdicts: Vec<GuardVerdict> = req
            .guards
            .iter()
            .map(|g| self.judge_guard(g, req))
            .collect();
        let mut skip = vec![false; req.items.len()];
        for (g, v) in req.guards.iter().zip(&verdicts) {
            if *v != GuardVerdict::Appended {
                skip[g.start..g.end].iter_mut().for_each(|s| *s = true);
            }
        }
        let kept: Vec<PushItem> = req
            .items
            .iter()
            .zip(&skip)
            .filter(|(_, s)| !**s)
            .map(|(i, _)| i.clone())
            .collect();
        let mut pushed = self.plan_push(&kept, producer)?.into_iter();
        let results: Vec<PushResult> = req
            .items
            .iter()
            .zip(&skip)
            .map(|(item, s)| match s {
                false => pushed.next().unwrap_or_else(|| not_pushed(item)),
                true => not_pushed(item),
            })
            .collect();
        let expiration_us = ms_us(req.expiration_ms);
        for (g, v) in req.guards.iter().zip(&verdicts) {
            let rs = &results[g.start..g.end];
            if *v != GuardVerdict::Appended || rs.iter().any(|r| r.status != PushStatus::Queued) {
                continue;
            }
            let mut at = 0usize;
            for b in &g.batches {
                let Some(first) = rs.get(at) else { break };
                let stale = self.st.kafka_producers.get(b.producer_id).is_some()
                    && self.live_producer(b.producer_id, expiration_us).is_none();
                if stale {
                    // Judged as gone: its old partitions must not meet the new batches.
                    self.emit(Effect::KafkaProducerExpire {
                        producer_id: b.producer_id,
                    });
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
                at += b.records;
            }
        }
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
