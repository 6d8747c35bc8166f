//! A leader whose own disk hangs: openraft 0.9's core waits in `append` for the log writer,
//! which waits on the held fsync, so the core reports no metrics and the last
//! acknowledgement age it reported stays small. `RaftNode::status` adds the time since that
//! report (past one tick), so the frozen leader's age passes the lease and the broker stops
//! taking it for acknowledged (review s17 lead M1; a test that fails without the addition:
//! review s18 K5). Its core answers no question meanwhile (`core_silent_ms` grows: review
//! s19 lead M2).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use queenmq_storage::MemBackend;

use super::clustered_start::{start_on, three_listeners, wait_until};
use super::fixtures::{open_on, CountingBackend};

// Slow enough that a loaded CI machine does not call spurious elections (review s18 K8).
const HB_MS: u64 = 250;
const ETO_MS: u64 = 5 * HB_MS;
/// The broker's lease (`Timing::lease_ms`): the election timeout less two heartbeats.
const LEASE_MS: u64 = ETO_MS - 2 * HB_MS;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_frozen_on_its_own_fsync_ages_past_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let (listeners, peers) = three_listeners().await;
    let holds: Vec<Arc<AtomicBool>> = (0..3).map(|_| Arc::default()).collect();
    let mut members = Vec::new();
    let mut starts = Vec::new();
    for ((id, listener), hold) in listeners.into_iter().zip(&holds) {
        let backend = CountingBackend {
            inner: MemBackend::new(),
            syncs: Arc::new(AtomicU64::new(0)),
            sync_delay: Duration::ZERO,
            hold: hold.clone(),
        };
        let at = dir.path().join(id.to_string());
        std::fs::create_dir_all(&at).unwrap();
        let stores = open_on(&at, Arc::new(backend));
        let peers = peers.clone();
        starts.push(tokio::spawn(async move {
            start_on(stores, id, listener, &peers, HB_MS, ETO_MS).await
        }));
    }
    for s in starts {
        members.push(s.await.unwrap());
    }
    // The leader that took a write (a loaded machine may elect another meanwhile: ask again).
    let mut lead = None;
    for _ in 0..100 {
        wait_until("a leader acknowledged by a majority", || {
            members.iter().any(|m| {
                let s = m.node.status();
                s.role == "leader" && s.quorum_ack_ms.is_some()
            })
        })
        .await;
        let Some(l) = members
            .iter()
            .position(|m| m.node.status().role == "leader")
        else {
            continue;
        };
        if members[l].node.propose(b"one".to_vec()).await.is_ok() {
            lead = Some(l);
            break;
        }
    }
    let lead = lead.expect("no leader took a write");

    holds[lead].store(true, Ordering::SeqCst);
    // The first write blocks the writer thread in its fsync, the next ones the core in append.
    let writes: Vec<_> = (0..3)
        .map(|i| {
            let node = members[lead].node.clone();
            tokio::spawn(async move { node.propose(format!("held {i}").into_bytes()).await })
        })
        .collect();
    wait_until(
        "the frozen leader's acknowledgement age passes its lease",
        || {
            let s = members[lead].node.status();
            s.quorum_ack_ms.is_some_and(|ms| ms > LEASE_MS)
        },
    )
    .await;
    let s = members[lead].node.status();
    assert_eq!(s.role, "leader", "the frozen core reported a new role");
    // Its last report still says leader; its core has answered nothing since it froze
    // (review s19 lead M2: the broker's /health reads this).
    wait_until(
        "the frozen core stays silent past an election timeout",
        || {
            members[lead]
                .node
                .core_silent_ms()
                .is_some_and(|ms| ms > ETO_MS)
        },
    )
    .await;

    holds[lead].store(false, Ordering::SeqCst);
    for w in writes {
        // Committed, or refused once it learnt of the new leader: either is fine here.
        let _ = w.await.unwrap();
    }
    wait_until("the thawed core answers again", || {
        members[lead]
            .node
            .core_silent_ms()
            .is_some_and(|ms| ms < ETO_MS)
    })
    .await;
    for m in &members {
        m.node.shutdown().await.unwrap();
    }
}
