//! Power cuts and failing fsyncs, through storage's MemBackend: what a proposer was told is
//! committed must survive, and a failed fsync must stop the node rather than acknowledge.

use std::sync::{Arc, Mutex};

use queenmq_storage::MemBackend;

use super::fixtures::{open_on, Recorder};
use crate::{RaftConfig, RaftError, RaftNode};

type Acked = Arc<Mutex<Vec<(u64, u64, Vec<u8>)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_entry_survives_a_power_cut() {
    let dir = tempfile::tempdir().unwrap();
    let mem = MemBackend::new();
    let (log, store) = open_on(dir.path(), Arc::new(mem.clone()));
    let node = RaftNode::start_single(RaftConfig::default(), log, store, Recorder::new(None))
        .await
        .unwrap();

    // Proposals in flight from several tasks while the power goes.
    let acked: Acked = Arc::default();
    let mut tasks = Vec::new();
    for t in 0..4u8 {
        let (node, acked) = (node.clone(), acked.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..100u8 {
                let payload = vec![t, i];
                match node.propose(payload.clone()).await {
                    Ok((index, term)) => acked.lock().unwrap().push((index, term, payload)),
                    Err(_) => return,
                }
            }
        }));
    }
    while acked.lock().unwrap().len() < 150 {
        tokio::task::yield_now().await;
    }
    let told_before_cut = acked.lock().unwrap().clone();
    let image = mem.crash();

    node.shutdown().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    drop(node);

    let (log, store) = open_on(dir.path(), Arc::new(image));
    let h = Recorder::new(None);
    let node = RaftNode::start_single(RaftConfig::default(), log, store, h.clone())
        .await
        .unwrap();
    let replayed = h.applied();
    assert!(
        replayed.windows(2).all(|w| w[0].0 < w[1].0),
        "replayed in index order"
    );
    for entry in &told_before_cut {
        assert!(replayed.contains(entry), "acknowledged {entry:?} was lost");
    }
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_fsync_is_never_acknowledged_and_stops_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let mem = MemBackend::new();
    let (log, store) = open_on(dir.path(), Arc::new(mem.clone()));
    let node = RaftNode::start_single(RaftConfig::default(), log, store, Recorder::new(None))
        .await
        .unwrap();
    let mut acked = Vec::new();
    for i in 0..5u8 {
        let (index, term) = node.propose(vec![i]).await.unwrap();
        acked.push((index, term, vec![i]));
    }

    mem.set_fail_sync(true);
    let err = node.propose(b"never durable".to_vec()).await.unwrap_err();
    assert!(matches!(err, RaftError::Fatal(_)), "{err}");
    let again = node
        .propose(b"after the failure".to_vec())
        .await
        .unwrap_err();
    assert!(matches!(again, RaftError::Fatal(_)), "{again}");

    let image = mem.crash();
    let _ = node.shutdown().await;
    drop(node);

    let (log, store) = open_on(dir.path(), Arc::new(image));
    let h = Recorder::new(None);
    let node = RaftNode::start_single(RaftConfig::default(), log, store, h.clone())
        .await
        .unwrap();
    assert_eq!(
        h.applied(),
        acked,
        "exactly the acknowledged entries come back"
    );
    node.shutdown().await.unwrap();
}
