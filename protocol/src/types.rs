//! Domain types carried by commands and outcomes.

use bytes::Bytes;
use std::sync::Arc;

use crate::error::QueenError;
use crate::queue_options::QueueOptions;
use crate::views::*;

/// Creates a queue or changes its labels and options.
#[derive(Debug, Clone, Default)]
pub struct ConfigureReq {
    pub queue: String,
    pub namespace: Option<String>,
    pub task: Option<String>,
    pub options: QueueOptions,
    pub replace: bool,
}

/// One message to push. `payload` is compact JSON text, validated by the door.
#[derive(Debug, Clone)]
pub struct PushItem {
    pub queue: String,
    pub partition: String,
    pub payload: Bytes,
    pub transaction_id: Option<String>,
    pub trace_id: Option<[u8; 16]>,
}

#[derive(Debug, Clone, Default)]
pub struct PushReq {
    pub items: Vec<PushItem>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushStatus {
    Queued,
    Duplicate,
    Failed,
}

impl PushStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PushStatus::Queued => "queued",
            PushStatus::Duplicate => "duplicate",
            PushStatus::Failed => "failed",
        }
    }
}

#[derive(Debug, Clone)]
pub struct PushResult {
    pub message_id: String,
    pub transaction_id: String,
    pub queue: String,
    pub partition_id: u64,
    pub offset: u64,
    pub status: PushStatus,
    /// Why the item was refused (`status` is `Failed`).
    pub error: Option<QueenError>,
}

/// Where a pop takes messages from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PopSource {
    /// Any partition of the queue.
    Queue(String),
    /// One named partition.
    Partition(String, String),
    /// Every queue carrying these labels.
    Labels {
        namespace: Option<String>,
        task: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscription {
    /// No mode given: the broker default (`new` for named groups).
    Default,
    All,
    New,
    /// Messages created at or after this instant (µs since the epoch).
    From(i64),
}

#[derive(Debug, Clone)]
pub struct PopReq {
    pub source: PopSource,
    pub group: Option<String>,
    pub batch: u32,
    pub partitions: u32,
    pub wait: bool,
    pub timeout_ms: u64,
    pub auto_ack: bool,
    pub subscription: Subscription,
    pub lease_seconds: Option<u64>,
    pub autopilot: bool,
    /// The client asked for last-value delivery (`conflation=true`, spec §2.5.4).
    pub conflation: bool,
    /// What an empty answer to this pop says about conflation: the planner sets it when it
    /// parks the pop, so a long poll that ends empty still echoes the group's stored policy.
    pub parked_echo: ConflationEcho,
}

/// The conflation keys of a pop answer: `conflation` when the group's stored policy is
/// last-value delivery, `conflict` when the pop asked for the opposite of that policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConflationEcho {
    pub conflation: bool,
    pub conflict: bool,
}

/// A delivered message. `payload` is the stored JSON text.
#[derive(Debug, Clone)]
pub struct PoppedMessage {
    pub id: String,
    pub transaction_id: String,
    pub trace_id: Option<String>,
    pub payload: Bytes,
    pub producer_sub: Option<String>,
    pub created_at_us: i64,
    /// Shared by every message of one answer (an `Arc` clone, not a copy per message).
    pub queue: Arc<str>,
    pub partition: Arc<str>,
    pub partition_id: u64,
    pub lease_id: Arc<str>,
    pub consumer_group: Arc<str>,
    pub offset: u64,
    pub delivery_attempt: u32,
}

