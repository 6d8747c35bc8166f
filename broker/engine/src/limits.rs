//! Bounds checked before a command is planned, so a refusal changes nothing: the bytes the
//! command can add to a cycle's log entry (an upper bound, never an undercount) and the
//! partitions a push may create.
//!
//! Why an upper bound and not the exact size: planning applies effects to the state at once,
//! so a command found too large after planning could not be taken back. The bound is computed
//! in one pass over the request with arithmetic only (no per-item hashing or allocation).

use std::collections::HashSet;

use queenmq_protocol::limits::MAX_LOCK_OWNER_BYTES;
use queenmq_protocol::{
    Command, DlqAdminReq, ErrorCode, GroupAdminReq, KvOp, LockOp, PopSource, PushItem, QueenError,
    TxnOp, LOCKS_NS,
};

use crate::seal::MAX_SEAL_OVERHEAD;
use crate::state::State;

/// Bytes the Raft layer adds around an engine entry in a log record (term, index, type and
/// openraft's envelope), with room to spare.
const RECORD_ENVELOPE: usize = 64 * 1024;
/// A frame's fixed part: length, flags, id, trace id, txn and producer length prefixes.
const FRAME_FIXED: usize = 4 + 1 + 16 + 16 + 2 + 2;
/// A generated transaction id: the message id's text form.
const GENERATED_TXN: usize = 36;
/// The transaction-id hash an Append carries per message.
const HASH: usize = 8;
/// PartitionCreate plus an Append header, excluding the partition name.
const PER_PARTITION: usize = 64;
/// QueueUpsert with its configuration, excluding the names.
const PER_QUEUE: usize = 512;
/// One CursorPut effect (with a lease), rounded up.
const CURSOR_PUT: usize = 96;
/// One DlqInsert effect, excluding the error text.
const DLQ_INSERT: usize = 48;
/// GroupRegister / GroupDelete, excluding the group name.
const GROUP_EFFECT: usize = 32;
/// One KafkaProducerBatch effect, with the KafkaProducerExpire a stale producer adds and the
/// one a new producer at the cap evicts.
const PRODUCER_BATCH: usize = 96;
/// Effect 59's fixed part (kind, id length, partition, offset, count), rounded up.
const TXN_RECORDS_EFFECT: usize = 32;
/// What a Kafka producer command's expiry sweep may add: one KafkaProducerExpire each.
const PRODUCER_SWEEP: usize = queenmq_protocol::kafka_producers::PRODUCER_EXPIRY_PER_COMMAND * 16;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest entry one request may produce: the log's record limit less the envelope.
    pub max_entry_bytes: usize,
    /// A cycle takes no further command once its entry would pass this (a command alone may).
    pub cycle_bytes: usize,
    /// Partitions one push (or transaction) may create.
    pub max_new_partitions: usize,
}

impl Limits {
    pub fn new(record_limit: usize, cycle_bytes: usize, max_new_partitions: usize) -> Self {
        let max_entry_bytes = record_limit.saturating_sub(RECORD_ENVELOPE);
        Limits {
            max_entry_bytes,
            cycle_bytes: cycle_bytes.min(max_entry_bytes),
            max_new_partitions,
        }
    }

    /// Refuses a command that alone would make an entry above the record limit, or that
    /// creates too many partitions; `Ok(bytes)` is its entry-size bound otherwise.
    pub fn admit(
        &self,
        st: &State,
        cmd: &Command,
        producer: Option<&str>,
    ) -> Result<usize, QueenError> {
        let mut bytes = entry_bound(st, cmd, producer);
        if let Command::DlqAdmin(DlqAdminReq::Retry { .. }) = cmd {
            bytes = bytes.min(self.max_entry_bytes);
        }
        if bytes > self.max_entry_bytes {
            return Err(QueenError::new(
                ErrorCode::PayloadTooLarge,
                format!(
                    "this request would make a log entry of up to {bytes} bytes, above the \
                     broker's limit of {} bytes per entry; nothing was written, send it in \
                     smaller requests",
                    self.max_entry_bytes
                ),
            ));
        }
        let new = match cmd {
            Command::Push(p) => new_partitions(st, &p.items, self.max_new_partitions),
            Command::KafkaProduce(p) => new_partitions(st, &p.items, self.max_new_partitions),
            Command::KafkaTxn(queenmq_protocol::kafka_txns::KafkaTxnReq::AddPartitions {
                partitions,
                ..
            }) => new_txn_partitions(st, partitions),
            Command::Transaction(t) => {
                let items: Vec<&PushItem> = t
                    .ops
                    .iter()
                    .filter_map(|op| match op {
                        TxnOp::Push(items) => Some(items.iter()),
                        TxnOp::Ack(_) => None,
                    })
                    .flatten()
                    .collect();
                new_partitions_of(st, items.iter().copied(), self.max_new_partitions)
            }
            _ => 0,
        };
        if new > self.max_new_partitions {
            return Err(QueenError::new(
                ErrorCode::PayloadTooLarge,
                format!(
                    "this request would create more than {} new partitions (the \
                     max_new_partitions_per_request limit); nothing was written, create them \
                     over several requests",
                    self.max_new_partitions
                ),
            ));
        }
        Ok(bytes)
    }
}

