//! Reclamation and new nodes under snapshot catch-up (`LogStore::bound_by_raft_purge`): under a
//! multi-node membership reclamation stops at openraft's purge horizon and a widening change
//! holds it off (review s26 snap M5); a node may be added once the log was deleted only up to
//! that horizon, and is still refused once it was deleted past it (review s26 snap M2).

use openraft::storage::RaftLogStorage;

use super::fixtures::{filled_node, reclaim};
use crate::meta;
use crate::types::log_id;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_multi_node_membership_reclamation_stops_at_openrafts_purge() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store, node) = filled_node(dir.path()).await;
    let ls = node.log_store().clone();
    ls.bound_by_raft_purge();
    meta::note_multi_node(&store).unwrap();
    // Nothing purged by openraft yet: nothing is reclaimed.
    assert_eq!(ls.reclaim_refusal(), None);
    assert_eq!(reclaim(&node, 100).await, 0);
    let first = log.first_index().unwrap();
    let (_, term) = log.last().unwrap();
    let mut purging = ls.clone();
    purging.purge(log_id(term, 60)).await.unwrap();
    let freed = reclaim(&node, 100).await;
    assert!(freed > 0);
    // Every entry above openraft's horizon is still there, the ones a peer may be sent.
    let now_first = log.first_index().unwrap();
    assert!(
        now_first > first && now_first <= 61,
        "{first} -> {now_first}"
    );
    // A widening change holds reclamation off, and it is allowed: only purged entries are gone.
    let widening = ls.begin_widening().await.unwrap();
    assert_eq!(ls.reclaim_refusal(), Some("widening"));
    assert_eq!(node.reclaimable_bytes(100), 0);
    drop(widening);
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_is_refused_only_when_the_log_was_deleted_past_openrafts_purge() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _store, node) = filled_node(dir.path()).await;
    let ls = node.log_store().clone();
    let (_, term) = log.last().unwrap();
    let mut purging = ls.clone();
    purging.purge(log_id(term, 40)).await.unwrap();
    // Without snapshot catch-up any deletion refuses, as before.
    assert!(ls.begin_widening().await.is_err());
    ls.bound_by_raft_purge();
    drop(ls.begin_widening().await.unwrap());
    // A single-node reclamation is not bounded by openraft's purge: past it, refused again.
    assert!(reclaim(&node, 100).await > 0);
    assert!(log.first_index().unwrap() > 41);
    assert!(ls.begin_widening().await.is_err());
    node.shutdown().await.unwrap();
}
