//! Review s23 M1 and M2 through the log store and the state machine: a stage refused by a
//! check that reads nothing holds no append back, an append that meets a deciding stage waits
//! for its outcome rather than stopping the group, and an installed snapshot's membership is
//! saved before the engine's state moves to its index.

use std::collections::BTreeSet;
use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

use openraft::storage::RaftStateMachine;
use openraft::{ErrorSubject, SnapshotMeta};
use queenmq_storage::{
    DiskDataDir, FileBackend, IoBackend, LogOptions, SnapshotReceiver, StateStore, StorageError,
    SNAPSHOT_HEADER_LEN, SNAPSHOT_INCOMING,
};

use super::fixtures::{fill, open_small_segments, start_fresh};
use crate::apply::ApplyHandler;
use crate::log_store::LogStore;
use crate::meta;
use crate::state_machine::StateMachine;
use crate::types::{log_id, Membership, RaftLogId, StoredMembership};
use crate::SnapshotReader;

/// Cannot pass falsely: an append that did not wait would have answered within it.
const QUIET: Duration = Duration::from_millis(300);

fn small() -> LogOptions {
    LogOptions {
        segment_bytes: 4096,
        ..LogOptions::default()
    }
}

fn one_voter(at: Option<RaftLogId>, id: &str) -> SnapshotMeta<u64, openraft::BasicNode> {
    SnapshotMeta {
        last_log_id: at,
        last_membership: StoredMembership::new(at, Membership::new(vec![BTreeSet::from([1])], ())),
        snapshot_id: id.to_string(),
    }
}

fn stage(
    ls: &LogStore,
    root: &std::path::Path,
    meta: SnapshotMeta<u64, openraft::BasicNode>,
) -> tokio::task::JoinHandle<Result<queenmq_storage::Installed, StorageError>> {
    let (s, r) = (ls.clone(), root.to_path_buf());
    tokio::task::spawn_blocking(move || {
        s.stage_install(&DiskDataDir::new(&r).unwrap(), small(), &meta, 1)
    })
}

/// A stale snapshot (at or below the committed index) is refused while an append holds its
/// pass: the refusal never waited for appends, and its stream file is deleted (M3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_snapshot_is_refused_without_holding_appends_back() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let (log, store) = open_small_segments(&root);
    let node = start_fresh(&log, &store).await;
    for i in 0..5u8 {
        node.propose(vec![i]).await.unwrap();
    }
    let ls = node.log_store().clone();
    std::fs::write(root.join(SNAPSHOT_INCOMING), b"a stream").unwrap();
    let pass = ls.hold_append().await.unwrap();
    let (_, term) = log.last().unwrap();
    let refused = tokio::time::timeout(
        Duration::from_secs(60),
        stage(&ls, &root, one_voter(Some(log_id(term, 3)), "stale")),
    )
    .await
    .expect("the refusal waited for the append in flight")
    .unwrap()
    .unwrap_err();
    assert!(
        matches!(&refused, StorageError::SnapshotRefused { reason, .. } if reason.contains("committed index")),
        "{refused}"
    );
    assert!(!root.join(SNAPSHOT_INCOMING).exists());
    assert!(!ls.appends_closing());
    drop(pass);
    node.propose(b"after".to_vec()).await.unwrap();
    node.shutdown().await.unwrap();
}

