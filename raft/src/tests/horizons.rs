//! openraft's horizon and the durable one (review s10 §9): a read of an index reclamation
//! deleted behind openraft's back fails instead of answering from a later index; an openraft
//! purge never moves the durable horizon back; reclamation stops once a second node is named.

use std::sync::Arc;

use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, ErrorSubject, RaftLogReader};

use crate::backend::{SegmentLog, StateStore};
use crate::log_store::LogStore;
use crate::meta;
use crate::types::{log_id, RaftLogId};
use crate::RaftNode;

use super::fixtures::{fill, open_small_segments, reclaim, restart_with, start_fresh, Recorder};

/// A node with 120 application entries over several 4 KiB segments.
async fn filled(log: &Arc<SegmentLog>, store: &Arc<StateStore>) -> RaftNode {
    let node = start_fresh(log, store).await;
    fill(&node, log).await;
    node
}

async fn restart(log: &Arc<SegmentLog>, store: &Arc<StateStore>) -> RaftNode {
    restart_with(log, store, Recorder::new(None)).await
}

fn durable(store: &StateStore) -> Option<RaftLogId> {
    meta::get(store, meta::PURGED, ErrorSubject::Logs).unwrap()
}

fn log_store(node: &RaftNode) -> LogStore {
    node.log_store().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_of_a_reclaimed_index_fails_and_one_above_it_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_small_segments(dir.path());
    let node = filled(&log, &store).await;
    assert!(reclaim(&node, 60).await > 0);
    let first = log.first_index().unwrap();
    let mut r = log_store(&node);

    for range in [0..first + 1, first - 1..first + 2, 1..2] {
        let err = r.try_get_log_entries(range.clone()).await.unwrap_err();
        assert!(err.to_string().contains("reclaimed"), "{range:?}: {err}");
    }
    let got = r.try_get_log_entries(first..first + 2).await.unwrap();
    let indexes: Vec<u64> = got.iter().map(|e| e.log_id.index).collect();
    assert_eq!(indexes, vec![first, first + 1]);
    assert!(r.try_get_log_entries(3..3).await.unwrap().is_empty());
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openraft_purge_below_the_reclaimed_horizon_keeps_the_durable_one() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_small_segments(dir.path());
    let node = filled(&log, &store).await;
    reclaim(&node, 60).await;
    let first = log.first_index().unwrap();
    let reclaimed = durable(&store).unwrap();
    assert_eq!(reclaimed.index, first - 1);

    let mut w = log_store(&node);
    w.purge(log_id(reclaimed.leader_id.term, 5)).await.unwrap();
    assert_eq!(durable(&store), Some(reclaimed), "never moved back");
    // openraft now knows 0..=5 gone: a read from 0 starts at 6, which was reclaimed.
    assert!(w.try_get_log_entries(0..first + 1).await.is_err());
    let state = w.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id.map(|p| p.index), Some(5));

    // Purging openraft's horizon up to the durable one makes the rest readable from there.
    w.purge(reclaimed).await.unwrap();
    let got = w.try_get_log_entries(0..first + 1).await.unwrap();
    assert_eq!(got.first().map(|e| e.log_id.index), Some(first));
    assert_eq!(durable(&store), Some(reclaimed));
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclamation_is_refused_once_a_second_node_is_named_and_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_small_segments(dir.path());
    let node = filled(&log, &store).await;
    // The learner is unreachable (no transport yet); the single voter still commits the
    // membership entry on its own.
    node.add_learner(2, BasicNode::default()).await.unwrap();
    let segments = log.segment_count();
    assert_eq!(
        node.reclaimable_bytes(u64::MAX),
        0,
        "agrees with the refusal"
    );
    assert_eq!(reclaim(&node, u64::MAX).await, 0);
    assert_eq!(log.segment_count(), segments);
    assert_eq!(durable(&store), None);
    node.shutdown().await.unwrap();
    drop(node);
    drop((log, store));

    let (log, store) = open_small_segments(dir.path());
    let node = restart(&log, &store).await;
    assert_eq!(reclaim(&node, u64::MAX).await, 0);
    assert_eq!(log.segment_count(), segments);
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_membership_still_reclaims_after_a_restart() {
    // The control for the test above: the same steps without the learner do free segments.
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_small_segments(dir.path());
    let node = filled(&log, &store).await;
    node.shutdown().await.unwrap();
    drop(node);
    let node = restart(&log, &store).await;
    assert!(node.reclaimable_bytes(60) > 0);
    assert!(reclaim(&node, 60).await > 0);
    node.shutdown().await.unwrap();
}

/// A kill -9 inside `purge` past the last record: the horizon (1, 171) is committed, the
/// records ..=121 are not deleted yet. What the crash leaves is written here directly, since
/// `purge` commits the horizon before anything else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_after_a_crash_between_the_purge_horizon_and_the_truncation_continues() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_small_segments(dir.path());
    let node = filled(&log, &store).await;
    let last = log.last().unwrap().0;
    assert!(last < 171, "{last}");
    node.shutdown().await.unwrap();
    drop(node);
    meta::put(
        &store,
        meta::PURGED,
        &Some(log_id(1, 171)),
        ErrorSubject::Logs,
    )
    .unwrap();

    let node = restart_with(&log, &store, Recorder::new(Some((171, 1)))).await;
    let (index, _) = node.propose(b"after".to_vec()).await.unwrap();
    assert!(index > 171, "{index}");
    assert!(log.first_index().unwrap() > 171, "stale records deleted");
    node.shutdown().await.unwrap();
    drop(node);

    // And the start after that one finds nothing left to finish.
    let node = restart_with(&log, &store, Recorder::new(Some((171, 1)))).await;
    node.propose(b"again".to_vec()).await.unwrap();
    node.shutdown().await.unwrap();
}

/// openraft's start-up builds a snapshot when a purge horizon exists and none is current:
/// after a reclamation that would be a full engine encode inside `Raft::new`, held for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_after_a_reclamation_encodes_no_engine_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_small_segments(dir.path());
    let node = filled(&log, &store).await;
    assert!(reclaim(&node, 60).await > 0);
    let (last, term) = log.last().unwrap();
    node.shutdown().await.unwrap();
    drop(node);

    // The engine's checkpoint covers the log (reclamation needs one at or above its bound).
    let h = Recorder::new(Some((last, term)));
    let node = restart_with(&log, &store, h.clone()).await;
    assert_eq!(h.snapshots.load(std::sync::atomic::Ordering::SeqCst), 0);
    node.propose(b"after".to_vec()).await.unwrap();
    node.shutdown().await.unwrap();
}
