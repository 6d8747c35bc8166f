//! Two survivors with the same election timeout and slow vote requests: openraft 0.9 alone
//! splits their votes in every round for ever (its timeout is drawn once per node); the
//! election nudge (`election_nudge`) lets one of them win.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use openraft::BasicNode;

use crate::{ClusterStart, RaftConfig, RaftNode, CLUSTER_ENTRY_MAX};

use super::fixtures::{open_stores, Recorder};
use super::router::Router;

/// A safety bound on every wait, never an assertion about time.
const BOUND: Duration = Duration::from_secs(60);

async fn start(dir: &Path, id: u64, router: &Router, peers: &BTreeMap<u64, BasicNode>) -> RaftNode {
    let (log, store) = open_stores(&dir.join(id.to_string()));
    // min..max holds one value: every node draws the same election timeout.
    let cfg = RaftConfig {
        node_id: id,
        heartbeat_ms: 100,
        election_timeout_min_ms: 1000,
        election_timeout_max_ms: 1001,
    };
    let r = router.clone();
    let initial = ClusterStart {
        peers: peers.clone(),
        initialise: id == 1,
        entry_limit: CLUSTER_ENTRY_MAX,
        join: false,
        gate: None,
        snapshots: None,
    };
    RaftNode::start_clustered(
        cfg,
        log,
        store,
        Recorder::new(None),
        router.clone(),
        initial,
        move |raft| r.add(id, raft),
    )
    .await
    .unwrap()
}

async fn wait_for_leader(nodes: &[&RaftNode], what: &str) -> u64 {
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        if let Some(l) = nodes.iter().find(|n| n.status().role == "leader") {
            return l.id();
        }
        assert!(tokio::time::Instant::now() < deadline, "waited for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survivors_with_equal_timeouts_and_slow_votes_elect_a_leader() {
    let dir = tempfile::tempdir().unwrap();
    let router = Router::default();
    let nodes: BTreeMap<u64, BasicNode> = (1..=3).map(|id| (id, BasicNode::default())).collect();
    let (n1, n2, n3) = tokio::join!(
        start(dir.path(), 1, &router, &nodes),
        start(dir.path(), 2, &router, &nodes),
        start(dir.path(), 3, &router, &nodes),
    );
    let all = [n1, n2, n3];
    let first = wait_for_leader(&all.iter().collect::<Vec<_>>(), "the first leader").await;
    let (gone, survivors): (Vec<RaftNode>, Vec<RaftNode>) =
        all.into_iter().partition(|n| n.id() == first);

    // Longer than the 150 ms tick that parts the survivors' firing moments: each has voted
    // for itself before the other's request arrives.
    router.delay_votes(Duration::from_millis(200));
    router.remove(first);
    gone[0].shutdown().await.unwrap();

    let second = wait_for_leader(
        &survivors.iter().collect::<Vec<_>>(),
        "a leader among the survivors",
    )
    .await;
    assert_ne!(second, first);
    let lead = survivors.iter().find(|n| n.id() == second).unwrap();
    lead.propose(b"after".to_vec()).await.unwrap();
    for n in &survivors {
        n.shutdown().await.unwrap();
    }
}
