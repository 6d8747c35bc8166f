//! The node's own history for `GET /api/v1/analytics/system-metrics` and `/worker-metrics`
//! (spec native-api §2.1 rows 58-59): every `metrics_sample_s` the sampler reads the process
//! (CPU time, memory, threads), the doors' open HTTP connections, the requests queued for the
//! engines, how late its own timer fired on the runtime, and the requests the bus served since
//! the last sample, into a ring of `metrics_history_samples` kept in memory. Nothing of it is
//! written down: history starts again at every start (docs/api.md).

mod proc_stat;
mod ring;
mod sampler;
mod series;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use queenmq_protocol::{Command, NodeCounts, NodeMetricsQuery, NodeSeries, Outcome, QueenError};

pub use sampler::spawn;
pub use series::WORKER_ID;

/// What the bus counted of one command before sending it; finished with its answer.
#[derive(Debug, Clone, Copy)]
pub enum Counted {
    Push(u64),
    Pop,
    Ack(u64),
    Transaction,
    Other,
}

impl Counted {
    pub fn of(cmd: &Command) -> Counted {
        match cmd {
            Command::Push(p) => Counted::Push(p.items.len() as u64),
            Command::Pop(_) => Counted::Pop,
            Command::Ack(a) => Counted::Ack(a.items.len() as u64),
            Command::Transaction(_) => Counted::Transaction,
            _ => Counted::Other,
        }
    }
}

pub struct NodeMetrics {
    hostname: String,
    port: AtomicU64,
    sample_seconds: u64,
    /// Counts since the last sample.
    live: Mutex<NodeCounts>,
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
            live: Mutex::new(NodeCounts::default()),
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

    /// One command answered.
    pub fn record(&self, what: Counted, answer: &Result<Outcome, QueenError>) {
        let mut c = lock(&self.live);
        if answer.is_err() {
            c.errors += 1;
        }
        match what {
            Counted::Push(items) => {
                c.push_requests += 1;
                c.push_messages += items;
            }
            Counted::Pop => {
                c.pop_requests += 1;
                if let Ok(Outcome::Popped(p)) = answer {
                    c.pop_messages += p.messages.len() as u64;
                }
            }
            Counted::Ack(items) => {
                c.ack_requests += 1;
                c.ack_messages += items;
                if let Ok(Outcome::Acked(rows)) = answer {
                    let ok = rows.iter().filter(|r| r.success).count() as u64;
                    c.ack_success += ok;
                    c.ack_failed += rows.len() as u64 - ok;
                }
            }
            Counted::Transaction => c.transactions += 1,
            Counted::Other => c.other_requests += 1,
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
        std::mem::take(&mut *lock(&self.live))
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
