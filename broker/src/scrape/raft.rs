//! Raft role and positions, from the status `/health` reports.

use crate::engine::log::LogStatus;

pub fn record(tenant: &str, s: &LogStatus) {
    let t = || [("tenant", tenant.to_owned())];
    metrics::gauge!("queen_raft_is_leader", &t()).set(if s.role == "leader" { 1.0 } else { 0.0 });
    metrics::gauge!("queen_raft_term", &t()).set(s.term as f64);
    metrics::gauge!("queen_raft_last_log_index", &t()).set(s.last_log_index as f64);
    metrics::gauge!("queen_raft_commit_index", &t()).set(s.committed as f64);
    metrics::gauge!("queen_raft_applied_index", &t()).set(s.applied as f64);
    metrics::gauge!("queen_raft_applied_lag", &t())
        .set(s.committed.saturating_sub(s.applied) as f64);
}
