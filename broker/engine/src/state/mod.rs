//! The engine's in-memory state and `apply`, its only mutator.

#[cfg(any(test, feature = "test-support"))]
pub mod canonical;
pub mod compaction;
pub mod config;
pub mod cow_clock;
mod cursor_map;
mod drop_later;
mod fifo;
mod fold_ring;
mod forget;
pub mod frame;
mod group_start;
mod hash_slots;
pub mod kafka_groups;
pub mod kafka_producers;
pub mod kafka_txns;
mod kafka_txns_apply;
mod kafka_txns_section;
pub mod kv;
mod label_index;
pub mod model;
mod name_index;
mod partition_group;
mod partition_name;
mod partition_order;
mod partition_table;
mod retention;
pub mod run_floor;
pub mod run_list;
mod sealed_runs;
mod snapshot;
pub mod tenants;
pub mod timers;
mod txn_filter_files;
mod txn_ids;
mod txn_searched;
mod txn_spill;
mod wake_index;

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::entry::Effect;
pub use cursor_map::{CursorMap, CursorsSnapshot, CURSOR_FOLDS_PER_CYCLE};
pub use forget::Forgotten;
pub use label_index::LabelIndex;
use model::*;
pub use name_index::NameIndex;
pub use partition_order::PartitionOrder;
pub use partition_table::{PartitionTable, PartitionsSnapshot, PARTITION_FOLDS_PER_CYCLE};
pub use txn_filter_files::{FilterFileName, RestoreReport, SavedFilter};
pub use txn_ids::{TxnIds, TxnRow, TxnSnapshot};
pub use txn_spill::{
    bucket_of, id_key, FindError, IdStore, TxnSpill, BY_TIME_SEARCHES_PER_CYCLE,
    FILTER_WINDOW_MAX_US, ID_BUCKET_US, MIN_HOT_IDS,
};
pub use wake_index::WakeIndex;

#[cfg(test)]
pub(crate) use snapshot::offlock_tests;
pub use snapshot::{
    begin_checkpoint, decode_state, encode_state, PendingCheckpoint, ReadyCheckpoint,
    MAX_NEXT_GROUP_ID, MAX_NEXT_PARTITION_ID, MAX_NEXT_QUEUE_ID,
};

/// How long ack resolution keeps transaction ids when the dedup window is shorter.
const MIN_TXN_MEMORY_US: i64 = 600 * 1_000_000;
/// The longest transaction ids are remembered, whatever a queue's dedupWindowSeconds says: a
/// huge window must not keep every id in memory for ever. Past it a repeated id is a new message.
pub const MAX_TXN_MEMORY_US: i64 = 7 * 24 * 3600 * 1_000_000;
/// Traces kept, and the bytes they may hold (oldest dropped first past either).
///
/// These bounds are constants, not configuration, because `apply` enforces them and must give
/// the same state on every replay and every replica, whatever a node was started with.
pub const MAX_TRACES: usize = 100_000;
pub const MAX_TRACE_BYTES: usize = 64 << 20;
/// Dead-letter rows kept per queue; past it the oldest row is evicted (a FIFO).
pub const MAX_DLQ_ROWS_PER_QUEUE: usize = 100_000;