/// A Kafka group effect is its strings behind a kind byte, three numbers and their lengths.
fn kafka_groups_bound(req: &queenmq_protocol::kafka_groups::KafkaGroupsReq) -> usize {
    use queenmq_protocol::kafka_groups::KafkaGroupsReq as K;
    const FIXED: usize = 1 + 4 * 4 + 4 + 8 + 4;
    match req {
        K::Commit { group, offsets } => offsets.iter().fold(0usize, |acc, o| {
            acc.saturating_add(FIXED + group.len() + o.topic.len() + o.metadata.len())
        }),
        K::NextGeneration {
            group,
            protocol_type,
            protocol_name,
        } => FIXED + group.len() + protocol_type.len() + protocol_name.len(),
        K::Delete { groups } => groups
            .iter()
            .fold(0usize, |acc, g| acc.saturating_add(FIXED + g.len())),
        K::OffsetDelete { group, partitions } => partitions.iter().fold(0usize, |acc, (t, _)| {
            acc.saturating_add(FIXED + group.len() + t.len())
        }),
        K::Fetch { .. } | K::List | K::Describe { .. } | K::Infos { .. } => 0,
    }
}

/// A TimerPut is its strings and payload behind a kind byte, an id, a time and five lengths.
fn timer_ops_bound(ops: &[queenmq_protocol::TimerOp]) -> usize {
    ops.iter().fold(0usize, |acc, op| {
        acc.saturating_add(match op {
            // A schedule the log could never fire is refused when it is made: its bound is
            // also that of its fire.
            queenmq_protocol::TimerOp::Schedule(s) => (64
                + s.queue.len()
                + s.key.len()
                + s.partition.len()
                + s.txn.len()
                + s.payload.len()
                // A timer into an encrypted queue stores a mark byte and the envelope.
                + 1
                + MAX_SEAL_OVERHEAD)
                .max(crate::plan::timer_fire_bound(
                    &s.queue,
                    &s.key,
                    &s.partition,
                    &s.txn,
                    s.payload.len(),
                )),
            queenmq_protocol::TimerOp::Cancel { queue, key, .. } => 16 + queue.len() + key.len(),
        })
    })
}

