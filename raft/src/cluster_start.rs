//! What a member of a multi-node group is started with, and the checks a start makes before
//! it may take part: the stored membership against `peers` (review s15 A1) and the engine's
//! entry limit against the append budget (A5).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use openraft::error::InitializeError;
use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, ErrorSubject, StorageHelper, Vote};

use crate::backend::StateStore;
use crate::error::RaftError;
use crate::log_store::LogStore;
use crate::meta;
use crate::rpc_codec::ENTRY_HEAD;
use crate::state_machine::StateMachine;
use crate::types::TypeConfig;
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
/// whose last install recorded that its membership did not name the node
/// (`installed_before_addition`, `meta::INSTALLED_BEFORE_ADDITION`, written in the install's
/// own commit): a learner started on an empty directory without `cluster_join` (review s27
/// snap), also once it appended entries after the snapshot and was killed before the one
/// adding it (review s27 snap second pass M2: the start check used to read the log's shape
/// instead, and refused it). Only an install writes the marker, so openraft's start-up purge
/// cannot make a foreign directory look exempt (second pass M1), whatever the catch-up key
/// says now. Once a start finds a membership naming the node the marker is cleared.
pub(crate) fn may_predate_addition(joining: bool, installed_before_addition: bool) -> bool {
    joining || installed_before_addition
}

/// The membership check of a clustered start, run on the opened stores before openraft
/// starts on them (review s27 snap second pass LOW: run after `Raft::new`, a refused start
/// had already let openraft snapshot and purge its log).
pub(crate) struct MembershipCheck {
    pub peers: BTreeMap<u64, BasicNode>,
    /// The vote gate says this node is still joining (`VoteGate::joining`).
    pub joining: bool,
    /// The segment log held no entry at open.
    pub log_empty: bool,
}

impl MembershipCheck {
    /// Reads the effective membership openraft will start from (the applied one, or the last
    /// in the log after it, as openraft's own start reads it) and checks it
    /// (`check_stored_membership`). A directory without a vote or a log position (not
    /// initialised) passes: it waits to be contacted, or is initialised by the caller. A start
    /// whose committed membership names this node clears `meta::INSTALLED_BEFORE_ADDITION`
    /// (durably, before openraft runs) so the exemption ends with the addition.
    // The clearing closure returns openraft's storage error by value, as `meta` does.
    #[allow(clippy::result_large_err)]
    pub(crate) async fn run(
        &self,
        me: u64,
        log_store: &LogStore,
        state_machine: &mut StateMachine,
        store: &Arc<StateStore>,
    ) -> Result<(), RaftError> {
        let startup = |what: &str, e: &dyn std::fmt::Display| {
            RaftError::Startup(format!("{what} for the membership check: {e}"))
        };
        let mut ls = log_store.clone();
        let vote = ls
            .read_vote()
            .await
            .map_err(|e| startup("reading the vote", &e))?;
        let state = ls
            .get_log_state()
            .await
            .map_err(|e| startup("reading the log state", &e))?;
        let voted = vote.is_some_and(|v| v != Vote::default());
        if state.last_log_id.is_none() && !voted {
            return Ok(());
        }
        let m = StorageHelper::<TypeConfig, _, _>::new(&mut ls, state_machine)
            .get_membership()
            .await
            .map_err(|e| startup("reading the membership", &e))?;
        let effective = m.effective();
        let stored = StoredMembership {
            voters: effective.membership().voter_ids().collect(),
            learners: effective.membership().learner_ids().collect(),
            changed: effective.log_id().is_some_and(|l| l.index > 0),
        };
        let marked = meta::installed_before_addition(store)
            .map_err(|e| startup(&format!("reading {}", meta::INSTALLED_BEFORE_ADDITION), &e))?;
        check_stored_membership(
            me,
            &self.peers,
            &stored,
            self.log_empty,
            may_predate_addition(self.joining, marked),
        )?;
        // Cleared only once a committed membership names this node: an appended one may still
        // be cut off by a new leader.
        let named = m.committed().membership().get_node(&me).is_some();
        if marked && named {
            meta::blocking(store, ErrorSubject::Store, |s| {
                meta::put(
                    s,
                    meta::INSTALLED_BEFORE_ADDITION,
                    &false,
                    ErrorSubject::Store,
                )
            })
            .await
            .map_err(|e| startup(&format!("clearing {}", meta::INSTALLED_BEFORE_ADDITION), &e))?;
        }
        Ok(())
    }
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

    /// A membership not naming this node is held only while joining or while the last
    /// install recorded it (review s27 snap second pass M2): not from the log's shape, which
    /// openraft's own purge can fake (second pass M1).
    #[test]
    fn only_a_joining_node_or_a_marked_install_may_predate_its_addition() {
        assert!(may_predate_addition(true, false));
        assert!(may_predate_addition(false, true));
        assert!(!may_predate_addition(false, false));
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