/// A stage refused after it closed the gate (the state in the file does not match its
/// header): the append that met it waited, then went on, and the group stayed up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_meeting_a_deciding_stage_waits_and_goes_on_after_a_refusal() {
    // The sender: 120 entries, a checkpoint at the last with run floor 60.
    let leader_dir = tempfile::tempdir().unwrap();
    let (log, store) = open_small_segments(leader_dir.path());
    let node = start_fresh(&log, &store).await;
    fill(&node, &log).await;
    let (applied, term) = log.last().unwrap();
    let state: Vec<u8> = (0..9000u32).map(|i| (i * 5) as u8).collect();
    store
        .save_checkpoint_with_floor(applied, term, 60, |sink| sink.write(&state))
        .unwrap();
    let ls = node.log_store().clone();
    let source = tokio::task::spawn_blocking(move || ls.snapshot_source(applied))
        .await
        .unwrap()
        .unwrap();
    let mut reader = SnapshotReader::new(source);

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let (flog, fstore) = open_small_segments(&root);
    let files: Arc<dyn IoBackend> = Arc::new(FileBackend::new(&root).unwrap());
    let mut rx = SnapshotReceiver::create(files, 1 << 20, Box::new(|_| Ok(()))).unwrap();
    super::snapshot_stream::pump(&mut reader, &mut rx, 5000).await;
    rx.finish().unwrap();
    drop(reader);
    node.shutdown().await.unwrap();
    // A byte of the state flipped: only step 3's CRC compare, after the close, sees it.
    let path = root.join(SNAPSHOT_INCOMING);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[SNAPSHOT_HEADER_LEN + 100] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();

    let follower = Arc::new(start_fresh(&flog, &fstore).await);
    follower.propose(b"before".to_vec()).await.unwrap();
    let fls = follower.log_store().clone();
    let pass = fls.hold_append().await.unwrap();
    let staged = stage(
        &fls,
        &root,
        one_voter(Some(log_id(term, applied)), "damaged"),
    );
    while !fls.appends_closing() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let f = follower.clone();
    let waiting = tokio::spawn(async move { f.propose(b"during".to_vec()).await });
    tokio::time::sleep(QUIET).await;
    assert!(
        !waiting.is_finished(),
        "the append was answered while the stage decided"
    );
    drop(pass);
    let err = staged.await.unwrap().unwrap_err();
    assert!(
        matches!(&err, StorageError::SnapshotRefused { reason, .. } if reason.contains("crc32c")),
        "{err}"
    );
    waiting.await.unwrap().unwrap();
    assert!(!fls.install_staged());
    follower.propose(b"after".to_vec()).await.unwrap();
    assert_eq!(fstore.installing().unwrap(), None);
    assert!(!path.exists());
    follower.shutdown().await.unwrap();
}

/// An engine that saves its checkpoint the moment its state is restored, as the periodic save
/// may: the generation records the `raft/membership` of that moment.
struct SavesOnRestore {
    store: Arc<StateStore>,
}

impl ApplyHandler for SavesOnRestore {
    fn apply(&self, _: u64, _: u64, _: &[u8]) -> Result<(), String> {
        Ok(())
    }
    fn checkpointed(&self) -> Option<(u64, u64)> {
        None
    }
    fn snapshot(&self) -> (Option<(u64, u64)>, Vec<u8>) {
        (None, Vec::new())
    }
    fn restore(&self, index: u64, term: u64, bytes: &[u8]) -> Result<(), String> {
        self.store
            .save_checkpoint_with_floor(index, term, index + 1, |sink| sink.write(bytes))
            .map_err(|e| e.to_string())
    }
}

/// M1: a save between the engine's restore and the membership's save would record the old
/// membership with the generation at A, naming the wrong voters to whoever it is sent to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_save_right_after_the_restore_records_the_snapshots_membership() {
    let dir = tempfile::tempdir().unwrap();
    let (_log, store) = open_small_segments(dir.path());
    let old = StoredMembership::new(
        Some(log_id(1, 10)),
        Membership::new(vec![BTreeSet::from([1])], ()),
    );
    meta::put(&store, meta::MEMBERSHIP, &old, ErrorSubject::StateMachine).unwrap();
    let handler = Arc::new(SavesOnRestore {
        store: store.clone(),
    });
    let (mut sm, _gone) = StateMachine::open(handler, store.clone()).unwrap();
    let at = Some(log_id(3, 500));
    let new = StoredMembership::new(
        Some(log_id(3, 300)),
        Membership::new(vec![BTreeSet::from([1, 2, 3])], ()),
    );
    let snapshot = SnapshotMeta {
        last_log_id: at,
        last_membership: new.clone(),
        snapshot_id: "from-the-leader".to_string(),
    };
    sm.install_snapshot(&snapshot, Box::new(Cursor::new(vec![7; 64])))
        .await
        .unwrap();
    let view = StateStore::state_view(&store, 500).unwrap();
    let recorded: StoredMembership =
        serde_json::from_slice(view.membership.as_deref().expect("a membership row")).unwrap();
    assert_eq!(recorded, new);
}
