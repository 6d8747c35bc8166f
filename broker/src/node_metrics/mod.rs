//! The node's own history for `GET /api/v1/analytics/system-metrics` and `/worker-metrics`
//! (spec native-api §2.1 rows 58-59): every `metrics_sample_s` the sampler reads the process
//! (CPU time, memory, threads), the doors' open HTTP connections, the requests queued for the
//! engines, how late its own timer fired on the runtime, and the requests the bus served since
//! the last sample, into a ring of `metrics_history_samples` kept in memory. Nothing of it is
//! written down: history starts again at every start (docs/api.md).

mod cpu_rate;
mod proc_stat;
mod ring;
mod sampler;
mod series;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use queenmq_protocol::{Command, NodeCounts, NodeMetricsQuery, NodeSeries, Outcome, QueenError};

pub use sampler::spawn;

/// What one kept sample costs in the ring, for the memory budget's check of
/// `metrics_history_samples` (docs/memory.md).
pub const SAMPLE_BYTES: u64 = std::mem::size_of::<ring::NodeSample>() as u64;
pub use series::WORKER_ID;

/// What kind of request the bus counted a command as, when it took it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    Push,
    Pop,
    Ack,
    Transaction,
    Other,
}

impl Counted {
    /// A Kafka produce is a push whichever path it takes (idempotent or not); a Kafka fetch is
    /// a read, not a pop (it leases nothing).
    pub fn of(cmd: &Command) -> Counted {
        match cmd {
            Command::Push(_) | Command::KafkaProduce(_) => Counted::Push,
            Command::Pop(_) => Counted::Pop,
            Command::Ack(_) => Counted::Ack,
            Command::Transaction(_) => Counted::Transaction,
            _ => Counted::Other,
        }
    }
}

/// [`NodeCounts`] as atomics: every HTTP and Kafka task adds to them, so no lock is taken on
/// the request path (a parked runtime worker would stall every connection it serves).
#[derive(Default)]
struct LiveCounts {
    push_requests: AtomicU64,
    push_messages: AtomicU64,
    pop_requests: AtomicU64,
    pop_messages: AtomicU64,
    ack_requests: AtomicU64,
    ack_messages: AtomicU64,
    ack_success: AtomicU64,
    ack_failed: AtomicU64,
    transactions: AtomicU64,
    other_requests: AtomicU64,
    errors: AtomicU64,
}

fn appended(rows: &[queenmq_protocol::PushResult]) -> u64 {
    rows.iter()
        .filter(|r| r.status == queenmq_protocol::PushStatus::Queued)
        .count() as u64
}

