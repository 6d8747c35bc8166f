//! Two nodes in one process over `Router` (review s12 F1): openraft replicates for real, so a
//! learner added after a reclamation would make the leader read entries it deleted.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use openraft::{BasicNode, Raft};

use crate::backend::SegmentLog;
use crate::log_store::LogStore;
use crate::state_machine::StateMachine;
use crate::types::TypeConfig;
use crate::{RaftConfig, RaftError, RaftNode};

use super::fixtures::{fill, open_small_segments, reclaim, Recorder};
use super::router::Router;

const WAIT: Option<Duration> = Some(Duration::from_secs(20));

/// Node 1, the single voter, on `dir/1`, reachable through `router`, with 120 entries.
async fn leader(dir: &Path, router: &Router) -> (RaftNode, Arc<SegmentLog>) {
    let (log, store) = open_small_segments(&dir.join("1"));
    let node = RaftNode::start_with(
        RaftConfig::default(),
        log.clone(),
        store,
        Recorder::new(None),
        router.clone(),
    )
    .await
    .unwrap();
    router.add(1, node.raft().clone());
    fill(&node, &log).await;
    (node, log)
}

/// Node 2 on `dir/2`: empty, not initialised, registered with `router`.
async fn empty_node(dir: &Path, router: &Router) -> Raft<TypeConfig> {
    let (log, store) = open_small_segments(&dir.join("2"));
    let log_store = LogStore::open(log, store.clone()).unwrap();
    let (sm, _gone) = StateMachine::open(Recorder::new(None), store).unwrap();
    let cfg = RaftConfig {
        node_id: 2,
        ..RaftConfig::default()
    };
    let raft = Raft::new(
        2,
        Arc::new(cfg.to_openraft().unwrap()),
        router.clone(),
        log_store,
        sm,
    )
    .await
    .unwrap();
    router.add(2, raft.clone());
    raft
}

/// A leader that reclaimed part of its log, and an empty node 2 it can reach.
async fn reclaimed_leader_and_empty_node() -> (tempfile::TempDir, RaftNode, Raft<TypeConfig>) {
    let dir = tempfile::tempdir().unwrap();
    let router = Router::default();
    let (node, _log) = leader(dir.path(), &router).await;
    assert!(reclaim(&node, 60).await > 0);
    let learner = empty_node(dir.path(), &router).await;
    (dir, node, learner)
}

/// The control: with nothing reclaimed the learner is sent the whole log and applies it, so
/// the network of the test below does replicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_added_before_any_reclamation_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let router = Router::default();
    let (node, log) = leader(dir.path(), &router).await;
    let learner = empty_node(dir.path(), &router).await;

    let (index, _) = node.add_learner(2, BasicNode::default()).await.unwrap();
    learner
        .wait(WAIT)
        .applied_index_at_least(Some(index), "learner caught up")
        .await
        .unwrap();
    assert_eq!(reclaim(&node, u64::MAX).await, 0, "never again with a peer");
    assert!(log.segment_count() > 4);
    learner.shutdown().await.unwrap();
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_is_refused_after_a_reclamation_and_the_leader_stays_healthy() {
    let (_dir, node, learner) = reclaimed_leader_and_empty_node().await;

    let refused = node.add_learner(2, BasicNode::default()).await;
    assert!(
        matches!(&refused, Err(RaftError::Membership(m)) if m.contains("refused")),
        "{refused:?}"
    );
    let voters_only =
        openraft::ChangeMembers::AddVoters(BTreeMap::from([(2, BasicNode::default())]));
    assert!(matches!(
        node.change_membership(voters_only, false).await,
        Err(RaftError::Membership(_))
    ));
    // Still leading, still writing, and reclaiming (no peer was named).
    node.propose(b"after".to_vec()).await.unwrap();
    let m = node.raft().metrics().borrow().clone();
    assert!(m.running_state.is_ok(), "{:?}", m.running_state);
    assert_eq!(m.membership_config.membership().nodes().count(), 1);
    assert_eq!(node.reclaim_refusal(), None);
    learner.shutdown().await.unwrap();
    node.shutdown().await.unwrap();
}

/// Why the refusal exists: going around it (openraft's own `add_learner`) after a reclamation
/// stops the leader's Raft core, because replicating to the empty learner reads entries
/// openraft believes present and reclamation deleted. If openraft ever copes (a newer
/// version), this fails and the refusal can be revisited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn around_the_refusal_the_leader_stops_on_the_reclaimed_entries() {
    let (_dir, node, learner) = reclaimed_leader_and_empty_node().await;

    let _ = node
        .raft()
        .add_learner(2, BasicNode::default(), false)
        .await;
    let stopped = node
        .raft()
        .wait(WAIT)
        .metrics(|m| m.running_state.is_err(), "the leader's core stops")
        .await;
    assert!(stopped.is_ok(), "{stopped:?}");
    let _ = learner.shutdown().await;
    let _ = node.shutdown().await;
}
