//! Leadership hand-over, which openraft 0.9 lacks (its `transfer_leader` is 0.10's): the
//! leader of a group closes its write fence, waits until a voter holds its whole log, stops
//! its own heartbeats and elections, and asks that voter ("elect now", `wire::Kind::Elect`,
//! `elect_now`) to campaign at once.
//!
//! Why the campaign wins at once in a group of three: the voter's log is as long as the
//! leader's, and the leader's own vote was last renewed when it was elected, so it grants the
//! vote (openraft's `handle_vote_req` refuses a vote only within a lease counted from the
//! voter's last vote renewal, which on a follower is every append and on the leader only its
//! election). Two grants of three are a majority. The third voter still refuses within its
//! lease, and in a group of five two grants are not enough: the target then campaigns again
//! once the lease has run out (`elect_now`), a lease after the last heartbeat rather than the
//! lease plus a drawn election timeout of a dead leader. A leader elected less than a lease
//! ago refuses too, with the same fallback.
//!
//! The same request places a leader anywhere (`to`), for balancing later.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use openraft::ServerState;
use tokio::sync::{RwLock, RwLockReadGuard};
use tokio::time::Instant;

use crate::node::RaftNode;
use crate::tcp_client::TcpNetwork;

/// Proposals pass it while it is open; `close` shuts it and waits for those in flight.
#[derive(Default)]
pub(crate) struct WriteFence {
    closed: AtomicBool,
    /// Each proposal holds a read guard until openraft answered it.
    in_flight: RwLock<()>,
    /// A stopping leader's hand-over and abdication failed: the fence stays closed for good
    /// and the node is to be stopped (`abandon`).
    abandoned: AtomicBool,
}

impl WriteFence {
    /// A guard to hold while proposing, or None while closed. Checked again once the guard is
    /// held: a proposal that waited behind `close` must not slip in after it.
    pub(crate) async fn enter(&self) -> Option<RwLockReadGuard<'_, ()>> {
        if self.is_closed() {
            return None;
        }
        let guard = self.in_flight.read().await;
        (!self.is_closed()).then_some(guard)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Closes the fence; true once every proposal in flight has been answered, false if that
    /// did not happen by `deadline` (the fence stays closed: the caller reopens it).
    pub(crate) async fn close(&self, deadline: Instant) -> bool {
        self.closed.store(true, Ordering::Release);
        tokio::time::timeout_at(deadline, self.in_flight.write())
            .await
            .is_ok()
    }

    pub(crate) fn open(&self) {
        self.closed.store(false, Ordering::Release);
    }

    /// Keeps the fence closed for good: once any voter was asked to campaign, this node's
    /// acknowledgements no longer prove it leads (a voter may act on a late "elect now" at
    /// any time), so it must not plan again in this term (review s25 failover M2).
    pub(crate) fn abandon(&self) {
        self.closed.store(true, Ordering::Release);
        self.abandoned.store(true, Ordering::Release);
    }

    pub(crate) fn is_abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Acquire)
    }
}

/// What a stopping leader did after its hand-over failed (`hand_over_at_stop`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Abdication {
    /// Every other voter was asked to campaign and `0` leads now.
    Elected(u64),
    /// Every other voter was asked, and no other leader was seen in time: the fence stays
    /// closed for good (`RaftStatus::abandoned`), and the node is to be stopped.
    Abandoned,
}

/// How a hand-over ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandOver {
    /// This node did not lead the group: nothing to hand over.
    NotLeading,
    /// `to` was asked to campaign and `leader` leads now (normally `to`).
    Moved { to: u64, leader: u64 },
    /// Nothing was asked of any voter, for the reason given; this node leads as before.
    Kept(String),
    /// `to` was asked, but no other leader was known by the deadline; this node campaigns
    /// and heartbeats again (it may still lead, or follow a leader elected later).
    TimedOut { to: u64 },
}

/// The voter to hand the lead to: `to` if given, else the one with the highest matched index
/// (the lowest id among equals); only a voter other than `me` whose matched index (the
/// leader's `replication` metrics) reaches `last`, the leader's last log index.
pub(crate) fn pick_target(
    me: u64,
    voters: &[u64],
    matched: &BTreeMap<u64, Option<u64>>,
    last: Option<u64>,
    to: Option<u64>,
) -> Option<u64> {
    voters
        .iter()
        .copied()
        .filter(|v| *v != me && to.is_none_or(|t| t == *v))
        .filter(|v| matched.get(v).copied().flatten() >= last)
        .min_by_key(|v| (std::cmp::Reverse(matched.get(v).copied().flatten()), *v))
}

