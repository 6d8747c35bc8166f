//! RaftNode end to end on one voter: propose, apply in order, restart, replay after the
//! engine's checkpoint, continue the index sequence.

use std::sync::Arc;

use super::fixtures::{open_stores, Recorder};
use crate::{RaftConfig, RaftNode};

fn cfg() -> RaftConfig {
    RaftConfig::default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propose_apply_restart_replay_continue() {
    let dir = tempfile::tempdir().unwrap();

    // --- first start on an empty dir
    let (log, store) = open_stores(dir.path());
    let h1 = Recorder::new(None);
    let node = RaftNode::start_single(cfg(), log.clone(), store.clone(), h1.clone())
        .await
        .unwrap();
    assert_eq!(node.status().role, "leader");

    let mut proposed = Vec::new();
    for i in 0..100u32 {
        let payload = format!("message {i}").into_bytes();
        let (index, term) = node.propose(payload.clone()).await.unwrap();
        proposed.push((index, term, payload));
    }
    assert!(
        proposed.windows(2).all(|w| w[0].0 < w[1].0),
        "indexes increase"
    );
    assert_eq!(
        h1.applied(),
        proposed,
        "the handler saw every entry, in order, once"
    );

    for (index, _, payload) in &proposed {
        assert_eq!(
            node.read_app_payload(*index).unwrap().as_ref(),
            Some(payload)
        );
    }
    assert_eq!(
        node.read_app_payload(0).unwrap(),
        None,
        "index 0 is the membership entry"
    );
    assert_eq!(
        node.read_app_payload(1_000_000).unwrap(),
        None,
        "past the end"
    );

    let last = proposed.last().unwrap().0;
    let st = node.status();
    assert_eq!(st.leader, Some(1));
    assert_eq!(st.applied, Some(last));
    assert_eq!(st.committed, Some(last));
    assert_eq!(st.last_log_index, Some(last));

    node.shutdown().await.unwrap();
    assert_eq!(
        Arc::strong_count(&h1),
        1,
        "after shutdown nothing calls the handler"
    );
    drop(node);
    assert_eq!(
        Arc::strong_count(&log),
        1,
        "after drop nothing holds the log"
    );
    assert_eq!(
        Arc::strong_count(&store),
        1,
        "after drop nothing holds the state store"
    );
    drop((log, store));

    // --- restart with the engine checkpointed at index 40
    let (log, store) = open_stores(dir.path());
    let term_40 = log.term_of(40).unwrap();
    let h2 = Recorder::new(Some((40, term_40)));
    let node = RaftNode::start_single(cfg(), log.clone(), store.clone(), h2.clone())
        .await
        .unwrap();
    let replayed: Vec<_> = proposed
        .iter()
        .filter(|(i, _, _)| *i > 40)
        .cloned()
        .collect();
    assert_eq!(
        h2.applied(),
        replayed,
        "entries after the checkpoint re-applied before start returned"
    );

    let (next_index, next_term) = node.propose(b"after restart".to_vec()).await.unwrap();
    assert!(next_index > last, "{next_index} continues after {last}");
    assert!(next_term >= proposed.last().unwrap().1);
    assert_eq!(
        h2.applied().last().unwrap(),
        &(next_index, next_term, b"after restart".to_vec())
    );
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_without_checkpoint_replays_everything() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_stores(dir.path());
    let node = RaftNode::start_single(cfg(), log.clone(), store.clone(), Recorder::new(None))
        .await
        .unwrap();
    let mut proposed = Vec::new();
    for i in 0..10u8 {
        let (index, term) = node.propose(vec![i]).await.unwrap();
        proposed.push((index, term, vec![i]));
    }
    node.shutdown().await.unwrap();
    drop((node, log, store));

    let (log, store) = open_stores(dir.path());
    let h = Recorder::new(None);
    let node = RaftNode::start_single(cfg(), log, store, h.clone())
        .await
        .unwrap();
    assert_eq!(h.applied(), proposed);
    node.shutdown().await.unwrap();
}
