//! What a clustered start refuses or survives on a directory it did not expect: a single-node
//! directory reused under `peers` (review s15 A1), a stored committed id past the log's end
//! (A3), an entry limit over the append budget (A5).

use std::collections::BTreeMap;
use std::time::Duration;

use openraft::{BasicNode, ErrorSubject};

use crate::network::NoPeers;
use crate::{ClusterStart, RaftConfig, RaftError, RaftNode, CLUSTER_ENTRY_MAX};

use super::fixtures::{open_stores, Recorder};

/// A safety bound on the start, never an assertion about time.
const BOUND: Duration = Duration::from_secs(30);

fn peers(ids: &[u64]) -> BTreeMap<u64, BasicNode> {
    ids.iter()
        .map(|i| (*i, BasicNode::new(format!("127.0.0.1:{}", 7100 + i))))
        .collect()
}

async fn clustered(
    dir: &std::path::Path,
    id: u64,
    start: ClusterStart,
) -> Result<RaftNode, RaftError> {
    let (log, store) = open_stores(dir);
    let cfg = RaftConfig {
        node_id: id,
        ..RaftConfig::default()
    };
    let started =
        RaftNode::start_clustered(cfg, log, store, Recorder::new(None), NoPeers, start, |_| {});
    tokio::time::timeout(BOUND, started)
        .await
        .expect("the start returned")
}

/// A single-node broker's directory: membership {1}, a few entries.
async fn single_node_dir(dir: &std::path::Path) {
    let (log, store) = open_stores(dir);
    let node = RaftNode::start_single(RaftConfig::default(), log, store, Recorder::new(None))
        .await
        .unwrap();
    for i in 0..5u32 {
        node.propose(format!("e{i}").into_bytes()).await.unwrap();
    }
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_directory_cannot_join_a_cluster() {
    for id in [1, 2] {
        let dir = tempfile::tempdir().unwrap();
        single_node_dir(dir.path()).await;
        let start = ClusterStart {
            peers: peers(&[1, 2, 3]),
            initialise: id == 1,
            entry_limit: CLUSTER_ENTRY_MAX,
            join: false,
            gate: None,
            snapshots: None,
        };
        let err = match clustered(dir.path(), id, start).await {
            Ok(_) => panic!("node {id} started on a single-node directory"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("peers names"), "{err}");
        // The refused start stopped everything: the directory opens again.
        let again = ClusterStart {
            peers: peers(&[1]),
            initialise: true,
            entry_limit: CLUSTER_ENTRY_MAX,
            join: false,
            gate: None,
            snapshots: None,
        };
        if id == 1 {
            let node = clustered(dir.path(), 1, again).await.unwrap();
            node.shutdown().await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_committed_past_the_log_end_does_not_hang_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let one = || ClusterStart {
        peers: peers(&[1]),
        initialise: true,
        entry_limit: CLUSTER_ENTRY_MAX,
        join: false,
        gate: None,
        snapshots: None,
    };
    let node = clustered(dir.path(), 1, one()).await.unwrap();
    // A clustered start returns before the lone voter has elected itself (an election
    // timeout); a propose before that is refused `NotLeader`.
    super::clustered_start::wait_until("node 1 to lead", || node.status().role == "leader").await;
    for i in 0..5u32 {
        node.propose(format!("e{i}").into_bytes()).await.unwrap();
    }
    let last = node.status().last_log_index.unwrap();
    node.shutdown().await.unwrap();
    drop(node);
    {
        // A committed id beyond the log: what a cut-off tail leaves behind.
        let (_log, store) = open_stores(dir.path());
        let term = 1;
        crate::meta::put(
            &store,
            crate::meta::COMMITTED,
            &Some(crate::types::log_id(term, last + 100)),
            ErrorSubject::Store,
        )
        .unwrap();
    }
    let node = clustered(dir.path(), 1, one()).await.unwrap();
    assert!(node.status().applied >= Some(last));
    node.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_entry_limit_over_the_append_budget_opens_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let start = ClusterStart {
        peers: peers(&[1, 2, 3]),
        initialise: true,
        entry_limit: 256 << 20,
        join: false,
        gate: None,
        snapshots: None,
    };
    let err = match clustered(dir.path(), 1, start).await {
        Ok(_) => panic!("started with a 256 MiB entry limit"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("max_record_bytes"), "{err}");
}
