//! Whether this member may vote and campaign (docs/cluster.md "Membership operations", review
//! s21 membership M5 and M6).
//!
//! **Joining** (M5). A node started with `cluster_join` on an empty directory has no vote and
//! no log. If its id is a voter of the group (a wiped voter rejoining under its old id), a
//! vote it grants or an election it calls could elect a leader missing entries it had
//! acknowledged before the wipe. So such a node is *joining*: a marker file in its data
//! directory says so across restarts; while it stands the node grants no vote (the listener
//! refuses vote requests before openraft sees them) and calls no election (openraft's
//! `enable_elect` is off). The marker goes once the node has caught up with the leader's
//! commit (its log reaches the `leader_commit` of an append it took) while the membership at
//! its log's end names it a learner: from then on it has never acknowledged or voted anything
//! it could have forgotten, and holds a prefix of the leader's log, as any follower. A wiped
//! voter never sees itself a caught-up learner (the group holds it as a voter), so it never
//! votes; it says so, and the operator removes it and adds it back as a learner.
//!
//! **Removed** (M6). A voter removed while down and restarted on its old directory still
//! holds the old membership and campaigns. A member refuses a vote request from a candidate
//! that neither its committed nor its effective membership names ("not a member"), before
//! openraft sees it (so the refusal moves no term); the candidate, told so, stops calling
//! elections until it is restarted and says why.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use openraft::Raft;

use crate::error::RaftError;
use crate::types::TypeConfig;

/// The marker's contents: the file's presence is what counts; the text is for an operator.
const MARKER_TEXT: &str = "this node joined with an empty directory and does not vote until \
it has caught up as a learner (docs/cluster.md)\n";

/// One member's gate, shared by its Raft node, its listener and its network. Clones share it.
#[derive(Clone)]
pub struct VoteGate {
    inner: Arc<Inner>,
}

struct Inner {
    me: u64,
    marker: PathBuf,
    joining: AtomicBool,
    removed: AtomicBool,
    /// Said once: a wiped voter's caught-up log names it a voter.
    stuck_said: AtomicBool,
    /// The horizon beside the marker is written (`join_horizon`).
    horizon_known: AtomicBool,
    /// Whether this group keeps a joining horizon: only the one whose apply reads it (the
    /// `default` group's, `without_horizon` for the others; review s28 M-2).
    keeps_horizon: bool,
    raft: OnceLock<Raft<TypeConfig>>,
    /// The node's log, whose last (index, term) a "not a member" refusal is weighed against.
    /// Weak: the gate outlives the group's stores (the listener keeps it), and a held log
    /// would stop the group's rebuild, which waits for every holder of its files (it did:
    /// a cut-off leader's reload waited for ever, test_cluster.py).
    log: OnceLock<std::sync::Weak<crate::backend::SegmentLog>>,
    /// One catch-up check clears the marker at a time.
    opening: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for VoteGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VoteGate")
            .field("me", &self.inner.me)
            .field("joining", &self.joining())
            .field("removed", &self.removed())
            .finish_non_exhaustive()
    }
}

/// What a joining node's catch-up check concludes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CatchUp {
    /// Not caught up with the leader's commit yet, or not named at all yet.
    Behind,
    /// Caught up while a learner: it may vote from now on.
    Open,
    /// Caught up while the group holds it as a voter: a wiped voter, which never votes.
    WipedVoter,
}

/// The verdict for node `me` whose log ends at `last` after an append whose leader had
/// committed `leader_commit`, the membership at the log's end naming `voters` and `learners`.
pub(crate) fn catch_up(
    me: u64,
    last: Option<u64>,
    leader_commit: Option<u64>,
    voters: &BTreeSet<u64>,
    learners: &BTreeSet<u64>,
) -> CatchUp {
    if last < leader_commit {
        return CatchUp::Behind;
    }
    if learners.contains(&me) {
        CatchUp::Open
    } else if voters.contains(&me) {
        CatchUp::WipedVoter
    } else {
        CatchUp::Behind
    }
}

