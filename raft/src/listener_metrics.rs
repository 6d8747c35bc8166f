//! The cluster listener's series (docs/metrics.md "Raft"): connections it closed before their
//! request was answered, by reason, and the body budget.

/// Every `reason` of `queen_cluster_connections_closed_total`.
const REASONS: [&str; 5] = [
    "pre_hello_source_cap",
    "pre_hello_pool_cap",
    "hello_refused",
    "body_over_budget",
    "body_deadline",
];

pub(crate) fn closed(reason: &'static str) {
    metrics::counter!("queen_cluster_connections_closed_total", "reason" => reason).increment(1);
}

/// Exports every series at 0, so a node that is not (yet) a cluster member shows the same set
/// (the test of docs/metrics.md scrapes a single node).
pub fn register_series() {
    for reason in REASONS {
        metrics::counter!("queen_cluster_connections_closed_total", "reason" => reason)
            .increment(0);
    }
    metrics::gauge!("queen_cluster_body_bytes").increment(0.0);
    metrics::gauge!("queen_cluster_body_budget_bytes").increment(0.0);
}
