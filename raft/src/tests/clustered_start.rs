//! `RaftNode::start_clustered` over loopback TCP: the lowest id initialises an empty group,
//! the others wait to be contacted, nobody waits to lead, followers apply what the leader
//! commits, and a restart on a directory that holds the group does not initialise it again.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use openraft::BasicNode;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::backend::{SegmentLog, StateStore};
use crate::tcp_server::Groups;
use crate::{ClusterStart, RaftConfig, RaftNode, TcpNetwork, VoteGate, CLUSTER_ENTRY_MAX};

use super::fixtures::{open_stores, Recorder};
use super::tcp_cluster::{limits, listen, server_config, GROUP, TOKEN};

/// A safety bound on every wait, never an assertion about time.
const BOUND: Duration = Duration::from_secs(30);

pub(super) struct Member {
    pub(super) node: RaftNode,
    recorder: Arc<Recorder>,
    pub(super) _stop: oneshot::Sender<()>,
}

async fn start(
    dir: &Path,
    id: u64,
    listener: TcpListener,
    peers: &BTreeMap<u64, BasicNode>,
) -> Member {
    start_timed(dir, id, listener, peers, 100, 1000).await
}

/// A member with heartbeat `hb_ms` and the broker's election range (`eto_ms` to twice it).
pub(super) async fn start_timed(
    dir: &Path,
    id: u64,
    listener: TcpListener,
    peers: &BTreeMap<u64, BasicNode>,
    hb_ms: u64,
    eto_ms: u64,
) -> Member {
    let stores = open_stores(&dir.join(id.to_string()));
    start_on(stores, id, listener, peers, hb_ms, eto_ms).await
}

/// `start_timed` on given stores (a log on an injected backend).
pub(super) async fn start_on(
    stores: (Arc<SegmentLog>, Arc<StateStore>),
    id: u64,
    listener: TcpListener,
    peers: &BTreeMap<u64, BasicNode>,
    hb_ms: u64,
    eto_ms: u64,
) -> Member {
    start_gated(stores, id, listener, peers, (hb_ms, eto_ms), None).await
}

/// `start_on` as the broker starts a member: with `cluster_join` or not, and a vote gate
/// shared by the listener, the network and the node.
pub(super) async fn start_gated(
    stores: (Arc<SegmentLog>, Arc<StateStore>),
    id: u64,
    listener: TcpListener,
    peers: &BTreeMap<u64, BasicNode>,
    timing: (u64, u64),
    gated: Option<(bool, VoteGate)>,
) -> Member {
    let m = start_unread(stores, id, listener, peers, timing, gated.clone())
        .await
        .unwrap();
    // As the broker does: a joining member reads its horizon from the leader (review s28 M-3).
    if let Some((_, g)) = gated.filter(|(_, g)| g.needs_horizon()) {
        let net = TcpNetwork::new(id, GROUP, TOKEN, limits()).with_gate(g.clone());
        tokio::spawn(crate::read_join_horizon(g, net, peers.clone()));
    }
    m
}

/// `start_gated` without the horizon read a joining member starts (a test starts it itself,
/// review s33 L-4); a refused start is returned.
pub(super) async fn start_unread(
    (log, store): (Arc<SegmentLog>, Arc<StateStore>),
    id: u64,
    listener: TcpListener,
    peers: &BTreeMap<u64, BasicNode>,
    (hb_ms, eto_ms): (u64, u64),
    gated: Option<(bool, VoteGate)>,
) -> Result<Member, crate::error::RaftError> {
    let recorder = Recorder::new(None);
    let cfg = RaftConfig {
        node_id: id,
        heartbeat_ms: hb_ms,
        election_timeout_min_ms: eto_ms,
        election_timeout_max_ms: eto_ms * 2,
    };
    // The listener must answer before the start returns: a follower is ready only once a
    // leader reached it. Its group is registered as soon as openraft runs.
    let groups = Groups::default();
    let stop = listen(listener, server_config(id, BOUND, 64), groups.clone());
    let mut net = TcpNetwork::new(id, GROUP, TOKEN, limits());
    let (join, gate) = match gated {
        Some((join, gate)) => (join, Some(gate)),
        None => (false, None),
    };
    if let Some(g) = &gate {
        net = net.with_gate(g.clone());
    }
    let start = ClusterStart {
        peers: peers.clone(),
        initialise: id == 1 && !join,
        entry_limit: CLUSTER_ENTRY_MAX,
        join,
        gate: gate.clone(),
        snapshots: None,
    };
    let node =
        RaftNode::start_clustered(
            cfg,
            log,
            store,
            recorder.clone(),
            net,
            start,
            |raft| match gate {
                Some(g) => groups.add_member(GROUP, raft, g),
                None => groups.add(GROUP, raft),
            },
        )
        .await?;
    Ok(Member {
        node,
        recorder,
        _stop: stop,
    })
}

