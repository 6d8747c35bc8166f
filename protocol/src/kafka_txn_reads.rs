//! Read-only views of the Kafka transaction coordinator and the idempotent producers' state
//! (DescribeTransactions, ListTransactions, DescribeProducers; docs/kafka-transactions.md
//! "Reading the coordinator"). Answered from applied state, no entry written.

/// The most transactional ids one DescribeTransactions may name, and the most rows one
/// ListTransactions answers (the rest are left out: the answer stays bounded whatever the
/// configured `kafka_max_transactional_ids`).
pub const MAX_TXNS_PER_ANSWER: usize = 10_000;
/// The most partitions one DescribeProducers may name.
pub const MAX_PRODUCER_PARTITIONS: usize = 10_000;
/// The most producers listed per partition (the rest are left out).
pub const MAX_PRODUCERS_PER_PARTITION: usize = 1_000;
/// The most filter values (states or producer ids) one ListTransactions may carry.
pub const MAX_LIST_FILTERS: usize = 1_000;

/// A transaction's state under Kafka's names (`TransactionState` in Kafka's coordinator).
/// Here an end is one entry, so the Prepare* states are never shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnStateName {
    /// InitProducerId granted, nothing begun since.
    Empty,
    Ongoing,
    /// The last transaction of this epoch committed.
    CompleteCommit,
    /// The last transaction of this epoch aborted.
    CompleteAbort,
}

/// Every state name Kafka knows, whether or not this coordinator shows it: a
/// ListTransactions filter naming one of these is known (and may match nothing here).
pub const KAFKA_STATE_NAMES: &[&str] = &[
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
];

impl TxnStateName {
    pub fn kafka_name(self) -> &'static str {
        match self {
            TxnStateName::Empty => "Empty",
            TxnStateName::Ongoing => "Ongoing",
            TxnStateName::CompleteCommit => "CompleteCommit",
            TxnStateName::CompleteAbort => "CompleteAbort",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KafkaTxnRead {
    /// DescribeTransactions: each id, in order (at most [`MAX_TXNS_PER_ANSWER`]).
    Describe { txn_ids: Vec<String> },
    /// ListTransactions: every id whose state is one of `states` (Kafka names; empty: any)
    /// and whose producer id is one of `producer_ids` (empty: any). (v1's duration filter
    /// is Kafka 3.8's; v0 is served.)
    List {
        states: Vec<String>,
        producer_ids: Vec<i64>,
    },
    /// DescribeProducers: per (topic, partition index), in order.
    Producers { partitions: Vec<(String, i32)> },
    /// OffsetFetch `require_stable`: per (topic, partition index) of `group`, in order,
    /// whether an open transaction holds a pending offset there (at most
    /// [`MAX_PRODUCER_PARTITIONS`] asked).
    PendingOffsets {
        group: String,
        partitions: Vec<(String, i32)>,
    },
}

/// One transactional id as DescribeTransactions shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnView {
    pub txn_id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub timeout_ms: u32,
    pub state: TxnStateName,
    /// When the open transaction began (ms since the epoch); -1 when none is open.
    pub start_ms: i64,
    /// The open transaction's partitions as (topic, partition index), in topic order.
    pub partitions: Vec<(String, i32)>,
}

/// One row of ListTransactions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnListed {
    pub txn_id: String,
    pub producer_id: i64,
    pub state: TxnStateName,
}

/// One producer with state on a partition, as DescribeProducers shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerView {
    pub producer_id: i64,
    pub epoch: i16,
    /// The last sequence of the last batch kept for the partition; -1 when none.
    pub last_sequence: i32,
    /// When the producer was last active (any partition), ms since the epoch.
    pub last_ms: i64,
    /// The first offset of its open transaction on the partition; -1 when none.
    pub txn_start_offset: i64,
}

/// A partition's answer: `None` when the topic does not exist.
pub type PartitionProducers = Option<Vec<ProducerView>>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KafkaTxnReadAnswer {
    /// One per asked id, in order: `None` for an id the coordinator does not know.
    Described(Vec<Option<TxnView>>),
    /// At most [`MAX_TXNS_PER_ANSWER`] rows in transactional id order; `unknown_states` are
    /// the filters that name no Kafka state.
    Listed {
        rows: Vec<TxnListed>,
        unknown_states: Vec<String>,
    },
    /// One per asked partition, in order.
    Producers(Vec<PartitionProducers>),
    /// One per asked partition, in order: true where an offset is pending.
    Pending(Vec<bool>),
}
