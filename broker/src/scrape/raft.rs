//! Raft role and positions, from the status `/health` reports.

use crate::engine::log::LogStatus;

pub fn record(s: &LogStatus) {
    metrics::gauge!("queen_raft_is_leader").set(if s.role == "leader" { 1.0 } else { 0.0 });
    metrics::gauge!("queen_raft_term").set(s.term as f64);
    metrics::gauge!("queen_raft_last_log_index").set(s.last_log_index as f64);
    metrics::gauge!("queen_raft_commit_index").set(s.committed as f64);
    metrics::gauge!("queen_raft_applied_index").set(s.applied as f64);
    metrics::gauge!("queen_raft_applied_lag").set(s.committed.saturating_sub(s.applied) as f64);
}
