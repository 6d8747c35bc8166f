//! A snapshot staged through a running node's log store (steps 2-3): its appends (so no
//! proposal is acknowledged), reclamation and a second install are refused until the group is
//! reopened, and the reopen (the start-up step, then the log store's open) finds the
//! sender's records, horizon and checkpoint.

use std::collections::BTreeSet;
use std::sync::Arc;

use openraft::SnapshotMeta;
use queenmq_storage::{
    finish_interrupted_install, DiskDataDir, FileBackend, IoBackend, LogOptions, SegmentLog,
    SnapshotReceiver, StorageError,
};

use super::fixtures::{fill, open_small_segments, start_fresh};
use crate::log_store::LogStore;
use crate::meta;
use crate::types::{log_id, Membership, StoredMembership};
use crate::SnapshotReader;

fn small() -> LogOptions {
    LogOptions {
        segment_bytes: 4096,
        ..LogOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_staged_install_holds_reclamation_until_the_reopen_finishes_it() {
    // The sender: 120 entries, a checkpoint at the last with run floor 60.
    let leader_dir = tempfile::tempdir().unwrap();
    let (log, store) = open_small_segments(leader_dir.path());
    let node = start_fresh(&log, &store).await;
    fill(&node, &log).await;
    let (applied, term) = log.last().unwrap();
    let state: Vec<u8> = (0..9000u32).map(|i| (i * 3) as u8).collect();
    store
        .save_checkpoint_with_floor(applied, term, 60, |sink| sink.write(&state))
        .unwrap();
    let ls = node.log_store().clone();
    let source = tokio::task::spawn_blocking(move || ls.snapshot_source(applied))
        .await
        .unwrap()
        .unwrap();
    let mut reader = SnapshotReader::new(source);

    // The receiver: a node of its own, short of A, the stream written into its data directory.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let (flog, fstore) = open_small_segments(&root);
    let receive = || {
        let files: Arc<dyn IoBackend> = Arc::new(FileBackend::new(&root).unwrap());
        SnapshotReceiver::create(files, 1 << 20, Box::new(|_| Ok(()))).unwrap()
    };
    let mut rx = receive();
    super::snapshot_stream::pump(&mut reader, &mut rx, 5000).await;
    rx.finish().unwrap();
    drop(reader);
    node.shutdown().await.unwrap();

    let follower = start_fresh(&flog, &fstore).await;
    follower.propose(b"before".to_vec()).await.unwrap();
    let fls = follower.log_store().clone();
    assert_eq!(fls.reclaim_refusal(), None);
    let at = Some(log_id(term, applied));
    let meta = SnapshotMeta {
        last_log_id: at,
        last_membership: StoredMembership::new(at, Membership::new(vec![BTreeSet::from([1])], ())),
        snapshot_id: "from-the-leader".to_string(),
    };
    let (s, m, r) = (fls.clone(), meta.clone(), root.clone());
    let staged = tokio::task::spawn_blocking(move || {
        s.stage_install(&DiskDataDir::new(&r).unwrap(), small(), &m, 1)
    })
    .await
    .unwrap()
    .unwrap();
    assert!(staged.switched);
    assert!(fls.install_staged());
    assert_eq!(fls.reclaim_refusal(), Some("installing"));
    assert_eq!(fls.reclaimable_bytes(applied), 0);

    // openraft's purge of the replaced log, run by this incarnation after the stage, leaves
    // the installed horizon (written, the reopen read below the installed records: the s28
    // CI failure "try to get log at index 18 but got None").
    let mut p = fls.clone();
    openraft::storage::RaftLogStorage::purge(&mut p, log_id(1, 2))
        .await
        .unwrap();
    let purged: Option<crate::types::RaftLogId> =
        meta::get(&fstore, meta::PURGED, openraft::ErrorSubject::Logs).unwrap();
    assert_eq!(
        purged, at,
        "a purge after the stage moved the installed horizon"
    );
    // Nor does a membership this incarnation applies from its replaced log (review s29 snap
    // H1): the reopen must run on the snapshot's.
    let (mut sm, _gone) = crate::state_machine::StateMachine::open(
        super::fixtures::Recorder::new(None),
        fstore.clone(),
    )
    .unwrap();
    let older = Membership::new(vec![BTreeSet::from([1, 2])], ());
    let entry = crate::types::Entry {
        log_id: log_id(1, 3),
        payload: openraft::EntryPayload::Membership(older),
    };
    openraft::storage::RaftStateMachine::apply(&mut sm, vec![entry])
        .await
        .unwrap();
    let stored: Option<StoredMembership> =
        meta::get(&fstore, meta::MEMBERSHIP, openraft::ErrorSubject::Logs).unwrap();
    assert_eq!(
        stored.as_ref(),
        Some(&meta.last_membership),
        "a membership applied after the stage replaced the snapshot's"
    );
    let history = crate::membership_history::read(&fstore).unwrap();
    assert_eq!(history, vec![meta.last_membership.clone()]);
    drop(sm);

    // A second install before the reopen is refused, and the first one's log stays.
    let (s, m, r) = (fls.clone(), meta.clone(), root.clone());
    let again = tokio::task::spawn_blocking(move || {
        s.stage_install(&DiskDataDir::new(&r).unwrap(), small(), &m, 1)
    })
    .await
    .unwrap();
    assert!(
        matches!(again, Err(StorageError::InstallPending { .. })),
        "{again:?}"
    );
    assert!(root.join("log-incoming").is_dir());

    // An entry appended now would be acknowledged and then lost with the replaced log.
    let before = flog.last();
    let refused = follower.propose(b"after".to_vec()).await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(flog.last(), before);

    // The window between the stage's commit of `raft/installing` and the in-memory flag (set
    // when the gate drops, after the reclaim gate was released): a purge there sees no flag,
    // and its horizons are still the replaced log's, so only the committed row tells it of the
    // stage (review s29 snap L1). Driven through this store, not a second one on the same log
    // (review s30 L6); last, as nothing after it may rely on the flag.
    fls.forget_staged_flag();
    assert!(!fls.install_staged());
    let mut p = fls.clone();
    openraft::storage::RaftLogStorage::purge(&mut p, log_id(1, 2))
        .await
        .unwrap();
    let purged: Option<crate::types::RaftLogId> =
        meta::get(&fstore, meta::PURGED, openraft::ErrorSubject::Logs).unwrap();
    assert_eq!(
        purged, at,
        "a purge that only the committed row tells of the stage moved the horizon"
    );

    // The reopen: the group and its log closed, the start-up step, the stores opened again.
    let _stopped_on_the_refused_append = follower.shutdown().await;
    drop(follower);
    drop(fls);
    drop(flog);
    let finished = finish_interrupted_install(&DiskDataDir::new(&root).unwrap(), &fstore)
        .unwrap()
        .unwrap();
    assert_eq!((finished.applied_index, finished.switch), (applied, true));
    let (flog, _) = SegmentLog::open(&root.join("log"), small()).unwrap();
    assert_eq!(flog.first_index(), Some(60));
    assert_eq!(flog.last(), Some((applied, term)));
    assert_eq!(flog.read(60).unwrap(), log.read(60).unwrap());
    let flog = Arc::new(flog);
    let fls = LogStore::open(flog.clone(), fstore.clone()).unwrap();
    assert_eq!(fls.reclaim_refusal(), None);
    let purged: Option<crate::types::RaftLogId> =
        meta::get(&fstore, meta::PURGED, openraft::ErrorSubject::Logs).unwrap();
    assert_eq!(purged, at);
    let cp = fstore.load_checkpoint().unwrap().unwrap();
    assert_eq!((cp.applied_index, cp.state), (applied, state));
    tokio::task::spawn_blocking(move || fls.stop())
        .await
        .unwrap();
}

/// Review s22 H1 and H2 through the log store: a snapshot at or below the committed index is
/// refused (the node is past it), a stage refused for any reason opens the append gate again,
/// so the group goes on proposing, and the log and the checkpoint are as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_stage_leaves_the_node_appending() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let (log, store) = open_small_segments(&root);
    let node = start_fresh(&log, &store).await;
    for i in 0..5u8 {
        node.propose(vec![i]).await.unwrap();
    }
    let ls = node.log_store().clone();
    let (last, term) = log.last().unwrap();
    let stage_at = |index: u64| {
        let (s, r) = (ls.clone(), root.clone());
        let at = Some(log_id(term, index));
        let meta = SnapshotMeta {
            last_log_id: at,
            last_membership: StoredMembership::new(
                at,
                Membership::new(vec![BTreeSet::from([1])], ()),
            ),
            snapshot_id: "refused".to_string(),
        };
        tokio::task::spawn_blocking(move || {
            s.stage_install(&DiskDataDir::new(&r).unwrap(), small(), &meta, 1)
        })
    };
    let committed = ls.committed().unwrap().index;
    assert!(committed >= 3, "{committed}");
    let err = stage_at(3).await.unwrap().unwrap_err();
    assert!(
        matches!(&err, StorageError::SnapshotRefused { reason, .. }
            if reason.contains(&format!("committed index {committed} already"))),
        "{err}"
    );
    assert!(!ls.install_staged());
    node.propose(b"after the refusal".to_vec()).await.unwrap();

    // Past the committed index but with no stream received: refused by the storage stage.
    let err = stage_at(last + 100).await.unwrap().unwrap_err();
    assert!(!matches!(err, StorageError::InstallPending { .. }), "{err}");
    assert!(!ls.install_staged());
    assert_eq!(ls.reclaim_refusal(), None);
    node.propose(b"after the second refusal".to_vec())
        .await
        .unwrap();
    assert_eq!(log.last().unwrap().0, last + 2);
    assert_eq!(store.installing().unwrap(), None);
    node.shutdown().await.unwrap();
}