impl RaftNode {
    /// Hands this node's lead of the group over to a caught-up voter (`to`, or the most
    /// caught up), within `bound`: its proposals are refused `HandingOver` from the start (the
    /// engine sees `RaftStatus::handing_over`), those in flight are answered first, and the
    /// target must hold the whole log before it is asked. `net` is the group's network (the
    /// same token and group as the node's own). What this node keeps or restores on each
    /// outcome is said on `HandOver`.
    pub async fn hand_over(&self, net: &TcpNetwork, to: Option<u64>, bound: Duration) -> HandOver {
        self.hand_over_with(net, to, bound, None).await.0
    }

    /// The hand-over of a stopping node (SIGTERM), all within `bound`: as `hand_over` to the
    /// most caught-up voter within two thirds of it, and should that fail, `abdicate` within
    /// the rest before the fence opens again (the group's supervisor stops a Raft node once
    /// the fence reopens with its engine ended, so it stops only after the others were asked
    /// to campaign; review s24 failover M2). One bound for both, so a pod's grace period
    /// that allows for the hand-over allows for this (review s25 failover M1). The second
    /// value: what the abdication came to, None when it did not run (this node did not lead,
    /// the hand-over moved the lead, or a membership change held the group past the bound).
    pub async fn hand_over_at_stop(
        &self,
        net: &TcpNetwork,
        bound: Duration,
    ) -> (HandOver, Option<Abdication>) {
        let abdicate = bound / 3;
        self.hand_over_with(net, None, bound - abdicate, Some(abdicate))
            .await
    }

    pub(crate) async fn hand_over_with(
        &self,
        net: &TcpNetwork,
        to: Option<u64>,
        bound: Duration,
        abdicate: Option<Duration>,
    ) -> (HandOver, Option<Abdication>) {
        let deadline = Instant::now() + bound;
        let raft = self.raft();
        let term = {
            let m = raft.metrics().borrow().clone();
            if m.state != ServerState::Leader {
                return (HandOver::NotLeading, None);
            }
            m.current_term
        };
        let Ok(_no_change) = tokio::time::timeout_at(deadline, self.changing().lock()).await else {
            return (
                HandOver::Kept("a membership change is still running".into()),
                None,
            );
        };
        let kept = |why: String| HandOver::Kept(why);
        let out = if !self.fence().close(deadline).await {
            kept("proposals in flight were not answered in time".into())
        } else {
            match self.caught_up_voter(to, deadline).await {
                Err(out) => out,
                Ok((target, addr)) => {
                    let rc = raft.runtime_config();
                    rc.heartbeat(false);
                    rc.elect(false);
                    let left = deadline.saturating_duration_since(Instant::now());
                    match net.elect_now(target, &addr, term, left).await {
                        Err(why) => kept(why),
                        Ok(()) => match self.other_leader(deadline).await {
                            Some(leader) => return (HandOver::Moved { to: target, leader }, None),
                            None => HandOver::TimedOut { to: target },
                        },
                    }
                }
            }
        };
        // Failed: the fence is still closed here, so a supervisor waiting on it keeps the
        // Raft node running while the others are asked to campaign.
        let abdication = match abdicate {
            Some(b) if !matches!(out, HandOver::NotLeading) => self.abdicate(net, term, b).await,
            _ => None,
        };
        match abdication {
            Some(Abdication::Abandoned) => self.fence().abandon(),
            _ => self.restore(),
        }
        (out, abdication)
    }

    /// After a failed hand-over, as this node stops: asks every other voter to campaign at
    /// once (not only a caught-up one), heartbeats and elections off, and waits up to
    /// `bound` for another leader. None when this node no longer leads in `term` (nobody
    /// was asked). Private: only `hand_over_with` calls it, with the fence closed.
    ///
    /// Why (review s24 failover M2): a group whose hand-over failed has its Raft node stopped
    /// while the process, and so its cluster listener, lives on through the drain; the
    /// followers' `leader_gone` probes are answered, so they would wait out openraft's lease
    /// (3-4 election timeouts). Each campaign is safe for the log (a vote still needs a
    /// majority and an up-to-date log), and once the followers campaign their votes are no
    /// longer committed, so the most up-to-date of them wins the next round. It is not safe
    /// for this node's lease (`may_plan`): a voter may act on its request late, so with no
    /// other leader seen the caller abandons the term (`WriteFence::abandon`).
    async fn abdicate(&self, net: &TcpNetwork, term: u64, bound: Duration) -> Option<Abdication> {
        let deadline = Instant::now() + bound;
        let raft = self.raft();
        let m = raft.metrics().borrow().clone();
        if m.state != ServerState::Leader || m.current_term != term {
            return None;
        }
        let membership = m.membership_config.membership().clone();
        let rc = raft.runtime_config();
        rc.heartbeat(false);
        rc.elect(false);
        // Aborted on return: an ask still waiting for its answer (an unreachable voter) is
        // not waited for (review s25 failover M1).
        let mut asks = tokio::task::JoinSet::new();
        for v in membership.voter_ids().filter(|v| *v != self.id()) {
            let Some(node) = membership.get_node(&v) else {
                continue;
            };
            let addr = crate::member_addr::cluster_part(&node.addr).to_string();
            let net = net.clone();
            asks.spawn(async move {
                if let Err(why) = net.elect_now(v, &addr, term, bound).await {
                    tracing::debug!(voter = v, %why, "abdicating: a voter did not campaign");
                }
            });
        }
        let leader = self.other_leader(deadline).await;
        asks.abort_all();
        Some(match leader {
            Some(l) => Abdication::Elected(l),
            None => Abdication::Abandoned,
        })
    }

