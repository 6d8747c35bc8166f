//! What a member of a multi-node group is started with, and the checks a start makes before
//! it may take part: the stored membership against `peers` (review s15 A1) and the engine's
//! entry limit against the append budget (A5).

use std::collections::{BTreeMap, BTreeSet};

use openraft::error::InitializeError;
use openraft::BasicNode;

use crate::error::RaftError;
use crate::rpc_codec::ENTRY_HEAD;
use crate::wire::APPEND_ENTRIES_MAX;

/// The largest application entry a clustered group can replicate: one append carries at most
/// `APPEND_ENTRIES_MAX` entry bytes, each entry its 20-byte head and the codec's kind byte on
/// top of the payload. A larger entry would be refused by every follower for good and stall
/// the group (no chunked append exists).
pub const CLUSTER_ENTRY_MAX: u64 = APPEND_ENTRIES_MAX as u64 - ENTRY_HEAD as u64 - 1;

/// A clustered start's inputs besides the stores and the network.
#[derive(Debug, Clone)]
pub struct ClusterStart {
    /// Every voter by id, this node included: the `peers` of the configuration.
    pub peers: BTreeMap<u64, BasicNode>,
    /// Initialise the membership with `peers` if the directory holds nothing of the group:
    /// true on one node only (the lowest id of `peers`), and never on a node started to join
    /// a running group (`cluster_join`: a wiped node must not found a second group, A2).
    pub initialise: bool,
    /// The largest entry the engine may propose (its entry limit, from `max_record_bytes`).
    pub entry_limit: u64,
    /// `cluster_join`: with an empty log the node starts joining (`VoteGate`).
    pub join: bool,
    /// Whether this member may vote and campaign (review s21 membership M5, M6); the same
    /// gate the listener (`Groups::add_member`) and the network (`TcpNetwork::with_gate`)
    /// hold. None: always (in-process tests).
    pub gate: Option<crate::VoteGate>,
    /// Catch lagging peers up by snapshot (issue 13, `SnapshotFeed`): openraft builds
    /// snapshots (the durable checkpoint) and purges behind them, reclamation under a
    /// multi-node membership stops at that purge instead of being refused, and the feed gets
    /// the group's log store for the network and the listener's inbox. None: today's
    /// behaviour (openraft never snapshots; a multi-node group never reclaims).
    pub snapshots: Option<crate::SnapshotFeed>,
}

impl ClusterStart {
    /// Refuses an entry limit a follower could never receive.
    pub(crate) fn check_entry_limit(&self) -> Result<(), RaftError> {
        if self.entry_limit > CLUSTER_ENTRY_MAX {
            return Err(RaftError::Config(format!(
                "max_record_bytes (the engine's entry limit) is {} bytes, above the {} bytes one \
                 Raft append can carry to a follower; a clustered group needs it at most that",
                self.entry_limit, CLUSTER_ENTRY_MAX
            )));
        }
        Ok(())
    }
}

/// Refuses a stored membership this node must not run with under `peers`: an empty one in a
/// directory whose log holds entries, a lone `{me}` while `peers` names others (a single-node
/// directory reused in a cluster would lead alone and acknowledge writes nobody else holds),
/// or one that names this node neither as a voter nor as a learner (a directory of another
/// group, or of a member since removed). A vote without any log (a member asked to vote
/// before it received the membership) waits to be contacted. Beyond that the stored
/// membership need not match `peers`: once the membership operations changed it (`changed`:
/// it was written above the log's first index, where only `initialize` writes), it is the
/// group's own and `peers` only seeded the first boot, so a group shrunk to one voter
/// restarts whatever `peers` still names (review s21 membership M4). A single node never
/// changes its membership (the routes answer it 501), so a lone `{me}` above index 0 is a
/// cluster's. A node that `may_predate_addition` may hold one that does not name it (logged).
pub(crate) fn check_stored_membership(
    me: u64,
    peers: &BTreeMap<u64, BasicNode>,
    stored: &StoredMembership,
    log_empty: bool,
    predates_addition: bool,
) -> Result<(), RaftError> {
    let StoredMembership {
        voters,
        learners,
        changed,
    } = stored;
    let named: BTreeSet<u64> = peers.keys().copied().collect();
    let refuse = |why: String| {
        Err(RaftError::Startup(format!(
            "the data directory's stored Raft membership (voters {voters:?}, learners \
             {learners:?}) {why}; peers names {named:?}. Point this node at the group's own \
             data directory, or at an empty one to join (cluster_join = true)"
        )))
    };
    if voters.is_empty() {
        if log_empty {
            return Ok(());
        }
        return refuse("is empty while its log holds entries".to_string());
    }
    if !voters.contains(&me) && !learners.contains(&me) {
        if predates_addition {
            tracing::warn!(
                node = me,
                ?voters,
                ?learners,
                "the stored Raft membership does not name this node: taken as a snapshot from \
                 before it was added (the entry adding it follows); if it was removed instead, \
                 it stays idle: wipe its data directory"
            );
            return Ok(());
        }
        return refuse(format!("does not name this node ({me})"));
    }
    if voters.len() == 1 && learners.is_empty() && named.len() > 1 && !changed {
        return refuse(format!(
            "is this node ({me}) alone: a single-node directory cannot join a cluster"
        ));
    }
    Ok(())
}

