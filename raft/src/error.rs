//! The one error type of this crate.

use crate::backend::StorageError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RaftError {
    #[error("this node is not the Raft leader; {}", leader_hint(.leader))]
    NotLeader { leader: Option<u64> },

    #[error("the storage under the Raft log failed: {0}")]
    Storage(#[from] StorageError),

    #[error("the Raft log holds a record that cannot be read back: {0}")]
    Corrupt(String),

    #[error("the Raft configuration is invalid: {0}")]
    Config(String),

    #[error("the Raft node could not start: {0}")]
    Startup(String),

    #[error("the Raft membership change was refused: {0}")]
    Membership(String),

    /// A membership operation refused before openraft was asked (`membership_change::plan`).
    #[error("the membership change was refused: {message}")]
    ChangeRefused {
        kind: ChangeRefusal,
        message: String,
    },

    #[error("the Raft node has stopped: {0}")]
    Fatal(String),

    /// Refused at the fence while this leader hands its lead over (`hand_over`): the entry
    /// was never proposed.
    #[error("this node is handing its lead over; nothing was proposed")]
    HandingOver,

    /// The node stopped because a log append met ENOSPC (a full disk, not a failed one).
    #[error("the Raft node has stopped, its disk is full: {0}")]
    StorageFull(String),
}

/// Why a membership operation was refused, for the caller's status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeRefusal {
    /// The request itself is malformed (an id of 0, nothing to promote).
    BadRequest,
    /// The id is not a member.
    UnknownId,
    /// The id or an address is a member's already, or the learner is a voter already.
    Duplicate,
    /// The change would leave the group without a voter.
    LastVoter,
    /// Another change has not committed yet.
    InProgress,
    /// The change would leave a configuration without a caught-up majority, or removes the
    /// leader itself (review s21 membership M2, M6).
    Unsafe,
}

fn leader_hint(leader: &Option<u64>) -> String {
    match leader {
        Some(id) => format!("node {id} leads"),
        None => "no leader is known yet".to_string(),
    }
}