#[derive(Default)]
pub struct State {
    /// Cycle number of the last entry applied (planned cycles count as applied on the leader).
    pub last_cycle: u64,
    pub last_now_us: i64,
    /// (index, term) of the last applied Raft entry.
    pub applied: Option<(u64, u64)>,
    pub next_queue_id: u64,
    pub next_partition_id: u64,
    pub next_group_id: u64,
    pub queues: HashMap<u64, Queue>,
    pub queue_by_name: HashMap<String, u64>,
    /// Derived: queue ids by namespace and by task, for label pops.
    pub labels: LabelIndex,
    pub partitions: PartitionTable,
    pub groups: HashMap<u64, Group>,
    /// Derived: lease id → (group, partition) rows holding it.
    pub leases: HashMap<u128, Vec<(u64, u64)>>,
    pub traces: VecDeque<TraceRow>,
    /// Transaction ids of the messages inside the remembered window.
    pub txn_ids: TxnIds,
    /// Where the ids past the hot table's bound go (the broker's id files); None: the table
    /// keeps every id of the window (tests, tools). Not state: a node's own files and
    /// configuration, carried over when a snapshot replaces the state.
    pub txn_spill: Option<Box<TxnSpill>>,
    /// Derived: how many queues have each dedup window (seconds). Transaction ids are kept
    /// for the longest (`txn_keep_us`), so it follows the queues that exist now: a window of
    /// "any queue ever configured" could not be rebuilt from a checkpoint, and a node that
    /// restarted forgot ids sooner than one that did not (property test, replay_props.rs).
    pub dedup_windows: BTreeMap<i64, u32>,
    /// Derived: the sum of `TraceRow::stored_bytes` over `traces`.
    pub trace_bytes: usize,
    /// Derived: every push onto a group's `wake` heap, by time (the engine tick drains it).
    pub wakes: WakeIndex,
    /// Pending timers (and their derived due index).
    pub timers: timers::TimerTable,
    /// The tenant's key/value rows and lock permits.
    pub kv: kv::KvTable,
    /// Kafka consumer groups' committed offsets and generations.
    pub kafka_groups: kafka_groups::KafkaGroups,
    /// Derived: the lowest log index a held message lives in (segments below it can go).
    pub run_floor: run_floor::RunFloor,
    /// Kafka idempotent producers: ids handed out and their partitions' last batches.
    pub kafka_producers: kafka_producers::KafkaProducers,
    /// Kafka transactions: the coordinator's rows and what readers must hide per partition.
    pub kafka_txns: kafka_txns::KafkaTxns,
    /// Declared ephemeral queues by name; their contents are RAM of the broker, not state.
    pub ephemeral: BTreeMap<String, queenmq_protocol::EphemeralOptions>,
    /// Tenants declared in a cluster (effect 67, the `default` group's only), the first
    /// declaration of each name: kept so a checkpoint carries them to a node that never
    /// applies their entries (one caught up by a snapshot).
    pub tenants: tenants::DeclaredTenants,
    /// The group `fold_cursor_overlays` goes on from (not state: the engine's place in its
    /// round of folds).
    pub cursor_fold_next: u64,
}

/// Where an effect's bytes live, so runs can point at them.
#[derive(Clone, Copy)]
pub struct Loc {
    pub index: u64,
    pub pos: u32,
}

impl State {
    pub fn queue_named(&self, name: &str) -> Option<&Queue> {
        self.queue_by_name
            .get(name)
            .and_then(|id| self.queues.get(id))
    }

    /// A group as `GroupRegister` makes it (every partition of the queue ready), without
    /// registering it: a pop plans against it before deciding to register.
    pub fn new_group(
        &self,
        qid: u64,
        gid: u64,
        name: &str,
        start_from_us: i64,
        now_us: i64,
    ) -> Option<Group> {
        let q = self.queues.get(&qid)?;
        let mut g = Group {
            id: gid,
            queue: qid,
            name: name.to_string(),
            start_from_us,
            created_us: now_us,
            conflation: false,
            cursors: CursorMap::default(),
            ready: VecDeque::new(),
            in_ready: Default::default(),
            wake: Default::default(),
        };
        for pid in &q.partition_order {
            g.mark_ready(pid);
        }
        Some(g)
    }

