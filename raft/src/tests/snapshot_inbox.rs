//! The snapshot inbox: chunks received outside openraft, staged durably at the end of the
//! stream before openraft hears of the snapshot (it never does: the reopen is the install), a
//! refused stage leaving the node as it was, and a restart after the stage finishing it.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::InstallSnapshotRequest;
use openraft::SnapshotMeta;
use queenmq_storage::{finish_interrupted_install, DataDir, DiskDataDir, LogOptions, SegmentLog};
use tokio::io::AsyncReadExt;

use super::fixtures::{fill, open_small_segments, start_fresh};
use crate::log_store::LogStore;
use crate::meta;
use crate::types::{log_id, Membership, StoredMembership, TypeConfig};
use crate::{RaftNode, SnapshotFeed, SnapshotInbox, SnapshotReader};

const CHUNK: usize = 5000;

fn small() -> LogOptions {
    LogOptions {
        segment_bytes: 4096,
        ..LogOptions::default()
    }
}

/// A sender's node: 120 entries and a checkpoint at the last with run floor 60, its stream
/// read whole into chunks. Returns (applied, term, state, the stream, the leader's log).
pub(super) async fn leader_stream(dir: &Path) -> (u64, u64, Vec<u8>, Vec<u8>, Arc<SegmentLog>) {
    let (log, store) = open_small_segments(dir);
    let node = start_fresh(&log, &store).await;
    fill(&node, &log).await;
    let (applied, term) = log.last().unwrap();
    let state: Vec<u8> = (0..9000u32).map(|i| (i * 7) as u8).collect();
    store
        .save_checkpoint_with_floor(applied, term, 60, |sink| sink.write(&state))
        .unwrap();
    let ls = node.log_store().clone();
    let source = tokio::task::spawn_blocking(move || ls.snapshot_source(applied))
        .await
        .unwrap()
        .unwrap();
    let mut reader = SnapshotReader::new(source);
    let mut stream = Vec::new();
    reader.read_to_end(&mut stream).await.unwrap();
    drop(reader);
    node.shutdown().await.unwrap();
    (applied, term, state, stream, log)
}

fn meta_at(applied: u64, term: u64, id: &str) -> SnapshotMeta<u64, openraft::BasicNode> {
    let at = Some(log_id(term, applied));
    SnapshotMeta {
        last_log_id: at,
        last_membership: StoredMembership::new(at, Membership::new(vec![BTreeSet::from([1])], ())),
        snapshot_id: id.to_string(),
    }
}

pub(super) fn inbox_of(node: &RaftNode, root: &Path) -> SnapshotInbox {
    let dir: Arc<dyn DataDir> = Arc::new(DiskDataDir::new(root).unwrap());
    let feed = SnapshotFeed::new("inbox-test", 0);
    feed.attach(node.log_store().clone());
    SnapshotInbox::new(feed, dir, small(), Arc::new(|_| Ok(())))
}

fn chunk(
    node: &RaftNode,
    meta: &SnapshotMeta<u64, openraft::BasicNode>,
    stream: &[u8],
    offset: usize,
) -> InstallSnapshotRequest<TypeConfig> {
    let end = (offset + CHUNK).min(stream.len());
    InstallSnapshotRequest {
        vote: node.raft_handle().metrics().borrow().vote,
        meta: meta.clone(),
        offset: offset as u64,
        data: stream[offset..end].to_vec(),
        done: end == stream.len(),
    }
}

/// Sends every chunk but the last; returns the last one's answer.
pub(super) async fn send_all(
    inbox: &SnapshotInbox,
    node: &RaftNode,
    meta: &SnapshotMeta<u64, openraft::BasicNode>,
    stream: &[u8],
) -> Result<(), RaftError<u64, InstallSnapshotError>> {
    let raft = node.raft_handle();
    let mut at = 0;
    loop {
        let req = chunk(node, meta, stream, at);
        let done = req.done;
        inbox.receive(&raft, req).await?;
        if done {
            return Ok(());
        }
        at += CHUNK;
        // Nothing is staged, and the store appends, until the last chunk.
        assert!(!node.log_store().install_staged());
        assert!(!*inbox.staged().borrow());
    }
}