fn add(c: &AtomicU64, n: u64) {
    if n > 0 {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

impl LiveCounts {
    fn take(&self) -> NodeCounts {
        let t = |c: &AtomicU64| c.swap(0, Ordering::Relaxed);
        NodeCounts {
            push_requests: t(&self.push_requests),
            push_messages: t(&self.push_messages),
            pop_requests: t(&self.pop_requests),
            pop_messages: t(&self.pop_messages),
            ack_requests: t(&self.ack_requests),
            ack_messages: t(&self.ack_messages),
            ack_success: t(&self.ack_success),
            ack_failed: t(&self.ack_failed),
            transactions: t(&self.transactions),
            other_requests: t(&self.other_requests),
            errors: t(&self.errors),
        }
    }
}

pub struct NodeMetrics {
    hostname: String,
    port: AtomicU64,
    sample_seconds: u64,
    /// Counts since the last sample.
    live: LiveCounts,
    http_connections: AtomicU64,
    ring: Mutex<ring::Ring>,
}

impl NodeMetrics {
    pub fn new(sample_seconds: u64, history_samples: usize) -> Arc<NodeMetrics> {
        let ring = ring::Ring::new(history_samples);
        tracing::debug!(bytes = ring.bytes(), "node metrics history allocated");
        Arc::new(NodeMetrics {
            hostname: hostname(),
            port: AtomicU64::new(0),
            sample_seconds: sample_seconds.max(1),
            live: LiveCounts::default(),
            http_connections: AtomicU64::new(0),
            ring: Mutex::new(ring),
        })
    }

    /// The HTTP port the replica is known by (known once the listener is bound).
    pub fn set_port(&self, port: u16) {
        self.port.store(u64::from(port), Ordering::Relaxed);
    }

    /// An HTTP connection opened (`true`) or closed.
    pub fn connection(&self, open: bool) {
        if open {
            self.http_connections.fetch_add(1, Ordering::Relaxed);
        } else {
            // Pairs are exact (native-api meter.rs); saturating all the same.
            let _ = self
                .http_connections
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    Some(n.saturating_sub(1))
                });
        }
    }

    /// A command taken: counted as a request whether or not its answer is ever awaited (a
    /// client that goes away drops the answer, not the request).
    pub fn started(&self, what: Counted) {
        let c = &self.live;
        add(
            match what {
                Counted::Push => &c.push_requests,
                Counted::Pop => &c.pop_requests,
                Counted::Ack => &c.ack_requests,
                Counted::Transaction => &c.transactions,
                Counted::Other => &c.other_requests,
            },
            1,
        );
    }

    /// Its answer: messages are counted from what was done, not from what was asked: pushed
    /// messages are the items appended (`queued`; not duplicates, not refused ones, not a Kafka
    /// batch its producer guard turned away), an ack item counts once answered.
    pub fn answered(&self, answer: &Result<Outcome, QueenError>) {
        let c = &self.live;
        match answer {
            Err(_) => add(&c.errors, 1),
            Ok(Outcome::Pushed(rows)) => add(&c.push_messages, appended(rows)),
            Ok(Outcome::KafkaProduced(out)) => add(&c.push_messages, appended(&out.results)),
            Ok(Outcome::Popped(p)) => add(&c.pop_messages, p.messages.len() as u64),
            Ok(Outcome::Acked(rows)) => {
                let ok = rows.iter().filter(|r| r.success).count() as u64;
                add(&c.ack_messages, rows.len() as u64);
                add(&c.ack_success, ok);
                add(&c.ack_failed, rows.len() as u64 - ok);
            }
            Ok(_) => {}
        }
    }

    pub fn query(&self, q: &NodeMetricsQuery) -> Result<NodeSeries, QueenError> {
        let ring = lock(&self.ring);
        let me = series::Replica {
            hostname: &self.hostname,
            port: u16::try_from(self.port.load(Ordering::Relaxed)).unwrap_or(0),
            sample_seconds: self.sample_seconds,
        };
        series::series(ring.iter(), q, now_us(), &me)
    }

    fn take_counts(&self) -> NodeCounts {
        self.live.take()
    }

    fn push(&self, s: ring::NodeSample) {
        lock(&self.ring).push(s);
    }
}

/// A panic while holding one of these leaves plain numbers behind: still good to read.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// The replica's name: the kernel's hostname (the pod name under Kubernetes).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "queen".to_string())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use queenmq_protocol::{AckResult, Outcome, PushResult, PushStatus, QueenError};

    use super::{Counted, NodeMetrics};

    fn pushed(statuses: &[PushStatus]) -> Outcome {
        Outcome::Pushed(
            statuses
                .iter()
                .map(|s| PushResult {
                    message_id: String::new(),
                    transaction_id: String::new(),
                    queue: "q".into(),
                    partition_id: 0,
                    offset: 0,
                    status: *s,
                    error: None,
                })
                .collect(),
        )
    }

    #[test]
    fn counts_from_many_threads_add_up_and_come_from_the_answers() {
        let node = NodeMetrics::new(1, 4);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let node = Arc::clone(&node);
                std::thread::spawn(move || {
                    for _ in 0..1_000 {
                        node.started(Counted::Push);
                        node.answered(&Ok(pushed(&[
                            PushStatus::Queued,
                            PushStatus::Duplicate,
                            PushStatus::Failed,
                        ])));
                        node.started(Counted::Ack);
                        node.answered(&Ok(Outcome::Acked(vec![
                            AckResult {
                                success: true,
                                ..AckResult::default()
                            },
                            AckResult::default(),
                        ])));
                        // Refused whole: a request, an error, no message.
                        node.started(Counted::Push);
                        node.answered(&Err(QueenError::unavailable("full")));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        let c = node.take_counts();
        assert_eq!((c.push_requests, c.push_messages), (8_000, 4_000));
        assert_eq!(
            (c.ack_requests, c.ack_messages, c.ack_success, c.ack_failed),
            (4_000, 8_000, 4_000, 4_000)
        );
        assert_eq!(c.errors, 4_000);
        assert_eq!(node.take_counts().push_requests, 0, "taken once");
    }
}
