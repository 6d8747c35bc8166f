//! The engine's view of the Raft node.

use queenmq_raft::RaftNode;

use crate::engine::log::{LogError, LogStatus, ProposeFuture, ReplicatedLog};

/// The node, and whether it runs clustered.
pub struct RaftLog(pub RaftNode, pub bool);

impl ReplicatedLog for RaftLog {
    fn propose(&self, payload: Vec<u8>) -> ProposeFuture {
        let node = self.0.clone();
        Box::pin(async move {
            node.propose(payload).await.map_err(|e| match e {
                // The engine cannot name the Raft crate's errors: the kind travels as the
                // std one, which `disk_gate::is_enospc` finds.
                queenmq_raft::RaftError::StorageFull(text) => {
                    LogError::propose(std::io::Error::new(std::io::ErrorKind::StorageFull, text))
                }
                e => LogError::propose(e),
            })
        })
    }

    fn read(&self, index: u64) -> Result<Option<Vec<u8>>, LogError> {
        self.0.read_app_payload(index).map_err(LogError::read)
    }

    fn reclaim(&self, upto: u64) -> Result<usize, LogError> {
        self.0.reclaim_upto(upto).map_err(LogError::reclaim)
    }

    fn reclaimable_bytes(&self, upto: u64) -> u64 {
        self.0.reclaimable_bytes(upto)
    }

    fn sealed_segment_of(&self, index: u64) -> Option<(u64, u64, u64)> {
        self.0.sealed_segment_of(index)
    }

    fn reclaim_refusal(&self) -> Option<&'static str> {
        self.0.reclaim_refusal()
    }

    fn status(&self) -> LogStatus {
        let s = self.0.status();
        LogStatus {
            role: s.role,
            term: s.term,
            leader: s.leader,
            last_log_index: s.last_log_index.unwrap_or(0),
            committed: s.committed.unwrap_or(0),
            applied: s.applied.unwrap_or(0),
            clustered: self.1,
        }
    }
}