    /// Applies one effect. Pure: the effect carries every time and id.
    pub fn apply(&mut self, e: &Effect<'_>, now_us: i64, loc: Loc) {
        match e {
            Effect::QueueUpsert {
                qid,
                name,
                namespace,
                task,
                configured,
                config,
            } => {
                // The planner hands out no queue id past 32 bits (`MAX_NEXT_QUEUE_ID`, session
                // 35); one in an entry (a damaged log) is skipped on every replica alike:
                // kept, its partitions could not be created and its pushes would be answered
                // Queued with nothing stored (review s35 p M).
                if *qid >= MAX_NEXT_QUEUE_ID {
                    tracing::warn!(qid, name, "queue upsert past the id limit skipped");
                    return;
                }
                self.next_queue_id = self.next_queue_id.max(qid.saturating_add(1));
                let old_window = self.queues.get(qid).map(|q| q.config.dedup_window_seconds);
                let is_new = old_window.is_none();
                let q = self.queues.entry(*qid).or_insert_with(|| Queue {
                    id: *qid,
                    name: name.to_string(),
                    namespace: String::new(),
                    task: String::new(),
                    config: config.clone(),
                    configured: false,
                    created_us: now_us,
                    partitions: NameIndex::default(),
                    partition_order: PartitionOrder::default(),
                    groups: HashMap::new(),
                    dlq: VecDeque::new(),
                    counters: QueueCounters::default(),
                });
                if is_new || q.namespace != *namespace || q.task != *task {
                    self.labels.remove(*qid, &q.namespace, &q.task);
                    self.labels.insert(*qid, namespace, task);
                }
                q.namespace = namespace.to_string();
                q.task = task.to_string();
                q.config = config.clone();
                q.configured |= *configured;
                self.queue_by_name.insert(name.to_string(), *qid);
                if let Some(w) = old_window {
                    self.uncount_dedup_window(w);
                }
                self.count_dedup_window(config.dedup_window_seconds);
            }
            Effect::QueueDelete { qid } => self.delete_queue(*qid),
            Effect::PartitionCreate { qid, pid, name } => {
                // The planner hands out no such id; an entry carrying one (an older build, a
                // damaged log) is skipped on every replica alike: kept, it would make every
                // later checkpoint one that decode refuses. With the limit at exactly 2^32,
                // fitting a `u32` is the whole check (a lower limit fails the build below).
                const _: () = assert!(MAX_NEXT_PARTITION_ID == 1 << 32);
                let Ok(short) = u32::try_from(*pid) else {
                    tracing::warn!(pid, "partition create past the id limit skipped");
                    return;
                };
                // Queue ids too since session 35 (`MAX_NEXT_QUEUE_ID`, the row holds 32 bits).
                const _: () = assert!(MAX_NEXT_QUEUE_ID == 1 << 32);
                let Ok(short_qid) = u32::try_from(*qid) else {
                    tracing::warn!(
                        qid,
                        pid,
                        "partition create in a queue past the id limit skipped"
                    );
                    return;
                };
                self.next_partition_id = self.next_partition_id.max(pid + 1);
                if let Some(q) = self.queues.get_mut(qid) {
                    q.partition_order.push(short);
                    let replaced = self
                        .partitions
                        .insert(*pid, Partition::new(short, short_qid, name, now_us));
                    // A create over an existing id (never planned) must not pin the floor.
                    if let Some(old) = replaced {
                        self.run_floor.remove_partition(&old);
                    }
                    q.partitions.insert(name, *pid, &self.partitions);
                }
            }
            Effect::Append {
                pid,
                base_offset,
                hashes,
                frames,
            } => self.append(*pid, *base_offset, hashes, frames.len(), now_us, loc),
            Effect::GroupRegister {
                qid,
                gid,
                name,
                start_from_us,
            } => {
                // u64::MAX marks a deleted group row in a checkpoint (see PartitionCreate).
                if *gid == MAX_NEXT_GROUP_ID {
                    tracing::warn!(gid, "group register past the id limit skipped");
                    return;
                }
                self.next_group_id = self.next_group_id.max(gid + 1);
                let Some(g) = self.new_group(*qid, *gid, name, *start_from_us, now_us) else {
                    return;
                };
                if let Some(q) = self.queues.get_mut(qid) {
                    q.groups.insert(name.to_string(), *gid);
                }
                self.groups.insert(*gid, g);
            }
            Effect::GroupDelete { gid } => self.delete_group(*gid),
            Effect::CursorPut { gid, pid, row } => self.put_cursor(*gid, *pid, *row),
            Effect::DlqInsert {
                gid,
                pid,
                offset,
                retries,
                error,
            } => {
                let Some(g) = self.groups.get(gid) else {
                    return;
                };
                if let Some(q) = self.queues.get_mut(&g.queue) {
                    q.counters.dead_lettered += 1;
                    while q.dlq.len() >= MAX_DLQ_ROWS_PER_QUEUE {
                        q.dlq.pop_front();
                    }
                    q.dlq.push_back(DlqRow {
                        group: g.name.clone(),
                        partition: *pid,
                        offset: *offset,
                        error: error.to_string(),
                        failed_us: now_us,
                        retries: *retries,
                    });
                }
            }
            Effect::TraceAppend {
                pid,
                txn,
                group,
                names,
                event_type,
                data,
            } => {
                let row = TraceRow {
                    partition: *pid,
                    transaction_id: txn.to_string(),
                    group: group.to_string(),
                    names: names.iter().map(|s| s.to_string()).collect(),
                    event_type: event_type.to_string(),
                    data: data.to_string(),
                    at_us: now_us,
                };
                let size = row.stored_bytes();
                while !self.traces.is_empty()
                    && (self.traces.len() >= MAX_TRACES
                        || self.trace_bytes.saturating_add(size) > MAX_TRACE_BYTES)
                {
                    if let Some(old) = self.traces.pop_front() {
                        self.trace_bytes = self.trace_bytes.saturating_sub(old.stored_bytes());
                    }
                }
                self.trace_bytes = self.trace_bytes.saturating_add(size);
                self.traces.push_back(row);
            }
            Effect::KvPut {
                ns,
                key,
                value,
                version,
                expires_at_us,
            } => self.kv.put(
                ns,
                key,
                kv::KvRow {
                    value: value.to_string(),
                    version: *version,
                    expires_at_us: *expires_at_us,
                    updated_at_us: now_us,
                },
            ),
            Effect::KvDelete { ns, key } => {
                self.kv.remove(ns, key);
            }
            Effect::KafkaGeneration {
                group,
                generation,
                protocol_type,
                protocol_name,
            } => self
                .kafka_groups
                .set_generation(group, *generation, protocol_type, protocol_name),
            Effect::KafkaOffsetPut {
                group,
                topic,
                partition,
                offset,
                leader_epoch,
                metadata,
            } => self.kafka_groups.put_offset(
                group,
                topic,
                *partition,
                kafka_groups::OffsetRow {
                    offset: *offset,
                    leader_epoch: *leader_epoch,
                    metadata: metadata.to_string(),
                    commit_time_us: now_us,
                },
            ),
            Effect::KafkaOffsetDelete {
                group,
                topic,
                partition,
            } => self.kafka_groups.delete_offset(group, topic, *partition),
            Effect::KafkaGroupDelete { group } => self.kafka_groups.delete_group(group),
            Effect::KafkaProducerInit { producer_id, epoch } => {
                self.kafka_producers.init(*producer_id, *epoch, now_us)
            }
            Effect::KafkaProducerBatch {
                producer_id,
                pid,
                epoch,
                first_seq,
                last_seq,
                base_offset,
                records,
            } => {
                let b = kafka_producers::BatchRow {
                    first_seq: *first_seq,
                    last_seq: *last_seq,
                    base_offset: *base_offset,
                    records: *records,
                };
                let next_pid = self.next_partition_id;
                if self
                    .kafka_producers
                    .accepts_batch(*producer_id, *pid, *epoch, &b, next_pid)
                {
                    self.kafka_producers
                        .batch(*producer_id, *pid, *epoch, b, now_us);
                } else {
                    tracing::warn!(
                        producer_id,
                        pid,
                        first_seq,
                        records,
                        "kafka producer batch the planner never makes skipped"
                    );
                }
            }
            Effect::KafkaProducerExpire { producer_id } => {
                self.kafka_producers.expire(*producer_id)
            }
            Effect::KafkaProducerIdTaken { producer_id } => {
                self.kafka_producers.take_id(*producer_id)
            }
            Effect::TimerPut {
                queue,
                key,
                partition,
                txn,
                message_id,
                deliver_at_us,
                payload,
            } => {
                let row = timers::TimerRow {
                    partition: partition.to_string(),
                    txn: txn.to_string(),
                    message_id: *message_id,
                    deliver_at_us: *deliver_at_us,
                    created_us: now_us,
                    payload: payload.to_vec(),
                };
                self.timers.put(queue, key, row);
            }
            Effect::TimerDelete { queue, key } => {
                self.timers.remove(queue, key);
            }
            Effect::RetentionTrim { pid, low } => self.trim_partition(*pid, *low),
            Effect::RunCopy {
                pid,
                base_offset,
                count,
                frames,
            } => self.copy_run(*pid, *base_offset, *count, frames, loc),
            Effect::KafkaDeleteRecords { pid, low } => self.delete_records(*pid, *low),
            Effect::GroupConflation { gid } => {
                if let Some(g) = self.groups.get_mut(gid) {
                    g.conflation = true;
                }
            }
            Effect::GroupStartFrom { gid, start_from_us } => {
                self.set_group_start(*gid, *start_from_us)
            }
            Effect::DlqDelete { pid, offset } => {
                let Some(qid) = self.partitions.get(pid).map(|p| p.queue()) else {
                    return;
                };
                if let Some(q) = self.queues.get_mut(&qid) {
                    q.dlq
                        .retain(|d| !(d.partition == *pid && d.offset == *offset));
                }
            }
            Effect::DlqPurge {
                qid,
                group,
                pid,
                from_us,
                to_us,
            } => {
                if let Some(q) = self.queues.get_mut(qid) {
                    q.dlq
                        .retain(|d| !d.purged_by(group, *pid, *from_us, *to_us));
                }
            }
            Effect::EphemeralConfigSet { queue, options } => {
                self.ephemeral.insert((*queue).to_string(), *options);
            }
            Effect::EphemeralConfigDelete { queue } => {
                self.ephemeral.remove(*queue);
            }
            Effect::KafkaTxn(t) => self.apply_kafka_txn(t, now_us),
            // Kept at commit (`apply::Committed::apply`), where the entry's index is known:
            // while the leader plans it is not.
            Effect::TenantDeclared(_) => {}
        }
    }

