//! Measures (never asserts) sequential propose latency on the real file backend, next to the
//! bare SegmentLog append+sync it is built on, so the Raft layer's own cost is visible.
//! Run: cargo test -p queenmq-raft --release latency -- --ignored --nocapture
//! On a shared VM disk fdatasync latency swings several-fold between runs and even between
//! the two halves of one run (strace showed one fdatasync per propose, as designed), so only
//! compare numbers taken back to back, and several times.

use std::time::{Duration, Instant};

use super::fixtures::{open_stores, Recorder};
use crate::{RaftConfig, RaftNode};

const N: usize = 500;
const SIZES: [usize; 2] = [1024, 256 * 1024];

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let pct = |p: usize| samples[(samples.len() * p / 100).min(samples.len() - 1)];
    println!(
        "{what}: n={} p50={:?} p90={:?} p99={:?} max={:?}",
        samples.len(),
        pct(50),
        pct(90),
        pct(99),
        samples[samples.len() - 1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement, run by hand"]
async fn latency_propose_vs_bare_log() {
    for size in SIZES {
        let dir = tempfile::tempdir().unwrap();
        let (log, _store) = open_stores(&dir.path().join("bare"));
        let payload = vec![7u8; size];
        let mut bare = Vec::with_capacity(N);
        for i in 0..N as u64 {
            let t = Instant::now();
            log.append(i, 1, &payload).unwrap();
            log.sync().unwrap();
            bare.push(t.elapsed());
        }
        report(&format!("{size} B bare append+sync"), bare);

        let (log, store) = open_stores(&dir.path().join("raft"));
        let node = RaftNode::start_single(RaftConfig::default(), log, store, Recorder::new(None))
            .await
            .unwrap();
        let mut raft = Vec::with_capacity(N);
        for _ in 0..N {
            let t = Instant::now();
            node.propose(payload.clone()).await.unwrap();
            raft.push(t.elapsed());
        }
        report(&format!("{size} B raft propose"), raft);
        node.shutdown().await.unwrap();
    }
}
