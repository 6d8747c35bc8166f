//! A learner caught up by a snapshot taken before it was added (its membership does not name
//! the learner; the entry adding it follows the snapshot's index), restarted after it appended
//! entries past the snapshot and before that entry: review s27 snap second pass M2 and M3. The
//! install records so in its own commit (`meta::INSTALLED_BEFORE_ADDITION`), and only that
//! record lets such a start through; the check runs before openraft (the LOW of that review).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use openraft::{BasicNode, EntryPayload, ErrorSubject, SnapshotMeta};
use queenmq_storage::{finish_interrupted_install, DiskDataDir, SegmentLog};

use super::fixtures::{open_small_segments, Recorder};
use super::snapshot_inbox::{inbox_of, leader_stream, send_all};
use crate::backend::StateStore;
use crate::entry_codec;
use crate::meta;
use crate::network::NoPeers;
use crate::state_machine::StateMachine;
use crate::types::{log_id, Entry, Membership, RaftLogId, StoredMembership};
use crate::{ClusterStart, RaftConfig, RaftError, RaftNode, CLUSTER_ENTRY_MAX};

const LEARNER: u64 = 4;

fn peers(ids: &[u64]) -> BTreeMap<u64, BasicNode> {
    ids.iter().map(|i| (*i, BasicNode::default())).collect()
}

/// The learner as the broker starts a member without `cluster_join`: never initialising.
async fn start_learner(
    log: &Arc<SegmentLog>,
    store: &Arc<StateStore>,
) -> Result<RaftNode, RaftError> {
    let cfg = RaftConfig {
        node_id: LEARNER,
        ..RaftConfig::default()
    };
    let start = ClusterStart {
        peers: peers(&[1, 2, 3, LEARNER]),
        initialise: false,
        entry_limit: CLUSTER_ENTRY_MAX,
        join: false,
        gate: None,
        snapshots: None,
    };
    RaftNode::start_clustered(
        cfg,
        log.clone(),
        store.clone(),
        Recorder::new(None),
        NoPeers,
        start,
        |_| {},
    )
    .await
}

fn meta_of(applied: u64, term: u64, voters: &[u64]) -> SnapshotMeta<u64, BasicNode> {
    let at = Some(log_id(term, applied));
    let voters: BTreeSet<u64> = voters.iter().copied().collect();
    SnapshotMeta {
        last_log_id: at,
        last_membership: StoredMembership::new(at, Membership::new(vec![voters], ())),
        snapshot_id: "before-the-addition".to_string(),
    }
}

/// Streams a checkpoint of `voters` {1, 2, 3} into a fresh learner through its inbox, stops
/// it, and finishes the install as the reopen does. Returns the reopened stores and `A`.
async fn installed_learner(root: &Path) -> (Arc<SegmentLog>, Arc<StateStore>, u64, u64) {
    let leader_dir = tempfile::tempdir().unwrap();
    let (applied, term, _state, stream, _leader_log) = leader_stream(leader_dir.path()).await;
    let (log, store) = open_small_segments(root);
    let learner = start_learner(&log, &store).await.unwrap();
    let inbox = inbox_of(&learner, root);
    send_all(
        &inbox,
        &learner,
        &meta_of(applied, term, &[1, 2, 3]),
        &stream,
    )
    .await
    .unwrap();
    assert!(learner.log_store().install_staged());
    learner.shutdown().await.unwrap();
    drop((learner, inbox, log));
    finish_interrupted_install(&DiskDataDir::new(root).unwrap(), &store)
        .unwrap()
        .unwrap();
    drop(store);
    let (log, store) = open_small_segments(root);
    (log, store, applied, term)
}

fn append(log: &SegmentLog, index: u64, term: u64, payload: EntryPayload<crate::TypeConfig>) {
    let entry = Entry {
        log_id: log_id(term, index),
        payload,
    };
    log.append(index, term, &entry_codec::encode(&entry).unwrap())
        .unwrap();
}