/// Loopback listeners for nodes 1, 2 and 3, and the members they make.
pub(super) async fn three_listeners() -> (BTreeMap<u64, TcpListener>, BTreeMap<u64, BasicNode>) {
    let mut listeners = BTreeMap::new();
    let mut nodes = BTreeMap::new();
    for id in 1..=3u64 {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        nodes.insert(id, BasicNode::new(l.local_addr().unwrap().to_string()));
        listeners.insert(id, l);
    }
    (listeners, nodes)
}

pub(super) async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + BOUND;
    while !f() {
        assert!(tokio::time::Instant::now() < deadline, "waited for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lowest_id_initialises_and_followers_apply() {
    let dir = tempfile::tempdir().unwrap();
    let (mut listeners, nodes) = three_listeners().await;
    let addr1 = nodes[&1].addr.clone();
    let (l1, l2, l3) = (
        listeners.remove(&1).unwrap(),
        listeners.remove(&2).unwrap(),
        listeners.remove(&3).unwrap(),
    );
    let (m1, m2, m3) = tokio::join!(
        start(dir.path(), 1, l1, &nodes),
        start(dir.path(), 2, l2, &nodes),
        start(dir.path(), 3, l3, &nodes),
    );
    let members = [&m1, &m2, &m3];
    wait_until("one leader known to all", || {
        let leaders: Vec<_> = members.iter().map(|m| m.node.status().leader).collect();
        leaders[0].is_some() && leaders.iter().all(|l| *l == leaders[0])
    })
    .await;
    let leader = m1.node.status().leader.unwrap();
    let lead = members[(leader - 1) as usize];
    let mut last = 0;
    for i in 0..20u32 {
        last = lead
            .node
            .propose(format!("e{i}").into_bytes())
            .await
            .unwrap()
            .0;
    }
    let follower = members.iter().find(|m| m.node.id() != leader).unwrap();
    assert!(matches!(
        follower.node.propose(b"no".to_vec()).await,
        Err(crate::RaftError::NotLeader { leader: Some(l) }) if l == leader
    ));
    wait_until("every member applied the writes", || {
        members
            .iter()
            .all(|m| m.node.status().applied >= Some(last))
    })
    .await;
    for m in members {
        assert_eq!(m.recorder.applied().len(), 20);
        assert_eq!(m.node.status().term, lead.node.status().term);
    }

    // Node 1 again on its own directory, told to initialise as at first start: it rejoins and
    // catches up; the group keeps its three voters (nothing initialised again).
    let Member { node, _stop, .. } = m1;
    node.shutdown().await.unwrap();
    drop((node, _stop));
    wait_until("a leader among 2 and 3", || {
        [&m2, &m3].iter().any(|m| m.node.status().role == "leader")
    })
    .await;
    let lead = [&m2, &m3]
        .into_iter()
        .find(|m| m.node.status().role == "leader")
        .unwrap();
    let more = lead.node.propose(b"after".to_vec()).await.unwrap().0;
    // The old listener lets go of the port once its task has seen the stop.
    let deadline = tokio::time::Instant::now() + BOUND;
    let l1 = loop {
        match TcpListener::bind(addr1.as_str()).await {
            Ok(l) => break l,
            Err(e) => assert!(tokio::time::Instant::now() < deadline, "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let back = start(dir.path(), 1, l1, &nodes).await;
    wait_until("the restarted node caught up", || {
        back.node.status().applied >= Some(more)
    })
    .await;
    assert_eq!(back.node.status().role, "follower");
    let voters: Vec<u64> = back
        .node
        .raft_handle()
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .voter_ids()
        .collect();
    assert_eq!(voters, vec![1, 2, 3]);
    for m in [&back, &m2, &m3] {
        m.node.shutdown().await.unwrap();
    }
}

/// Proposes `n` entries through `m` one after another; the last one's index.
pub(super) async fn propose(m: &Member, n: u32) -> u64 {
    let mut last = 0;
    for i in 0..n {
        last = m
            .node
            .propose(format!("e{i}").into_bytes())
            .await
            .unwrap()
            .0;
    }
    last
}