/// Whether a start may hold a stored membership that does not name this node: the snapshot it
/// was caught up by was taken before it was added, and the entry adding it comes after the
/// snapshot's index (review s26 snap M2: the start after the install's reopen was refused).
/// So for a node still `joining` (its marker is made only on an empty directory), and for one
/// whose log holds nothing past its purge horizon (`last_at_open` at most `purged_at_open`;
/// a snapshot without records leaves no log at all): all it
/// has is an installed snapshot, which only a leader counting it a member sends, as to a
/// learner started on an empty directory without `cluster_join` (review s27 snap). Once the
/// entry adding it is in its log, the membership read names it and the check applies again.
/// Only once it held a membership of several nodes (`multi_node`, sticky; an install of one
/// writes it): a single-node directory whose whole log was reclaimed is still refused (another
/// group's data; a group of one voter adding its first learner is left out with it). And only
/// with snapshot catch-up on (`catch_up`): with it off no checkpoint is ever installed, and
/// openraft's own start-up purge can leave a foreign directory looking the same (review s27
/// snap second pass, M1: it must stay refused).
pub(crate) fn may_predate_addition(
    joining: bool,
    catch_up: bool,
    multi_node: bool,
    purged_at_open: Option<u64>,
    last_at_open: Option<u64>,
) -> bool {
    joining
        || (catch_up && multi_node && purged_at_open.is_some() && last_at_open <= purged_at_open)
}

/// The effective membership a directory holds, as the start check reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredMembership {
    pub voters: BTreeSet<u64>,
    pub learners: BTreeSet<u64>,
    /// Written by a membership change (its log index above 0), not by `initialize`.
    pub changed: bool,
}

