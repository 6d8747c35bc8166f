//! Consumer-group answers.

/// How far a group is behind on one queue.
#[derive(Debug, Clone)]
pub struct GroupQueueLag {
    pub queue: String,
    pub pending: u64,
    pub lag_seconds: i64,
    pub partitions: usize,
    pub subscribed_us: i64,
}

#[derive(Debug, Clone)]
pub struct GroupView {
    pub name: String,
    /// One per registration of the group; None where the queue is gone.
    pub queues: Vec<Option<GroupQueueLag>>,
}

#[derive(Debug, Clone)]
pub struct LaggingRow {
    pub group: String,
    pub lag: GroupQueueLag,
}
