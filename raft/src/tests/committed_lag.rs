//! The persisted committed id may lag (it is saved in the background) or, after a power cut
//! that kept redb but lost the log's tail, point past the log. Neither may lose or invent an
//! entry: a restart still applies exactly what the log holds.

use super::fixtures::{open_stores, start_fresh, Recorder};
use crate::meta;
use crate::{RaftConfig, RaftNode};

async fn restart_with_committed(committed_json: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_stores(dir.path());
    let node = start_fresh(&log, &store).await;
    let mut proposed = Vec::new();
    for i in 0..20u8 {
        let (index, term) = node.propose(vec![i]).await.unwrap();
        proposed.push((index, term, vec![i]));
    }
    node.shutdown().await.unwrap();
    store.put_meta(meta::COMMITTED, committed_json).unwrap();
    drop((node, log, store));

    let (log, store) = open_stores(dir.path());
    let h = Recorder::new(None);
    let node = RaftNode::start_single(RaftConfig::default(), log, store, h.clone())
        .await
        .unwrap();
    assert_eq!(h.applied(), proposed);
    let (index, _) = node.propose(b"next".to_vec()).await.unwrap();
    assert!(index > proposed.last().unwrap().0);
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_never_saved() {
    restart_with_committed(b"null").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_lagging_behind_the_log() {
    restart_with_committed(br#"{"leader_id":1,"index":3}"#).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_past_the_end_of_the_log() {
    restart_with_committed(br#"{"leader_id":1,"index":10000}"#).await;
}