    fn append(&mut self, pid: u64, base: u64, hashes: &[u64], bytes: usize, now_us: i64, loc: Loc) {
        let Some(p) = self.partitions.get_mut(&pid) else {
            return;
        };
        let Some(q) = self.queues.get_mut(&p.queue()) else {
            return;
        };
        let n = hashes.len() as u64;
        if n == 0 {
            return;
        }
        if base != p.next_offset {
            // The planner appends at the partition's end; an entry that does not (an older
            // build, a damaged log) is skipped alike on every replica: kept, it would leave
            // runs that overlap or a next offset below the floor, which checkpoint decode
            // refuses at the next restart.
            tracing::warn!(
                pid,
                base,
                next = p.next_offset,
                "append not at the partition's end skipped"
            );
            return;
        }
        self.run_floor.push(
            p,
            Run {
                base_offset: base,
                count: hashes.len() as u32,
                created_us: now_us,
                index: loc.index,
                pos: loc.pos,
            },
        );
        p.next_offset = base + n;
        p.last_write_us = now_us;
        p.bytes += bytes as u64;
        q.counters.pushed += n;
        for gid in q.groups.values() {
            if let Some(g) = self.groups.get_mut(gid) {
                g.mark_ready(pid);
            }
        }
        self.txn_ids.record(now_us, pid, base, hashes);
        let keep = self.txn_keep_us();
        self.txn_ids.expire(now_us.saturating_sub(keep));
        if let Some(spill) = self.txn_spill.as_mut() {
            spill.spill(&mut self.txn_ids, keep, now_us);
        }
    }

