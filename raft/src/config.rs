//! Tunables of a Raft group and their translation to openraft's `Config`.

use openraft::SnapshotPolicy;

use crate::error::RaftError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftConfig {
    /// This node's id; 1 in a single-node deployment.
    pub node_id: u64,
    pub heartbeat_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
}

impl Default for RaftConfig {
    /// Short timeouts: a restarted single voter waits out one election timeout at most before
    /// leading again, and nothing is written meanwhile.
    fn default() -> Self {
        RaftConfig {
            node_id: 1,
            heartbeat_ms: 100,
            election_timeout_min_ms: 150,
            election_timeout_max_ms: 300,
        }
    }
}

impl RaftConfig {
    pub(crate) fn to_openraft(&self) -> Result<openraft::Config, RaftError> {
        openraft::Config {
            cluster_name: "queenmq".to_string(),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.election_timeout_min_ms,
            election_timeout_max: self.election_timeout_max_ms,
            // Message payloads live in the log; dropping log below a snapshot is the broker's
            // retention decision, never openraft's.
            snapshot_policy: SnapshotPolicy::Never,
            max_in_snapshot_log_to_keep: u64::MAX,
            ..Default::default()
        }
        .validate()
        .map_err(|e| RaftError::Config(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        let c = RaftConfig::default().to_openraft().unwrap();
        assert_eq!(c.heartbeat_interval, 100);
        assert_eq!(c.snapshot_policy, SnapshotPolicy::Never);
    }

    #[test]
    fn election_timeout_must_exceed_heartbeat() {
        let cfg = RaftConfig {
            heartbeat_ms: 200,
            ..RaftConfig::default()
        };
        assert!(matches!(cfg.to_openraft(), Err(RaftError::Config(_))));
    }

    #[test]
    fn election_range_must_be_ordered() {
        let cfg = RaftConfig {
            election_timeout_min_ms: 300,
            election_timeout_max_ms: 300,
            ..RaftConfig::default()
        };
        assert!(matches!(cfg.to_openraft(), Err(RaftError::Config(_))));
    }
}
