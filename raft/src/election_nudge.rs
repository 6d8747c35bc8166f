//! Breaks split votes that openraft 0.9 cannot break by itself.
//!
//! openraft 0.9 draws a node's election timeout once, when its `Raft` is built
//! (`EngineConfig::new`), and reuses it for every campaign. Two survivors of a lost leader whose
//! draws fall within one tick of each other fire together, each votes for itself, each refuses
//! the other in that term, and the next round keeps the same gap: the split repeats for ever
//! while the two are a healthy quorum (openraft#1838, fixed on the 0.10 line only). A loaded
//! machine widens the window (a vote is fsynced before its request leaves), which is how the
//! CI's three-node tests met it.
//!
//! This task watches the node's metrics. A campaign streak that outlasted the whole election
//! range without a leader is retried after a fresh random pause shorter than the minimum
//! timeout, so the survivors' next campaigns start at independent moments and one of them
//! reaches the other first. A leader, a follower or a learner is never touched, nor a campaign
//! younger than the range (the one openraft's own timer started may still win).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;

use openraft::metrics::RaftServerMetrics;
use openraft::{BasicNode, Raft, ServerState};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::types::{NodeId, TypeConfig};

/// Decides, from what the node's metrics show, when a stuck campaign is retried: the pure
/// part of the nudge, tested without a Raft.
#[derive(Debug)]
pub(crate) struct Campaigns {
    /// The longest election timeout: a streak older than this has seen a campaign fail.
    range_end: Duration,
    since: Option<Instant>,
}

impl Campaigns {
    pub(crate) fn new(range_end: Duration) -> Campaigns {
        Campaigns {
            range_end,
            since: None,
        }
    }

    /// One look: `campaigning` is whether the node is a candidate now. True when a retry is due.
    pub(crate) fn due(&mut self, campaigning: bool, now: Instant) -> bool {
        if !campaigning {
            self.since = None;
            return false;
        }
        let since = *self.since.get_or_insert(now);
        now.saturating_duration_since(since) >= self.range_end
    }

    /// A retry was made (or found unneeded) at `now`: the next one waits a whole range again.
    pub(crate) fn retried(&mut self, now: Instant) {
        self.since = Some(now);
    }
}

/// A pause in `[0, below)`, drawn afresh at each call. Not for secrets: SipHash keyed by the
/// process's random state over the node id and the time is spread enough to part two nodes.
pub(crate) fn random_pause(node_id: u64, below: Duration) -> Duration {
    let below_ms = below.as_millis().max(1) as u64;
    let draw = RandomState::new().hash_one((node_id, std::time::SystemTime::now()));
    Duration::from_millis(draw % below_ms)
}

/// Campaigning on its own behalf with nobody known to lead, in a group of two voters or more.
/// A node that granted its vote to another, or heard from a leader, shows that vote or that
/// leader once openraft flushed its metrics after the vote's fsync; until then it may still
/// look stuck, and a retry then costs one election round, never the group's liveness.
fn stuck(m: &RaftServerMetrics<NodeId, BasicNode>, node_id: NodeId) -> bool {
    m.state == ServerState::Candidate
        && m.current_leader.is_none()
        && m.vote.leader_id().voted_for() == Some(node_id)
        && m.membership_config
            .membership()
            .voter_ids()
            .nth(1)
            .is_some()
}

