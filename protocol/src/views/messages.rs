//! Stored messages, DLQ rows and traces. `data` is the stored JSON text, as the producer sent it.

use bytes::Bytes;

use super::{PageInfo, QueueSettings};

/// Where one consumer group stands on a message.
#[derive(Debug, Clone)]
pub struct MessageGroupState {
    pub name: String,
    pub consumed: bool,
    /// Set while the group holds the message under a live lease.
    pub lease_expires_us: Option<i64>,
}

/// Where a message stands, the first that holds: a dead-letter row of some group; a group's live
/// lease over it; every group of the queue (at least one) past it; else pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageStatus {
    DeadLetter,
    Processing,
    Completed,
    Pending,
}

#[derive(Debug, Clone)]
pub struct MessageDoc {
    pub id: String,
    pub transaction_id: String,
    pub partition_id: u64,
    pub queue: String,
    pub namespace: String,
    pub task: String,
    pub queue_config: QueueSettings,
    pub status: MessageStatus,
    /// Failures charged to the message: the most any group's dead-letter row or cursor holds.
    pub retry_count: u32,
    pub partition: String,
    pub offset: u64,
    pub data: Bytes,
    pub producer_sub: Option<String>,
    pub trace_id: Option<String>,
    pub created_us: i64,
    pub consumer_groups: Vec<MessageGroupState>,
}

#[derive(Debug, Clone)]
pub struct MessageRow {
    pub id: String,
    pub transaction_id: String,
    pub queue: String,
    pub partition: String,
    pub partition_id: u64,
    pub offset: u64,
    pub data: Bytes,
    pub created_us: i64,
}

/// A page of messages; its total is the rows it holds.
#[derive(Debug, Clone)]
pub struct MessagePage {
    pub messages: Vec<MessageRow>,
    pub limit: usize,
    pub offset: usize,
}

#[derive(Debug, Clone)]
pub struct DlqRow {
    pub id: String,
    pub transaction_id: String,
    pub partition_id: u64,
    pub queue: String,
    pub partition: String,
    pub consumer_group: String,
    pub error: String,
    pub retry_count: u32,
    pub data: Bytes,
    pub producer_sub: Option<String>,
    pub created_us: i64,
    pub failed_us: i64,
}

#[derive(Debug, Clone)]
pub struct DlqPage {
    pub messages: Vec<DlqRow>,
    pub page: PageInfo,
}

#[derive(Debug, Clone)]
pub struct TraceNameCount {
    pub name: String,
    pub count: u64,
}

#[derive(Debug, Clone)]
pub struct TraceNames {
    pub names: Vec<TraceNameCount>,
    pub page: PageInfo,
}

#[derive(Debug, Clone)]
pub struct TraceView {
    pub transaction_id: String,
    pub partition_id: u64,
    /// None when the partition's queue is gone.
    pub queue: Option<String>,
    pub consumer_group: String,
    pub names: Vec<String>,
    pub event_type: String,
    /// The JSON text the trace was recorded with.
    pub data: String,
    pub at_us: i64,
}

#[derive(Debug, Clone)]
pub struct TracesPage {
    pub traces: Vec<TraceView>,
    pub limit: usize,
    pub offset: usize,
}
