//! The engine's view of the Raft node.

use std::time::{Duration, Instant};

use queenmq_raft::{RaftError, RaftNode};

use crate::config::Timing;
use crate::engine::log::{LogError, LogStatus, ProposeFuture, ReplicatedLog};

/// The node, and its cluster timing when it is a member of a multi-node group (None: a
/// single node).
pub struct RaftLog {
    pub node: RaftNode,
    pub cluster: Option<Timing>,
}

/// `clustered`: a lost lead is a deposition; on a single node it cannot happen, and is the
/// failure it always was.
fn log_error(e: RaftError, clustered: bool) -> LogError {
    match e {
        // The engine cannot name the Raft crate's errors: the kind travels as the std one,
        // which `disk_gate::is_enospc` finds.
        RaftError::StorageFull(text) => {
            LogError::propose(std::io::Error::new(std::io::ErrorKind::StorageFull, text))
        }
        RaftError::NotLeader { leader } if clustered => LogError::Deposed(match leader {
            Some(id) => format!("this node lost the lead to node {id}"),
            None => "this node lost the lead".to_string(),
        }),
        e => LogError::propose(e),
    }
}

/// Resolves, saying why, once a cluster leader may no longer wait for its proposal: it is no
/// longer leader, no majority acknowledged it within the lease (openraft 0.9 keeps a leader
/// cut off from the majority leading, and its entry would wait for as long as the partition
/// lasts), or the write limit passed (review s16 B1).
async fn lost_lead(node: &RaftNode, t: Timing) -> String {
    let started = Instant::now();
    let every = Duration::from_millis(t.heartbeat_ms);
    loop {
        tokio::time::sleep(every).await;
        let s = node.status();
        if s.role != "leader" {
            return format!("this node is no longer the leader (now {})", s.role);
        }
        if !crate::cluster_member::quorum_contact(s.quorum_ack_ms, &t) {
            return match s.quorum_ack_ms {
                Some(ms) => format!("no majority acknowledged this leader for {ms} ms"),
                None => "no majority acknowledged this leader".to_string(),
            };
        }
        if started.elapsed() >= t.write_limit() {
            return format!(
                "the write did not commit within {} ms",
                t.write_limit().as_millis()
            );
        }
    }
}

impl ReplicatedLog for RaftLog {
    fn propose(&self, payload: Vec<u8>) -> ProposeFuture {
        let node = self.node.clone();
        let cluster = self.cluster;
        Box::pin(async move {
            let Some(timing) = cluster else {
                return node.propose(payload).await.map_err(|e| log_error(e, false));
            };
            tokio::select! {
                written = node.propose(payload) => written.map_err(|e| log_error(e, true)),
                why = lost_lead(&node, timing) => Err(LogError::Deposed(why)),
            }
        })
    }

    fn read(&self, index: u64) -> Result<Option<Vec<u8>>, LogError> {
        self.node.read_app_payload(index).map_err(LogError::read)
    }

    fn reclaim(&self, upto: u64) -> Result<usize, LogError> {
        self.node.reclaim_upto(upto).map_err(LogError::reclaim)
    }

    fn reclaimable_bytes(&self, upto: u64) -> u64 {
        self.node.reclaimable_bytes(upto)
    }

    fn sealed_segment_of(&self, index: u64) -> Option<(u64, u64, u64)> {
        self.node.sealed_segment_of(index)
    }

    fn reclaim_refusal(&self) -> Option<&'static str> {
        self.node.reclaim_refusal()
    }

    fn status(&self) -> LogStatus {
        let s = self.node.status();
        LogStatus {
            role: s.role,
            term: s.term,
            leader: s.leader,
            last_log_index: s.last_log_index.unwrap_or(0),
            committed: s.committed.unwrap_or(0),
            applied: s.applied.unwrap_or(0),
            clustered: self.cluster.is_some(),
            quorum_ack_ms: s.quorum_ack_ms,
            quorum_contact: s.role == "leader"
                && self
                    .cluster
                    .is_none_or(|t| crate::cluster_member::quorum_contact(s.quorum_ack_ms, &t)),
        }
    }
}
