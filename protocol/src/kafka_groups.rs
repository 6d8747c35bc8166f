//! The durable half of Kafka consumer groups (docs/kafka-compat.md "Consumer groups"):
//! committed offsets and each group's last generation. Membership (members, heartbeats,
//! join and sync waits) is not here: it lives in the Kafka door's coordinator, in memory,
//! as it does in Kafka, so a heartbeat never becomes a log entry.
//!
//! These offsets are separate from the native consumer-group cursors of the same name.

/// Longest Kafka group id, in bytes (the door refuses longer with INVALID_GROUP_ID).
pub const MAX_KAFKA_GROUP_ID_BYTES: usize = 512;
/// Longest committed `metadata` string (Kafka's `offset.metadata.max.bytes` default; past it
/// the partition gets OFFSET_METADATA_TOO_LARGE).
pub const MAX_KAFKA_OFFSET_METADATA_BYTES: usize = 4096;
/// Most partitions one commit, fetch or offset delete may name.
pub const MAX_KAFKA_OFFSETS_PER_REQUEST: usize = 10_000;
/// Most groups one request may name (DeleteGroups, the multi-group OffsetFetch).
pub const MAX_KAFKA_GROUPS_PER_REQUEST: usize = 1_000;
/// Longest topic name a committed offset may carry (Kafka's own limit).
pub const MAX_KAFKA_TOPIC_BYTES: usize = 249;
/// Longest protocol type or protocol name kept with a generation.
pub const MAX_KAFKA_PROTOCOL_BYTES: usize = 255;

/// One committed offset as a client sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaOffsetCommit {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// -1 when the client sent none.
    pub leader_epoch: i32,
    pub metadata: String,
}

/// One committed offset as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaCommitted {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_time_us: i64,
}

/// A group's durable facts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KafkaGroupInfo {
    pub group: String,
    /// The last generation handed out (0: none yet).
    pub generation: i32,
    pub protocol_type: String,
    pub protocol_name: String,
    pub offsets: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KafkaGroupsReq {
    /// Store offsets (the coordinator has already checked the member and generation).
    Commit {
        group: String,
        offsets: Vec<KafkaOffsetCommit>,
    },
    /// Committed offsets of `group`; `None` asks every partition it has.
    Fetch {
        group: String,
        partitions: Option<Vec<(String, i32)>>,
    },
    /// Mints the generation after the group's last and records its protocol.
    NextGeneration {
        group: String,
        protocol_type: String,
        protocol_name: String,
    },
    /// Every group this tenant holds durable facts for (ListGroups).
    List,
    /// One group's facts (the coordinator's start after a restart, OffsetDelete).
    Describe { group: String },
    /// Each named group's facts, in order (DescribeGroups; at most
    /// [`MAX_KAFKA_GROUPS_PER_REQUEST`]): bounded by the request, where a List to describe
    /// one group copied every group (review s19 kafka H2).
    Infos { groups: Vec<String> },
    /// Removes groups with everything committed for them. The coordinator refuses a group
    /// with live members first (NON_EMPTY_GROUP).
    Delete { groups: Vec<String> },
    /// Removes some committed offsets of a group.
    OffsetDelete {
        group: String,
        partitions: Vec<(String, i32)>,
    },
}

impl KafkaGroupsReq {
    /// Whether this request may add bytes to the engine's state (refused under memory pressure).
    pub fn grows(&self) -> bool {
        matches!(
            self,
            KafkaGroupsReq::Commit { .. } | KafkaGroupsReq::NextGeneration { .. }
        )
    }
}

/// Per-partition answer of a commit or an offset delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KafkaPartitionResult {
    Ok,
    /// The metadata string is longer than [`MAX_KAFKA_OFFSET_METADATA_BYTES`].
    MetadataTooLarge,
    /// A topic name the broker cannot hold, or a negative partition.
    InvalidTopic,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KafkaGroupsOutcome {
    Committed(Vec<KafkaPartitionResult>),
    Fetched(Vec<KafkaCommitted>),
    Generation(i32),
    Groups(Vec<KafkaGroupInfo>),
    Group(Option<KafkaGroupInfo>),
    /// One per named group of [`KafkaGroupsReq::Infos`], in order.
    Infos(Vec<Option<KafkaGroupInfo>>),
    /// A List or a Fetch past what the engine cycle grants its admin reads (review s19 kafka
    /// H2): Kafka's answers have no "more" flag, so the whole answer is refused, listing
    /// nothing; the door answers COORDINATOR_LOAD_IN_PROGRESS, which clients retry.
    OverBudget,
    /// Per requested group: whether it existed (and is now gone).
    Deleted(Vec<bool>),
    OffsetsDeleted(Vec<KafkaPartitionResult>),
}

/// The door's checks of a group id (empty ids are Kafka's INVALID_GROUP_ID too).
pub fn valid_group_id(group: &str) -> bool {
    !group.is_empty() && group.len() <= MAX_KAFKA_GROUP_ID_BYTES
}
