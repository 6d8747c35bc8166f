//! Review s21 membership M5 and M6 over loopback TCP, members started as the broker starts
//! them (a `VoteGate` shared by the listener, the network and the node): a wiped voter
//! rejoining under its old id grants no vote and calls no election; a fresh node added as a
//! learner votes once it has caught up; a voter removed while down and restarted on its old
//! directory is told it is no member and stops campaigning.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use openraft::error::RPCError;
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::VoteRequest;
use openraft::{BasicNode, Vote};
use tokio::net::TcpListener;

use crate::{Change, TcpNetwork, VoteGate};

use super::clustered_start::{propose, start_gated, three_listeners, wait_until, Member};
use super::fixtures::open_stores;
use super::tcp_cluster::{limits, GROUP, TOKEN};

const BOUND: Duration = Duration::from_secs(30);
pub(super) const TIMING: (u64, u64) = (100, 1000);

pub(super) fn gate(dir: &Path, id: u64) -> VoteGate {
    VoteGate::new(id, dir.join(format!("{id}-joining")))
}

pub(super) async fn member(
    dir: &Path,
    id: u64,
    l: TcpListener,
    peers: &BTreeMap<u64, BasicNode>,
    join: bool,
) -> (Member, VoteGate) {
    let g = gate(dir, id);
    let stores = open_stores(&dir.join(id.to_string()));
    let m = start_gated(stores, id, l, peers, TIMING, Some((join, g.clone()))).await;
    (m, g)
}

/// Three gated members and the leader's id.
pub(super) async fn three(dir: &Path) -> (BTreeMap<u64, Member>, BTreeMap<u64, BasicNode>, u64) {
    let (mut ls, nodes) = three_listeners().await;
    let (l1, l2, l3) = (
        ls.remove(&1).unwrap(),
        ls.remove(&2).unwrap(),
        ls.remove(&3).unwrap(),
    );
    let ((m1, _), (m2, _), (m3, _)) = tokio::join!(
        member(dir, 1, l1, &nodes, false),
        member(dir, 2, l2, &nodes, false),
        member(dir, 3, l3, &nodes, false),
    );
    let members = BTreeMap::from([(1, m1), (2, m2), (3, m3)]);
    wait_until("one leader known to all", || {
        let leaders: BTreeSet<_> = members.values().map(|m| m.node.status().leader).collect();
        leaders.len() == 1 && !leaders.contains(&None)
    })
    .await;
    let lead = members[&1].node.status().leader.unwrap();
    (members, nodes, lead)
}

async fn rebind(addr: &str) -> TcpListener {
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => return l,
            Err(e) => assert!(tokio::time::Instant::now() < deadline, "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(super) async fn stop(m: Member) {
    let Member { node, _stop, .. } = m;
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t13_m5_a_wiped_voter_rejoining_under_its_old_id_never_votes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut members, nodes, lead) = three(dir.path()).await;
    propose(&members[&lead], 20).await;
    let victim = (1..=3).find(|i| *i != lead).unwrap();
    let other = (1..=3).find(|i| *i != lead && *i != victim).unwrap();
    stop(members.remove(&victim).unwrap()).await;
    std::fs::remove_dir_all(dir.path().join(victim.to_string())).unwrap();

    let l = rebind(&nodes[&victim].addr).await;
    let (wiped, g) = member(dir.path(), victim, l, &nodes, true).await;
    assert!(g.joining(), "an empty directory started to join is joining");
    let more = propose(&members[&lead], 20).await;
    // The group holds it as a voter: it acknowledges no append that would make it hold that
    // membership (review s22 membership H2), so it takes none of the log, however long (a
    // generous bound), stays joining, and refuses a vote request a member could have sent it,
    // before openraft sees it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        wiped.node.status().applied < Some(more),
        "the wiped voter took the log: {:?}",
        wiped.node.status()
    );
    assert!(g.joining());
    let term = members[&lead].node.status().term;
    let mut net = TcpNetwork::new(other, GROUP, TOKEN, limits());
    let mut c = net.new_client(victim, &nodes[&victim]).await;
    let last = wiped.node.raft().metrics().borrow().last_applied;
    let req = VoteRequest {
        vote: Vote::new(term + 5, other),
        last_log_id: last,
    };
    match c.vote(req, RPCOption::new(BOUND)).await {
        Err(RPCError::Unreachable(u)) => {
            assert!(u.to_string().contains("grants no vote"), "{u}")
        }
        r => panic!("the wiped voter answered a vote request: {r:?}"),
    }

    // The leader gone, the other survivor cannot win the wiped voter's vote, and the wiped
    // voter calls no election: no leader among the two, however long (a generous bound).
    stop(members.remove(&lead).unwrap()).await;
    let survivor = members.remove(&other).unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    for m in [&survivor, &wiped] {
        let s = m.node.status();
        assert_ne!(s.role, "leader", "{s:?}");
    }
    assert_ne!(wiped.node.status().role, "candidate");
    stop(survivor).await;
    stop(wiped).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t13_m5_a_fresh_learner_votes_once_caught_up() {
    let dir = tempfile::tempdir().unwrap();
    let (members, mut nodes, lead) = three(dir.path()).await;
    propose(&members[&lead], 20).await;
    let l4 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr4 = l4.local_addr().unwrap().to_string();
    nodes.insert(4, BasicNode::new(addr4.clone()));
    let (m4, g4) = member(dir.path(), 4, l4, &nodes, true).await;
    assert!(g4.joining());
    let add = Change::AddLearner {
        id: 4,
        cluster_addr: addr4,
        http: "http://127.0.0.1:1".into(),
        kafka: None,
    };
    members[&lead]
        .node
        .change(add, BTreeMap::new())
        .await
        .unwrap();
    wait_until("node 4 caught up as a learner", || !g4.joining()).await;
    assert!(!dir.path().join("4-joining").exists());
    // Its first append's horizon was kept, and outlives the marker (`join_horizon`).
    let horizon = crate::join_horizon::read_horizon(&dir.path().join("4-joining")).unwrap();
    assert!(horizon.is_some(), "no joining horizon was written");
    members[&lead]
        .node
        .change(Change::Promote(BTreeSet::from([4])), BTreeMap::new())
        .await
        .unwrap();
    wait_until("node 4 a voter", || {
        m4.node
            .raft()
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .any(|v| v == 4)
    })
    .await;
    for (_, m) in members {
        stop(m).await;
    }
    stop(m4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t13_m6_a_removed_voter_back_on_its_old_directory_stops_campaigning() {
    let dir = tempfile::tempdir().unwrap();
    let (mut members, nodes, lead) = three(dir.path()).await;
    propose(&members[&lead], 10).await;
    let victim = (1..=3).find(|i| *i != lead).unwrap();
    stop(members.remove(&victim).unwrap()).await;
    members[&lead]
        .node
        .change(Change::Remove(victim), BTreeMap::new())
        .await
        .unwrap();
    let term = members[&lead].node.status().term;
    propose(&members[&lead], 10).await;

    let l = rebind(&nodes[&victim].addr).await;
    let (back, g) = member(dir.path(), victim, l, &nodes, false).await;
    assert!(!g.joining());
    wait_until("the removed voter told it is no member", || g.removed()).await;
    // Its campaigns moved no term of the live members, and the leader still leads.
    let s = members[&lead].node.status();
    assert_eq!((s.role, s.term), ("leader", term), "{s:?}");
    assert_ne!(back.node.status().role, "leader");
    stop(back).await;
    for (_, m) in members {
        stop(m).await;
    }
}
