//! The openraft type configuration of a QueenMQ Raft group.

use std::io::Cursor;

use openraft::{BasicNode, CommittedLeaderId, LogId};

openraft::declare_raft_types!(
    /// Application data is the opaque bytes the engine proposes; the response is empty because
    /// `propose` answers with the entry's (index, term) and the engine keeps its own results.
    pub TypeConfig:
        D = Vec<u8>,
        R = (),
        NodeId = u64,
        Node = BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type Entry = openraft::Entry<TypeConfig>;
pub type NodeId = u64;
pub type RaftLogId = LogId<NodeId>;
pub type OrStorageError = openraft::StorageError<NodeId>;

/// An I/O failure of the log or the state store, in the shape openraft reports.
pub fn io_err(
    subject: openraft::ErrorSubject<NodeId>,
    verb: openraft::ErrorVerb,
    e: impl Into<openraft::AnyError>,
) -> OrStorageError {
    openraft::StorageIOError::new(subject, verb, e).into()
}
pub type StoredMembership = openraft::StoredMembership<NodeId, BasicNode>;
pub type Membership = openraft::Membership<NodeId, BasicNode>;

/// With `single-term-leader` a committed leader id is the term alone; the node id argument is
/// ignored, so 0 is as good as any.
pub fn log_id(term: u64, index: u64) -> RaftLogId {
    LogId::new(CommittedLeaderId::new(term, 0), index)
}

pub fn term_of(id: &RaftLogId) -> u64 {
    id.leader_id.term
}

/// Whether a membership names more than one node (voters and learners).
pub fn is_multi_node(m: &Membership) -> bool {
    m.nodes().nth(1).is_some()
}
