//! Every command the engine knows, and the one table that says how each is routed (its class)
//! and who may send it (its role). Both doors translate requests into these commands; the bus
//! refuses a command whose row the caller's roles do not grant, whichever door it came from.

use crate::ephemeral::EphemeralConfigReq;
use crate::kv::{KvReq, LockReq};
use crate::types::*;

/// How the bus routes a command (DESIGN.md "The write path", step 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandClass {
    /// Planned on the leader and proposed as (part of) one Raft entry.
    ReplicatedWrite,
    /// A consumption operation (pop, ack, lease); planned on the leader, its cursor and lease
    /// rows are replicated in the same entry before the answer is released.
    Consumption,
    /// Answered from the leader's applied state, ordered after earlier writes.
    LinearizableRead,
    /// Answered by the node that received it, from node-local facts.
    NodeLocal,
}

/// The least role a command asks of its caller (spec/native-api.md §1.2): `admin` may do
/// everything, `read-write` everything but administration, `write-only` and `read-only` only
/// the commands whose row names exactly their role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    ReadOnly,
    WriteOnly,
    ReadWrite,
    Admin,
}

impl Role {
    /// A role name from a token. An unknown name gets the least role: it can read, no more.
    pub fn parse(name: &str) -> Role {
        match name {
            "admin" => Role::Admin,
            "read-write" => Role::ReadWrite,
            "write-only" => Role::WriteOnly,
            _ => Role::ReadOnly,
        }
    }