    /// How long transaction ids are remembered: the longest dedup window of the queues (one
    /// FIFO serves every queue, so rows of shorter-window queues are remembered as long;
    /// forgotten later, never wrongly), within [`MIN_TXN_MEMORY_US`, `MAX_TXN_MEMORY_US`].
    pub fn txn_keep_us(&self) -> i64 {
        let longest = self.dedup_windows.last_key_value().map_or(0, |(w, _)| *w);
        longest
            .saturating_mul(1_000_000)
            .clamp(MIN_TXN_MEMORY_US, MAX_TXN_MEMORY_US)
    }

    pub fn count_dedup_window(&mut self, seconds: i64) {
        *self.dedup_windows.entry(seconds).or_default() += 1;
    }

    fn uncount_dedup_window(&mut self, seconds: i64) {
        if let Some(n) = self.dedup_windows.get_mut(&seconds) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.dedup_windows.remove(&seconds);
            }
        }
    }

    fn put_cursor(&mut self, gid: u64, pid: u64, row: CursorRow) {
        let Some(g) = self.groups.get_mut(&gid) else {
            return;
        };
        let old = g.cursors.insert(pid, row);
        if let Some(old_lease) = old.and_then(|o| o.lease) {
            if row.lease.map(|l| l.id) != Some(old_lease.id) {
                if let Some(v) = self.leases.get_mut(&old_lease.id) {
                    v.retain(|&(gg, pp)| !(gg == gid && pp == pid));
                    if v.is_empty() {
                        self.leases.remove(&old_lease.id);
                    }
                }
            }
        }
        if let Some(old) = old {
            if let Some(q) = self.queues.get_mut(&g.queue) {
                q.counters.acked += row.committed.saturating_sub(old.committed);
            }
        }
        match row.lease {
            Some(l) => {
                let v = self.leases.entry(l.id).or_default();
                if !v.contains(&(gid, pid)) {
                    v.push((gid, pid));
                }
                g.wake.push(Reverse((l.expires_us, pid)));
                self.wakes.insert(l.expires_us, gid);
            }
            // A released partition is only worth a ready hint when it still has a backlog; an
            // empty one gets its hint from the next append. Stale hints cost every later pop a
            // lookup, one per acked partition, which dominated pops at a million partitions.
            None => {
                if self
                    .partitions
                    .get(&pid)
                    .is_some_and(|p| row.committed < p.next_offset)
                {
                    g.mark_ready(pid);
                }
            }
        }
    }

    /// Folds the cursor overlays a finished checkpoint left behind, looking at `max` shards at
    /// most (review s30 M1): true if it stopped for the bound, so the caller goes on in a later
    /// cycle. Shards a checkpoint still holds stay for the fold after that one. Groups are
    /// taken in id order from where the last call stopped, and wrap (review s31 ckpt M1):
    /// from the first group each time, the groups past the bound never folded when a
    /// checkpoint began right after each fold. The scan over the groups is one check a group,
    /// and only while overlays are left.
    pub fn fold_cursor_overlays(&mut self, max: usize) -> bool {
        let mut pending: Vec<u64> = self
            .groups
            .iter()
            .filter(|(_, g)| g.cursors.has_overlays())
            .map(|(gid, _)| *gid)
            .collect();
        pending.sort_unstable();
        let from = pending.partition_point(|gid| *gid < self.cursor_fold_next);
        pending.rotate_left(from);
        let mut left = max;
        for gid in pending {
            if left == 0 {
                return true;
            }
            if let Some(g) = self.groups.get_mut(&gid) {
                left = left.saturating_sub(g.cursors.fold_owned(left));
                // Stopped inside this group: the next call goes on in it (its own round).
                self.cursor_fold_next = if left == 0 { gid } else { gid.wrapping_add(1) };
            }
        }
        left == 0
    }

    /// Folds the partition chunks' overlays a finished checkpoint left behind, looking at
    /// `max` chunks at most: true if it stopped for the bound, as `fold_cursor_overlays`.
    pub fn fold_partition_overlays(&mut self, max: usize) -> bool {
        self.partitions.has_overlays() && self.partitions.fold_owned(max) >= max
    }

    fn delete_group(&mut self, gid: u64) {
        let Some(g) = self.groups.remove(&gid) else {
            return;
        };
        for row in g.cursors.values() {
            if let Some(l) = row.lease {
                self.leases.remove(&l.id);
            }
        }
        if let Some(q) = self.queues.get_mut(&g.queue) {
            q.groups.remove(&g.name);
        }
        // A million cursors are a million frees: not under the state lock (review s29 M4).
        drop_later::drop_later(g);
    }

    fn delete_queue(&mut self, qid: u64) {
        let Some(q) = self.queues.remove(&qid) else {
            return;
        };
        self.uncount_dedup_window(q.config.dedup_window_seconds);
        self.queue_by_name.remove(&q.name);
        self.labels.remove(qid, &q.namespace, &q.task);
        // A topic is a queue: its Kafka offsets go with it (docs/kafka-compat.md "Topic admin").
        self.kafka_groups.forget_topic(&q.name);
        self.kafka_txns.forget_topic(&q.name);
        for gid in q.groups.values() {
            self.delete_group(*gid);
        }
        for pid in &q.partition_order {
            if let Some(p) = self.partitions.remove(&pid) {
                self.run_floor.remove_partition(&p);
            }
            self.kafka_txns.forget_partition(pid);
        }
    }

    /// Replaces the PENDING log index of runs appended while planning with the committed index.
    pub fn commit_pending_runs(&mut self, touched: &[u64], index: u64) {
        for pid in touched {
            if let Some(p) = self.partitions.get_mut(pid) {
                for i in (0..p.runs.len()).rev() {
                    let Some(run) = p.runs.get(i).filter(|r| r.index == PENDING_INDEX) else {
                        break;
                    };
                    let pos = run.pos;
                    self.run_floor.set_index(p, i, index, pos, false);
                }
            }
        }
    }
}