/// An upper bound of the bytes `cmd` adds to a cycle's entry.
pub fn entry_bound(st: &State, cmd: &Command, producer: Option<&str>) -> usize {
    match cmd {
        Command::Push(p) => push_bound(st, p.items.iter(), producer),
        Command::Transaction(t) => t
            .ops
            .iter()
            .fold(kv_bound(&t.kv), |acc, op| {
                acc.saturating_add(match op {
                    TxnOp::Push(items) => push_bound(st, items.iter(), producer),
                    TxnOp::Ack(a) => ack_bound(a.error.as_deref()),
                })
            })
            .saturating_add(timer_ops_bound(&t.timers)),
        Command::Kv(k) => kv_bound(&k.ops),
        Command::Locks(l) => l.ops.iter().fold(0usize, |acc, op| {
            let owner = match op {
                LockOp::Acquire { owner, .. } => owner.len(),
                _ => MAX_LOCK_OWNER_BYTES,
            };
            // A permit value is rebuilt from its owner (renew too), never copied: its bytes are
            // the owner escaped, the fixed text and `since`; the key adds `#` and the slot.
            acc.saturating_add(KV_EFFECT + LOCKS_NS.len() + op.name().len() + 64 + 2 * owner)
        }),
        Command::Ack(a) => a.items.iter().fold(0usize, |acc, i| {
            acc.saturating_add(ack_bound(i.error.as_deref()))
        }),
        Command::Pop(p) => {
            let queues = match &p.source {
                PopSource::Labels { namespace, task } => st
                    .labels
                    .iter_matching(namespace.as_deref(), task.as_deref())
                    .map_or(st.queues.len(), Iterator::count)
                    .max(1),
                _ => 1,
            };
            let group = p.group.as_deref().map_or(0, str::len);
            let claims = match (p.partitions, p.batch) {
                (0, _) => 32usize,
                (n, _) => n as usize,
            }
            .min(if p.batch == 0 { 200 } else { p.batch as usize })
            // A pop claims each partition at most once: a huge `partitions` is not refused.
            .min(st.partitions.len().max(1));
            // A group registered by a conflating pop adds its GroupConflation effect.
            let policy = if p.conflation { GROUP_EFFECT } else { 0 };
            claims
                .saturating_mul(CURSOR_PUT)
                .saturating_add(queues.saturating_mul(GROUP_EFFECT + group + policy))
        }
        Command::ExtendLease { lease_id } => {
            let holders = crate::plan::parse_lease(lease_id)
                .and_then(|id| st.leases.get(&id))
                .map_or(0, Vec::len);
            holders.saturating_mul(CURSOR_PUT)
        }
        Command::Timers(t) => timer_ops_bound(&t.ops),
        Command::KafkaGroups(k) => kafka_groups_bound(k),
        Command::KafkaProduce(p) => push_bound(st, p.items.iter(), producer)
            .saturating_add(p.guards.len().saturating_mul(PRODUCER_BATCH))
            // A transactional batch adds its effect 59 (kind, id, pid, offset, count).
            .saturating_add(p.transactional_id.as_ref().map_or(0, |t| {
                p.guards
                    .len()
                    .saturating_mul(TXN_RECORDS_EFFECT.saturating_add(t.len()))
            }))
            .saturating_add(PRODUCER_SWEEP),
        Command::KafkaProducers(_) => PRODUCER_BATCH + PRODUCER_SWEEP,
        Command::KafkaTxn(t) => crate::plan::kafka_txn_entry_bound(st, t)
            .saturating_add(PRODUCER_BATCH)
            .saturating_add(PER_PARTITION),
        // Kind, the name (u32 length + bytes) and 33 bytes of options.
        Command::EphemeralConfig(e) => match e {
            queenmq_protocol::EphemeralConfigReq::Set { queue, .. } => 1 + 4 + queue.len() + 33,
            queenmq_protocol::EphemeralConfigReq::Delete { queue } => 1 + 4 + queue.len(),
            queenmq_protocol::EphemeralConfigReq::List => 0,
        },
        // `67 | tenant str | count u16 | voter u64 x count`.
        Command::DeclareTenant { tenant, voters } => 1 + 4 + tenant.len() + 2 + 8 * voters.len(),
        // One KafkaDeleteRecords effect per partition at most: kind, pid, low.
        Command::KafkaDeleteRecords(d) => d.targets.len().saturating_mul(1 + 8 + 8 + 8),
        Command::Trace(t) => {
            let names: usize = t.names.iter().map(|n| n.len() + 4).sum();
            64 + t.transaction_id.len() + t.group.len() + names + t.event_type.len() + t.data.len()
        }
        Command::Configure(c) => {
            // A given option costs about its name and a number.
            let opts = c.options.given() * 48
                + c.options
                    .retention_sink_hold
                    .as_ref()
                    .map_or(0, |s| s.resolve(&String::new()).len());
            PER_QUEUE
                + c.queue.len()
                + c.namespace.as_deref().map_or(0, str::len)
                + c.task.as_deref().map_or(0, str::len)
                + opts
        }
        Command::GroupAdmin(g) => match g {
            GroupAdminReq::Delete { group, .. } => {
                st.queues.len().saturating_mul(GROUP_EFFECT + group.len())
            }
            GroupAdminReq::Seek { queue, .. } => st
                .queue_named(queue)
                .map_or(0, |q| q.partition_order.len())
                .saturating_mul(CURSOR_PUT)
                .saturating_add(GROUP_EFFECT),
            GroupAdminReq::Subscription { group, .. } => st
                .queues
                .len()
                .saturating_mul(2 * (GROUP_EFFECT + group.len())),
        },
        Command::DlqAdmin(d) => match d {
            DlqAdminReq::Delete { .. } => DLQ_INSERT,
            DlqAdminReq::Purge(q) => DLQ_INSERT + q.group.as_deref().map_or(0, str::len),
            // The replay is one stored message of the partition again: bounded by what the
            // partition holds (clamped in `admit`: the message came in one entry, so it fits
            // one), plus its new transaction id and the row delete.
            DlqAdminReq::Retry { partition_id, .. } => {
                let held = partition_id
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .and_then(|pid| st.partitions.get(&pid))
                    .map_or(0, |p| usize::try_from(p.bytes).unwrap_or(usize::MAX));
                held.saturating_add(PER_PARTITION + FRAME_FIXED + HASH + 64 + DLQ_INSERT)
            }
        },
        Command::DeleteQueue { .. }
        | Command::Read(_)
        | Command::Health
        | Command::Metrics(_)
        | Command::NodeMetrics(_)
        | Command::StatsRefresh => 64,
    }
}

