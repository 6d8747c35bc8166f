//! Review s33 L-2: a leader answers a commit read from its confirmed read index without
//! waiting for its own apply of it (`ensure_linearizable` waited, with no limit, so a leader
//! with a long apply backlog answered every joiner "try again" at the 5 s bound).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::rpc_codec::{decode_reply, CommitRead, Reply};
use crate::{ApplyHandler, RaftConfig, RaftNode};

use super::fixtures::{open_stores, Recorder};

/// A handler whose apply waits while `hold` is set, like a slow disk under the engine.
struct Held {
    hold: AtomicBool,
    inner: Arc<Recorder>,
}

impl ApplyHandler for Held {
    fn apply(&self, index: u64, term: u64, payload: &[u8]) -> Result<(), String> {
        while self.hold.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.inner.apply(index, term, payload)
    }
    fn checkpointed(&self) -> Option<(u64, u64)> {
        self.inner.checkpointed()
    }
    fn snapshot(&self) -> (Option<(u64, u64)>, Vec<u8>) {
        self.inner.snapshot()
    }
    fn restore(&self, index: u64, term: u64, bytes: &[u8]) -> Result<(), String> {
        self.inner.restore(index, term, bytes)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_answers_a_commit_read_while_its_apply_is_stuck() {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_stores(dir.path());
    let held = Arc::new(Held {
        hold: AtomicBool::new(false),
        inner: Recorder::new(None),
    });
    let node = RaftNode::start_single(RaftConfig::default(), log, store, held.clone())
        .await
        .unwrap();
    let raft = node.raft_handle();
    held.hold.store(true, Ordering::SeqCst);
    let writer = node.clone();
    let write = tokio::spawn(async move { writer.propose(b"stuck".to_vec()).await });
    // Committed (a single voter) but not applied.
    let mut metrics = raft.metrics();
    let committed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let m = metrics.borrow_and_update().clone();
            if let (Some(last), applied) = (m.last_log_index, m.last_applied.map(|l| l.index)) {
                if Some(last) > applied {
                    return last;
                }
            }
            metrics.changed().await.unwrap();
        }
    })
    .await
    .expect("the entry never reached the log");
    let reply = tokio::time::timeout(Duration::from_secs(3), crate::commit_read::answer(&raft))
        .await
        .expect("the commit read waited for the stuck apply");
    match decode_reply::<CommitRead, String>(&reply).unwrap() {
        Reply::Ok(CommitRead::Committed(c)) => assert!(c >= committed, "{c} < {committed}"),
        other => panic!("{other:?}"),
    }
    held.hold.store(false, Ordering::SeqCst);
    write.await.unwrap().unwrap();
    node.shutdown().await.unwrap();
}
