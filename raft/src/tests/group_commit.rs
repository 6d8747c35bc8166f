//! Concurrent proposals: the engine sees one ordered stream, and the log pays one fsync per
//! openraft append, never more. (openraft 0.9 awaits each append's flush before the next, so
//! proposals do not share fsyncs at this level; the engine batches commands into entries.)

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use queenmq_storage::MemBackend;

use super::fixtures::{open_on, CountingBackend, Recorder};
use crate::{RaftConfig, RaftNode};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_proposals_apply_in_index_order_with_one_fsync_each_at_most() {
    let dir = tempfile::tempdir().unwrap();
    let syncs = Arc::new(AtomicU64::new(0));
    let backend = CountingBackend {
        inner: MemBackend::new(),
        syncs: syncs.clone(),
        sync_delay: Duration::from_millis(2),
        hold: Default::default(),
    };
    let (log, store) = open_on(dir.path(), Arc::new(backend));
    let h = Recorder::new(None);
    let node = RaftNode::start_single(RaftConfig::default(), log, store, h.clone())
        .await
        .unwrap();

    const TASKS: u32 = 32;
    const EACH: u32 = 20;
    let before = syncs.load(Ordering::SeqCst);
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let node = node.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            for i in 0..EACH {
                let payload = format!("{t}/{i}").into_bytes();
                let (index, term) = node.propose(payload.clone()).await.unwrap();
                mine.push((index, term, payload));
            }
            mine
        }));
    }
    let mut acked = Vec::new();
    for t in tasks {
        let mine = t.await.unwrap();
        assert!(
            mine.windows(2).all(|w| w[0].0 < w[1].0),
            "one proposer's entries keep its order"
        );
        acked.extend(mine);
    }
    let fsyncs = syncs.load(Ordering::SeqCst) - before;

    let applied = h.applied();
    acked.sort();
    assert_eq!(
        applied, acked,
        "the engine saw every proposal once, in index order"
    );
    let distinct: BTreeSet<u64> = applied.iter().map(|(i, _, _)| *i).collect();
    assert_eq!(distinct.len() as u32, TASKS * EACH);
    assert!(
        fsyncs <= u64::from(TASKS * EACH),
        "{fsyncs} fsyncs for {} proposals: more than one per append",
        TASKS * EACH
    );
    println!("{} proposals, {fsyncs} fsyncs", TASKS * EACH);
    node.shutdown().await.unwrap();
}
