//! The task that takes a sample every `metrics_sample_s`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::ring::NodeSample;
use super::{proc_stat, NodeMetrics};
use crate::group::Registry;

/// Runs until the runtime stops (the process ends with it).
pub fn spawn(node: Arc<NodeMetrics>, groups: Arc<Registry>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let every = Duration::from_secs(node.sample_seconds);
        let mut before = proc_stat::read();
        let mut due = Instant::now() + every;
        loop {
            tokio::time::sleep_until(due).await;
            // How late the timer fired: time this runtime's workers were too busy to run it.
            let late = Instant::now().saturating_duration_since(due);
            due += every;
            if due < Instant::now() {
                due = Instant::now() + every;
            }
            // /proc files are answered from kernel memory: reading them does not block on disk.
            let now = proc_stat::read();
            let secs = every.as_secs_f64();
            let mem = std::fs::read_to_string("/proc/self/status")
                .map(|t| crate::scrape::memory::parse_status(&t))
                .unwrap_or_default();
            let queued: usize = groups
                .running()
                .iter()
                .map(|g| g.tx.max_capacity().saturating_sub(g.tx.capacity()))
                .sum();
            node.push(NodeSample {
                at_us: super::now_us(),
                // µs of CPU per second of wall time / 100: percent × 100.
                cpu_user: now.user_us.saturating_sub(before.user_us) as f64 / (secs * 100.0),
                cpu_system: now.system_us.saturating_sub(before.system_us) as f64 / (secs * 100.0),
                rss_bytes: mem.resident_bytes.unwrap_or(0),
                virtual_bytes: mem.virtual_bytes.unwrap_or(0),
                threads: now.threads,
                http_connections: node
                    .http_connections
                    .load(std::sync::atomic::Ordering::Relaxed),
                engine_queued: queued as u64,
                loop_lag_ms: late.as_secs_f64() * 1_000.0,
                counts: node.take_counts(),
            });
            before = now;
        }
    })
}