#[cfg(test)]
impl State {
    /// Test set-up rows applied outside any entry: queue `qid` named `name`, then its
    /// partitions `(pid, name)`, all at log position `loc` and time 0.
    pub fn seed_queue(
        &mut self,
        qid: u64,
        name: &str,
        config: config::QueueConfig,
        partitions: &[(u64, &str)],
        loc: Loc,
    ) {
        self.apply(
            &Effect::QueueUpsert {
                qid,
                name,
                namespace: "",
                task: "",
                configured: true,
                config,
            },
            0,
            loc,
        );
        for (pid, pname) in partitions {
            self.apply(
                &Effect::PartitionCreate {
                    qid,
                    pid: *pid,
                    name: pname,
                },
                0,
                loc,
            );
        }
    }
}

#[cfg(test)]
mod bound_tests {
    use super::*;

    #[test]
    fn the_dlq_keeps_the_newest_rows_and_traces_stay_under_their_byte_cap() {
        let mut st = State::default();
        let loc = Loc { index: 1, pos: 0 };
        st.seed_queue(1, "q", Default::default(), &[(1, "p")], loc);
        st.apply(
            &Effect::GroupRegister {
                qid: 1,
                gid: 1,
                name: "g",
                start_from_us: i64::MIN,
            },
            0,
            loc,
        );
        for offset in 0..(MAX_DLQ_ROWS_PER_QUEUE as u64 + 5) {
            st.apply(
                &Effect::DlqInsert {
                    gid: 1,
                    pid: 1,
                    offset,
                    retries: 3,
                    error: "e",
                },
                0,
                loc,
            );
        }
        let q = st.queue_named("q").unwrap();
        assert_eq!(q.dlq.len(), MAX_DLQ_ROWS_PER_QUEUE);
        assert_eq!(
            q.dlq.front().unwrap().offset,
            5,
            "oldest rows evicted first"
        );
        assert_eq!(q.counters.dead_lettered, MAX_DLQ_ROWS_PER_QUEUE as u64 + 5);

        let data = "x".repeat(60 * 1024);
        for _ in 0..(MAX_TRACE_BYTES / data.len() + 10) {
            st.apply(
                &Effect::TraceAppend {
                    pid: 1,
                    txn: "t",
                    group: "g",
                    names: vec!["n"],
                    event_type: "info",
                    data: &data,
                },
                0,
                loc,
            );
        }
        assert!(st.trace_bytes <= MAX_TRACE_BYTES);
        let sum: usize = st.traces.iter().map(TraceRow::stored_bytes).sum();
        assert_eq!(sum, st.trace_bytes);
    }

