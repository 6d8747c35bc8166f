//! The engine's view of the Raft node.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use queenmq_raft::{RaftError, RaftNode, RaftStatus};

use crate::config::Timing;
use crate::engine::log::{LogError, LogStatus, ProposeFuture, ReplicatedLog};

/// The node, and its cluster timing when it is a member of a multi-node group (None: a
/// single node).
pub struct RaftLog {
    pub node: RaftNode,
    pub cluster: Option<Timing>,
    latest: LatestProposal,
}

impl RaftLog {
    pub fn new(node: RaftNode, cluster: Option<Timing>) -> RaftLog {
        RaftLog {
            node,
            cluster,
            latest: LatestProposal::new(),
        }
    }
}

/// When the latest proposal started (the engine's cycle in flight, if one is): a leader whose
/// own disk hangs keeps an entry appended and unapplied, and its frozen Raft metrics would
/// still call it acknowledged; the age of that proposal tells (review s17 lead M1). Never
/// cleared: a proposal that finished left applied at its index, so the stamp matters only while
/// applied trails the log, which a later proposal (with a later stamp) or a stuck one explains.
struct LatestProposal {
    base: Instant,
    /// Milliseconds since `base` plus one; 0 before the first proposal.
    at: AtomicU64,
}

impl LatestProposal {
    fn new() -> LatestProposal {
        LatestProposal {
            base: Instant::now(),
            at: AtomicU64::new(0),
        }
    }

    fn started(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.at.store(ms.saturating_add(1), Ordering::Release);
    }

    fn age_ms(&self) -> Option<u64> {
        let at = self.at.load(Ordering::Acquire).checked_sub(1)?;
        let now = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        Some(now.saturating_sub(at))
    }
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
        e @ RaftError::HandingOver => LogError::HandingOver(e.to_string()),
        RaftError::NotLeader { leader } if clustered => LogError::Deposed(match leader {
            Some(id) => format!("this node lost the lead to node {id}"),
            None => "this node lost the lead".to_string(),
        }),
        e => LogError::propose(e),
    }
}

/// Resolves once a cluster leader may no longer wait for its proposal (review s16 B1),
/// polling its status every heartbeat.
async fn lost_lead(node: &RaftNode, t: Timing) -> LogError {
    let every = Duration::from_millis(t.heartbeat_ms);
    loop {
        tokio::time::sleep(every).await;
        if let Some(e) = give_up(&node.status(), &t) {
            return e;
        }
    }
}

/// Whether a leader gives its entry up, and why: deposed when it is no longer leader or no
/// majority acknowledged it within the lease (openraft 0.9 keeps a leader cut off from the
/// majority leading, and its entry would wait for as long as the partition lasts). A leader
/// that keeps both waits for its entry however long it takes (a quorum that acknowledges but
/// does not commit: stalled disks); its requests are answered at the write limit
/// (`answer_limit`), and the group is neither reloaded nor rebuilt (review s18 K4; before, a
/// rebuild with the backoff, review s17 C7).
fn give_up(s: &RaftStatus, t: &Timing) -> Option<LogError> {
    if s.role != "leader" {
        return Some(LogError::Deposed(format!(
            "this node is no longer the leader (now {})",
            s.role
        )));
    }
    if !crate::cluster_member::quorum_contact(s.quorum_ack_ms, t) {
        return Some(LogError::Deposed(match s.quorum_ack_ms {
            Some(ms) => format!("no majority acknowledged this leader for {ms} ms"),
            None => "no majority acknowledged this leader".to_string(),
        }));
    }
    None
}

impl ReplicatedLog for RaftLog {
    fn propose(&self, payload: Vec<u8>) -> ProposeFuture {
        let node = self.node.clone();
        let cluster = self.cluster;
        // Stamped before the entry is appended: whoever sees it unapplied sees this stamp or a
        // later one.
        self.latest.started();
        Box::pin(async move {
            let Some(timing) = cluster else {
                return node.propose(payload).await.map_err(|e| log_error(e, false));
            };
            tokio::select! {
                written = node.propose(payload) => written.map_err(|e| log_error(e, true)),
                gave_up = lost_lead(&node, timing) => Err(gave_up),
            }
        })
    }

