//! How a node joining the `default` group obtains its joining horizon (`join_horizon`, review
//! s28 M-3): a commit read from the group's leader (`commit_read`), taken after this process
//! started. Every entry the node's wiped incarnation could have applied was committed before
//! the wipe, so before this read, so at or below the leader's answer; an append's commit, the
//! horizon before session 32's fix, may come from a deposed leader and lag it.
//!
//! The node asks its peers in turn (the configured `peers` and whoever the membership it
//! holds names), going next to the leader a follower names, until a leader answers; rounds
//! are spaced by a doubling backoff. Until the answer is durably written the gate refuses
//! every append (`VoteGate::before_append`), so a cluster without a reachable leader keeps
//! the node waiting, which is the point.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use openraft::BasicNode;

use crate::join_read_log::ReadLog;
use crate::rpc_codec::CommitRead;
use crate::tcp_client::TcpNetwork;
use crate::vote_gate::VoteGate;

/// The wait before the first retry round; doubled after each round up to `BACKOFF_MAX`.
const BACKOFF_FIRST: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// One ask: the leader's confirmation bound and room for the round trip.
const ASK_TTL: Duration = Duration::from_secs(7);

/// The longest leader address a follower's answer may name: a cluster address is a host
/// and a port; a longer one is not dialled.
const ADDR_MAX: usize = 255;

/// Reads the joining horizon of `gate`'s member over `net` until it is written or the
/// member's Raft core stops. `peers`: the configured voters by id, this node included.
/// `queen_join_horizon_pending` is 1 meanwhile (review s33 M-2).
pub async fn read_join_horizon(gate: VoteGate, net: TcpNetwork, peers: BTreeMap<u64, BasicNode>) {
    let ask = |id: u64, addr: String| {
        let net = net.clone();
        async move { net.commit_read(id, &addr, ASK_TTL).await }
    };
    let known = |gate: &VoteGate| {
        let mut all: BTreeMap<u64, String> = peers
            .iter()
            .map(|(id, n)| (*id, crate::member_addr::cluster_part(&n.addr).to_string()))
            .collect();
        all.extend(gate.membership_addrs());
        all
    };
    metrics::gauge!("queen_join_horizon_pending").set(1.0);
    let mut log = ReadLog::default();
    run(&gate, known, ask, BACKOFF_FIRST, &mut log).await;
    metrics::gauge!("queen_join_horizon_pending").set(0.0);
}

/// Refuses the start of a member that must read its horizon (`VoteGate::needs_horizon`)
/// while `peers` names no other node (review s33 H-1): it holds no membership either (a
/// wiped directory), so it would ask nobody, refuse every append, and never be caught up by
/// the leader, whose refused appends never turn into a snapshot. Checked again at every
/// start while the read is owed, so a restart with the old `peers` is refused too.
pub(crate) fn check_someone_to_ask(
    gate: &VoteGate,
    peers: &BTreeMap<u64, BasicNode>,
) -> Result<(), crate::error::RaftError> {
    let me = gate.me();
    if !gate.needs_horizon() || peers.keys().any(|id| *id != me) {
        return Ok(());
    }
    Err(crate::error::RaftError::Config(format!(
        "node {me} is joining the cluster (cluster_join; its joining marker stands) and must \
         read its joining horizon from the current leader before it takes any append, but \
         `peers` names no other node to ask: name at least one current member in `peers` \
         besides this node (e.g. QUEEN_PEERS=\"2=host2:7000,{me}=own:7000\"). With cluster_join \
         the others are only asked where the leader is; this node founds nothing \
         (docs/cluster.md \"Replacing a node\")"
    )))
}