/// `initialize`'s outcome on an empty directory: "not allowed" means a leader reached this
/// node between `is_initialized` and `initialize` (review s15 A7), so the group is
/// initialised, by the one that leads it, and the start goes on.
pub(crate) fn initialised(
    me: u64,
    res: Result<(), openraft::error::RaftError<u64, InitializeError<u64, BasicNode>>>,
) -> Result<(), RaftError> {
    match res {
        Ok(()) => Ok(()),
        Err(openraft::error::RaftError::APIError(InitializeError::NotAllowed(e))) => {
            tracing::info!(node = me, reason = %e, "raft group initialised by a peer first");
            Ok(())
        }
        Err(e) => Err(RaftError::Startup(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers(ids: &[u64]) -> BTreeMap<u64, BasicNode> {
        ids.iter().map(|i| (*i, BasicNode::default())).collect()
    }

    fn voters(ids: &[u64]) -> BTreeSet<u64> {
        ids.iter().copied().collect()
    }

    fn check(me: u64, p: &[u64], v: &[u64], l: &[u64], empty: bool) -> Result<(), RaftError> {
        let stored = StoredMembership {
            voters: voters(v),
            learners: voters(l),
            changed: false,
        };
        check_stored_membership(me, &peers(p), &stored, empty, false)
    }

    /// Review s21 membership M4: a group shrunk to one voter by the routes restarts while
    /// `peers` still names the first boot's members; a single node's own directory (its
    /// membership written by `initialize`, at index 0) is still refused in a cluster.
    #[test]
    fn a_group_shrunk_to_one_voter_restarts_whatever_peers_names() {
        let stored = |changed| StoredMembership {
            voters: voters(&[1]),
            learners: BTreeSet::new(),
            changed,
        };
        assert!(
            check_stored_membership(1, &peers(&[1, 2, 3]), &stored(true), false, false).is_ok()
        );
        let e = check_stored_membership(1, &peers(&[1, 2, 3]), &stored(false), false, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("single-node directory"), "{e}");
    }

    #[test]
    fn the_group_s_own_membership_passes() {
        assert!(check(2, &[1, 2, 3], &[1, 2, 3], &[], false).is_ok());
        // A single-node cluster's directory is its own.
        assert!(check(1, &[1], &[1], &[], false).is_ok());
        // Voted, nothing logged: waits for the leader.
        assert!(check(3, &[1, 2, 3], &[], &[], true).is_ok());
    }

    /// Once the membership operations changed the membership, the stored one is the group's
    /// own: a node added at run time (a learner, or promoted) restarts whatever `peers` says.
    #[test]
    fn a_membership_changed_at_run_time_names_this_node_and_passes() {
        // Node 4 joined as a learner; its `peers` lists 1, 2, 4.
        assert!(check(4, &[1, 2, 4], &[1, 2, 3], &[4], false).is_ok());
        // Promoted, node 3 removed; node 1 still has the first boot's peers.
        assert!(check(4, &[1, 2, 4], &[1, 2, 4], &[], false).is_ok());
        assert!(check(1, &[1, 2, 3], &[1, 2, 4], &[], false).is_ok());
        // Shrunk to one voter with a learner catching up: not a single-node directory.
        assert!(check(1, &[1, 2, 3], &[1], &[4], false).is_ok());
    }

    /// A joining node caught up by a snapshot taken before it was added holds a membership
    /// that does not name it: its start is not refused; the same directory not joining is.
    #[test]
    fn a_joining_node_may_hold_a_membership_from_before_it_was_added() {
        let stored = StoredMembership {
            voters: BTreeSet::from([1, 2, 3]),
            learners: BTreeSet::new(),
            changed: false,
        };
        let peers4 = peers(&[4]);
        assert!(check_stored_membership(4, &peers4, &stored, false, true).is_ok());
        assert!(check_stored_membership(4, &peers4, &stored, false, false).is_err());
    }

    /// Review s27 snap: a learner started on an empty directory without `cluster_join` and
    /// caught up by such a snapshot holds only it (its log ends at its purge horizon): its
    /// restart is not refused; once anything was appended past the horizon, or with nothing
    /// purged, the check applies.
    #[test]
    fn a_directory_holding_only_an_installed_snapshot_may_predate_its_addition() {
        assert!(may_predate_addition(true, true, false, None, None));
        assert!(may_predate_addition(true, false, false, None, None));
        assert!(may_predate_addition(
            false,
            true,
            true,
            Some(500),
            Some(500)
        ));
        assert!(may_predate_addition(false, true, true, Some(500), None));
        assert!(!may_predate_addition(
            false,
            true,
            true,
            Some(500),
            Some(501)
        ));
        assert!(!may_predate_addition(false, true, true, None, Some(500)));
        assert!(!may_predate_addition(false, true, true, None, None));
        // A single-node directory reclaimed whole is another group's, still refused.
        assert!(!may_predate_addition(
            false,
            true,
            false,
            Some(500),
            Some(500)
        ));
        // With catch-up off nothing is installed: openraft's start-up purge of a foreign
        // directory (its log cut below its checkpoint) looks the same and stays refused.
        assert!(!may_predate_addition(
            false,
            false,
            true,
            Some(500),
            Some(500)
        ));
        assert!(!may_predate_addition(false, false, true, Some(500), None));
    }

    /// The refusals of A1 hold under run-time membership too: a removed member's directory,
    /// and a lone single-node directory.
    #[test]
    fn a_removed_member_s_directory_is_refused() {
        let e = check(3, &[1, 2, 3], &[1, 2, 4], &[], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not name this node (3)"), "{e}");
        assert!(e.contains("cluster_join"), "{e}");
        assert!(check(4, &[1, 2, 4], &[4], &[], false).is_err());
    }

    #[test]
    fn a_foreign_membership_is_refused_naming_peers() {
        for (me, v, empty) in [
            (1, &[1][..], false),
            (2, &[2], false),
            (3, &[1, 2], false),
            (1, &[], false),
        ] {
            let e = check(me, &[1, 2, 3], v, &[], empty)
                .unwrap_err()
                .to_string();
            assert!(e.contains("peers names"), "{e}");
        }
    }

    #[test]
    fn initialise_not_allowed_is_taken_as_initialised() {
        let not_allowed = openraft::error::NotAllowed {
            last_log_id: None,
            vote: openraft::Vote::new(3, 2),
        };
        let res = Err(openraft::error::RaftError::APIError(
            InitializeError::NotAllowed(not_allowed),
        ));
        assert!(initialised(1, res).is_ok());
        let fatal = Err(openraft::error::RaftError::Fatal(
            openraft::error::Fatal::Stopped,
        ));
        assert!(matches!(initialised(1, fatal), Err(RaftError::Startup(_))));
    }

    #[test]
    fn an_entry_limit_above_the_append_budget_is_refused_naming_the_key() {
        let mut s = ClusterStart {
            peers: peers(&[1, 2, 3]),
            initialise: true,
            entry_limit: CLUSTER_ENTRY_MAX,
            join: false,
            gate: None,
            snapshots: None,
        };
        assert!(s.check_entry_limit().is_ok());
        s.entry_limit = CLUSTER_ENTRY_MAX + 1;
        let e = s.check_entry_limit().unwrap_err().to_string();
        assert!(e.contains("max_record_bytes"), "{e}");
        s.entry_limit = 256 << 20;
        assert!(s.check_entry_limit().is_err());
    }
}