    /// A cluster leader answers a cycle's requests at the write limit and keeps waiting for
    /// its entry (review s18 K4): while it keeps the lead and its majority the entry cannot be
    /// lost, only late (the followers' disks stalled), and a rebuild would not make it sooner.
    fn answer_limit(&self) -> Option<Duration> {
        self.cluster.map(|t| t.write_limit())
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

    fn install_staged(&self) -> bool {
        self.node.install_staged()
    }

    /// A cluster member's core is frozen once it has answered nothing for three election
    /// timeouts: openraft 0.9's followers wait out a leader lease (the upper election
    /// timeout, twice the lower here) plus their own random timeout before they campaign,
    /// so a core slower than that has been replaced in effect, while one slowed by a long
    /// fsync within it is still the member its peers count on (review s20 lead A2). A single
    /// node's hung disk shows in its status already (its proposals stop committing).
    fn core_frozen(&self) -> bool {
        let Some(t) = self.cluster else {
            return false;
        };
        let bound = t.election_timeout_ms.saturating_mul(3);
        self.node.core_silent_ms().is_some_and(|ms| ms > bound)
    }

    fn status(&self) -> LogStatus {
        // The positions first, the proposal's stamp after them (see `LatestProposal`).
        let s = self.node.status();
        log_status(s, self.cluster, self.latest.age_ms())
    }
}

/// What the engine and the probes see of the node, `proposal_age_ms` being how long ago the
/// latest proposal started.
fn log_status(s: RaftStatus, cluster: Option<Timing>, proposal_age_ms: Option<u64>) -> LogStatus {
    let leader = s.role == "leader";
    LogStatus {
        role: s.role,
        term: s.term,
        leader: s.leader,
        last_log_index: s.last_log_index.unwrap_or(0),
        committed: s.committed.unwrap_or(0),
        applied: s.applied.unwrap_or(0),
        clustered: cluster.is_some(),
        quorum_ack_ms: s.quorum_ack_ms,
        quorum_contact: leader
            && cluster.is_none_or(|t| crate::cluster_member::quorum_contact(s.quorum_ack_ms, &t)),
        proposal_fresh: leader
            && cluster.is_some_and(|t| proposal_age_ms.is_some_and(|ms| ms < t.lease_ms())),
        handing_over: s.handing_over,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMING: Timing = Timing {
        heartbeat_ms: 500,
        election_timeout_ms: 5_000,
    };

    fn leader(applied: u64, last: u64, quorum_ack_ms: Option<u64>) -> RaftStatus {
        RaftStatus {
            role: "leader",
            term: 2,
            leader: Some(1),
            last_log_index: Some(last),
            committed: Some(applied),
            applied: Some(applied),
            quorum_ack_ms,
            handing_over: false,
            abandoned: false,
        }
    }

    /// Review s17 lead M1: a leader whose applied index trails its log by its own entry is
    /// serving while that proposal is younger than the lease, and stuck once it is older (its
    /// own disk hangs); its frozen metrics' acknowledgement age, which `RaftNode::status` now
    /// ages with the clock, fails the quorum contact past the lease too.
    #[test]
    fn a_proposal_older_than_the_lease_is_stuck() {
        let lease = TIMING.lease_ms();
        let s = |age| log_status(leader(8, 9, Some(10)), Some(TIMING), age);
        assert!(s(Some(lease - 1)).proposal_fresh);
        assert!(!s(Some(lease)).proposal_fresh);
        assert!(!s(None).proposal_fresh);
        assert!(s(Some(lease - 1)).quorum_contact);
        let frozen = log_status(leader(8, 9, Some(lease + 1)), Some(TIMING), Some(0));
        assert!(!frozen.quorum_contact);
        // A single node has no lease: nothing changes for it.
        let single = log_status(leader(8, 9, Some(lease + 1)), None, Some(0));
        assert!(single.quorum_contact && !single.proposal_fresh && !single.clustered);
    }

    /// Review s17 C7, s18 K4: only a lost lead or a lapsed lease gives the entry up (a
    /// deposition, reloaded at once); a leader that keeps both waits for it, however long.
    #[test]
    fn only_a_lost_lead_or_lease_gives_the_entry_up() {
        let in_contact = leader(8, 9, Some(10));
        assert!(give_up(&in_contact, &TIMING).is_none());
        let lapsed = leader(8, 9, Some(TIMING.lease_ms() + 1));
        assert!(matches!(
            give_up(&lapsed, &TIMING),
            Some(LogError::Deposed(_))
        ));
        let follower = RaftStatus {
            role: "follower",
            ..in_contact
        };
        assert!(matches!(
            give_up(&follower, &TIMING),
            Some(LogError::Deposed(_))
        ));
    }

    #[test]
    fn the_latest_proposal_is_stamped() {
        let p = LatestProposal::new();
        assert_eq!(p.age_ms(), None);
        p.started();
        assert!(p.age_ms().is_some());
    }
}