    fn queue(qid: u64, name: &str, dedup_window_seconds: i64) -> Effect<'_> {
        Effect::QueueUpsert {
            qid,
            name,
            namespace: "",
            task: "",
            configured: true,
            config: crate::state::config::QueueConfig {
                dedup_window_seconds,
                ..Default::default()
            },
        }
    }

    #[test]
    fn a_huge_dedup_window_is_capped() {
        let mut st = State::default();
        st.apply(&queue(1, "q", i64::MAX), 0, Loc { index: 1, pos: 0 });
        assert_eq!(st.txn_keep_us(), MAX_TXN_MEMORY_US);
    }

    /// Found by the replay property: the memory was the longest window ever configured, which
    /// a checkpoint does not hold, so a restarted node forgot ids an hour sooner.
    #[test]
    fn the_dedup_memory_follows_the_queues_that_exist_alike_live_and_from_a_checkpoint() {
        let mut st = State::default();
        let loc = Loc { index: 1, pos: 0 };
        st.apply(&queue(1, "long", 7200), 0, loc);
        st.apply(&queue(2, "short", 900), 0, loc);
        assert_eq!(st.txn_keep_us(), 7200 * 1_000_000);
        st.apply(&queue(1, "long", 1200), 0, loc);
        assert_eq!(
            st.txn_keep_us(),
            1200 * 1_000_000,
            "a shortened window counts"
        );
        st.apply(&Effect::QueueDelete { qid: 1 }, 0, loc);
        assert_eq!(st.txn_keep_us(), 900 * 1_000_000);
        let back = decode_state(&encode_state(&st)).expect("decodes");
        assert_eq!(back.txn_keep_us(), st.txn_keep_us());
        st.apply(&Effect::QueueDelete { qid: 2 }, 0, loc);
        assert_eq!(st.txn_keep_us(), MIN_TXN_MEMORY_US);
        assert!(st.dedup_windows.is_empty());
    }
}
