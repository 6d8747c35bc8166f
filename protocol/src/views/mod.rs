//! What the engine answers, as plain domain values: every door renders them its own way (the
//! Queen API's JSON lives in native-api/src/render). Stored message payloads and trace data
//! stay the raw JSON text they were written as; only a door decides how to show them.

pub mod admin;
pub mod analytics;
pub mod groups;
pub mod messages;
pub mod node;
pub mod node_metrics;
pub mod queues;

pub use admin::*;
pub use analytics::*;
pub use groups::*;
pub use messages::*;
pub use node::*;
pub use node_metrics::*;
pub use queues::*;

/// Where a page of rows sits in the whole listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageInfo {
    pub limit: usize,
    pub offset: usize,
    pub total: usize,
}

/// One answer per [`crate::ReadReq`] variant.
#[derive(Debug, Clone)]
pub enum ReadAnswer {
    Queues(Vec<QueueView>),
    Queue(QueueDoc),
    Depth(QueueDepth),
    Overview(Overview),
    Namespaces(Vec<LabelRow>),
    Tasks(Vec<LabelRow>),
    Partitions(PartitionRows),
    Status(StatusView),
    Message(MessageDoc),
    Messages(MessagePage),
    Dlq(DlqPage),
    TraceNames(TraceNames),
    TracesByName(TracesPage),
    TracesForMessage(Vec<TraceView>),
    ConsumerGroups(Vec<GroupView>),
    ConsumerGroup(GroupView),
    Lagging(Vec<LaggingRow>),
    Timer(Option<crate::timers::TimerView>),
    Timers(crate::timers::TimerPage),
    Fetch(crate::fetch::FetchAnswer),
    Changed(crate::fetch::ChangedAnswer),
    Offsets(Vec<crate::fetch::OffsetFound>),
    Analytics(AnalyticsSeries),
    /// One per asked name, in order: the smallest colliding queue name, if any.
    TopicCollisions(Vec<Option<String>>),
    KafkaTxns(crate::kafka_txn_reads::KafkaTxnReadAnswer),
}
