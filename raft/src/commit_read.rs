//! The answering side of a "commit read" (`wire::Kind::CommitRead`, review s28 M-3): a node
//! joining the `default` group takes its joining horizon from the leader's committed index,
//! read after its process started (`join_read`). Only a leader confirmed by a majority in its
//! current term answers an index: a deposed leader's commit may lag what was committed after
//! it lost the lead, and a horizon too low lets the joining node found a group it once voted
//! in. A follower names the leader it knows, so the asker goes there next.

use std::time::Duration;

use openraft::error::{CheckIsLeaderError, RaftError};
use openraft::{BasicNode, Membership, Raft, ServerState};

use crate::rpc_codec::{self, CommitRead, LeaderAt};
use crate::types::{NodeId, TypeConfig};

/// How long the leader's confirmation may take (a majority's heartbeat answers): past it the
/// asker is told to try again, so a leader cut off from its majority holds no request long.
pub(crate) const CONFIRM_BOUND: Duration = Duration::from_secs(5);

/// Why `get_read_log_id` did not confirm the lead.
type NotConfirmed = RaftError<NodeId, CheckIsLeaderError<NodeId, openraft::BasicNode>>;

/// The reply to a commit read for `raft`'s group.
pub(crate) async fn answer(raft: &Raft<TypeConfig>) -> Vec<u8> {
    let m = raft.metrics().borrow().clone();
    let members = m.membership_config.membership().clone();
    if m.state != ServerState::Leader {
        return ok(CommitRead::NotLeader(
            m.current_leader.map(|id| leader_at(id, None, &members)),
        ));
    }
    // `get_read_log_id`, not `ensure_linearizable`: the horizon needs the confirmed index,
    // not this leader's apply of it, which after an election with a long unapplied tail or
    // on a slow disk outlasts the bound and turned every read into "try again" (review s33
    // L-2).
    match tokio::time::timeout(CONFIRM_BOUND, raft.get_read_log_id()).await {
        Err(_) => rpc_codec::encode_unavailable("the lead was not confirmed in time; try again"),
        Ok(confirmed) => confirmed_answer(confirmed.map(|(read, _applied)| read), &members),
    }
}

/// What `get_read_log_id`'s outcome answers. Its index is the larger of the leader's commit
/// and its term's first entry when the read began, confirmed by a majority's heartbeat after
/// it: every entry committed before the request arrived lies at or below it.
fn confirmed_answer(
    r: Result<Option<openraft::LogId<NodeId>>, NotConfirmed>,
    members: &Membership<NodeId, BasicNode>,
) -> Vec<u8> {
    match r {
        Ok(read) => ok(CommitRead::Committed(read.map_or(0, |l| l.index))),
        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
            ok(CommitRead::NotLeader(
                f.leader_id
                    .map(|id| leader_at(id, f.leader_node.as_ref(), members)),
            ))
        }
        Err(e) => rpc_codec::encode_unavailable(&format!("the lead was not confirmed: {e}")),
    }
}

/// Leader `id` with its cluster address: the one openraft named, else the membership's.
fn leader_at(
    id: NodeId,
    named: Option<&BasicNode>,
    members: &Membership<NodeId, BasicNode>,
) -> LeaderAt {
    let addr = named
        .or_else(|| members.get_node(&id))
        .map(|n| crate::member_addr::cluster_part(&n.addr).to_string())
        .filter(|a| !a.is_empty());
    LeaderAt { id, addr }
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

    fn members() -> Membership<NodeId, BasicNode> {
        let nodes = (1..=3).map(|i| (i, BasicNode::new(format!("10.0.0.{i}:7000;http://h{i}"))));
        Membership::new(
            vec![std::collections::BTreeSet::from([1, 2, 3])],
            nodes.collect::<std::collections::BTreeMap<_, _>>(),
        )
    }

    /// A deposed leader (openraft saw a higher term while confirming) names the new leader
    /// and its cluster address (review s33 M-1); one without a majority answers nothing the
    /// asker could take as an index.
    #[test]
    fn only_a_confirmed_lead_answers_an_index() {
        let m = members();
        let read = Ok(Some(crate::types::log_id(4, 90)));
        assert!(matches!(
            decoded(&confirmed_answer(read, &m)),
            Reply::Ok(CommitRead::Committed(90))
        ));
        assert!(matches!(
            decoded(&confirmed_answer(Ok(None), &m)),
            Reply::Ok(CommitRead::Committed(0))
        ));
        let moved = Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(
            ForwardToLeader {
                leader_id: Some(3),
                leader_node: None,
            },
        )));
        match decoded(&confirmed_answer(moved, &m)) {
            Reply::Ok(CommitRead::NotLeader(Some(l))) => assert_eq!(
                l,
                LeaderAt {
                    id: 3,
                    addr: Some("10.0.0.3:7000".into())
                },
                "the address from the membership, its cluster part only"
            ),
            other => panic!("{other:?}"),
        }
        let elsewhere = Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(
            ForwardToLeader::new(5, BasicNode::new("10.0.0.5:7000")),
        )));
        match decoded(&confirmed_answer(elsewhere, &m)) {
            Reply::Ok(CommitRead::NotLeader(Some(l))) => {
                assert_eq!(l.addr.as_deref(), Some("10.0.0.5:7000"))
            }
            other => panic!("{other:?}"),
        }
        let unknown = leader_at(9, None, &m);
        assert_eq!(unknown, LeaderAt { id: 9, addr: None });
        let short = Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(
            QuorumNotEnough {
                cluster: "{1,2,3}".into(),
                got: std::collections::BTreeSet::from([1]),
            },
        )));
        assert!(matches!(
            decoded(&confirmed_answer(short, &m)),
            Reply::Unavailable(_)
        ));
    }
}