    /// Heartbeats and elections as configured, and proposals let in again.
    fn restore(&self) {
        let raft = self.raft();
        let rc = raft.runtime_config();
        rc.heartbeat(raft.config().enable_heartbeat);
        rc.elect(raft.config().enable_elect);
        self.fence().open();
    }

    /// Waits for a voter that holds this leader's whole log: its id and cluster address.
    async fn caught_up_voter(
        &self,
        to: Option<u64>,
        deadline: Instant,
    ) -> Result<(u64, String), HandOver> {
        let mut rx = self.raft().metrics();
        loop {
            let m = rx.borrow_and_update().clone();
            if m.state != ServerState::Leader {
                return Err(HandOver::NotLeading);
            }
            let membership = m.membership_config.membership().clone();
            let voters: Vec<u64> = membership.voter_ids().collect();
            let matched: BTreeMap<u64, Option<u64>> = m
                .replication
                .iter()
                .flatten()
                .map(|(id, l)| (*id, l.map(|l| l.index)))
                .collect();
            let last = m.last_log_index;
            if let Some(t) = pick_target(self.id(), &voters, &matched, last, to) {
                let addr = membership
                    .get_node(&t)
                    .map(|n| crate::member_addr::cluster_part(&n.addr).to_string())
                    .unwrap_or_default();
                return Ok((t, addr));
            }
            let why = match to {
                Some(t) if !voters.contains(&t) || t == self.id() => {
                    return Err(HandOver::Kept(format!("node {t} is not another voter")));
                }
                Some(t) => format!("node {t} did not catch up with index {last:?} in time"),
                None => format!("no voter caught up with index {last:?} in time"),
            };
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(HandOver::Kept("the raft core stopped".into())),
                Err(_) => return Err(HandOver::Kept(why)),
            }
        }
    }

    /// Waits until the metrics name a leader other than this node.
    async fn other_leader(&self, deadline: Instant) -> Option<u64> {
        let mut rx = self.raft().metrics();
        loop {
            let leader = rx.borrow_and_update().current_leader;
            if let Some(l) = leader.filter(|l| *l != self.id()) {
                return Some(l);
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_caught_up_other_voter_is_picked() {
        let matched = BTreeMap::from([(2, Some(9)), (3, Some(10)), (4, Some(10)), (5, None)]);
        let voters = [1, 2, 3, 4, 5];
        assert_eq!(pick_target(1, &voters, &matched, Some(10), None), Some(3));
        assert_eq!(
            pick_target(1, &voters, &matched, Some(10), Some(4)),
            Some(4)
        );
        assert_eq!(pick_target(1, &voters, &matched, Some(10), Some(2)), None);
        assert_eq!(pick_target(1, &voters, &matched, Some(11), None), None);
        assert_eq!(pick_target(1, &voters, &matched, Some(10), Some(1)), None);
        // A learner holding the log is not a voter.
        assert_eq!(pick_target(1, &[1, 2], &matched, Some(10), None), None);
        assert_eq!(
            pick_target(1, &voters, &BTreeMap::new(), None, None),
            Some(2)
        );
    }

    #[tokio::test]
    async fn a_closed_fence_waits_for_proposals_in_flight_and_lets_none_in() {
        let fence = std::sync::Arc::new(WriteFence::default());
        let guard = fence.enter().await.unwrap();
        let soon = Instant::now() + Duration::from_millis(50);
        assert!(!fence.close(soon).await, "a proposal is in flight");
        assert!(fence.enter().await.is_none());
        drop(guard);
        let later = Instant::now() + Duration::from_secs(30);
        assert!(fence.close(later).await);
        assert!(fence.enter().await.is_none());
        fence.open();
        assert!(fence.enter().await.is_some());
    }
}
