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
/// The most state filters one ListTransactions may carry (Kafka knows eight names).
pub const MAX_LIST_FILTERS: usize = 1_000;
/// The most producer id filters one ListTransactions may carry: they are matched as a set
/// through the by-producer index, and Java's `kafka-transactions.sh find-hanging` sends all
/// its candidates in one request (review s17 kafka L1: a cap of 1 000 closed its connection).
pub const MAX_LIST_PRODUCER_FILTERS: usize = 100_000;
/// The most entries one DescribeTransactions or DescribeProducers answer holds: partitions
/// summed over every described transaction, producers summed over every described
/// partition. The engine counts while it builds the answer; the item that would pass it and
/// every item after it are answered [`TxnDescribed::OverBudget`] /
/// [`PartitionProducers::OverBudget`], which the door turns into a retriable per-item error
/// (docs/kafka-transactions.md "Reading the coordinator"). It is above one transaction's
/// most partitions (`kafka_max_partitions_per_transaction` is at most 50 000) and one
/// partition's most producers, so every answer serves its first item and a client that
/// retries the rest always progresses.
pub const MAX_ENTRIES_PER_ANSWER: usize = 100_000;
const _: () = assert!(MAX_PRODUCERS_PER_PARTITION < MAX_ENTRIES_PER_ANSWER);
/// DescribeProducers' budget. Past it the door answers NOT_LEADER_OR_FOLLOWER per partition,
/// which Java's find-hanging treats as fatal when the caller pinned a broker id (review s17
/// kafka M1): a batch of 500 partitions averaging over 200 producers each meets it. The
/// answer is now charged (the cycle's budget, [`MAX_READ_ENTRIES_PER_CYCLE`], and the door's
/// answer room: review s17 lead H1); raising it is that review's M1, not done yet.
pub const MAX_PRODUCER_ENTRIES_PER_ANSWER: usize = 100_000;
const _: () = assert!(MAX_PRODUCERS_PER_PARTITION < MAX_PRODUCER_ENTRIES_PER_ANSWER);
// A described transaction is one entry beside its partitions.
const _: () = assert!(
    (crate::kafka_txns::MAX_PARTITIONS_PER_TRANSACTION_LIMIT as usize) < MAX_ENTRIES_PER_ANSWER
);
/// The most entries (described partitions, listed producers and rows, pending pairs) the
/// Kafka transaction reads of one engine cycle are granted together (review s17 lead H1): a
/// cycle keeps every read's answer until its entry commits, so per-answer budgets alone let
/// a cycle of 4096 reads hold thousands of answers. The cycle's first read that lists
/// anything is granted its own answer's budget whatever this leaves (every cycle makes
/// progress); the later ones share what is left, within their share of the memory budget's
/// answer room ([`ADMIN_READ_SHARE_DIVISOR`]) at [`READ_ENTRY_BYTES`] plus their names each,
/// and an item past it is `OverBudget` (retriable; a ListTransactions is refused whole).
pub const MAX_READ_ENTRIES_PER_CYCLE: usize = 1_000_000;
const _: () = assert!(MAX_PRODUCER_ENTRIES_PER_ANSWER <= MAX_READ_ENTRIES_PER_CYCLE);
const _: () = assert!(MAX_ENTRIES_PER_ANSWER <= MAX_READ_ENTRIES_PER_CYCLE);
/// What one listed entry is charged against the answer room while the cycle holds it,
/// beside the bytes of the names it carries (review s18 kafka M1): a [`ProducerView`] is 32
/// bytes; a described partition, a pending pair or a listed row is an index or a producer id
/// plus its own copy of a topic name or transactional id, charged `READ_ENTRY_BYTES +
/// name.len()` (a 249-byte topic name or a 1 KiB id is up to 27 times the fixed part).
pub const READ_ENTRY_BYTES: usize = 40;
/// The share of the cycle's answer room the Kafka transaction reads may take, as a divisor
/// (review s18 kafka M2): they keep their own count, and the cycle's pops never take this
/// share, so a stream of admin reads cannot cut every pop to one message, nor a pop-heavy
/// cycle refuse every admin read.
pub const ADMIN_READ_SHARE_DIVISOR: usize = 4;

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
    /// DescribeTransactions: each id, in order (at most [`MAX_TXNS_PER_ANSWER`]; the door
    /// drops repeats, and the answer is bounded by [`MAX_ENTRIES_PER_ANSWER`] anyway).
    Describe { txn_ids: Vec<String> },
    /// ListTransactions: every id whose state is one of `states` (Kafka names; empty: any)
    /// and whose producer id is one of `producer_ids` (empty: any). (v1's duration filter
    /// is Kafka 3.8's; v0 is served.)
    List {
        states: Vec<String>,
        producer_ids: Vec<i64>,
    },
    /// DescribeProducers: per (topic, partition index), in order (the door drops repeats;
    /// the answer is bounded by [`MAX_ENTRIES_PER_ANSWER`] anyway).
    Producers { partitions: Vec<(String, i32)> },
    /// OffsetFetch `require_stable`: per (topic, partition index) of `group`, in order,
    /// whether an open transaction holds a pending offset there (at most
    /// [`MAX_PRODUCER_PARTITIONS`] asked).
    PendingOffsets {
        group: String,
        partitions: Vec<(String, i32)>,
    },
    /// OffsetFetch `require_stable` with every partition asked: the (topic, partition
    /// index) where an open transaction holds a pending offset of `group`, read before the
    /// offsets are (at most [`MAX_ENTRIES_PER_ANSWER`]).
    GroupPending { group: String },
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

/// One asked id of a DescribeTransactions answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnDescribed {
    Known(TxnView),
    /// The coordinator does not know the id.
    Unknown,
    /// Past [`MAX_ENTRIES_PER_ANSWER`]: not described, ask again.
    OverBudget,
}

/// One asked partition of a DescribeProducers answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionProducers {
    /// At most [`MAX_PRODUCERS_PER_PARTITION`] producers with state there.
    Listed(Vec<ProducerView>),
    /// The topic does not exist.
    NoTopic,
    /// Past [`MAX_ENTRIES_PER_ANSWER`]: not described, ask again.
    OverBudget,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KafkaTxnReadAnswer {
    /// One per asked id, in order.
    Described(Vec<TxnDescribed>),
    /// At most [`MAX_TXNS_PER_ANSWER`] rows in transactional id order; `unknown_states` are
    /// the filters that name no Kafka state.
    Listed {
        rows: Vec<TxnListed>,
        unknown_states: Vec<String>,
    },
    /// ListTransactions past what the cycle grants (review s18 kafka H1): Kafka's answer
    /// has no per-row error and no "more" flag, so the whole list is refused and the door
    /// answers COORDINATOR_LOAD_IN_PROGRESS, which Java's ListTransactionsHandler retries.
    ListOverBudget,
    /// One per asked partition, in order.
    Producers(Vec<PartitionProducers>),
    /// One per asked partition, in order: true where an offset is pending.
    Pending(Vec<bool>),
    /// The group's pending (topic, partition index) in order; `complete` is false when
    /// [`MAX_ENTRIES_PER_ANSWER`] of them were listed and more are pending.
    GroupPending {
        pairs: Vec<(String, i32)>,
        complete: bool,
    },
    /// The group's pending set past what the cycle grants (review s19 kafka H1): it is never
    /// cut, so it is refused whole and the door answers the group
    /// COORDINATOR_LOAD_IN_PROGRESS, which Java's ListConsumerGroupOffsetsHandler and
    /// librdkafka retry.
    GroupPendingOverBudget,
}
