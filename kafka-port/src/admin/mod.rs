//! Kafka's topic and cluster admin APIs (CreateTopics, DeleteTopics, CreatePartitions,
//! DescribeConfigs, DescribeCluster, DescribeLogDirs, DeleteRecords), each mapped onto the engine commands
//! the HTTP API uses: a queue configure creates, a queue delete deletes, and the partition
//! count lives in [`floor`].

pub mod alter_configs;
pub mod config_row;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_log_dirs;
pub mod floor;
pub mod kv_row;
pub mod topic_configs;

/// The brokers a replica list may name: every voter of the tenant's clustered group (each
/// holds the whole log, so any of them is a replica of every partition), or this broker
/// alone. A list copied from Metadata (review s22 kmeta L4) is accepted; placement is not
/// chosen by it.
///
/// A clustered node whose membership is not known yet (its group being rebuilt) answers
/// NOT_CONTROLLER, which clients retry after asking for metadata again, rather than judging
/// by this broker alone.
pub fn replica_brokers(door: &crate::Door) -> Result<Vec<i32>, Refusal> {
    match door.topology() {
        None => Ok(vec![door.cfg.node_id]),
        Some(t) if !t.replicas.is_empty() => Ok(t.replicas),
        Some(_) => Err(Refusal::new(
            codes::NOT_CONTROLLER,
            "the cluster's voters are not known on this node yet",
        )),
    }
}

/// Whether `list` is a replica list Kafka would take here: not empty, no broker twice, every
/// one of `brokers`.
pub fn replicas_hold(list: &[i32], brokers: &[i32]) -> bool {
    !list.is_empty()
        && list.iter().all(|b| brokers.contains(b))
        && list.iter().enumerate().all(|(i, b)| !list[..i].contains(b))
}

/// The refusal of a replica list that does not hold.
pub fn replicas_refusal(brokers: &[i32]) -> String {
    format!("every replica must be one of the brokers {brokers:?}, each once")
}

/// Kafka error codes only the admin APIs answer.
pub mod codes {
    pub const TOPIC_ALREADY_EXISTS: i16 = 36;
    pub const INVALID_PARTITIONS: i16 = 37;
    pub const INVALID_REPLICATION_FACTOR: i16 = 38;
    pub const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
    pub const INVALID_CONFIG: i16 = 40;
    pub const NOT_CONTROLLER: i16 = 41;
    pub const INVALID_REQUEST: i16 = 42;
}

/// Topics one admin request may name: each costs engine calls, and a bigger batch is a
/// mistake rather than a workload.
pub const MAX_TOPICS: usize = 1_000;
/// Configs one topic of a CreateTopics request may carry (Kafka has about 40 topic configs).
pub const MAX_CONFIGS: usize = 100;
/// Replica assignments one topic may carry: at most one per partition.
pub const MAX_ASSIGNMENTS: usize = crate::topics::MAX_TOPIC_PARTITIONS as usize;

/// A per-topic verdict: a Kafka error code and the message clients show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: i16,
    pub message: String,
}

impl Refusal {
    pub fn new(code: i16, message: impl Into<String>) -> Self {
        Refusal {
            code,
            message: message.into(),
        }
    }

    pub fn from_queen(e: &queenmq_protocol::QueenError) -> Self {
        Refusal::new(crate::errors::from_queen(e), e.to_string())
    }
}

/// Refuses a user whose roles do not reach every row in `rows` with `code` (a topic's or the
/// cluster's authorization failure), before anything is looked up: as Kafka checks its ACLs
/// first, a validate-only request or a change to nothing is refused too, and a refused user
/// does not learn whether the topic exists.
pub fn authorized(
    door: &crate::Door,
    rows: &[queenmq_protocol::CommandMeta],
    code: i16,
) -> Result<(), Refusal> {
    match rows.iter().find(|row| !door.may(row)) {
        None => Ok(()),
        Some(row) => Err(Refusal::new(
            code,
            format!(
                "user {:?} lacks the role this needs ({:?} for {})",
                door.ctx.principal.as_deref().unwrap_or(""),
                row.role,
                row.name
            ),
        )),
    }
}

/// The names a request gives twice: Kafka refuses every copy with INVALID_REQUEST rather
/// than act on one of them.
pub fn duplicates(names: &[String]) -> std::collections::HashSet<String> {
    let mut seen = std::collections::HashSet::new();
    let mut twice = std::collections::HashSet::new();
    for n in names {
        if !seen.insert(n.as_str()) {
            twice.insert(n.clone());
        }
    }
    twice
}
