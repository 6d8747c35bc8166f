//! Kafka transactions (docs/kafka-transactions.md): what the Kafka door asks of the engine's
//! transaction coordinator, and what it answers. The door maps [`TxnCode`] to Kafka's codes.

/// Kafka's `transaction.max.timeout.ms` default (15 minutes), `kafka_transaction_max_timeout_ms`.
pub const DEFAULT_TRANSACTION_MAX_TIMEOUT_MS: u32 = 900_000;
/// `kafka_max_transactional_ids`: transactional id rows kept per tenant.
pub const DEFAULT_MAX_TRANSACTIONAL_IDS: u64 = 10_000;
/// `kafka_max_open_transactions`: open transactions per tenant.
pub const DEFAULT_MAX_OPEN_TRANSACTIONS: u64 = 1_000;
/// `kafka_max_partitions_per_transaction`; pending offsets and groups per transaction have
/// the same bound.
pub const DEFAULT_MAX_PARTITIONS_PER_TRANSACTION: u64 = 1_000;
/// The highest `kafka_max_partitions_per_transaction` may be set: a transaction's end must
/// fit one entry (broker config keys.rs has the arithmetic). The reads' per-answer budgets
/// are above it, so every answer serves its first transaction.
pub const MAX_PARTITIONS_PER_TRANSACTION_LIMIT: u64 = 50_000;
/// The longest transactional id the coordinator keeps (Kafka sets none; this bounds a row).
pub const MAX_TRANSACTIONAL_ID_BYTES: usize = 1024;
/// `kafka_max_aborted_per_partition`: aborted transactions one partition remembers (rows of
/// its index in RAM; an abort that would add one past it is refused, retriable).
pub const DEFAULT_MAX_ABORTED_PER_PARTITION: u64 = 10_000;
/// Kafka's `transactional.id.expiration.ms` default (7 days).
pub const DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS: u64 = 604_800_000;
/// The most timed-out transactions one sweep aborts (the rest wait for the next).
pub const TXN_TIMEOUTS_PER_SWEEP: usize = 64;
/// The most idle transactional ids one expiry sweep forgets (the rest wait for the next).
pub const TXN_EXPIRIES_PER_SWEEP: usize = 256;

/// The configured bounds, sent with every request (the engine keeps no configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnLimits {
    pub max_timeout_ms: u32,
    pub max_ids: u64,
    pub max_open: u64,
    pub max_partitions: u64,
    pub max_aborted: u64,
}

impl Default for TxnLimits {
    fn default() -> Self {
        TxnLimits {
            max_timeout_ms: DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
            max_ids: DEFAULT_MAX_TRANSACTIONAL_IDS,
            max_open: DEFAULT_MAX_OPEN_TRANSACTIONS,
            max_partitions: DEFAULT_MAX_PARTITIONS_PER_TRANSACTION,
            max_aborted: DEFAULT_MAX_ABORTED_PER_PARTITION,
        }
    }
}

/// The most partitions a Kafka topic shows (the door's `topics::MAX_TOPIC_PARTITIONS`).
pub const MAX_KAFKA_TOPIC_PARTITIONS: u32 = 10_000;

/// One AddPartitionsToTxn partition, with the topic's partition count as the door shows it
/// (its floor row is not engine state): an index at or past it is refused, as a produce to
/// it is, so that a transaction never creates a partition that changes every client's
/// key-to-partition mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnPartition {
    pub topic: String,
    pub index: i32,
    pub count: u32,
}

/// One TxnOffsetCommit partition: what an OffsetCommit partition carries.
pub use crate::kafka_groups::KafkaOffsetCommit as TxnOffset;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KafkaTxnReq {
    /// InitProducerId with a transactional id. `current` is the (id, epoch) a v3+ client
    /// names (KIP-360).
    Init {
        txn_id: String,
        timeout_ms: i32,
        current: Option<(i64, i16)>,
        limits: TxnLimits,
    },
    /// AddPartitionsToTxn.
    AddPartitions {
        txn_id: String,
        producer_id: i64,
        epoch: i16,
        partitions: Vec<TxnPartition>,
        limits: TxnLimits,
    },
    AddOffsets {
        txn_id: String,
        producer_id: i64,
        epoch: i16,
        group: String,
        limits: TxnLimits,
    },
    OffsetCommit {
        txn_id: String,
        producer_id: i64,
        epoch: i16,
        group: String,
        offsets: Vec<TxnOffset>,
        limits: TxnLimits,
    },
    End {
        txn_id: String,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        /// Whether the caller holds the role of [`crate::command::rows::KAFKA_TXN_OFFSETS`]:
        /// set by the bus (`Command::stamp_access`), never by a door. A commit that holds
        /// pending offsets is refused without it.
        may_commit_offsets: bool,
        /// Its `max_aborted` bounds what an abort adds to each partition's index.
        limits: TxnLimits,
    },
}

/// The coordinator's answers, each one Kafka code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnCode {
    None,
    /// INVALID_TRANSACTION_TIMEOUT (50).
    InvalidTimeout,
    /// PRODUCER_FENCED (90; INVALID_PRODUCER_EPOCH (47) to clients before v4 of the API).
    Fenced,
    /// INVALID_PRODUCER_ID_MAPPING (49): no such transactional id, or another producer id.
    InvalidMapping,
    /// INVALID_TXN_STATE (48).
    InvalidState,
    /// UNKNOWN_TOPIC_OR_PARTITION (3).
    UnknownPartition,
    /// OPERATION_NOT_ATTEMPTED (55): another partition of the request failed.
    NotAttempted,
    /// COORDINATOR_LOAD_IN_PROGRESS (14), retriable: a cap is reached or a marker could not
    /// be written now.
    Busy,
    /// POLICY_VIOLATION (44): past `kafka_max_partitions_per_transaction`.
    TooMany,
    /// GROUP_AUTHORIZATION_FAILED (30): a commit holding group offsets by a caller without
    /// the consumer role.
    GroupAuthorization,
    /// INVALID_TOPIC_EXCEPTION (17): an offset for a topic the broker does not have, or a
    /// negative partition, as OffsetCommit answers.
    InvalidTopic,
    /// OFFSET_METADATA_TOO_LARGE (12).
    MetadataTooLarge,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KafkaTxnOutcome {
    Init {
        code: TxnCode,
        producer_id: i64,
        epoch: i16,
    },
    /// Per partition (AddPartitions, OffsetCommit, in request order) or one (AddOffsets, End).
    Codes(Vec<TxnCode>),
}