/// A KvPut or KvDelete, excluding its strings: kind, lengths, version, expiry, number text.
const KV_EFFECT: usize = 64;

fn kv_bound(ops: &[KvOp]) -> usize {
    ops.iter().fold(0usize, |acc, op| {
        let (ns, key) = op.ns_key();
        let value = match op {
            KvOp::Put { value, .. } => value.len(),
            _ => 0,
        };
        let one = if op.is_write() {
            KV_EFFECT + ns.len() + key.len() + value
        } else {
            0
        };
        acc.saturating_add(one)
    })
}

fn ack_bound(error: Option<&str>) -> usize {
    CURSOR_PUT + DLQ_INSERT + error.map_or(0, str::len)
}

/// Frames and hashes of every item, a PartitionCreate + Append header wherever the (queue,
/// partition) pair changes from the item before, and a QueueUpsert wherever the queue changes.
/// Every distinct pair starts at least one such run, so the count never falls short.
/// An item of a queue with `encryptionEnabled` also carries its envelope's overhead.
fn push_bound<'a>(
    st: &State,
    items: impl Iterator<Item = &'a PushItem>,
    producer: Option<&str>,
) -> usize {
    let producer = producer.map_or(0, str::len);
    let mut total = 0usize;
    let mut prev: Option<(&str, &str)> = None;
    for i in items {
        let txn = match i.transaction_id.as_deref() {
            Some(t) if !t.is_empty() => t.len(),
            _ => GENERATED_TXN,
        };
        let mut n = HASH + FRAME_FIXED + txn + producer + i.payload.len();
        if st
            .queue_named(&i.queue)
            .is_some_and(|q| q.config.encryption_enabled)
        {
            n += MAX_SEAL_OVERHEAD;
        }
        match prev {
            Some((q, p)) if q == i.queue && p == i.partition => {}
            Some((q, _)) if q == i.queue => n += PER_PARTITION + i.partition.len(),
            _ => n += PER_QUEUE + i.queue.len() + PER_PARTITION + i.partition.len(),
        }
        prev = Some((&i.queue, &i.partition));
        total = total.saturating_add(n);
    }
    total
}

fn new_partitions(st: &State, items: &[PushItem], max: usize) -> usize {
    new_partitions_of(st, items.iter(), max)
}

/// Distinct partitions an AddPartitionsToTxn names that do not exist yet (it creates them).
fn new_txn_partitions(
    st: &State,
    partitions: &[queenmq_protocol::kafka_txns::TxnPartition],
) -> usize {
    let mut seen: HashSet<(&str, i32)> = HashSet::new();
    for p in partitions {
        let exists = st
            .queue_named(&p.topic)
            .and_then(|q| q.partitions.get(&p.index.to_string(), &st.partitions))
            .is_some();
        if !exists {
            seen.insert((&p.topic, p.index));
        }
    }
    seen.len()
}

