//! The multi-node flag is sticky (review s12 F6): a membership naming a second node, from any
//! source, refuses reclamation for good, whatever a later membership or restart shows.

use std::collections::BTreeSet;
use std::io::Cursor;

use openraft::storage::RaftStateMachine;
use openraft::{BasicNode, ChangeMembers, ErrorSubject, SnapshotMeta};

use crate::log_store::LogStore;
use crate::meta;
use crate::state_machine::StateMachine;
use crate::types::{log_id, Membership, StoredMembership};

use super::fixtures::{filled_node, filled_then_stopped, reclaim, restart_with, Recorder};

/// A follower that installs a snapshot naming two nodes stops reclaiming at once, with no
/// restart and no append in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_installed_multi_node_snapshot_refuses_reclamation_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = filled_then_stopped(dir.path()).await;
    let (last, term) = log.last().unwrap();

    let log_store = LogStore::open(log.clone(), store.clone()).unwrap();
    let (mut sm, _gone) = StateMachine::open(Recorder::new(None), store.clone()).unwrap();
    assert!(log_store.reclaimable_bytes(60) > 0, "the control");
    assert_eq!(log_store.reclaim_refusal(), None);

    let at = Some(log_id(term, last));
    let two = Membership::new(vec![BTreeSet::from([1, 2])], ());
    let meta = SnapshotMeta {
        last_log_id: at,
        last_membership: StoredMembership::new(at, two),
        snapshot_id: "from-the-leader".to_string(),
    };
    sm.install_snapshot(&meta, Box::new(Cursor::new(vec![1])))
        .await
        .unwrap();

    assert_eq!(log_store.reclaimable_bytes(60), 0);
    assert_eq!(log_store.reclaim_refusal(), Some("multi_node"));
    let ls = log_store.clone();
    let deleted = tokio::task::spawn_blocking(move || ls.reclaim_upto(60))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(deleted, 0);
    tokio::task::spawn_blocking(move || log_store.stop())
        .await
        .unwrap();
}

/// A start whose log still holds a membership naming node 2 under a later single-node one:
/// node 2 is a member until the later one commits, so the start (or the replay applying the
/// {1, 2} entry) refuses reclamation, and it stays refused once {1} is committed and after
/// another restart. The stored facts are those of a build that predates the sticky key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_multi_node_membership_under_a_single_node_one_refuses_reclamation() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store, node) = filled_node(dir.path()).await;
    let single: StoredMembership = meta::get(&store, meta::MEMBERSHIP, ErrorSubject::StateMachine)
        .unwrap()
        .unwrap();
    let (added, _) = node.add_learner(2, BasicNode::default()).await.unwrap();
    let removed = ChangeMembers::RemoveNodes(BTreeSet::from([2]));
    let (removed_at, _) = node.change_membership(removed, false).await.unwrap();
    assert!(removed_at > added);
    node.shutdown().await.unwrap();
    drop(node);

    // As a build before the sticky key leaves it after a crash with the committed id saved
    // just below the {1, 2} entry: the state machine stored {1} from index 0, so openraft
    // finds both later memberships in the log, {1, 2} at `added` and {1} at `removed_at`,
    // and nothing says a second node was ever named.
    let below = added - 1;
    let below_term = log.term_of(below).unwrap();
    meta::put(
        &store,
        meta::MEMBERSHIP,
        &single,
        ErrorSubject::StateMachine,
    )
    .unwrap();
    meta::put(
        &store,
        meta::COMMITTED,
        &Some(log_id(below_term, below)),
        ErrorSubject::Store,
    )
    .unwrap();
    meta::put(&store, meta::MULTI_NODE, &false, ErrorSubject::Store).unwrap();

    let node = restart_with(&log, &store, Recorder::new(None)).await;
    let m = node.raft().metrics().borrow().membership_config.clone();
    assert_eq!(m.membership().nodes().count(), 1, "{m:?}");
    assert_eq!(node.reclaimable_bytes(u64::MAX), 0);
    assert_eq!(reclaim(&node, u64::MAX).await, 0);
    assert!(
        meta::multi_node_noted(&store).unwrap(),
        "sticky from now on"
    );
    node.shutdown().await.unwrap();
    drop(node);

    let node = restart_with(&log, &store, Recorder::new(None)).await;
    assert_eq!(reclaim(&node, u64::MAX).await, 0);
    node.shutdown().await.unwrap();
}
