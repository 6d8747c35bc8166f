//! The founding fallback of a tenant's group (`cluster_tenant_groups`, docs/cluster.md
//! "Tenants"). Only `hosted::preferred(T, V)` founds T's group at its start; were that voter
//! down when T was declared, T would have no leader until it came back, and for ever if it
//! never does. So a voter of V that is not the preferred one founds T's group itself when,
//! after [`WAIT_ELECTION_TIMEOUTS`] election timeouts plus a stagger by its rank in V (two
//! fallbacks rarely race), nothing of the group has reached it, and its directory is not
//! lost (whose vote is forgotten), holds no joining marker, is not joining, and still has no
//! vote and an empty log at the deadline. A restart during the wait arms it again (review s29
//! M-B): a directory opened here before whose store stands keeps any vote it granted, which
//! openraft's own refusal sees; one whose store is gone is lost, and restarts joining.
//!
//! It founds with the identical V, the voters of the committed declaration, which every node
//! reads from its own hosted record (the first committed declaration wins on every node).
//! openraft 0.9.25 documents this as safe, `Raft::initialize` (src/raft/mod.rs): "More than
//! one node performing `initialize()` with the same config is safe, with different config
//! will result in split brain condition"; and src/docs/cluster_control/cluster-formation.md:
//! "If this method is called on more than one node simultaneously: with the same
//! `membership`, it is safe, as the voting protocol ensures consistency". Every initialiser
//! writes the same entry at log id (term 0, node 0, index 0), and `initialize` is refused
//! (`NotAllowed`) on a node whose vote is not (0,0) or whose log is not empty
//! (engine_impl.rs `check_initialize`), so a node some leader or candidate reached in between
//! founds nothing. The preferred voter started later founds too (its directory is empty): the
//! same identical-config case, its campaign losing to the longer logs of the others.

use std::time::Duration;

/// Election timeouts a non-preferred voter waits for the group to reach it before it founds.
pub const WAIT_ELECTION_TIMEOUTS: u64 = 3;

/// What this start knows of the tenant's directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Directory {
    /// The hosted record was not marked `opened` before this start. Not a condition (review
    /// s29 M-B: it turned the fallback off for a node restarted during its wait, for no
    /// safety the other fields and openraft's refusal do not give); only logged.
    pub first_open: bool,
    /// Lost since its first open here (it starts joining).
    pub lost: bool,
    /// Its joining marker stands.
    pub marked: bool,
}

/// How long `me` waits before it founds `tenant`'s group with `voters`, or None where it
/// never does: it is the preferred voter (it founds at its start), not a voter, or its
/// directory is lost or marked joining. Whether this is the directory's first open does not
/// matter: a store that stands holds whatever vote this node granted, and `initialize` is
/// refused over a vote or a log (`run`), so a restart during the wait keeps the fallback.
pub fn fallback_after(
    me: u64,
    tenant: &str,
    voters: &[u64],
    election_timeout_ms: u64,
    dir: Directory,
) -> Option<Duration> {
    if dir.lost || dir.marked {
        return None;
    }
    if !dir.first_open {
        tracing::debug!(
            tenant,
            "the tenant's group was opened here before: its fallback is armed again, and              openraft refuses it if a vote or an entry stands"
        );
    }
    let preferred = super::hosted::preferred(tenant, voters)?;
    if preferred == me {
        return None;
    }
    let mut others: Vec<u64> = voters.iter().copied().filter(|v| *v != preferred).collect();
    others.sort_unstable();
    others.dedup();
    let rank = others.iter().position(|v| *v == me)?;
    let timeouts = WAIT_ELECTION_TIMEOUTS.saturating_add(u64::try_from(rank).ok()?);
    Some(Duration::from_millis(
        election_timeout_ms.saturating_mul(timeouts),
    ))
}

/// What this node's metrics show of the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub term: u64,
    pub leader: Option<u64>,
    pub last_log_index: Option<u64>,
}

/// Whether anything of the group reached this node: a candidate's vote request (granted, it
/// moved the term past 0), a leader's append (a log entry, a leader known).
pub fn contacted(seen: &Seen) -> bool {
    seen.term > 0 || seen.leader.is_some() || seen.last_log_index.is_some()
}

/// Waits `after`, watching `raft`'s metrics; founds the group with `peers` if nothing reached
/// this node by then. Ends early once anything does (or the node stops), so the handle is not
/// held longer than needed.
pub async fn run(
    raft: queenmq_raft::RaftHandle,
    tenant: String,
    peers: std::collections::BTreeMap<u64, queenmq_raft::BasicNode>,
    after: Duration,
) {
    let deadline = tokio::time::Instant::now() + after;
    let mut rx = raft.metrics();
    loop {
        let seen = {
            let m = rx.borrow_and_update();
            if m.running_state.is_err() {
                return;
            }
            Seen {
                term: m.current_term,
                leader: m.current_leader,
                last_log_index: m.last_log_index,
            }
        };
        if contacted(&seen) {
            tracing::debug!(
                tenant,
                "the tenant's group reached this node: no fallback founding"
            );
            return;
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => continue,
            Ok(Err(_)) => return,
            Err(_) => break,
        }
    }
    let voters: Vec<u64> = peers.keys().copied().collect();
    tracing::warn!(
        tenant,
        ?voters,
        waited_ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
        "nothing of the tenant's group reached this node (its preferred voter down?): founding it with the declared voters"
    );
    match raft.initialize(peers).await {
        Ok(()) => tracing::info!(
            tenant,
            "the tenant's group was founded by this node's fallback"
        ),
        // A leader or candidate reached this node meanwhile: the group stands.
        Err(e) => tracing::info!(tenant, reason = %e, "the tenant's group was not founded here"),
    }
}

#[cfg(test)]
#[path = "founding_fallback_tests.rs"]
mod tests;