#[derive(Debug, Clone, Default)]
pub struct PopResult {
    pub queue: String,
    pub consumer_group: String,
    pub lease_id: String,
    pub partitions_claimed: u32,
    pub messages: Vec<PoppedMessage>,
    /// Set when the broker chose batch/partitions for an autopilot pop: (partitions, batch, wait ms).
    pub autopilot: Option<(u32, u32, u64)>,
    pub echo: ConflationEcho,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AckStatus {
    Completed,
    Failed,
    Retry,
    Dlq,
}

#[derive(Debug, Clone)]
pub struct AckItem {
    pub transaction_id: String,
    pub partition_id: String,
    pub status: AckStatus,
    pub error: Option<String>,
    pub lease_id: Option<String>,
    pub group: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct AckReq {
    pub items: Vec<AckItem>,
    pub group: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct AckResult {
    pub transaction_id: String,
    pub success: bool,
    /// Why the acknowledgment was refused (`success` is false).
    pub error: Option<QueenError>,
    pub lease_released: bool,
    pub dlq: bool,
    pub noop: bool,
}

#[derive(Debug, Clone, Default)]
pub struct LeaseExtendResult {
    pub lease_id: String,
    pub renewed: u32,
    pub expires_at_us: Option<i64>,
}

#[derive(Debug, Clone)]
pub enum TxnOp {
    Ack(AckItem),
    Push(Vec<PushItem>),
}

#[derive(Debug, Clone, Default)]
pub struct TxnReq {
    pub ops: Vec<TxnOp>,
    pub required_leases: Vec<String>,
    /// The `kv` rider, judged and applied with the bundle (plan/txn_kv.rs).
    pub kv: Vec<crate::kv::KvOp>,
    /// Timer riders (§2.8): applied with the bundle; their results follow the others'.
    pub timers: Vec<crate::timers::TimerOp>,
    /// Set by a door whose bundle must apply at most once (a streams cycle): an ack already
    /// covered by its group's cursor makes the bundle a replay, answered with
    /// [`TxnResult::replayed`] and nothing applied, instead of a no-op ack beside effects
    /// applied a second time.
    pub strict_acks: bool,
    /// With `strict_acks`: the queue every ack must be on (a streams query's source).
    pub ack_queue: Option<String>,
    /// A streams cycle's bound on its query's state rows, judged with the `kv` rider.
    pub state_cap: Option<crate::kv::StateCap>,
}

#[derive(Debug, Clone)]
pub enum TxnOpResult {
    Push(PushResult),
    Ack(AckResult),
    Kv(crate::kv::KvResult),
    Timer(crate::timers::TimerResult),
}

#[derive(Debug, Clone)]
pub struct TxnResult {
    pub transaction_id: String,
    pub results: Vec<TxnOpResult>,
    /// A `required` KV op of the rider did not hold: nothing was applied, `results` is empty.
    pub kv_precondition: Option<crate::kv::KvPrecondition>,
    /// Under `strict_acks`, an ack was already covered: nothing was applied, `results` is
    /// empty.
    pub replayed: bool,
}

#[derive(Debug, Clone)]
pub struct TraceReq {
    pub transaction_id: String,
    pub partition_id: String,
    pub group: String,
    pub names: Vec<String>,
    pub event_type: String,
    pub data: Bytes,
}

#[derive(Debug, Clone)]
pub enum GroupAdminReq {
    /// Drop the group's cursors on one queue or all queues.
    Delete {
        group: String,
        queue: Option<String>,
        delete_metadata: bool,
    },
    /// Move the group's cursors on a queue to the end or to a time.
    Seek {
        group: String,
        queue: String,
        to_end: bool,
        timestamp_us: Option<i64>,
    },
    /// Re-anchor the group's subscription on every queue at a time.
    Subscription { group: String, timestamp_us: i64 },
}

/// One page of a listing: at most `limit` rows after skipping `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub limit: usize,
    pub offset: usize,
}

/// Read-only questions, answered from applied state (one [`ReadAnswer`] variant each).
#[derive(Debug, Clone)]
pub enum ReadReq {
    Queues,
    /// The queue's document; its partition list is paged.
    Queue {
        queue: String,
        page: Page,
    },
    /// Depth totals over every partition; the per-partition rows are paged.
    QueueDepth {
        queue: String,
        group: Option<String>,
        page: Page,
    },
    Overview,
    Namespaces,
    Tasks,
    Partitions {
        queue: Option<String>,
        limit: usize,
        offset: usize,
    },
    Message {
        partition_id: String,
        transaction_id: String,
    },
    Messages {
        queue: Option<String>,
        limit: usize,
        offset: usize,
    },
    Dlq(DlqQuery),
    ConsumerGroups,
    ConsumerGroup {
        group: String,
    },
    LaggingGroups {
        min_lag_seconds: i64,
    },
    Status,
    StatusQueues,
    StatusQueue {
        queue: String,
    },
    TraceNames {
        limit: usize,
        offset: usize,
    },
    TracesByName {
        name: String,
        limit: usize,
        offset: usize,
    },
    TracesForMessage {
        partition_id: String,
        transaction_id: String,
    },
    Timer {
        queue: String,
        key: String,
    },
    Timers {
        queue: String,
        after: Option<String>,
        limit: usize,
    },
    /// Records by offset for the Kafka door: every record up to the next offset.
    Fetch(crate::fetch::FetchReq),
    /// Records by offset for the native API: what a Kafka transaction hides (open and
    /// aborted records, control markers) left out, up to the last stable offset.
    VisibleFetch(crate::fetch::FetchReq),
    Changed(crate::fetch::ChangedReq),
    ListOffsets(Vec<crate::fetch::OffsetQuery>),
    Analytics(crate::views::AnalyticsQuery),
    /// For each name (at most [`crate::topic_collision::MAX_COLLISION_NAMES`]), an existing
    /// queue it collides with ([`crate::topic_collision::collide`]): one pass over the
    /// queue names, so a Kafka request checks all its new topics at the cost of one read.
    TopicCollisions {
        names: Vec<String>,
    },
    /// The Kafka transaction coordinator's and producers' state, read only.
    KafkaTxns(crate::kafka_txn_reads::KafkaTxnRead),
}

#[derive(Debug, Clone, Default)]
pub struct DlqQuery {
    pub queue: Option<String>,
    pub group: Option<String>,
    pub partition: Option<String>,
    pub limit: usize,
    pub offset: usize,
    pub from_us: Option<i64>,
    pub to_us: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsFormat {
    Json,
    Prometheus,
}

/// What the engine (or the bus, for node-local commands) answers: one variant per command, so
/// a door matches exhaustively and renders each its own way.
#[derive(Debug, Clone)]
pub enum Outcome {
    Configured(Configured),
    Deleted(QueueDeleted),
    Pushed(Vec<PushResult>),
    Popped(PopResult),
    Acked(Vec<AckResult>),
    LeaseExtended(LeaseExtendResult),
    Transaction(TxnResult),
    Traced(TraceOutcome),
    Timers(Vec<crate::timers::TimerResult>),
    GroupAdmin(GroupAdminOutcome),
    DlqAdmin(crate::dlq_admin::DlqAdminOutcome),
    Read(ReadAnswer),
    Health(HealthView),
    Metrics(MetricsView),
    NodeMetrics(crate::views::NodeSeries),
    /// Statistics are live: nothing was refreshed.
    StatsLive,
    /// Text (Prometheus exposition format).
    Text(String),
    Kv(crate::kv::KvOutcome),
    Locks(Vec<crate::kv::LockResult>),
    KafkaGroups(crate::kafka_groups::KafkaGroupsOutcome),
    KafkaProducerId(crate::kafka_producers::InitProducerOutcome),
    KafkaProduced(crate::kafka_producers::KafkaProduceOutcome),
    KafkaTxn(crate::kafka_txns::KafkaTxnOutcome),
    KafkaRecordsDeleted(Vec<crate::kafka_records::DeleteRecordsVerdict>),
    EphemeralConfig(crate::ephemeral::EphemeralConfigOutcome),
    /// A tenant's declaration committed (or one stood already).
    TenantDeclared,
}