fn incoming_files(root: &Path) -> Vec<String> {
    std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("snapshot-incoming") || n == "log-incoming")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_stages_before_openraft_hears_of_it_and_a_restart_finishes_it() {
    let leader_dir = tempfile::tempdir().unwrap();
    let (applied, term, state, stream, leader_log) = leader_stream(leader_dir.path()).await;
    assert!(stream.len() > 3 * CHUNK, "{}", stream.len());

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let (flog, fstore) = open_small_segments(&root);
    let follower = start_fresh(&flog, &fstore).await;
    follower.propose(b"before".to_vec()).await.unwrap();
    let applied_before = follower.status().applied;
    let inbox = inbox_of(&follower, &root);
    let meta = meta_at(applied, term, "from-the-leader");
    send_all(&inbox, &follower, &meta, &stream).await.unwrap();

    // Staged durably (`raft/installing` is in the store) when the last chunk is answered...
    assert!(follower.log_store().install_staged());
    assert!(*inbox.staged().borrow());
    assert_eq!(inbox.installs(), 1);
    assert!(fstore.installing().unwrap().is_some());
    // ...and openraft was told nothing: no snapshot, its applied index is the old one.
    let m = follower.raft_handle().metrics().borrow().clone();
    assert_eq!(m.snapshot, None);
    assert_eq!(follower.status().applied, applied_before);
    // A stream while the stage waits for its reopen is refused before anything is written.
    let more = inbox
        .receive(
            &follower.raft_handle(),
            chunk(&follower, &meta_at(applied, term, "another"), &stream, 0),
        )
        .await;
    assert!(matches!(more, Err(RaftError::Fatal(_))), "{more:?}");

    // Killed before any reopen (no clean stop of the group): the restart's start-up step
    // finishes the install, and the log store opens on the sender's records and horizon.
    let _stopped = follower.shutdown().await;
    drop((follower, inbox, flog));
    let finished = finish_interrupted_install(&DiskDataDir::new(&root).unwrap(), &fstore)
        .unwrap()
        .unwrap();
    assert_eq!((finished.applied_index, finished.switch), (applied, true));
    assert!(
        incoming_files(&root).is_empty(),
        "{:?}",
        incoming_files(&root)
    );
    let (flog, _) = SegmentLog::open(&root.join("log"), small()).unwrap();
    assert_eq!(flog.first_index(), Some(60));
    assert_eq!(flog.last(), Some((applied, term)));
    assert_eq!(
        flog.read(applied).unwrap(),
        leader_log.read(applied).unwrap()
    );
    let flog = Arc::new(flog);
    let fls = LogStore::open(flog, fstore.clone()).unwrap();
    assert_eq!(fls.reclaim_refusal(), None);
    let purged: Option<crate::types::RaftLogId> =
        meta::get(&fstore, meta::PURGED, openraft::ErrorSubject::Logs).unwrap();
    assert_eq!(purged, Some(log_id(term, applied)));
    let cp = fstore.load_checkpoint().unwrap().unwrap();
    assert_eq!((cp.applied_index, cp.state), (applied, state));
    tokio::task::spawn_blocking(move || fls.stop())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_stage_leaves_the_node_as_it_was_and_the_stream_can_start_again() {
    let leader_dir = tempfile::tempdir().unwrap();
    let (applied, term, _state, stream, _leader_log) = leader_stream(leader_dir.path()).await;

    // A follower already committed past the snapshot: the stage refuses at the end.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let (flog, fstore) = open_small_segments(&root);
    let follower = start_fresh(&flog, &fstore).await;
    fill(&follower, &flog).await;
    follower.propose(b"one more".to_vec()).await.unwrap();
    let before = flog.last().unwrap();
    assert!(before.0 > applied);
    let inbox = inbox_of(&follower, &root);
    let meta = meta_at(applied, term, "stale");
    let refused = send_all(&inbox, &follower, &meta, &stream).await;
    assert!(matches!(refused, Err(RaftError::Fatal(_))), "{refused:?}");
    assert!(!follower.log_store().install_staged());
    assert!(!*inbox.staged().borrow());
    assert_eq!(inbox.installs(), 0);
    assert_eq!(fstore.installing().unwrap(), None);
    assert!(
        incoming_files(&root).is_empty(),
        "{:?}",
        incoming_files(&root)
    );
    assert_eq!(flog.last(), Some(before));
    follower
        .propose(b"after the refusal".to_vec())
        .await
        .unwrap();
    assert_eq!(flog.last().unwrap().0, before.0 + 1);

    // The same id sent again from offset 0 is received afresh (and refused again at its end).
    let again = send_all(&inbox, &follower, &meta, &stream).await;
    assert!(matches!(again, Err(RaftError::Fatal(_))), "{again:?}");
    assert!(
        incoming_files(&root).is_empty(),
        "{:?}",
        incoming_files(&root)
    );
    follower.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_out_of_place_or_from_an_older_leader_writes_nothing() {
    let leader_dir = tempfile::tempdir().unwrap();
    let (applied, term, _state, stream, _leader_log) = leader_stream(leader_dir.path()).await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let (flog, fstore) = open_small_segments(&root);
    let follower = start_fresh(&flog, &fstore).await;
    follower.propose(b"before".to_vec()).await.unwrap();
    let inbox = inbox_of(&follower, &root);
    let raft = follower.raft_handle();
    let meta = meta_at(applied, term, "first");

    // A new snapshot id that does not start at 0: openraft's sender restarts it at 0.
    let mid = chunk(&follower, &meta, &stream, CHUNK);
    let answer = inbox.receive(&raft, mid).await;
    assert!(
        matches!(
            answer,
            Err(RaftError::APIError(InstallSnapshotError::SnapshotMismatch(
                _
            )))
        ),
        "{answer:?}"
    );
    assert!(
        incoming_files(&root).is_empty(),
        "{:?}",
        incoming_files(&root)
    );

    // A vote below this node's is answered with this node's, nothing written.
    let mut old = chunk(&follower, &meta, &stream, 0);
    let mine = old.vote;
    old.vote = openraft::Vote::new_committed(0, 0);
    assert!(old.vote < mine);
    let answer = inbox.receive(&raft, old).await.unwrap();
    assert_eq!(answer.vote, mine);
    assert!(
        incoming_files(&root).is_empty(),
        "{:?}",
        incoming_files(&root)
    );

    // A first chunk opens the stream's part file; a second stream replaces it (one per group).
    inbox
        .receive(&raft, chunk(&follower, &meta, &stream, 0))
        .await
        .unwrap();
    assert_eq!(incoming_files(&root).len(), 1);
    let second = meta_at(applied, term, "second");
    inbox
        .receive(&raft, chunk(&follower, &second, &stream, 0))
        .await
        .unwrap();
    assert_eq!(
        incoming_files(&root).len(),
        1,
        "{:?}",
        incoming_files(&root)
    );
    drop(inbox);
    assert!(
        incoming_files(&root).is_empty(),
        "{:?}",
        incoming_files(&root)
    );
    follower.shutdown().await.unwrap();
}

/// Review s26 snap M3: once a chunk came with a higher vote, a chunk with a lower one (still
/// above this node's own) is answered with the higher vote and replaces nothing, so the
/// higher leader's stream goes on where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lower_leaders_chunk_is_answered_with_the_highest_vote_and_replaces_nothing() {
    let leader_dir = tempfile::tempdir().unwrap();
    let (applied, term, _state, stream, _leader_log) = leader_stream(leader_dir.path()).await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let (flog, fstore) = open_small_segments(&root);
    let follower = start_fresh(&flog, &fstore).await;
    let inbox = inbox_of(&follower, &root);
    let raft = follower.raft_handle();
    let mine = raft.metrics().borrow().vote;
    let high = openraft::Vote::new_committed(mine.leader_id().term + 5, 2);
    let low = openraft::Vote::new_committed(mine.leader_id().term + 3, 3);
    assert!(mine < low && low < high);

    let first = meta_at(applied, term, "from-high");
    let mut c = chunk(&follower, &first, &stream, 0);
    c.vote = high;
    assert_eq!(inbox.receive(&raft, c).await.unwrap().vote, mine);
    let files = incoming_files(&root);
    assert_eq!(files.len(), 1, "{files:?}");

    let other = meta_at(applied, term, "from-low");
    let mut c = chunk(&follower, &other, &stream, 0);
    c.vote = low;
    assert_eq!(inbox.receive(&raft, c).await.unwrap().vote, high);
    assert_eq!(incoming_files(&root), files);

    // The higher leader's stream goes on at its next offset: it was not replaced.
    let mut c = chunk(&follower, &first, &stream, CHUNK);
    c.vote = high;
    assert!(!c.done);
    assert_eq!(inbox.receive(&raft, c).await.unwrap().vote, mine);
    drop(inbox);
    follower.shutdown().await.unwrap();
}

/// Review s27 snap M4: a stream that gets no chunk for the inbox's wait is dropped with its
/// part file; its next chunk is answered `SnapshotMismatch` (the sender starts again at 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_stream_s_part_file_is_deleted() {
    let leader_dir = tempfile::tempdir().unwrap();
    let (applied, term, _state, stream, _leader_log) = leader_stream(leader_dir.path()).await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let (flog, fstore) = open_small_segments(&root);
    let follower = start_fresh(&flog, &fstore).await;
    let feed = SnapshotFeed::new("inbox-test", 0);
    feed.attach(follower.log_store().clone());
    let data: Arc<dyn DataDir> = Arc::new(DiskDataDir::new(&root).unwrap());
    let wait = std::time::Duration::from_millis(300);
    let inbox = SnapshotInbox::abandoning_after(feed, data, small(), Arc::new(|_| Ok(())), wait);
    let raft = follower.raft_handle();
    let meta = meta_at(applied, term, "abandoned");
    inbox
        .receive(&raft, chunk(&follower, &meta, &stream, 0))
        .await
        .unwrap();
    // A chunk inside the wait keeps the stream.
    tokio::time::sleep(wait / 2).await;
    inbox
        .receive(&raft, chunk(&follower, &meta, &stream, CHUNK))
        .await
        .unwrap();
    tokio::time::sleep(wait / 2).await;
    assert!(!incoming_files(&root).is_empty());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !incoming_files(&root).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            incoming_files(&root)
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let next = inbox
        .receive(&raft, chunk(&follower, &meta, &stream, 2 * CHUNK))
        .await;
    assert!(
        matches!(
            next,
            Err(RaftError::APIError(InstallSnapshotError::SnapshotMismatch(
                _
            )))
        ),
        "{next:?}"
    );
    follower.shutdown().await.unwrap();
}
