//! Node-local answers: health and metrics.

#[derive(Debug, Clone)]
pub struct RaftView {
    pub role: &'static str,
    pub term: u64,
    pub leader: Option<u64>,
    pub last_log_index: u64,
    pub committed: u64,
    pub applied: u64,
    /// A member of a multi-node cluster: a follower is healthy, and ready once it knows a
    /// leader and has applied the commit it knows.
    pub clustered: bool,
    /// A cluster leader that a majority acknowledged within its lease (review s16 B1): one
    /// cut off from the majority stays leader in openraft 0.9 but plans nothing.
    pub quorum_contact: bool,
    /// A cluster leader whose latest proposal started within its lease: its own entry in
    /// flight is why its applied index trails its log, not a stuck disk (review s17 lead M1).
    pub proposal_fresh: bool,
}

#[derive(Debug, Clone)]
pub enum HealthView {
    /// The default group's storage is not open (not started, or being rebuilt).
    NoStorage {
        error: String,
        uptime_seconds: u64,
        version: &'static str,
        groups: GroupCounts,
    },
    /// The default group is being reloaded after its node lost the lead of its cluster: the
    /// node is alive (healthy) but serves nothing (not ready) until the replay is done.
    Reloading {
        reason: String,
        uptime_seconds: u64,
        version: &'static str,
        groups: GroupCounts,
    },
    Running {
        /// The default group leads and its engine runs.
        healthy: bool,
        storage_ready: bool,
        uptime_seconds: u64,
        version: &'static str,
        raft: RaftView,
        groups: GroupCounts,
    },
}

/// The node's groups (one per tenant), counted: the probe is public, so it names none.
#[derive(Debug, Clone, Copy)]
pub struct GroupCounts {
    pub running: usize,
    /// Of those, being rebuilt after a failure.
    pub rebuilding: usize,
}

#[derive(Debug, Clone)]
pub struct QueueCounters {
    pub name: String,
    pub partitions: usize,
    pub pushed: u64,
    pub acked: u64,
    pub dead_lettered: u64,
}

/// Counters read from the state by the engine (None before its first sample).
#[derive(Debug, Clone)]
pub struct StateCounters {
    pub pushed: u64,
    pub acked: u64,
    pub dead_lettered: u64,
    pub queues: Vec<QueueCounters>,
    pub partitions: usize,
    pub consumer_groups: usize,
}

#[derive(Debug, Clone)]
pub struct MetricsView {
    pub counters: Option<StateCounters>,
    pub uptime_seconds: u64,
    pub raft: RaftView,
}