/// The loop of `read_join_horizon`, over any way of asking (tests ask no network). `known`
/// gives the members' cluster addresses by id, read again each round; `log` says why a
/// round found no horizon.
pub(crate) async fn run<A, F>(
    gate: &VoteGate,
    known: impl Fn(&VoteGate) -> BTreeMap<u64, String>,
    ask: A,
    first_backoff: Duration,
    log: &mut ReadLog,
) where
    A: Fn(u64, String) -> F,
    F: Future<Output = Result<CommitRead, String>>,
{
    let me = gate.me();
    let mut backoff = first_backoff;
    loop {
        if !gate.needs_horizon() || gate.core_stopped() {
            return;
        }
        let mut addrs = known(gate);
        let mut queue: Vec<u64> = addrs.keys().copied().filter(|id| *id != me).collect();
        let nobody = queue.is_empty();
        if nobody {
            log.no_peer(me);
        }
        let mut asked = BTreeSet::new();
        // Asked from the front; a follower's named leader goes to the front.
        queue.reverse();
        while let Some(id) = queue.pop() {
            if !asked.insert(id) {
                continue;
            }
            let Some(addr) = addrs.get(&id) else {
                continue;
            };
            match ask(id, addr.clone()).await {
                Ok(CommitRead::Committed(c)) => {
                    // Not bounded: this node knows nothing yet to weigh an index against. A
                    // too-high one is the safe direction (docs/cluster.md, review s33 L-6).
                    tracing::info!(
                        node = me,
                        peer = id,
                        horizon = c,
                        "joining: a leader answered the commit read"
                    );
                    match gate.keep_read_horizon(c).await {
                        Ok(()) => return,
                        Err(e) => {
                            tracing::warn!(error = %e, "joining: the horizon read was not written; retrying");
                            break;
                        }
                    }
                }
                Ok(CommitRead::NotLeader(Some(leader))) if leader.id != me => {
                    // The follower's address for it first: the asker may not know the id (a
                    // leader added after its `peers` were written), or hold a stale address
                    // (review s33 M-1).
                    if let Some(a) = leader.addr.filter(|a| !a.is_empty() && a.len() <= ADDR_MAX) {
                        addrs.insert(leader.id, a);
                    }
                    if !asked.contains(&leader.id) && addrs.contains_key(&leader.id) {
                        queue.push(leader.id);
                    }
                }
                Ok(CommitRead::NotLeader(_)) => {}
                Err(why) => log.peer_failed(me, id, &why),
            }
        }
        if !nobody {
            tracing::info!(
                node = me,
                wait_ms = backoff.as_millis() as u64,
                "joining: no leader answered a commit read yet; appends stay refused"
            );
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::join_horizon::read_horizon;
    use crate::rpc_codec::LeaderAt;
    use std::sync::{Arc, Mutex};

    fn addrs() -> BTreeMap<u64, String> {
        (1..=4).map(|i| (i, format!("127.0.0.1:710{i}"))).collect()
    }

    /// Review s28 M-3: a stale leader's append carrying a low commit is refused (it would
    /// have set the horizon), and the horizon is the read-index a follower pointed to.
    #[tokio::test]
    async fn the_horizon_is_the_leaders_read_not_an_append() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("cluster-joining");
        let gate = VoteGate::new(4, marker.clone());
        assert!(!gate.prepare(true, true).unwrap());
        // A deposed leader's append, its commit at 3 while the group committed 90: refused.
        assert!(!gate.before_append());
        assert_eq!(read_horizon(&marker).unwrap(), None);
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        let ask = move |id: u64, _addr: String| {
            log.lock().unwrap().push(id);
            async move {
                match id {
                    // Node 1 is the deposed leader: it no longer leads and names node 3.
                    1 => Ok(CommitRead::NotLeader(Some(LeaderAt { id: 3, addr: None }))),
                    3 => Ok(CommitRead::Committed(90)),
                    _ => Err("unreachable".to_string()),
                }
            }
        };
        run(
            &gate,
            |_| addrs(),
            ask,
            Duration::from_millis(1),
            &mut ReadLog::default(),
        )
        .await;
        assert_eq!(
            *asked.lock().unwrap(),
            vec![1, 3],
            "the named leader asked next"
        );
        assert_eq!(read_horizon(&marker).unwrap(), Some(90));
        assert!(gate.before_append());
    }

    /// No leader reachable: the node keeps asking with backoff and appends stay refused; a
    /// leader appearing later ends it.
    #[tokio::test]
    async fn without_a_leader_appends_stay_refused_and_rounds_repeat() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("cluster-joining");
        let gate = VoteGate::new(4, marker.clone());
        assert!(!gate.prepare(true, true).unwrap());
        let rounds = Arc::new(Mutex::new(0u32));
        let seen = rounds.clone();
        let probe = gate.clone();
        let ask = move |id: u64, _addr: String| {
            let seen = seen.clone();
            let probe = probe.clone();
            async move {
                assert_ne!(id, 4, "asked itself");
                let mut n = seen.lock().unwrap();
                *n += 1;
                assert!(!probe.before_append(), "an append let in before the read");
                if *n < 9 {
                    Ok(CommitRead::NotLeader(None))
                } else {
                    Ok(CommitRead::Committed(7))
                }
            }
        };
        run(
            &gate,
            |_| addrs(),
            ask,
            Duration::from_millis(1),
            &mut ReadLog::default(),
        )
        .await;
        assert_eq!(*rounds.lock().unwrap(), 9, "three rounds of three peers");
        assert_eq!(read_horizon(&marker).unwrap(), Some(7));
    }

    /// Review s33 M-1: a follower names a leader the joiner's `peers` and membership do not
    /// (added after the first boot); its address comes with the answer and it is asked.
    #[tokio::test]
    async fn a_leader_unknown_to_the_joiner_is_asked_at_the_address_a_follower_names() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("cluster-joining");
        let gate = VoteGate::new(2, marker.clone());
        assert!(!gate.prepare(true, true).unwrap());
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        let ask = move |id: u64, addr: String| {
            log.lock().unwrap().push((id, addr.clone()));
            async move {
                match id {
                    3 => Ok(CommitRead::NotLeader(Some(LeaderAt {
                        id: 5,
                        addr: Some("127.0.0.1:7105".into()),
                    }))),
                    5 => Ok(CommitRead::Committed(90)),
                    _ => Err("gone".to_string()),
                }
            }
        };
        let first_boot = |_: &VoteGate| (1..=3).map(|i| (i, format!("127.0.0.1:710{i}"))).collect();
        let mut log = ReadLog::default();
        let read = run(&gate, first_boot, ask, Duration::from_millis(1), &mut log);
        tokio::time::timeout(Duration::from_secs(5), read)
            .await
            .expect("the named leader was never asked");
        assert_eq!(
            asked.lock().unwrap().last().cloned(),
            Some((5, "127.0.0.1:7105".to_string()))
        );
        assert_eq!(read_horizon(&marker).unwrap(), Some(90));
    }

    /// Review s33 M-2 (and H-1): with nobody to ask, each round is counted as such (said at
    /// warn, rate-limited), not as "no leader answered"; a membership learned later is asked.
    #[tokio::test]
    async fn with_nobody_to_ask_the_round_says_so_and_a_later_membership_is_asked() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("cluster-joining");
        let gate = VoteGate::new(4, marker.clone());
        assert!(!gate.prepare(true, true).unwrap());
        let rounds = Arc::new(Mutex::new(0u32));
        let seen = rounds.clone();
        let known = move |_: &VoteGate| {
            let mut n = seen.lock().unwrap();
            *n += 1;
            let mut all: BTreeMap<u64, String> = BTreeMap::from([(4, "me".to_string())]);
            if *n > 3 {
                all.insert(1, "127.0.0.1:7101".into());
            }
            all
        };
        let ask = |_id: u64, _addr: String| async { Ok(CommitRead::Committed(12)) };
        let mut log = ReadLog::default();
        run(&gate, known, ask, Duration::from_millis(1), &mut log).await;
        assert_eq!(log.no_peer_rounds, 3);
        assert_eq!(read_horizon(&marker).unwrap(), Some(12));
    }
}