/// Watches `raft` until it shuts down, retrying stuck campaigns as the module says.
/// `min_ms` and `max_ms` are the node's election timeout range. It reads the server metrics,
/// which change with the role, the vote and the membership only (never per write), and looks
/// on a timer only while the node campaigns: a leader or follower costs nothing.
/// A node its `gate` keeps from campaigning (joining, or removed) is never nudged: openraft's
/// `trigger().elect()` ignores `enable_elect`.
pub(crate) fn spawn(
    raft: Raft<TypeConfig>,
    node_id: u64,
    (min_ms, max_ms): (u64, u64),
    gate: Option<crate::VoteGate>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let min = Duration::from_millis(min_ms.max(1));
        let look_every = min / 4;
        let mut campaigns = Campaigns::new(Duration::from_millis(max_ms));
        let mut server = raft.server_metrics();
        loop {
            let campaigning = stuck(&server.borrow(), node_id);
            if campaigns.due(campaigning, Instant::now()) {
                tokio::time::sleep(random_pause(node_id, min)).await;
                let barred = gate.as_ref().is_some_and(|g| !g.may_campaign());
                if stuck(&server.borrow(), node_id) && !barred {
                    tracing::info!(node = node_id, "a campaign is stuck: starting another");
                    if raft.trigger().elect().await.is_err() {
                        return; // the core stopped
                    }
                }
                campaigns.retried(Instant::now());
                continue;
            }
            let changed = if campaigning {
                tokio::select! {
                    changed = server.changed() => changed,
                    _ = tokio::time::sleep(look_every) => Ok(()),
                }
            } else {
                server.changed().await
            };
            if changed.is_err() {
                return; // the core stopped and dropped its metrics
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use openraft::Vote;

    use super::*;
    use crate::types::{Membership, StoredMembership};

    fn metrics(
        state: ServerState,
        voted_for: u64,
        leader: Option<u64>,
        voters: &[u64],
    ) -> RaftServerMetrics<NodeId, BasicNode> {
        let members = Membership::new(vec![voters.iter().copied().collect::<BTreeSet<_>>()], ());
        RaftServerMetrics {
            id: 1,
            vote: Vote::new(7, voted_for),
            state,
            current_leader: leader,
            membership_config: Arc::new(StoredMembership::new(None, members)),
        }
    }

    #[test]
    fn only_a_leaderless_self_voting_candidate_among_voters_is_stuck() {
        assert!(stuck(
            &metrics(ServerState::Candidate, 1, None, &[1, 2, 3]),
            1
        ));
        assert!(
            !stuck(&metrics(ServerState::Candidate, 2, None, &[1, 2, 3]), 1),
            "voted for another"
        );
        assert!(
            !stuck(&metrics(ServerState::Candidate, 1, Some(2), &[1, 2, 3]), 1),
            "a leader is known"
        );
        assert!(
            !stuck(&metrics(ServerState::Candidate, 1, None, &[1]), 1),
            "a single voter"
        );
        for state in [
            ServerState::Follower,
            ServerState::Leader,
            ServerState::Learner,
        ] {
            assert!(!stuck(&metrics(state, 1, None, &[1, 2, 3]), 1), "{state:?}");
        }
    }

    #[test]
    fn a_campaign_is_retried_only_once_it_outlasted_the_range() {
        let t0 = Instant::now();
        let range = Duration::from_millis(2000);
        let mut c = Campaigns::new(range);
        assert!(!c.due(false, t0));
        assert!(!c.due(true, t0));
        assert!(!c.due(true, t0 + range - Duration::from_millis(1)));
        assert!(c.due(true, t0 + range));
        c.retried(t0 + range);
        assert!(!c.due(true, t0 + range + Duration::from_millis(1999)));
        assert!(c.due(true, t0 + range * 2));
    }

    #[test]
    fn leaving_the_campaign_starts_the_count_again() {
        let t0 = Instant::now();
        let range = Duration::from_millis(1000);
        let mut c = Campaigns::new(range);
        assert!(!c.due(true, t0));
        assert!(!c.due(false, t0 + Duration::from_millis(900)));
        assert!(!c.due(true, t0 + Duration::from_millis(1100)));
        assert!(c.due(true, t0 + Duration::from_millis(2100)));
    }

    #[test]
    fn pauses_stay_below_the_bound_and_differ() {
        let below = Duration::from_millis(1000);
        let draws: Vec<Duration> = (0..64).map(|i| random_pause(i % 2, below)).collect();
        assert!(draws.iter().all(|d| *d < below));
        let first = draws[0];
        assert!(
            draws.iter().any(|d| *d != first),
            "64 equal draws: {first:?}"
        );
    }
}