fn purged(store: &StateStore) -> Option<RaftLogId> {
    meta::get(store, meta::PURGED, ErrorSubject::Logs).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_installed_before_its_addition_restarts_after_appending_past_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let (log, store, applied, term) = installed_learner(&root).await;
    assert!(meta::installed_before_addition(&store).unwrap());
    // The leader's appends after `A`, up to but not including the entry adding the learner.
    append(
        &log,
        applied + 1,
        term,
        EntryPayload::Normal(b"after A".to_vec()),
    );
    append(&log, applied + 2, term, EntryPayload::Blank);
    assert!(log.last().unwrap().0 > purged(&store).unwrap().index);

    // Killed there: the restart holds a membership not naming it, and is let through.
    let learner = start_learner(&log, &store).await.unwrap();
    let m = learner
        .raft_handle()
        .metrics()
        .borrow()
        .membership_config
        .clone();
    assert!(m.membership().get_node(&LEARNER).is_none(), "{m:?}");
    assert!(meta::installed_before_addition(&store).unwrap());
    learner.shutdown().await.unwrap();
    drop(learner);

    // The entry adding it arrives: the next start names it and ends the exemption.
    let with_learner = Membership::new(
        vec![BTreeSet::from([1, 2, 3])],
        BTreeMap::from([(LEARNER, BasicNode::default())]),
    );
    append(
        &log,
        applied + 3,
        term,
        EntryPayload::Membership(with_learner.clone()),
    );
    // Appended, not known committed: the exemption stays (a new leader may cut it off).
    let learner = start_learner(&log, &store).await.unwrap();
    assert!(meta::installed_before_addition(&store).unwrap());
    learner.shutdown().await.unwrap();
    drop(learner);
    // Applied (as the state machine records it): the next start ends the exemption.
    let applied_m = StoredMembership::new(Some(log_id(term, applied + 3)), with_learner);
    meta::put(
        &store,
        meta::MEMBERSHIP,
        &applied_m,
        ErrorSubject::StateMachine,
    )
    .unwrap();
    let learner = start_learner(&log, &store).await.unwrap();
    assert!(!meta::installed_before_addition(&store).unwrap());
    learner.shutdown().await.unwrap();
}

/// Without the install's record the same directory is refused (a removed member's, or one
/// whose log openraft purged), and refused before openraft runs: its log and horizon are as
/// they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_install_s_record_the_same_directory_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let (log, store, applied, term) = installed_learner(&root).await;
    append(
        &log,
        applied + 1,
        term,
        EntryPayload::Normal(b"after A".to_vec()),
    );
    meta::put(
        &store,
        meta::INSTALLED_BEFORE_ADDITION,
        &false,
        ErrorSubject::Store,
    )
    .unwrap();
    let before = (log.first_index(), log.last(), purged(&store));
    let e = start_learner(&log, &store).await.err().unwrap().to_string();
    assert!(e.contains("does not name this node (4)"), "{e}");
    assert_eq!((log.first_index(), log.last(), purged(&store)), before);
}

/// Review s28 snap M1: the exemption ends when the entry adding the node is applied, not at
/// the node's next start. Applied through the state machine, a membership naming the learner
/// clears the marker at once; a later one without it (the node removed) is then refused at
/// the next start, as any removed member's directory is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applying_the_addition_ends_the_exemption_so_a_removed_learner_is_refused() {
    use openraft::storage::RaftStateMachine;

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let (log, store, applied, term) = installed_learner(&root).await;
    assert!(meta::installed_before_addition(&store).unwrap());
    let with_learner = Membership::new(
        vec![BTreeSet::from([1, 2, 3])],
        BTreeMap::from([(LEARNER, BasicNode::default())]),
    );
    let without = Membership::new(vec![BTreeSet::from([1, 2, 3])], ());
    let entry = |index: u64, m: &Membership| Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Membership(m.clone()),
    };
    append(
        &log,
        applied + 1,
        term,
        EntryPayload::Membership(with_learner.clone()),
    );
    append(
        &log,
        applied + 2,
        term,
        EntryPayload::Membership(without.clone()),
    );

    let (mut sm, _gone) =
        StateMachine::open(Recorder::new(Some((applied, term))), store.clone()).unwrap();
    sm.for_node(LEARNER);
    sm.apply(vec![entry(applied + 1, &with_learner)])
        .await
        .unwrap();
    assert!(
        !meta::installed_before_addition(&store).unwrap(),
        "cleared by the apply, with no restart"
    );
    sm.apply(vec![entry(applied + 2, &without)]).await.unwrap();
    drop(sm);

    let e = start_learner(&log, &store).await.err().unwrap().to_string();
    assert!(e.contains("does not name this node (4)"), "{e}");
}