    /// Whether a caller holding `self` may send a command whose row asks `need`.
    pub fn grants(self, need: Role) -> bool {
        match (self, need) {
            (Role::Admin, _) => true,
            (Role::ReadWrite, need) => need != Role::Admin,
            (held, need) => held == need,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct CommandMeta {
    pub name: &'static str,
    pub class: CommandClass,
    pub role: Role,
}

const fn row(name: &'static str, class: CommandClass, role: Role) -> CommandMeta {
    CommandMeta { name, class, role }
}

/// The rows of the command table, by name, for the doors that refuse early (the HTTP door
/// answers 403 before reading a body) with the same row the bus checks again.
pub mod rows {
    use super::CommandClass::*;
    use super::Role::*;
    use super::{row, CommandMeta};

    pub const CONFIGURE: CommandMeta = row("configure", ReplicatedWrite, ReadWrite);
    pub const DELETE_QUEUE: CommandMeta = row("delete_queue", ReplicatedWrite, Admin);
    pub const PUSH: CommandMeta = row("push", ReplicatedWrite, WriteOnly);
    pub const POP: CommandMeta = row("pop", Consumption, ReadWrite);
    pub const ACK: CommandMeta = row("ack", Consumption, ReadWrite);
    pub const EXTEND_LEASE: CommandMeta = row("extend_lease", Consumption, ReadWrite);
    pub const TRANSACTION: CommandMeta = row("transaction", ReplicatedWrite, ReadWrite);
    pub const TRACE: CommandMeta = row("trace", ReplicatedWrite, ReadWrite);
    pub const TIMERS: CommandMeta = row("timers", ReplicatedWrite, WriteOnly);
    pub const GROUP_DELETE: CommandMeta = row("group_delete", ReplicatedWrite, Admin);
    pub const GROUP_SEEK: CommandMeta = row("group_seek", ReplicatedWrite, ReadWrite);
    pub const GROUP_SUBSCRIPTION: CommandMeta =
        row("group_subscription", ReplicatedWrite, ReadWrite);
    pub const DLQ_ADMIN: CommandMeta = row("dlq_admin", ReplicatedWrite, ReadWrite);
    pub const DLQ_PURGE: CommandMeta = row("dlq_purge", ReplicatedWrite, Admin);
    pub const READ: CommandMeta = row("read", LinearizableRead, ReadOnly);
    pub const HEALTH: CommandMeta = row("health", NodeLocal, ReadOnly);
    pub const METRICS: CommandMeta = row("metrics", NodeLocal, ReadOnly);
    /// The node's sampled process series (CPU, memory, request counts): node-wide numbers.
    pub const NODE_METRICS: CommandMeta = row("node_metrics", NodeLocal, ReadOnly);
    pub const STATS_REFRESH: CommandMeta = row("stats_refresh", NodeLocal, Admin);
    pub const KV: CommandMeta = row("kv", ReplicatedWrite, ReadWrite);
    pub const LOCKS: CommandMeta = row("locks", ReplicatedWrite, ReadWrite);
    pub const KAFKA_GROUPS: CommandMeta = row("kafka_groups", ReplicatedWrite, ReadWrite);
    pub const KAFKA_INIT_PRODUCER: CommandMeta =
        row("kafka_init_producer", ReplicatedWrite, WriteOnly);
    pub const KAFKA_PRODUCE: CommandMeta = row("kafka_produce", ReplicatedWrite, WriteOnly);
    /// The transaction coordinator's requests: a transactional producer writes.
    pub const KAFKA_TXN: CommandMeta = row("kafka_txn", ReplicatedWrite, WriteOnly);
    /// AddOffsetsToTxn and TxnOffsetCommit move a group's committed offsets at commit: the
    /// consumer's right, as the `kafka_groups` row (Kafka asks READ on the group).
    pub const KAFKA_TXN_OFFSETS: CommandMeta = row("kafka_txn_offsets", ReplicatedWrite, ReadWrite);
    /// Deleting records is an admin act, as deleting a queue is.
    pub const KAFKA_DELETE_RECORDS: CommandMeta =
        row("kafka_delete_records", ReplicatedWrite, Admin);
    pub const EPHEMERAL_CONFIGURE: CommandMeta =
        row("ephemeral_configure", ReplicatedWrite, ReadWrite);
    /// Deleting a declaration is an admin act, as deleting a durable queue is.
    pub const EPHEMERAL_DELETE: CommandMeta = row("ephemeral_delete", ReplicatedWrite, Admin);
    /// The cluster's membership operations (`/api/v1/cluster`): not a bus command (openraft's
    /// own entry), but routed as a write so a follower relays it to the leader.
    pub const CLUSTER_ADMIN: CommandMeta = row("cluster_admin", ReplicatedWrite, Admin);
    /// `GET /api/v1/cluster`: this node's own view of the membership, answered by the node
    /// asked, never relayed (review s21 membership M9: as a write, every node answered 503
    /// while no leader was known, when the view is most needed).
    pub const CLUSTER_VIEW: CommandMeta = row("cluster_view", NodeLocal, Admin);
    /// A tenant's declaration in a cluster: the bus's own, on a tenant's first write; no door
    /// sends it, and the bus does not check a caller's roles against it (the write that
    /// caused it is checked against its own row).
    pub const TENANT_DECLARE: CommandMeta = row("tenant_declare", ReplicatedWrite, Admin);
}

/// The command table. Doors translate into these; nothing else decides routing or roles.
pub const COMMAND_TABLE: &[CommandMeta] = &[
    rows::CONFIGURE,
    rows::DELETE_QUEUE,
    rows::PUSH,
    rows::POP,
    rows::ACK,
    rows::EXTEND_LEASE,
    rows::TRANSACTION,
    rows::TRACE,
    rows::TIMERS,
    rows::GROUP_DELETE,
    rows::GROUP_SEEK,
    rows::GROUP_SUBSCRIPTION,
    rows::DLQ_ADMIN,
    rows::DLQ_PURGE,
    rows::READ,
    rows::HEALTH,
    rows::METRICS,
    rows::NODE_METRICS,
    rows::STATS_REFRESH,
    rows::KV,
    rows::LOCKS,
    rows::KAFKA_GROUPS,
    rows::KAFKA_INIT_PRODUCER,
    rows::KAFKA_PRODUCE,
    rows::KAFKA_TXN,
    rows::KAFKA_TXN_OFFSETS,
    rows::KAFKA_DELETE_RECORDS,
    rows::EPHEMERAL_CONFIGURE,
    rows::EPHEMERAL_DELETE,
];

#[derive(Debug, Clone)]
pub enum Command {
    Configure(ConfigureReq),
    DeleteQueue {
        queue: String,
    },
    Push(PushReq),
    Pop(PopReq),
    Ack(AckReq),
    ExtendLease {
        lease_id: String,
    },
    Transaction(TxnReq),
    Trace(TraceReq),
    Timers(crate::timers::TimersReq),
    GroupAdmin(GroupAdminReq),
    DlqAdmin(crate::dlq_admin::DlqAdminReq),
    Read(ReadReq),
    Health,
    Metrics(MetricsFormat),
    /// The node's sampled series over a window (spec native-api §2.1 rows 58-59).
    NodeMetrics(crate::views::NodeMetricsQuery),
    /// Recompute consumer statistics: ours are live, so there is nothing to do but answer.
    StatsRefresh,
    Kv(KvReq),
    Locks(LockReq),
    KafkaGroups(crate::kafka_groups::KafkaGroupsReq),
    KafkaProducers(crate::kafka_producers::KafkaProducersReq),
    /// A Kafka produce with idempotent batches: checked and appended in one planner step.
    KafkaProduce(crate::kafka_producers::KafkaProduceReq),
    /// Kafka's transaction coordinator (docs/kafka-transactions.md).
    KafkaTxn(crate::kafka_txns::KafkaTxnReq),
    /// Kafka DeleteRecords: partitions' log start offsets move up.
    KafkaDeleteRecords(crate::kafka_records::DeleteRecordsReq),
    /// The replicated declarations of ephemeral queues (their contents never reach the bus).
    EphemeralConfig(crate::ephemeral::EphemeralConfigReq),
    /// A tenant's group declared with these voters (`cluster_tenant_groups`, effect 67): sent
    /// by the broker's bus to the `default` group on a tenant's first write, never by a door.
    DeclareTenant {
        tenant: String,
        voters: Vec<u64>,
    },
}

impl Command {
    /// Writes into the command what the caller's roles allow beyond its row, so the engine
    /// judges what only the state tells (an EndTxn commits group offsets only if it holds
    /// some). The bus calls it on every command; a door's own value is overwritten.
    pub fn stamp_access(&mut self, ctx: &crate::bus::RequestCtx) {
        if let Command::KafkaTxn(crate::kafka_txns::KafkaTxnReq::End {
            may_commit_offsets, ..
        }) = self
        {
            *may_commit_offsets = ctx.authorize(&rows::KAFKA_TXN_OFFSETS).is_ok();
        }
    }

    /// This command's row of [`COMMAND_TABLE`].
    pub fn meta(&self) -> &'static CommandMeta {
        match self {
            Command::Configure(_) => &rows::CONFIGURE,
            Command::DeleteQueue { .. } => &rows::DELETE_QUEUE,
            Command::Push(_) => &rows::PUSH,
            Command::Pop(_) => &rows::POP,
            Command::Ack(_) => &rows::ACK,
            Command::ExtendLease { .. } => &rows::EXTEND_LEASE,
            Command::Transaction(_) => &rows::TRANSACTION,
            Command::Trace(_) => &rows::TRACE,
            Command::Timers(_) => &rows::TIMERS,
            Command::GroupAdmin(GroupAdminReq::Delete { .. }) => &rows::GROUP_DELETE,
            Command::GroupAdmin(GroupAdminReq::Seek { .. }) => &rows::GROUP_SEEK,
            Command::GroupAdmin(GroupAdminReq::Subscription { .. }) => &rows::GROUP_SUBSCRIPTION,
            Command::DlqAdmin(crate::dlq_admin::DlqAdminReq::Purge(_)) => &rows::DLQ_PURGE,
            Command::DlqAdmin(_) => &rows::DLQ_ADMIN,
            Command::Read(_) => &rows::READ,
            Command::Health => &rows::HEALTH,
            Command::Metrics(_) => &rows::METRICS,
            Command::NodeMetrics(_) => &rows::NODE_METRICS,
            Command::StatsRefresh => &rows::STATS_REFRESH,
            Command::Kv(_) => &rows::KV,
            Command::Locks(_) => &rows::LOCKS,
            Command::KafkaGroups(_) => &rows::KAFKA_GROUPS,
            Command::KafkaProducers(_) => &rows::KAFKA_INIT_PRODUCER,
            Command::KafkaProduce(_) => &rows::KAFKA_PRODUCE,
            Command::KafkaTxn(
                crate::kafka_txns::KafkaTxnReq::AddOffsets { .. }
                | crate::kafka_txns::KafkaTxnReq::OffsetCommit { .. },
            ) => &rows::KAFKA_TXN_OFFSETS,
            Command::KafkaTxn(_) => &rows::KAFKA_TXN,
            Command::KafkaDeleteRecords(_) => &rows::KAFKA_DELETE_RECORDS,
            Command::EphemeralConfig(EphemeralConfigReq::Set { .. }) => &rows::EPHEMERAL_CONFIGURE,
            Command::EphemeralConfig(EphemeralConfigReq::Delete { .. }) => &rows::EPHEMERAL_DELETE,
            Command::EphemeralConfig(EphemeralConfigReq::List) => &rows::READ,
            Command::DeclareTenant { .. } => &rows::TENANT_DECLARE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_rows_match_variants() {
        assert_eq!(Command::Health.meta().name, "health");
        assert_eq!(
            Command::Metrics(MetricsFormat::Json).meta().class,
            CommandClass::NodeLocal
        );
        assert_eq!(
            Command::DeleteQueue { queue: "q".into() }.meta().name,
            "delete_queue"
        );
        let names: std::collections::HashSet<_> = COMMAND_TABLE.iter().map(|m| m.name).collect();
        assert_eq!(names.len(), COMMAND_TABLE.len(), "command names are unique");
    }

    #[test]
    fn roles_grant_as_the_reference_broker_does() {
        use Role::*;
        let all = [ReadOnly, WriteOnly, ReadWrite, Admin];
        for need in all {
            assert!(Admin.grants(need));
            assert_eq!(ReadWrite.grants(need), need != Admin);
        }
        assert!(WriteOnly.grants(WriteOnly) && !WriteOnly.grants(ReadOnly));
        assert!(ReadOnly.grants(ReadOnly) && !ReadOnly.grants(WriteOnly));
        assert!(!ReadOnly.grants(ReadWrite) && !WriteOnly.grants(ReadWrite));
        assert_eq!(Role::parse("admin"), Admin);
        assert_eq!(Role::parse("write-only"), WriteOnly);
        assert_eq!(
            Role::parse("superuser"),
            ReadOnly,
            "unknown names get the least"
        );
    }

    #[test]
    fn group_admin_rows_follow_the_operation() {
        let delete = Command::GroupAdmin(GroupAdminReq::Delete {
            group: "g".into(),
            queue: None,
            delete_metadata: false,
        });
        let seek = Command::GroupAdmin(GroupAdminReq::Seek {
            group: "g".into(),
            queue: "q".into(),
            to_end: true,
            timestamp_us: None,
        });
        assert_eq!(delete.meta().role, Role::Admin);
        assert_eq!(seek.meta().role, Role::ReadWrite);
        assert_eq!(
            Command::Push(PushReq::default()).meta().role,
            Role::WriteOnly
        );
        assert_eq!(Command::StatsRefresh.meta().role, Role::Admin);
        let delete_records =
            Command::KafkaDeleteRecords(crate::kafka_records::DeleteRecordsReq { targets: vec![] });
        assert_eq!(delete_records.meta().role, Role::Admin);
    }

    #[test]
    fn transactional_offsets_need_the_consumer_role() {
        use crate::bus::{Access, RequestCtx};
        use crate::kafka_txns::{KafkaTxnReq, TxnLimits};
        let writer = RequestCtx {
            access: Access::Roles(vec![Role::WriteOnly]),
            ..RequestCtx::default()
        };
        let add_offsets = Command::KafkaTxn(KafkaTxnReq::AddOffsets {
            txn_id: "tx".into(),
            producer_id: 1,
            epoch: 0,
            group: "billing".into(),
            limits: TxnLimits::default(),
        });
        let commit = Command::KafkaTxn(KafkaTxnReq::OffsetCommit {
            txn_id: "tx".into(),
            producer_id: 1,
            epoch: 0,
            group: "billing".into(),
            offsets: vec![],
            limits: TxnLimits::default(),
        });
        let refused = writer.authorize(add_offsets.meta()).err().map(|e| e.code);
        assert_eq!(refused, Some(crate::ErrorCode::Forbidden));
        assert!(writer.authorize(commit.meta()).is_err());
        let end = Command::KafkaTxn(KafkaTxnReq::End {
            txn_id: "tx".into(),
            producer_id: 1,
            epoch: 0,
            commit: true,
            may_commit_offsets: true,
            limits: TxnLimits::default(),
        });
        assert!(writer.authorize(end.meta()).is_ok());
        let mut stamped = end;
        stamped.stamp_access(&writer);
        assert!(matches!(
            stamped,
            Command::KafkaTxn(KafkaTxnReq::End {
                may_commit_offsets: false,
                ..
            })
        ));
    }
}
