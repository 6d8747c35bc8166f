//! What the engine needs from the replicated log: propose an entry, read one back.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use thiserror::Error;

pub type ProposeFuture = Pin<Box<dyn Future<Output = Result<(u64, u64), LogError>> + Send>>;

/// Why the log did not commit or give back an entry. The cause is the log's own error (the
/// Raft node's, or a test log's), shown as it is: the engine cannot name the Raft crate's types.
#[derive(Debug, Error)]
pub enum LogError {
    #[error(transparent)]
    Propose(Box<dyn StdError + Send + Sync>),
    #[error(transparent)]
    Read(Box<dyn StdError + Send + Sync>),
    #[error(transparent)]
    Reclaim(Box<dyn StdError + Send + Sync>),
    /// A cluster member lost the lead, or contact with a majority, with the entry in flight:
    /// the entry may yet commit under a new leader, or be cut.
    #[error("{0}")]
    Deposed(String),
    /// The leader is handing its lead over before it stops: the entry was refused before it
    /// was proposed, so it is not in any log. The state planned for it is ahead of the log:
    /// the group plans nothing more and the node stops (review s23 handover H1).
    #[error("{0}")]
    HandingOver(String),
}

impl LogError {
    pub fn propose(cause: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        LogError::Propose(cause.into())
    }

    pub fn read(cause: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        LogError::Read(cause.into())
    }

    pub fn reclaim(cause: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        LogError::Reclaim(cause.into())
    }
}

pub trait ReplicatedLog: Send + Sync + 'static {
    /// Resolves once the entry is committed (fsynced on a quorum) and applied: its (index, term).
    fn propose(&self, payload: Vec<u8>) -> ProposeFuture;
    /// How long a proposal may wait before the requests it carries are answered that they
    /// may or may not be done; the engine goes on waiting for the entry itself, since it
    /// planned its state ahead of it (review s18 K4). `None`: they wait with the entry.
    fn answer_limit(&self) -> Option<std::time::Duration> {
        None
    }
    /// The application payload of a committed entry.
    fn read(&self, index: u64) -> Result<Option<Vec<u8>>, LogError>;
    /// Raft facts for health and metrics: (role, term, last log index, committed, applied).
    fn status(&self) -> LogStatus;
    /// Whether the log's core has answered nothing for longer than its peers wait before
    /// they replace it: `status` is what it last reported, which a core frozen on its disk
    /// never updates (review s19 lead M2). Logs without a core: never.
    fn core_frozen(&self) -> bool {
        false
    }
    /// Frees the space of records `..= upto` that a durable checkpoint covers and no state
    /// points into: deletes whole sealed segments holding only such records; the number
    /// deleted. Blocking. A log that keeps nothing on disk (tests' logs) frees nothing.
    fn reclaim(&self, upto: u64) -> Result<usize, LogError> {
        let _ = upto;
        Ok(0)
    }
    /// Bytes `reclaim(upto)` would free now (the files of the segments it would delete).
    fn reclaimable_bytes(&self, upto: u64) -> u64 {
        let _ = upto;
        0
    }
    /// (first index, last index, file bytes) of the sealed segment holding `index`, the one
    /// the compactor may rewrite the live runs of; None when there is none (the segment
    /// appends go to, a log that keeps nothing on disk, or reclamation refused).
    fn sealed_segment_of(&self, index: u64) -> Option<(u64, u64, u64)> {
        let _ = index;
        None
    }
    /// Why `reclaim` deletes nothing whatever it is given, if it is refused: a short reason,
    /// the `reason` label of `queen_log_reclaim_refused_total` (the Raft log: "multi_node").
    fn reclaim_refusal(&self) -> Option<&'static str> {
        None
    }
    /// A snapshot install was staged under this log (a cluster follower caught up by
    /// snapshot): the log refuses appends and the group must be reopened, which finishes the
    /// install. Never on a log without snapshots.
    fn install_staged(&self) -> bool {
        false
    }
}

#[derive(Debug, Clone, Default)]
pub struct LogStatus {
    pub role: &'static str,
    pub term: u64,
    pub leader: Option<u64>,
    pub last_log_index: u64,
    pub committed: u64,
    pub applied: u64,
    /// A member of a multi-node cluster (a follower is then a normal state, not a fault).
    pub clustered: bool,
    /// On a leader, how long ago a majority last acknowledged it; None otherwise (and on a
    /// leader not yet acknowledged). A single node's own acknowledgement is its quorum.
    pub quorum_ack_ms: Option<u64>,
    /// A leader whose quorum acknowledgement is within its lease (a single node's leader
    /// always): what a cluster leader needs to plan.
    pub quorum_contact: bool,
    /// A cluster leader's latest proposal started within its lease: its applied index may
    /// trail its log by that entry and it is still serving (review s17 lead M1: one whose
    /// proposal is older is stuck, on its own disk or on the quorum's).
    pub proposal_fresh: bool,
    /// A cluster leader handing its lead over (SIGTERM): it takes no new proposal and
    /// answers `not_leader` meanwhile.
    pub handing_over: bool,
}

pub type SharedLog = Arc<dyn ReplicatedLog>;
