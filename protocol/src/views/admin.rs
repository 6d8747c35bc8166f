//! Answers of configure, delete, trace and group administration.

use super::QueueSettings;

#[derive(Debug, Clone)]
pub struct Configured {
    /// The queue's UUID.
    pub queue_id: String,
    pub queue: String,
    pub namespace: String,
    pub task: String,
    pub options: QueueSettings,
}

#[derive(Debug, Clone)]
pub struct QueueDeleted {
    pub queue: String,
    pub existed: bool,
}

#[derive(Debug, Clone)]
pub enum TraceOutcome {
    Recorded {
        trace_id: String,
    },
    /// The message the trace names does not exist: nothing was recorded.
    MessageNotFound,
}

#[derive(Debug, Clone)]
pub enum GroupAdminOutcome {
    Deleted {
        group: String,
        partitions: usize,
        metadata_deleted: bool,
        queues: usize,
    },
    Seeked {
        group: String,
        queue: String,
        to_end: bool,
        target_us: Option<i64>,
        partitions_updated: usize,
    },
    Resubscribed {
        group: String,
        at_us: i64,
        groups: usize,
    },
}
