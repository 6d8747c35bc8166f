//! The receiving side of a hand-over (`hand_over`): a voter asked by its leader to campaign
//! at once. Only the node's current leader may ask, in its current term, so a stale request
//! (an old leader's, a replay) or a peer that does not lead cannot make a healthy group
//! campaign.

use std::time::Duration;

use openraft::{Raft, ServerState};

use crate::rpc_codec;
use crate::types::TypeConfig;
use crate::vote_gate::VoteGate;

/// Why this node does not campaign for `from` in `term`, or None when it may.
pub(crate) fn refusal(
    m: &openraft::RaftMetrics<u64, openraft::BasicNode>,
    me: u64,
    from: u64,
    term: u64,
) -> Option<String> {
    if !m
        .membership_config
        .membership()
        .voter_ids()
        .any(|v| v == me)
    {
        return Some(format!("node {me} is not a voter"));
    }
    if m.current_term != term {
        return Some(format!(
            "asked for term {term}, this node is in term {}",
            m.current_term
        ));
    }
    if m.current_leader != Some(from) {
        return Some(format!(
            "node {from} does not lead this node (its leader: {:?})",
            m.current_leader
        ));
    }
    None
}

/// Answers an "elect now" from node `from`, leader in `term`: campaigns at once and, should
/// that campaign not win (a voter whose lease still holds, in a group of five or more), once
/// more when the lease the old leader's last heartbeat gave has run out.
pub(crate) async fn answer(
    raft: &Raft<TypeConfig>,
    gate: Option<&VoteGate>,
    from: u64,
    term: u64,
) -> Vec<u8> {
    if gate.is_some_and(VoteGate::joining) {
        return rpc_codec::encode_unavailable(
            "this node joined with an empty directory and calls no election until it has \
             caught up as a learner",
        );
    }
    let m = raft.metrics().borrow().clone();
    if m.state == ServerState::Leader {
        return rpc_codec::encode_reply(&Ok::<(), String>(()));
    }
    if let Some(why) = refusal(&m, m.id, from, term) {
        // The reason stays in this node's log: the answer names neither the term nor the
        // leader, which would tell a caller how to word a request that passes (review s23
        // handover M1).
        tracing::warn!(from, term, reason = %why, "an election request was refused");
        return rpc_codec::encode_unavailable("the election request was refused");
    }
    if let Err(e) = raft.trigger().elect().await {
        return rpc_codec::encode_unavailable(&format!("the raft core stopped: {e}"));
    }
    tracing::info!(from, term, "the leader handed its lead over: campaigning");
    // openraft's follower lease is the election range's maximum (docs/cluster.md "Timing").
    let cfg = raft.config();
    let lease = Duration::from_millis(
        cfg.election_timeout_max
            .saturating_add(cfg.heartbeat_interval),
    );
    let raft = raft.clone();
    tokio::spawn(async move {
        tokio::time::sleep(lease).await;
        let m = raft.metrics().borrow().clone();
        let nobody_else = m.current_leader.is_none() || m.current_leader == Some(from);
        if m.state != ServerState::Leader && nobody_else {
            tracing::info!(
                from,
                "the hand-over's first campaign did not win: campaigning again"
            );
            // A core stopped meanwhile has nothing left to elect.
            let _ = raft.trigger().elect().await;
        }
    });
    rpc_codec::encode_reply(&Ok::<(), String>(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{BasicNode, Membership, RaftMetrics, StoredMembership};
    use std::collections::BTreeSet;

    fn metrics(me: u64, term: u64, leader: Option<u64>) -> RaftMetrics<u64, BasicNode> {
        let mut m = RaftMetrics::new_initial(me);
        m.current_term = term;
        m.current_leader = leader;
        let voters = Membership::new(vec![BTreeSet::from([1, 2, 3])], ());
        m.membership_config = std::sync::Arc::new(StoredMembership::new(None, voters));
        m
    }

    #[test]
    fn only_the_current_leader_in_its_term_may_ask() {
        assert_eq!(refusal(&metrics(2, 5, Some(1)), 2, 1, 5), None);
        assert!(refusal(&metrics(2, 5, Some(1)), 2, 1, 4)
            .unwrap()
            .contains("term"));
        assert!(refusal(&metrics(2, 5, Some(1)), 2, 3, 5)
            .unwrap()
            .contains("does not lead"));
        assert!(refusal(&metrics(2, 5, None), 2, 1, 5).is_some());
        assert!(refusal(&metrics(4, 5, Some(1)), 4, 1, 5)
            .unwrap()
            .contains("not a voter"));
    }
}
