//! What a command may write to the disk, for the free-space gate (disk_gate.rs): an upper
//! bound of the bytes it adds, counted from everything the client sent that the entry keeps.

use queenmq_protocol::kafka_groups::KafkaGroupsReq;
use queenmq_protocol::kv::{KvOp, LockOp};
use queenmq_protocol::timers::TimerOp;
use queenmq_protocol::{Command, DlqAdminReq, EphemeralConfigReq, PushItem, TxnOp};

/// Bytes a row costs on disk beyond what the client sent (record framing, ids minted by the
/// planner, times): a generous bound, so the estimate errs on the side of refusing.
pub const ROW_OVERHEAD: u64 = 256;

/// What a command needs from the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Writes nothing (reads, node-local commands).
    Nothing,
    /// A small bookkeeping entry: what drains the queues and frees space.
    Bookkeeping,
    /// This many bytes of new data, at most.
    Data(u64),
}

fn len(s: &str) -> u64 {
    s.len() as u64
}

fn push_items(items: &[PushItem]) -> u64 {
    items.iter().fold(0u64, |a, i| {
        let one = (i.payload.len() as u64)
            .saturating_add(len(&i.queue))
            .saturating_add(len(&i.partition))
            .saturating_add(i.transaction_id.as_deref().map_or(0, len))
            .saturating_add(if i.trace_id.is_some() { 16 } else { 0 })
            .saturating_add(ROW_OVERHEAD);
        a.saturating_add(one)
    })
}

/// A KV write stores its namespace, key and value; reads and checks store nothing.
fn kv_ops(ops: &[KvOp]) -> u64 {
    ops.iter().fold(0u64, |a, op| {
        let one = match op {
            KvOp::Put { ns, key, value, .. } => len(ns) + len(key) + len(value) + ROW_OVERHEAD,
            KvOp::Incr { ns, key, .. } => len(ns) + len(key) + ROW_OVERHEAD,
            // A delete is what frees a row: bookkeeping.
            KvOp::Delete { .. }
            | KvOp::Get { .. }
            | KvOp::GetMany { .. }
            | KvOp::GetPrefix { .. }
            | KvOp::Check { .. } => 0,
        };
        a.saturating_add(one)
    })
}

/// A schedule keeps its payload until it fires; a cancel frees one.
fn timer_ops(ops: &[TimerOp]) -> u64 {
    ops.iter().fold(0u64, |a, op| match op {
        TimerOp::Schedule(s) => a.saturating_add(
            (s.payload.len() as u64)
                .saturating_add(len(&s.queue) + len(&s.key) + len(&s.partition) + len(&s.txn))
                .saturating_add(ROW_OVERHEAD),
        ),
        TimerOp::Cancel { .. } => a,
    })
}

/// A permit row holds its name and owner; a release frees one.
fn lock_ops(ops: &[LockOp]) -> u64 {
    ops.iter().fold(0u64, |a, op| {
        a.saturating_add(match op {
            LockOp::Acquire { name, owner, .. } => len(name) + len(owner) + ROW_OVERHEAD,
            LockOp::Renew { .. } | LockOp::Release { .. } | LockOp::Get { .. } => 0,
        })
    })
}

/// A Kafka commit writes a row per partition (topic and metadata included), a new generation
/// one row; reads write nothing, and deletes only free.
fn kafka_groups(req: &KafkaGroupsReq) -> u64 {
    match req {
        KafkaGroupsReq::Commit { group, offsets } => offsets.iter().fold(len(group), |a, o| {
            a.saturating_add(len(&o.topic) + len(&o.metadata) + ROW_OVERHEAD)
        }),
        KafkaGroupsReq::NextGeneration {
            group,
            protocol_type,
            protocol_name,
        } => len(group) + len(protocol_type) + len(protocol_name) + ROW_OVERHEAD,
        KafkaGroupsReq::Fetch { .. }
        | KafkaGroupsReq::List
        | KafkaGroupsReq::Describe { .. }
        | KafkaGroupsReq::Infos { .. }
        | KafkaGroupsReq::Delete { .. }
        | KafkaGroupsReq::OffsetDelete { .. } => 0,
    }
}

fn data_or_bookkeeping(bytes: u64) -> Need {
    if bytes == 0 {
        Need::Bookkeeping
    } else {
        Need::Data(bytes)
    }
}

/// The need of a command. Exhaustive on purpose: a new command must say what it writes.
pub fn need(cmd: &Command) -> Need {
    match cmd {
        Command::Push(p) => Need::Data(push_items(&p.items)),
        Command::Transaction(t) => {
            let pushed = t.ops.iter().fold(0u64, |a, op| match op {
                TxnOp::Push(v) => a.saturating_add(push_items(v)),
                TxnOp::Ack(_) => a,
            });
            data_or_bookkeeping(
                pushed
                    .saturating_add(kv_ops(&t.kv))
                    .saturating_add(timer_ops(&t.timers)),
            )
        }
        Command::Trace(t) => {
            let names = t.names.iter().fold(0u64, |a, n| a.saturating_add(len(n)));
            Need::Data(
                (t.data.len() as u64)
                    .saturating_add(len(&t.transaction_id) + len(&t.partition_id))
                    .saturating_add(len(&t.group) + len(&t.event_type))
                    .saturating_add(names)
                    .saturating_add(ROW_OVERHEAD),
            )
        }
        Command::Kv(k) => data_or_bookkeeping(kv_ops(&k.ops)),
        Command::Timers(t) => data_or_bookkeeping(timer_ops(&t.ops)),
        Command::Locks(l) => data_or_bookkeeping(lock_ops(&l.ops)),
        Command::KafkaGroups(g) => data_or_bookkeeping(kafka_groups(g)),
        // The records are data; a guard's batch rows are a few numbers each.
        Command::KafkaProduce(p) => Need::Data(
            push_items(&p.items)
                .saturating_add((p.guards.len() as u64).saturating_mul(ROW_OVERHEAD)),
        ),
        // A new id is a counter bump and a KIP-360 bump one epoch of a row: no new row, but
        // the entry still grows the log; kept with the data it is for, as a produce is.
        Command::KafkaProducers(_) => Need::Data(ROW_OVERHEAD),
        // An EndTxn appends its markers, an InitProducerId may abort (markers too): data, as
        // the records of the transaction are.
        Command::KafkaTxn(_) => Need::Data(ROW_OVERHEAD),
        Command::Configure(_)
        | Command::DeleteQueue { .. }
        | Command::KafkaDeleteRecords(_)
        | Command::Pop(_)
        | Command::Ack(_)
        | Command::ExtendLease { .. }
        | Command::GroupAdmin(_) => Need::Bookkeeping,
        // A retry appends a copy of a message: data. Deletes and purges only remove rows.
        Command::DlqAdmin(DlqAdminReq::Retry { .. }) => Need::Data(ROW_OVERHEAD),
        Command::DlqAdmin(_) => Need::Bookkeeping,
        // A declaration is one small row (its contents never reach the disk).
        Command::EphemeralConfig(EphemeralConfigReq::List) => Need::Nothing,
        Command::EphemeralConfig(_) => Need::Bookkeeping,
        // A tenant's declaration: one small effect, and the group it opens is refused on a
        // full disk by the registry.
        Command::DeclareTenant { .. } => Need::Bookkeeping,
        Command::Read(_)
        | Command::Health
        | Command::Metrics(_)
        | Command::NodeMetrics(_)
        | Command::StatsRefresh => Need::Nothing,
    }
}
