//! Space reclamation through the node: the purge horizon is durable before any segment goes,
//! the segment appends go to always stays, and a restart on a checkpoint at or above the
//! horizon replays the tail and continues.

use openraft::ErrorSubject;

use crate::meta;
use crate::types::RaftLogId;
use crate::{RaftConfig, RaftNode};

use super::fixtures::{open_small_segments, start_fresh, Recorder};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaimed_segments_go_after_the_horizon_and_a_restart_continues() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_small_segments(dir.path());
    let node = start_fresh(&log, &store).await;
    let mut proposed = Vec::new();
    for i in 0..120u32 {
        let payload = format!("message {i} {}", "y".repeat(200)).into_bytes();
        proposed.push((node.propose(payload.clone()).await.unwrap(), payload));
    }
    let segments = log.segment_count();
    assert!(segments > 4, "{segments}");

    let n = node.clone();
    let deleted = tokio::task::spawn_blocking(move || n.reclaim_upto(60))
        .await
        .unwrap()
        .unwrap();
    assert!(deleted > 0);
    assert_eq!(log.segment_count(), segments - deleted);
    let first = log.first_index().unwrap();
    assert!(first <= 61 && first > 1, "{first}");
    let horizon: Option<RaftLogId> = meta::get(&store, meta::PURGED, ErrorSubject::Logs).unwrap();
    assert_eq!(
        horizon.map(|h| h.index),
        Some(first - 1),
        "horizon names the last deleted record"
    );
    for ((index, _), payload) in proposed.iter().filter(|((i, _), _)| *i >= first) {
        assert_eq!(
            node.read_app_payload(*index).unwrap().as_ref(),
            Some(payload)
        );
    }
    // Past the end: the last segment stays, the horizon only moves forward.
    let n = node.clone();
    tokio::task::spawn_blocking(move || n.reclaim_upto(u64::MAX))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(log.segment_count(), 1);
    let n = node.clone();
    assert_eq!(
        tokio::task::spawn_blocking(move || n.reclaim_upto(10))
            .await
            .unwrap()
            .unwrap(),
        0
    );
    let horizon: Option<RaftLogId> = meta::get(&store, meta::PURGED, ErrorSubject::Logs).unwrap();
    let first = log.first_index().unwrap();
    assert_eq!(horizon.map(|h| h.index), Some(first - 1));
    node.shutdown().await.unwrap();
    drop(node);
    drop((log, store));

    // The engine's checkpoint covers everything deleted: the restart replays what follows it.
    let (log, store) = open_small_segments(dir.path());
    assert_eq!(log.first_index(), Some(first));
    let at = first - 1;
    let h = Recorder::new(Some((
        at,
        proposed.iter().find(|((i, _), _)| *i == at).unwrap().0 .1,
    )));
    let node = RaftNode::start_single(RaftConfig::default(), log.clone(), store.clone(), h.clone())
        .await
        .unwrap();
    let replayed: Vec<_> = proposed
        .iter()
        .filter(|((i, _), _)| *i > at)
        .map(|((i, t), p)| (*i, *t, p.clone()))
        .collect();
    assert_eq!(h.applied(), replayed);
    let (next, _) = node.propose(b"after".to_vec()).await.unwrap();
    assert_eq!(next, proposed.last().unwrap().0 .0 + 1);
    node.shutdown().await.unwrap();
}
