//! openraft's own snapshot and purge, run by the incarnation that staged an install (review
//! s29 snap L1, the s28 CI failure "try to get log at index … but got None"): after the stage
//! the state machine offers the installed checkpoint at `A` as openraft's snapshot, and
//! openraft purges the replaced log up to `A` less the entries it keeps. That purge must not
//! move the installed horizon back under the installed records, or the reopen cannot start.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::metrics::WaitError;
use openraft::{BasicNode, ErrorSubject, ServerState};
use queenmq_storage::{finish_interrupted_install, DiskDataDir, SegmentLog};

use super::fixtures::{open_small_segments, Recorder};
use super::snapshot_inbox::{inbox_of, leader_stream, send_all};
use crate::backend::StateStore;
use crate::meta;
use crate::network::NoPeers;
use crate::types::{log_id, Membership, RaftLogId, StoredMembership};
use crate::{ClusterStart, RaftConfig, RaftError, RaftNode, SnapshotFeed, CLUSTER_ENTRY_MAX};

/// Entries openraft keeps below its snapshot: fewer than `A`, so its purge after the stage
/// reaches into the replaced log.
const KEEP: u64 = 100;

/// Bound on each wait for the node: alone, an election or a snapshot and purge takes well
/// under a second, but on a loaded 2-core CI host tokio's workers can stall for seconds, and a
/// 20 s bound was close to what such a host was seen to need.
const WAIT: Duration = Duration::from_secs(60);

/// A lone voter catching peers up by snapshot, as the broker starts one with the key on;
/// `checkpoint` is what its engine restored (the installed checkpoint after the reopen).
async fn start_fed(
    log: &Arc<SegmentLog>,
    store: &Arc<StateStore>,
    checkpoint: Option<(u64, u64)>,
) -> Result<RaftNode, RaftError> {
    let start = ClusterStart {
        peers: BTreeMap::from([(1, BasicNode::default())]),
        initialise: true,
        entry_limit: CLUSTER_ENTRY_MAX,
        join: false,
        gate: None,
        snapshots: Some(SnapshotFeed::new("purge-after-stage", KEEP)),
    };
    RaftNode::start_clustered(
        RaftConfig::default(),
        log.clone(),
        store.clone(),
        Recorder::new(checkpoint),
        NoPeers,
        start,
        |_| {},
    )
    .await
}

/// `start_clustered` returns before the lone voter has elected itself.
async fn until_leader(node: &RaftNode) {
    let led = node
        .raft_handle()
        .wait(Some(WAIT))
        .state(ServerState::Leader, "the lone voter leads")
        .await;
    assert!(led.is_ok(), "{led:?} {:?}", node.status());
}

fn purged(store: &StateStore) -> Option<RaftLogId> {
    meta::get(store, meta::PURGED, ErrorSubject::Logs).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_purging_after_a_stage_leaves_the_installed_horizon_and_the_reopen_starts() {
    let leader_dir = tempfile::tempdir().unwrap();
    let (applied, term, _state, stream, leader_log) = leader_stream(leader_dir.path()).await;

    // The follower: 40 entries of its own, short of `A` but past `A - KEEP`.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let (log, store) = open_small_segments(&root);
    let node = start_fed(&log, &store, None).await.unwrap();
    until_leader(&node).await;
    for i in 0..40u8 {
        node.propose(vec![i]).await.unwrap();
    }
    let last = log.last().unwrap().0;
    assert!(last < applied && last + KEEP > applied, "{last} {applied}");
    assert_eq!(purged(&store), None);

    let inbox = inbox_of(&node, &root);
    let at = Some(log_id(term, applied));
    let meta = openraft::SnapshotMeta {
        last_log_id: at,
        last_membership: StoredMembership::new(
            at,
            Membership::new(vec![std::collections::BTreeSet::from([1])], ()),
        ),
        snapshot_id: "from-the-leader".to_string(),
    };
    send_all(&inbox, &node, &meta, &stream).await.unwrap();
    assert!(node.log_store().install_staged());
    assert_eq!(purged(&store), at, "the stage's commit");

    // openraft builds its snapshot (the installed checkpoint, offered as durable) and purges.
    // The state machine reads what it offers at most every 500 ms: a snapshot asked for
    // sooner may build nothing, so it is asked again after each 600 ms without a purge.
    let raft = node.raft_handle();
    let until = Instant::now() + WAIT;
    let p = loop {
        raft.trigger().snapshot().await.unwrap();
        let waited = raft
            .wait(Some(Duration::from_millis(600)))
            .metrics(|m| m.purged.is_some(), "openraft purged")
            .await;
        match waited {
            Ok(m) => break m.purged,
            Err(WaitError::Timeout(..)) => assert!(
                Instant::now() < until,
                "openraft never purged: snapshot {:?}",
                raft.metrics().borrow().snapshot
            ),
            Err(e) => panic!("{e}"),
        }
    };
    assert!(p.is_some_and(|p| p.index < applied), "{p:?}");
    assert_eq!(
        purged(&store),
        at,
        "openraft's purge moved the installed horizon"
    );

    // The reopen: stopped, the start-up step, started again on the installed log.
    let _ = node.shutdown().await;
    drop((node, inbox, raft, log));
    finish_interrupted_install(&DiskDataDir::new(&root).unwrap(), &store)
        .unwrap()
        .unwrap();
    drop(store);
    let (log, store) = open_small_segments(&root);
    let node = start_fed(&log, &store, Some((applied, term)))
        .await
        .expect("the reopen after openraft's purge starts");
    assert!(
        node.status().applied >= Some(applied),
        "{:?}",
        node.status()
    );
    until_leader(&node).await;
    assert_eq!(log.read(60).unwrap(), leader_log.read(60).unwrap());
    node.propose(b"after the reopen".to_vec()).await.unwrap();
    node.shutdown().await.unwrap();
}
