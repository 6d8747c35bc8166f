//! The answering side of a "commit read" (`wire::Kind::CommitRead`, review s28 M-3): a node
//! joining the `default` group takes its joining horizon from the leader's committed index,
//! read after its process started (`join_read`). Only a leader confirmed by a majority in its
//! current term answers an index: a deposed leader's commit may lag what was committed after
//! it lost the lead, and a horizon too low lets the joining node found a group it once voted
//! in. A follower names the leader it knows, so the asker goes there next.

use std::time::Duration;

use openraft::error::{CheckIsLeaderError, RaftError};
use openraft::{Raft, ServerState};

use crate::rpc_codec::{self, CommitRead};
use crate::types::{NodeId, TypeConfig};

/// How long the leader's confirmation may take (a majority's heartbeat answers): past it the
/// asker is told to try again, so a leader cut off from its majority holds no request long.
pub(crate) const CONFIRM_BOUND: Duration = Duration::from_secs(5);

/// Why `ensure_linearizable` did not confirm the lead.
type NotConfirmed = RaftError<NodeId, CheckIsLeaderError<NodeId, openraft::BasicNode>>;

/// The reply to a commit read for `raft`'s group.
pub(crate) async fn answer(raft: &Raft<TypeConfig>) -> Vec<u8> {
    let m = raft.metrics().borrow().clone();
    if m.state != ServerState::Leader {
        return ok(CommitRead::NotLeader(m.current_leader));
    }
    match tokio::time::timeout(CONFIRM_BOUND, raft.ensure_linearizable()).await {
        Err(_) => rpc_codec::encode_unavailable("the lead was not confirmed in time; try again"),
        Ok(confirmed) => confirmed_answer(confirmed),
    }
}

/// What `ensure_linearizable`'s outcome answers. Its index is the larger of the leader's
/// commit and its term's first entry when the read began, applied before it returned: every
/// entry committed before the request arrived lies at or below it.
fn confirmed_answer(r: Result<Option<openraft::LogId<NodeId>>, NotConfirmed>) -> Vec<u8> {
    match r {
        Ok(read) => ok(CommitRead::Committed(read.map_or(0, |l| l.index))),
        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
            ok(CommitRead::NotLeader(f.leader_id))
        }
        Err(e) => rpc_codec::encode_unavailable(&format!("the lead was not confirmed: {e}")),
    }
}

fn ok(answer: CommitRead) -> Vec<u8> {
    rpc_codec::encode_reply(&Ok::<_, String>(answer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc_codec::Reply;
    use openraft::error::{ForwardToLeader, QuorumNotEnough};

    fn decoded(reply: &[u8]) -> Reply<CommitRead, String> {
        rpc_codec::decode_reply(reply).unwrap()
    }

    /// A deposed leader (openraft saw a higher term while confirming) names the new leader;
    /// one without a majority answers nothing the asker could take as an index.
    #[test]
    fn only_a_confirmed_lead_answers_an_index() {
        let read = Ok(Some(crate::types::log_id(4, 90)));
        assert!(matches!(
            decoded(&confirmed_answer(read)),
            Reply::Ok(CommitRead::Committed(90))
        ));
        assert!(matches!(
            decoded(&confirmed_answer(Ok(None))),
            Reply::Ok(CommitRead::Committed(0))
        ));
        let moved = Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(
            ForwardToLeader::new(3, openraft::BasicNode::default()),
        )));
        assert!(matches!(
            decoded(&confirmed_answer(moved)),
            Reply::Ok(CommitRead::NotLeader(Some(3)))
        ));
        let short = Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(
            QuorumNotEnough {
                cluster: "{1,2,3}".into(),
                got: std::collections::BTreeSet::from([1]),
            },
        )));
        assert!(matches!(
            decoded(&confirmed_answer(short)),
            Reply::Unavailable(_)
        ));
    }
}
