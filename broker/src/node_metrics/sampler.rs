//! The task that takes a sample every `metrics_sample_s`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::cpu_rate::CpuRate;
use super::ring::NodeSample;
use super::{proc_stat, NodeMetrics};
use crate::group::Registry;

/// Runs until the runtime stops (the process ends with it).
pub fn spawn(node: Arc<NodeMetrics>, groups: Arc<Registry>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let every = Duration::from_secs(node.sample_seconds);
        let mut cpu = CpuRate::default();
        cpu.step(proc_stat::read(), Instant::now());
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
            let stat = proc_stat::read();
            let rate = cpu.step(stat, Instant::now());
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
                cpu_user: rate.map(|r| r.0),
                cpu_system: rate.map(|r| r.1),
                rss_bytes: mem.resident_bytes,
                virtual_bytes: mem.virtual_bytes,
                threads: stat.map(|s| s.threads),
                http_connections: node
                    .http_connections
                    .load(std::sync::atomic::Ordering::Relaxed),
                engine_queued: queued as u64,
                loop_lag_ms: late.as_secs_f64() * 1_000.0,
                counts: node.take_counts(),
            });
        }
    })
}
