//! The node's own sampled series: what `GET /api/v1/analytics/system-metrics` and
//! `/worker-metrics` answer (spec native-api §2.1 rows 58-59). The node samples its process
//! every few seconds into a bounded ring in memory (broker/src/node_metrics); a query buckets
//! the samples of a window. One node is one replica.

/// A window of the node's samples, both bounds inclusive, in microseconds since the epoch
/// (`to` defaults to now, `from` to an hour before `to`). `hostname` / `worker_id` narrow the
/// answer to one replica (no match: no points); the node's one worker is `worker-0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeMetricsQuery {
    pub from_us: Option<i64>,
    pub to_us: Option<i64>,
    pub hostname: Option<String>,
    pub worker_id: Option<String>,
}

/// `{avg, min, max, last}` of one gauge over a bucket's samples.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Gauge {
    pub avg: f64,
    pub min: f64,
    pub max: f64,
    pub last: f64,
}

/// Requests the node's bus served (both doors), by kind, over a stretch of time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeCounts {
    pub push_requests: u64,
    /// Items of those pushes.
    pub push_messages: u64,
    pub pop_requests: u64,
    /// Messages those pops delivered.
    pub pop_messages: u64,
    pub ack_requests: u64,
    /// Items of those acks, and of them the ones answered success / failure.
    pub ack_messages: u64,
    pub ack_success: u64,
    pub ack_failed: u64,
    pub transactions: u64,
    /// Every other command (reads, admin, Kafka requests).
    pub other_requests: u64,
    /// Commands answered with an error.
    pub errors: u64,
}

impl NodeCounts {
    pub fn add(&mut self, o: &NodeCounts) {
        self.push_requests += o.push_requests;
        self.push_messages += o.push_messages;
        self.pop_requests += o.pop_requests;
        self.pop_messages += o.pop_messages;
        self.ack_requests += o.ack_requests;
        self.ack_messages += o.ack_messages;
        self.ack_success += o.ack_success;
        self.ack_failed += o.ack_failed;
        self.transactions += o.transactions;
        self.other_requests += o.other_requests;
        self.errors += o.errors;
    }
}

/// One bucket of samples.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodePoint {
    pub bucket_us: i64,
    pub samples: u32,
    /// CPU time over each sample's interval, in percent × 100 (10 000 = one core busy).
    /// These five come from `/proc`: `None` when no sample of the bucket could read it (a
    /// failed read is unknown, never a zero).
    pub cpu_user: Option<Gauge>,
    pub cpu_system: Option<Gauge>,
    pub rss_bytes: Option<Gauge>,
    pub virtual_bytes: Option<Gauge>,
    pub threads: Option<Gauge>,
    pub http_connections: Gauge,
    /// Requests queued for the engines, waiting for their cycle.
    pub engine_queued: Gauge,
    /// How late the sampler's timer fired on the async runtime, in ms.
    pub loop_lag_ms: Gauge,
    pub counts: NodeCounts,
}

/// The answer: the node as one replica, the window's buckets oldest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeSeries {
    pub hostname: String,
    pub port: u16,
    pub from_us: i64,
    pub to_us: i64,
    pub bucket_minutes: u32,
    pub sample_seconds: u64,
    pub points: Vec<NodePoint>,
    /// Every retained sample of the last five minutes (unfiltered): the "workers" rows.
    pub recent: Option<NodePoint>,
    pub recent_last_us: Option<i64>,
    /// Counts over every retained sample, whatever the window: history is lost on restart
    /// and past the ring's capacity.
    pub totals: NodeCounts,
}
