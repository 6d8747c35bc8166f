//! Every command the engine knows, and the one table that says how each is routed.

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

#[derive(Debug, Clone, Copy)]
pub struct CommandMeta {
    pub name: &'static str,
    pub class: CommandClass,
}

/// The command table. Doors translate into these; nothing else decides routing.
pub const COMMAND_TABLE: &[CommandMeta] = &[
    CommandMeta {
        name: "configure",
        class: CommandClass::ReplicatedWrite,
    },
    CommandMeta {
        name: "delete_queue",
        class: CommandClass::ReplicatedWrite,
    },
    CommandMeta {
        name: "push",
        class: CommandClass::ReplicatedWrite,
    },
    CommandMeta {
        name: "pop",
        class: CommandClass::Consumption,
    },
    CommandMeta {
        name: "ack",
        class: CommandClass::Consumption,
    },
    CommandMeta {
        name: "extend_lease",
        class: CommandClass::Consumption,
    },
    CommandMeta {
        name: "transaction",
        class: CommandClass::ReplicatedWrite,
    },
    CommandMeta {
        name: "trace",
        class: CommandClass::ReplicatedWrite,
    },
    CommandMeta {
        name: "group_admin",
        class: CommandClass::ReplicatedWrite,
    },
    CommandMeta {
        name: "read",
        class: CommandClass::LinearizableRead,
    },
    CommandMeta {
        name: "health",
        class: CommandClass::NodeLocal,
    },
    CommandMeta {
        name: "metrics",
        class: CommandClass::NodeLocal,
    },
];

#[derive(Debug, Clone)]
pub enum Command {
    Configure(ConfigureReq),
    DeleteQueue { queue: String },
    Push(PushReq),
    Pop(PopReq),
    Ack(AckReq),
    ExtendLease { lease_id: String },
    Transaction(TxnReq),
    Trace(TraceReq),
    GroupAdmin(GroupAdminReq),
    Read(ReadReq),
    Health,
    Metrics(MetricsFormat),
}

impl Command {
    /// This command's row of [`COMMAND_TABLE`].
    pub fn meta(&self) -> &'static CommandMeta {
        let i = match self {
            Command::Configure(_) => 0,
            Command::DeleteQueue { .. } => 1,
            Command::Push(_) => 2,
            Command::Pop(_) => 3,
            Command::Ack(_) => 4,
            Command::ExtendLease { .. } => 5,
            Command::Transaction(_) => 6,
            Command::Trace(_) => 7,
            Command::GroupAdmin(_) => 8,
            Command::Read(_) => 9,
            Command::Health => 10,
            Command::Metrics(_) => 11,
        };
        &COMMAND_TABLE[i]
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
}