/// Whether a member refuses the vote request of `candidate`: when neither its committed nor
/// its effective membership names it, and its own log, as (term, index), is at least the
/// candidate's, so that it has seen whatever the candidate has (a member behind a newly
/// added one must not tell it it is no member). A node that knows no membership yet refuses
/// nothing on this ground.
pub(crate) fn not_a_member(
    candidate: u64,
    (committed, effective): (&BTreeSet<u64>, &BTreeSet<u64>),
    mine: Option<(u64, u64)>,
    theirs: Option<(u64, u64)>,
) -> bool {
    if committed.is_empty() && effective.is_empty() {
        return false;
    }
    mine >= theirs && !committed.contains(&candidate) && !effective.contains(&candidate)
}

impl VoteGate {
    /// The gate of node `me`, whose joining marker lives at `marker`.
    pub fn new(me: u64, marker: PathBuf) -> VoteGate {
        VoteGate {
            inner: Arc::new(Inner {
                me,
                marker,
                joining: AtomicBool::new(false),
                removed: AtomicBool::new(false),
                stuck_said: AtomicBool::new(false),
                horizon_known: AtomicBool::new(false),
                keeps_horizon: true,
                raft: OnceLock::new(),
                log: OnceLock::new(),
                opening: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// A gate that keeps no joining horizon: its group's apply never reads one (a tenant's
    /// group; review s28 M-2: a fresh learner of such a group wrote one nobody read or
    /// removed). Only before the gate is shared.
    pub fn without_horizon(mut self) -> VoteGate {
        let shared = match Arc::get_mut(&mut self.inner) {
            Some(inner) => {
                inner.keeps_horizon = false;
                false
            }
            None => true,
        };
        debug_assert!(!shared, "without_horizon on a shared gate does nothing");
        self
    }

    /// Decides at start, before openraft runs: joining if the marker stands, or if the node
    /// starts to join (`join`) with an empty log, in which case the marker is written and
    /// synced first. Returns whether the node may call elections.
    pub(crate) fn prepare(&self, join: bool, log_empty: bool) -> Result<bool, RaftError> {
        let marker = &self.inner.marker;
        let stands = marker
            .try_exists()
            .map_err(|e| startup(format!("reading {}: {e}", marker.display())))?;
        if !stands && join && log_empty {
            // A horizon left from an earlier join (a crash between the two removals) is not
            // this join's: gone before the marker stands, so it is never read as one.
            crate::join_horizon::remove_horizon(marker).map_err(|e| {
                startup(format!(
                    "removing the horizon beside {}: {e}",
                    marker.display()
                ))
            })?;
            write_marker(marker)?;
        }
        let joining = stands || (join && log_empty);
        let known = if self.inner.keeps_horizon {
            // A damaged horizon stops the start here, naming the file and the reset (review
            // s28 M-2): found later, it stopped the `default` apply at the next declaration.
            crate::join_horizon::read_horizon(marker)
                .map_err(startup)?
                .is_some()
        } else {
            // A tenant's gate: a horizon beside it was left by a build before session 32 and
            // nothing reads it, so a damaged one must not refuse the tenant's start with a
            // reset of the node (review s32 L-1). Removed as cleanup; kept if that fails.
            if let Err(e) = crate::join_horizon::remove_horizon(marker) {
                tracing::warn!(marker = %marker.display(), error = %e, "an unused joining horizon could not be removed; kept (harmless)");
            }
            false
        };
        self.inner.horizon_known.store(known, Ordering::SeqCst);
        if joining {
            tracing::info!(
                node = self.inner.me,
                marker = %marker.display(),
                "joining: this node grants no vote and calls no election until it has caught \
                 up as a learner"
            );
        }
        self.inner.joining.store(joining, Ordering::SeqCst);
        Ok(!joining)
    }

    /// Hands the gate the node's openraft handle, which it turns elections on and off with,
    /// and its log.
    pub(crate) fn attach(&self, raft: Raft<TypeConfig>, log: Arc<crate::backend::SegmentLog>) {
        let _ = self.inner.raft.set(raft);
        let _ = self.inner.log.set(Arc::downgrade(&log));
    }

    /// This node's last log entry as (term, index), for ordering against a candidate's.
    pub(crate) fn last_log(&self) -> Option<(u64, u64)> {
        let (index, term) = self.inner.log.get()?.upgrade()?.last()?;
        Some((term, index))
    }

    /// Whether the node is joining (grants no vote).
    /// This node's id.
    pub(crate) fn me(&self) -> u64 {
        self.inner.me
    }

    pub fn joining(&self) -> bool {
        self.inner.joining.load(Ordering::SeqCst)
    }

    /// Whether this node may call elections: neither joining nor told it was removed.
    pub fn may_campaign(&self) -> bool {
        !self.joining() && !self.removed()
    }

    /// Whether a peer said this node is not a member.
    pub fn removed(&self) -> bool {
        self.inner.removed.load(Ordering::SeqCst)
    }

    /// A peer refused this node's vote request as a non-member: stop calling elections.
    pub(crate) fn note_removed(&self, peer: u64) {
        if self.inner.removed.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(raft) = self.inner.raft.get() {
            raft.runtime_config().elect(false);
        }
        tracing::error!(
            node = self.inner.me,
            peer,
            "this node is not a member of the membership its peers hold (removed while it was \
             down?): it calls no more elections. Stop it; remove its data directory, or add \
             it back as a learner with a new id from an empty directory (cluster_join)"
        );
    }

    /// Before an append reaches openraft: whether it may go on. A joining member of the group
    /// that keeps a horizon (`default`) takes none until its horizon is durably written, and
    /// that horizon is a commit read from the group's leader (`join_read`), never an
    /// append's: an append may come from a deposed leader whose commit lags what was
    /// committed after it lost the lead, and no single append proves its sender current to a
    /// node with an empty vote (review s28 M-3). Refused appends are retried by the sender.
    pub(crate) fn before_append(&self) -> bool {
        !self.needs_horizon()
    }

    /// Whether this member still has to obtain its joining horizon (`join_read`): it keeps
    /// one, is joining, and none is written yet.
    pub fn needs_horizon(&self) -> bool {
        self.inner.keeps_horizon
            && self.joining()
            && !self.inner.horizon_known.load(Ordering::SeqCst)
    }

    /// The cluster addresses of the members this node's membership names, by id (none before
    /// the node is attached or has heard of any).
    pub(crate) fn membership_addrs(&self) -> Vec<(u64, String)> {
        let Some(raft) = self.inner.raft.get() else {
            return Vec::new();
        };
        let m = raft.metrics().borrow().membership_config.clone();
        m.membership()
            .nodes()
            .map(|(id, n)| (*id, crate::member_addr::cluster_part(&n.addr).to_string()))
            .collect()
    }

    /// Whether this member's Raft core has stopped (or never ran): a horizon read for it ends.
    pub(crate) fn core_stopped(&self) -> bool {
        match self.inner.raft.get() {
            Some(raft) => raft.metrics().has_changed().is_err(),
            None => false,
        }
    }

    /// Writes `horizon`, a commit read from the group's leader, durably as this joining
    /// member's horizon; appends are let in from then on. A horizon already written is kept
    /// (a second read is only ever higher, which changes nothing that matters).
    pub(crate) async fn keep_read_horizon(&self, horizon: u64) -> Result<(), String> {
        let _one = self.inner.opening.lock().await;
        if !self.needs_horizon() {
            return Ok(());
        }
        let marker = self.inner.marker.clone();
        tokio::task::spawn_blocking(move || crate::join_horizon::write_horizon(&marker, horizon))
            .await
            .map_err(|e| format!("the horizon write stopped: {e}"))?
            .map_err(|e| format!("writing the joining horizon: {e}"))?;
        self.inner.horizon_known.store(true, Ordering::SeqCst);
        tracing::info!(
            node = self.inner.me,
            horizon,
            "joining: the horizon read from the leader is kept"
        );
        Ok(())
    }

    /// After an append this node took from a leader that had committed `leader_commit`:
    /// clears the joining marker once the node caught up as a learner.
    pub(crate) async fn after_append(&self, leader_commit: Option<u64>) {
        // A leader replicates to this node: it is a member after all (a peer that said
        // otherwise was behind), and may campaign again.
        if self.inner.removed.swap(false, Ordering::SeqCst) && !self.joining() {
            if let Some(raft) = self.inner.raft.get() {
                raft.runtime_config().elect(true);
            }
            tracing::info!(
                node = self.inner.me,
                "a leader replicates to this node again"
            );
        }
        if !self.joining() {
            return;
        }
        let Some(raft) = self.inner.raft.get() else {
            return;
        };
        let _one = self.inner.opening.lock().await;
        if !self.joining() {
            return;
        }
        // openraft's metrics: reported after each batch of the core's work, so at worst one
        // append late, and the next append (a heartbeat at most) looks again.
        let (last, voters, learners) = {
            let m = raft.metrics().borrow().clone();
            let members = m.membership_config.membership();
            let voters: BTreeSet<u64> = members.voter_ids().collect();
            let learners: BTreeSet<u64> = members.learner_ids().collect();
            (m.last_log_index, voters, learners)
        };
        match catch_up(self.inner.me, last, leader_commit, &voters, &learners) {
            CatchUp::Behind => {}
            CatchUp::Open => {
                let marker = self.inner.marker.clone();
                // The horizon stays: the apply may lag the log, and a declaration applied
                // after the marker went is still weighed against it (`join_horizon`).
                let removed = tokio::task::spawn_blocking(move || remove_marker(&marker)).await;
                match removed {
                    Ok(Ok(())) => {
                        self.inner.joining.store(false, Ordering::SeqCst);
                        if !self.removed() {
                            raft.runtime_config().elect(true);
                        }
                        tracing::info!(
                            node = self.inner.me,
                            ?last,
                            "caught up as a learner: this node votes from now on"
                        );
                    }
                    Ok(Err(e)) => tracing::warn!(error = %e, "the joining marker stays"),
                    Err(e) => tracing::warn!(error = %e, "the joining marker stays"),
                }
            }
            CatchUp::WipedVoter => {
                if !self.inner.stuck_said.swap(true, Ordering::SeqCst) {
                    tracing::error!(
                        node = self.inner.me,
                        "this node joined with an empty directory, but the group holds node {} \
                         as a voter: it has forgotten what it acknowledged and voted, so it \
                         grants no vote and calls no election. Remove it (DELETE \
                         /api/v1/cluster/members/{}) and add it as a learner (a new id is \
                         safest)",
                        self.inner.me,
                        self.inner.me
                    );
                }
            }
        }
    }
}

fn startup(why: String) -> RaftError {
    RaftError::Startup(why)
}

/// Writes the marker and syncs it and its directory: a crash right after must find it.
fn write_marker(path: &std::path::Path) -> Result<(), RaftError> {
    use std::io::Write;
    let fail = |op: &str, e: std::io::Error| startup(format!("{op} {}: {e}", path.display()));
    let mut f = std::fs::File::create(path).map_err(|e| fail("creating", e))?;
    f.write_all(MARKER_TEXT.as_bytes())
        .map_err(|e| fail("writing", e))?;
    f.sync_all().map_err(|e| fail("syncing", e))?;
    sync_parent(path).map_err(|e| fail("syncing the directory of", e))
}

/// A marker already gone counts as removed: a removal whose outcome was lost (a crash after
/// the unlink, an earlier try cut short) must not keep the node from ever voting.
fn remove_marker(path: &std::path::Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    sync_parent(path)
}

fn sync_parent(path: &std::path::Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::File::open(dir)?.sync_all(),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[u64]) -> BTreeSet<u64> {
        ids.iter().copied().collect()
    }

    /// A fresh learner opens once caught up; a wiped voter never does, however far it
    /// catches up, even across the entry that once added it as a learner.
    #[test]
    fn only_a_caught_up_learner_may_vote() {
        // Fresh node 4, added as a learner: behind, then caught up.
        let (v, l) = (set(&[1, 2, 3]), set(&[4]));
        assert_eq!(catch_up(4, Some(10), Some(90), &v, &l), CatchUp::Behind);
        assert_eq!(catch_up(4, Some(90), Some(90), &v, &l), CatchUp::Open);
        assert_eq!(catch_up(4, Some(95), Some(90), &v, &l), CatchUp::Open);
        // Wiped node 4 that was promoted: its log passes the learner entry (index 40) while
        // the leader's commit is far ahead, then ends naming it a voter.
        assert_eq!(catch_up(4, Some(40), Some(900), &v, &l), CatchUp::Behind);
        let voters = set(&[1, 2, 3, 4]);
        assert_eq!(
            catch_up(4, Some(900), Some(900), &voters, &BTreeSet::new()),
            CatchUp::WipedVoter
        );
        // A wiped first-boot voter: named a voter from index 0.
        assert_eq!(
            catch_up(3, Some(5), Some(5), &v, &BTreeSet::new()),
            CatchUp::WipedVoter
        );
        // Not named yet (the learner entry not received).
        assert_eq!(
            catch_up(4, Some(5), Some(5), &v, &BTreeSet::new()),
            CatchUp::Behind
        );
    }

    #[test]
    fn a_candidate_in_neither_membership_is_not_a_member() {
        let (c, e) = (set(&[1, 2, 4]), set(&[1, 2, 4]));
        let (mine, stale) = (Some((5, 90)), Some((4, 60)));
        assert!(not_a_member(3, (&c, &e), mine, stale));
        assert!(!not_a_member(2, (&c, &e), mine, stale));
        // Removal not committed here yet: node 3 still counts.
        assert!(!not_a_member(3, (&set(&[1, 2, 3]), &e), mine, stale));
        // This member is behind the candidate (a newly added one it has not heard of): it
        // does not say "no member", however long its own stale tail.
        assert!(!not_a_member(5, (&c, &e), Some((4, 99)), Some((5, 70))));
        // A node that knows no membership refuses nothing.
        let none = BTreeSet::new();
        assert!(!not_a_member(3, (&none, &none), mine, stale));
    }

    /// The read horizon is kept once, and a horizon left by an earlier join is gone before the
    /// new marker stands (review s27 tenants H1); appends write none (review s28 M-3).
    #[tokio::test]
    async fn a_joining_gate_keeps_its_read_horizon_once() {
        use crate::join_horizon::{horizon_path, read_horizon, write_horizon};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster-joining");
        write_horizon(&path, 99).unwrap();
        let gate = VoteGate::new(4, path.clone());
        assert!(!gate.prepare(true, true).unwrap());
        assert_eq!(
            read_horizon(&path).unwrap(),
            None,
            "the stale horizon stayed"
        );
        assert!(!gate.before_append());
        assert_eq!(read_horizon(&path).unwrap(), None, "an append wrote one");
        gate.keep_read_horizon(7).await.unwrap();
        gate.keep_read_horizon(20).await.unwrap();
        assert_eq!(read_horizon(&path).unwrap(), Some(7));
        // Restarted still joining: the horizon stands; a later read moves nothing.
        let again = VoteGate::new(4, path.clone());
        assert!(!again.prepare(false, false).unwrap());
        again.keep_read_horizon(30).await.unwrap();
        assert_eq!(read_horizon(&path).unwrap(), Some(7));
        // Not joining: no horizon is needed or written, appends pass.
        let other = dir.path().join("other");
        let plain = VoteGate::new(1, other.clone());
        assert!(plain.prepare(false, true).unwrap());
        assert!(!plain.needs_horizon() && plain.before_append());
        plain.keep_read_horizon(5).await.unwrap();
        assert!(!horizon_path(&other).exists());
    }

    /// Review s28 M-2: a damaged horizon stops the start, naming the file, whether the node
    /// still joins or not; a tenant's gate keeps none.
    #[test]
    fn a_damaged_horizon_stops_the_start_naming_its_file() {
        use crate::join_horizon::{horizon_path, write_horizon};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster-joining");
        write_marker(&path).unwrap();
        write_horizon(&path, 7).unwrap();
        assert!(!VoteGate::new(4, path.clone())
            .prepare(false, false)
            .unwrap());
        std::fs::write(horizon_path(&path), b"queen-join-horizon 1\nindex=7").unwrap();
        for marker_stands in [true, false] {
            if !marker_stands {
                remove_marker(&path).unwrap();
            }
            let e = VoteGate::new(4, path.clone())
                .prepare(false, false)
                .unwrap_err()
                .to_string();
            assert!(e.contains("cluster-joining-commit"), "{e}");
        }
    }

    /// Review s28 M-3: an append is refused until the horizon read from the leader is
    /// written (a failed write keeps refusing), and passes once it is.
    #[tokio::test]
    async fn an_append_waits_for_the_read_horizon_to_be_written() {
        use crate::join_horizon::{horizon_path, read_horizon};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster-joining");
        let gate = VoteGate::new(4, path.clone());
        assert!(!gate.prepare(true, true).unwrap());
        assert!(gate.needs_horizon());
        assert!(!gate.before_append(), "let in without a horizon");
        // The temporary file's name taken by a directory: the write fails.
        let mut tmp = horizon_path(&path).into_os_string();
        tmp.push(".tmp");
        std::fs::create_dir(&tmp).unwrap();
        assert!(gate.keep_read_horizon(9).await.is_err());
        assert!(!gate.before_append(), "let in after a failed write");
        assert_eq!(read_horizon(&path).unwrap(), None);
        // A crash before the write (kill -9 between the marker and the horizon): restarted,
        // with or without `cluster_join`, it still needs the read and refuses appends.
        for join in [true, false] {
            let restarted = VoteGate::new(4, path.clone());
            assert!(!restarted.prepare(join, true).unwrap());
            assert!(restarted.needs_horizon() && !restarted.before_append());
        }
        std::fs::remove_dir(&tmp).unwrap();
        gate.keep_read_horizon(9).await.unwrap();
        assert!(gate.before_append());
        assert_eq!(read_horizon(&path).unwrap(), Some(9));
        // Restarted: the written horizon is read back, and appends pass at once.
        let again = VoteGate::new(4, path.clone());
        assert!(!again.prepare(false, false).unwrap());
        assert!(!again.needs_horizon() && again.before_append());
        // A tenant's gate keeps no horizon and lets appends in.
        let other = dir.path().join("tenant-joining");
        let tenant = VoteGate::new(4, other.clone()).without_horizon();
        assert!(!tenant.prepare(true, true).unwrap());
        assert!(!tenant.needs_horizon() && tenant.before_append());
        assert!(!horizon_path(&other).exists());
    }

    /// Review s32 L-1: a damaged horizon an older build left beside a tenant's marker does not
    /// refuse the tenant's start (nothing reads it); it is removed.
    #[test]
    fn a_tenant_gate_removes_an_old_damaged_horizon_and_starts() {
        use crate::join_horizon::horizon_path;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster-joining");
        std::fs::write(horizon_path(&path), b"x").unwrap();
        let tenant = VoteGate::new(4, path.clone()).without_horizon();
        assert!(tenant.prepare(false, false).unwrap());
        assert!(!horizon_path(&path).exists());
        // The default group's gate still refuses it, naming the file.
        std::fs::write(horizon_path(&path), b"x").unwrap();
        assert!(VoteGate::new(4, path).prepare(false, false).is_err());
    }

    #[test]
    fn the_marker_survives_a_restart_until_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster-joining");
        let gate = VoteGate::new(4, path.clone());
        // An empty log started to join: joining, the marker written.
        assert!(!gate.prepare(true, true).unwrap());
        assert!(gate.joining() && path.exists());
        // Restarted with a log and without cluster_join: still joining.
        let again = VoteGate::new(4, path.clone());
        assert!(!again.prepare(false, false).unwrap());
        assert!(again.joining());
        remove_marker(&path).unwrap();
        // Gone already (a removal whose outcome was lost): still a success.
        remove_marker(&path).unwrap();
        let after = VoteGate::new(4, path.clone());
        assert!(after.prepare(true, false).unwrap());
        assert!(!after.joining());
        // Not joining: no marker written.
        let plain = VoteGate::new(1, dir.path().join("other"));
        assert!(plain.prepare(false, true).unwrap());
        assert!(!dir.path().join("other").exists());
    }
}
