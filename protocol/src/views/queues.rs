//! Queue, partition, depth and status answers.

use super::PageInfo;

/// A queue's effective options, every one of them (the configure echo and the queue reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSettings {
    pub priority: i64,
    pub lease_time: i64,
    pub retry_limit: i64,
    pub retry_delay: i64,
    pub max_size: i64,
    pub ttl: i64,
    pub dead_letter_queue: bool,
    pub dlq_after_max_retries: bool,
    pub delayed_processing: i64,
    pub window_buffer: i64,
    pub retention_seconds: i64,
    pub completed_retention_seconds: i64,
    pub retention_enabled: bool,
    pub encryption_enabled: bool,
    pub max_wait_time_seconds: i64,
    pub min_pop_wait_time: i64,
    pub dedup_window_seconds: i64,
    pub retention_sink_hold: String,
    pub retention_sink_hold_max_seconds: i64,
}

/// Message totals as the slowest consumer group of a queue (or of every queue) sees them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MessageTotals {
    pub total: u64,
    /// Not completed and not leased.
    pub pending: u64,
    pub processing: u64,
    pub completed: u64,
    pub failed: u64,
    pub dead_letter: u64,
}

#[derive(Debug, Clone)]
pub struct QueueView {
    /// The queue's UUID.
    pub id: String,
    pub name: String,
    pub namespace: String,
    pub task: String,
    pub partitions: usize,
    pub messages: MessageTotals,
    pub retained_bytes: u64,
    pub options: QueueSettings,
    pub created_us: i64,
}

#[derive(Debug, Clone)]
pub struct PartitionSummary {
    pub id: u64,
    pub name: String,
    pub created_us: i64,
    pub messages: u64,
    pub last_write_us: i64,
    pub oldest_us: Option<i64>,
    pub newest_us: Option<i64>,
    pub retained_bytes: u64,
    /// The partition's per-state counts, read like the queue's `messages`.
    pub stats: MessageTotals,
    /// Offsets the slowest group's committed cursor has passed on this partition (0 with no
    /// group): the messages it consumed, or skipped by a seek or its subscription start. It
    /// never goes down as retention removes consumed messages, unlike `stats.completed`.
    pub consumed: u64,
}

/// One queue with a page of its partitions.
#[derive(Debug, Clone)]
pub struct QueueDoc {
    pub queue: QueueView,
    pub partitions: Vec<PartitionSummary>,
    pub page: PageInfo,
}

#[derive(Debug, Clone)]
pub struct PartitionDepth {
    pub partition: String,
    pub pending: u64,
    pub processing: u64,
    pub ready: u64,
}

/// Depth of a queue for one group (queue mode when none was named), totals over every
/// partition and a page of per-partition rows.
#[derive(Debug, Clone)]
pub struct QueueDepth {
    pub queue: String,
    pub group: String,
    pub pending: u64,
    pub processing: u64,
    pub ready: u64,
    pub partitions_pending: u64,
    pub partitions_ready: u64,
    /// The group's stored policy is last-value delivery: one handler run per partition owes
    /// work, whatever its backlog.
    pub conflation: bool,
    pub partitions: Vec<PartitionDepth>,
    pub page: PageInfo,
}

/// Average, median, least and most of a set of numbers; all 0 for an empty set.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spread {
    pub avg: f64,
    pub median: f64,
    pub min: u64,
    pub max: u64,
}

impl Spread {
    pub fn of(mut v: Vec<u64>) -> Spread {
        if v.is_empty() {
            return Spread::default();
        }
        v.sort_unstable();
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2] as f64
        } else {
            (v[n / 2 - 1] as f64 + v[n / 2] as f64) / 2.0
        };
        Spread {
            avg: v.iter().map(|&x| x as f64).sum::<f64>() / n as f64,
            median,
            min: v[0],
            max: v[n - 1],
        }
    }
}

/// How far behind the consumer groups are, over every (group, queue) with a queue: in seconds
/// since the oldest message each has not completed, and in messages.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LagSpread {
    pub time: Spread,
    pub offset: Spread,
}

#[derive(Debug, Clone)]
pub struct Overview {
    pub queues: usize,
    pub partitions: usize,
    pub namespaces: usize,
    pub tasks: usize,
    pub messages: MessageTotals,
    pub lag: LagSpread,
    /// When the answer was made (µs since the epoch).
    pub at_us: i64,
}

/// Queues sharing a namespace or a task.
#[derive(Debug, Clone)]
pub struct LabelRow {
    pub label: String,
    pub queues: u64,
    pub partitions: u64,
    pub total: u64,
    pub pending: u64,
}

#[derive(Debug, Clone)]
pub struct PartitionRow {
    pub id: u64,
    pub name: String,
    pub queue: String,
    pub messages: u64,
    /// What its slowest group of the queue has not completed.
    pub pending: u64,
    pub created_us: i64,
    pub last_write_us: i64,
}

#[derive(Debug, Clone)]
pub struct PartitionRows {
    pub rows: Vec<PartitionRow>,
    pub page: PageInfo,
}

#[derive(Debug, Clone)]
pub struct QueueStatus {
    pub queue: String,
    pub namespace: String,
    pub task: String,
    pub partitions: usize,
    pub messages: MessageTotals,
    pub consumer_groups: usize,
}

#[derive(Debug, Clone)]
pub struct StatusView {
    pub queues: Vec<QueueStatus>,
    pub overview: Overview,
}

#[cfg(test)]
mod tests {
    use super::Spread;

    #[test]
    fn a_spread_of_nothing_is_zero_and_an_even_count_has_a_middle_median() {
        assert_eq!(Spread::of(Vec::new()), Spread::default());
        let s = Spread::of(vec![4, 1, 9, 2]);
        assert_eq!((s.min, s.max, s.avg, s.median), (1, 9, 4.0, 3.0));
        let odd = Spread::of(vec![7, 3, 5]);
        assert_eq!((odd.min, odd.max, odd.avg, odd.median), (3, 7, 5.0, 5.0));
    }
}
