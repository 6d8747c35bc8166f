//! The guards between membership changes and reclamation, each with a test that fails when
//! the guard is removed (review s13 F3, F5).

use std::collections::{BTreeMap, BTreeSet};

use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, ChangeMembers, EntryPayload};

use crate::entry_codec;
use crate::log_store::LogStore;
use crate::meta;
use crate::types::{log_id, Entry, Membership};

use super::fixtures::{filled_node, filled_then_stopped, reclaim, restart_with, Recorder};

/// A change openraft refuses before appending anything (here: a voter that is not a
/// learner) leaves reclamation on, now and after a restart (review s13 F3: it used to switch
/// reclamation off for good on a single voter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_membership_change_leaves_reclamation_on() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store, node) = filled_node(dir.path()).await;
    let r = node
        .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([7])), false)
        .await;
    assert!(r.is_err(), "{r:?}");
    let m = node.raft().metrics().borrow().membership_config.clone();
    assert_eq!(m.membership().nodes().count(), 1, "{m:?}");
    assert_eq!(node.log_store().reclaim_refusal(), None);
    assert!(!meta::multi_node_noted(&store).unwrap());
    node.shutdown().await.unwrap();
    drop(node);

    let node = restart_with(&log, &store, Recorder::new(None)).await;
    assert_eq!(node.log_store().reclaim_refusal(), None);
    assert!(reclaim(&node, 60).await > 0);
    node.shutdown().await.unwrap();
}

/// From `begin_widening` until its guard is dropped (the caller holds it across openraft's
/// call), a reclamation deletes nothing: none can complete between the horizon check and the
/// membership's append (review s13 F5, the race the guard closes). Afterwards, with no
/// membership appended, reclamation runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_reclamation_runs_while_a_widening_change_is_in_hand() {
    let dir = tempfile::tempdir().unwrap();
    let (_log, _store, node) = filled_node(dir.path()).await;
    let widening = node.log_store().begin_widening().await.unwrap();
    assert_eq!(node.log_store().reclaim_refusal(), Some("widening"));
    assert_eq!(node.reclaimable_bytes(60), 0);
    assert_eq!(reclaim(&node, 60).await, 0);
    drop(widening);
    assert_eq!(node.log_store().reclaim_refusal(), None);
    assert!(reclaim(&node, 60).await > 0);
    // And now that something was reclaimed, a widening change is refused.
    assert!(node.log_store().begin_widening().await.is_err());
    node.shutdown().await.unwrap();
}

/// A membership naming node 2 that sits in the log above the committed index at start, and
/// is never applied (node 1 is not a voter of it, so the start fails before any election):
/// only the start-up check of the effective membership can refuse reclamation (review s13
/// F5; the old test's replay applied the entry, which set the key anyway).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_up_check_notes_an_unapplied_multi_node_membership() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = filled_then_stopped(dir.path()).await;
    let (last, term) = log.last().unwrap();
    let voters_2 = Membership::new(
        vec![BTreeSet::from([2])],
        BTreeMap::from([(1, BasicNode::default())]),
    );
    let entry = Entry {
        log_id: log_id(term, last + 1),
        payload: EntryPayload::Membership(voters_2),
    };
    log.append(last + 1, term, &entry_codec::encode(&entry).unwrap())
        .unwrap();
    assert!(!meta::multi_node_noted(&store).unwrap());

    let started = crate::RaftNode::start_single(
        crate::RaftConfig::default(),
        log.clone(),
        store.clone(),
        Recorder::new(None),
    )
    .await;
    assert!(
        started.is_err(),
        "node 1 is not a voter of the effective membership"
    );
    assert!(
        meta::multi_node_noted(&store).unwrap(),
        "the start-up check noted the effective membership"
    );
}

/// An append at or below openraft's horizon (review s12 F7): the stored term is dropped
/// (already purged), another term is refused, and nothing is stored either way. Through the
/// function `append` stores with, not the pure `at_horizon` alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_below_the_horizon_with_another_term_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = filled_then_stopped(dir.path()).await;
    let term = log.term_of(5).unwrap();
    let last = log.last();

    let mut log_store = LogStore::open(log.clone(), store.clone()).unwrap();
    log_store.purge(log_id(term, 5)).await.unwrap();
    let blank = |term, index| Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Blank,
    };
    assert!(log_store
        .records_to_store(vec![blank(term + 1, 5)])
        .is_err());
    assert!(log_store
        .records_to_store(vec![blank(term + 1, 3)])
        .is_err());
    let (records, widens) = log_store
        .records_to_store(vec![blank(term, 4), blank(term, 5)])
        .unwrap();
    assert!(records.is_empty() && !widens);
    assert_eq!(log.last(), last);
    tokio::task::spawn_blocking(move || log_store.stop())
        .await
        .unwrap();
}