/// Partitions the items would create, counted exactly only when the cheap bound (runs of equal
/// pairs) passes `max`; stops counting once past `max`.
fn new_partitions_of<'a>(
    st: &State,
    items: impl Iterator<Item = &'a PushItem> + Clone,
    max: usize,
) -> usize {
    let mut runs = 0usize;
    let mut prev: Option<(&str, &str)> = None;
    for i in items.clone() {
        if prev != Some((&i.queue, &i.partition)) {
            runs += 1;
        }
        prev = Some((&i.queue, &i.partition));
    }
    if runs <= max {
        return runs.min(max);
    }
    let mut seen: HashSet<(&str, &str)> = HashSet::new();
    for i in items {
        let exists = st
            .queue_named(&i.queue)
            .and_then(|q| q.partitions.get(&i.partition, &st.partitions))
            .is_some();
        if !exists && seen.insert((&i.queue, &i.partition)) && seen.len() > max {
            break;
        }
    }
    seen.len()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use queenmq_protocol::PushReq;

    use super::*;

    fn item(q: &str, p: &str, payload: &'static [u8]) -> PushItem {
        PushItem {
            queue: q.into(),
            partition: p.into(),
            payload: Bytes::from_static(payload),
            transaction_id: None,
            trace_id: None,
        }
    }

    #[test]
    fn a_push_above_the_entry_limit_is_refused_before_planning() {
        let limits = Limits::new(64 * 1024 + 10_000, 4096, 10);
        let st = State::default();
        let small = Command::Push(PushReq {
            items: vec![item("q", "p", b"{}"); 10],
        });
        assert!(limits.admit(&st, &small, None).is_ok());
        let big = Command::Push(PushReq {
            items: vec![item("q", "p", b"null"); 200],
        });
        let e = limits.admit(&st, &big, None).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);
    }

    #[test]
    fn a_transactional_produce_bounds_its_records_effects() {
        use queenmq_protocol::kafka_producers::{KafkaProduceReq, ProducerBatch, ProducerGuard};
        let st = State::default();
        let guard = |p: &str| ProducerGuard {
            queue: "t".into(),
            partition: p.into(),
            start: 0,
            end: 1,
            batch: ProducerBatch {
                producer_id: 1,
                epoch: 0,
                first_seq: 0,
                last_seq: 0,
                records: 1,
            },
        };
        let mut req = KafkaProduceReq {
            batches: Vec::new(),
            items: vec![item("t", "0", b"1"), item("t", "1", b"1")],
            guards: vec![guard("0"), guard("1")],
            expiration_ms: 60_000,
            max_producers: 3,
            evict_min_idle_ms: 0,
            transactional_id: None,
        };
        let plain = entry_bound(&st, &Command::KafkaProduce(req.clone()), None);
        req.transactional_id = Some("x".repeat(1024));
        let txn = entry_bound(&st, &Command::KafkaProduce(req), None);
        assert!(txn >= plain + 2 * (1 + 4 + 1024 + 20), "{txn} vs {plain}");
    }

    #[test]
    fn add_partitions_to_txn_is_bounded_by_max_new_partitions() {
        use queenmq_protocol::kafka_txns::{KafkaTxnReq, TxnLimits, TxnPartition};
        let limits = Limits::new(64 * 1024 * 1024, 1 << 20, 10);
        let st = State::default();
        let add = |n: i32| {
            Command::KafkaTxn(KafkaTxnReq::AddPartitions {
                txn_id: "tx".into(),
                producer_id: 1,
                epoch: 0,
                partitions: (0..n)
                    .map(|i| TxnPartition {
                        topic: "t".into(),
                        index: i,
                        count: 10_000,
                    })
                    .collect(),
                limits: TxnLimits::default(),
            })
        };
        assert!(limits.admit(&st, &add(10), None).is_ok());
        let e = limits.admit(&st, &add(11), None).err().map(|e| e.code);
        assert_eq!(e, Some(ErrorCode::PayloadTooLarge));
    }

    #[test]
    fn new_partitions_are_counted_exactly_only_past_the_cheap_bound() {
        let st = State::default();
        let names: Vec<String> = (0..30).map(|i| format!("p{}", i % 3)).collect();
        let items: Vec<PushItem> = names
            .iter()
            .map(|n| PushItem {
                partition: n.clone(),
                ..item("q", "", b"1")
            })
            .collect();
        // 30 runs, 3 distinct pairs.
        assert_eq!(new_partitions(&st, &items, 5), 3);
        assert_eq!(new_partitions(&st, &items, 50), 30);
        let distinct: Vec<PushItem> = (0..100)
            .map(|i| PushItem {
                partition: format!("x{i}"),
                ..item("q", "", b"1")
            })
            .collect();
        assert!(new_partitions(&st, &distinct, 10) > 10);
    }

    #[test]
    fn the_bound_never_undercounts_the_encoded_push() {
        use crate::entry::{Effect, EntryBuilder};
        use crate::state::frame::write_frame;
        let items = [item("q", "a", b"{\"x\":1}"), item("q", "b", b"[1,2,3]")];
        let mut b = EntryBuilder::new(1, 1);
        let before = b.len();
        b.push(&Effect::QueueUpsert {
            qid: 1,
            name: "q",
            namespace: "",
            task: "",
            configured: false,
            config: Default::default(),
        });
        for (pid, i) in items.iter().enumerate() {
            let mut frames = Vec::new();
            write_frame(
                &mut frames,
                &[0; 16],
                Some(&[0; 16]),
                &"t".repeat(GENERATED_TXN),
                Some("producer"),
                &i.payload,
            );
            b.push(&Effect::PartitionCreate {
                qid: 1,
                pid: pid as u64,
                name: &i.partition,
            });
            b.push(&Effect::Append {
                pid: pid as u64,
                base_offset: 0,
                hashes: vec![1],
                frames: &frames,
            });
        }
        assert!(push_bound(&State::default(), items.iter(), Some("producer")) >= b.len() - before);
    }
}
