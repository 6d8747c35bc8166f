//! An idle, healthy leader of three over loopback TCP stays acknowledged within the broker's
//! lease at the tightest timing the configuration accepts (election timeout = 5 heartbeats,
//! lease = 3), now that the acknowledgement age also counts the time since openraft's last
//! metrics report (review s17 lead M1): an idle core still reports at every tick and every
//! heartbeat answer, so the added age stays under a tick.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::clustered_start::{start_timed, three_listeners, wait_until};

// Heartbeats as slow as the default's order, so a loaded CI machine's scheduling delays stay
// well inside the lease (review s18 K8); the ratio is still the tightest accepted.
const HB_MS: u64 = 500;
const ETO_MS: u64 = 5 * HB_MS;
/// The broker's lease (`Timing::lease_ms`): the election timeout less two heartbeats.
const LEASE_MS: u64 = ETO_MS - 2 * HB_MS;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_leader_stays_within_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let (listeners, peers) = three_listeners().await;
    let mut it = listeners.into_values();
    let (l1, l2, l3) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
    let (m1, m2, m3) = tokio::join!(
        start_timed(dir.path(), 1, l1, &peers, HB_MS, ETO_MS),
        start_timed(dir.path(), 2, l2, &peers, HB_MS, ETO_MS),
        start_timed(dir.path(), 3, l3, &peers, HB_MS, ETO_MS),
    );
    let members = [&m1, &m2, &m3];
    wait_until("a leader acknowledged by a majority", || {
        members
            .iter()
            .any(|m| m.node.status().role == "leader" && m.node.status().quorum_ack_ms.is_some())
    })
    .await;
    let lead = members
        .into_iter()
        .find(|m| m.node.status().role == "leader")
        .unwrap();
    lead.node.propose(b"one".to_vec()).await.unwrap();

    // How often the idle core reports, for the record (`--nocapture`): at least once a tick.
    let mut rx = lead.node.raft_handle().metrics();
    let reported = Arc::new(AtomicU32::new(0));
    let count = reported.clone();
    let reports = tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            count.fetch_add(1, Ordering::Relaxed);
        }
    });
    let window = Duration::from_millis(4 * LEASE_MS);
    let until = tokio::time::Instant::now() + window;
    let mut worst = 0;
    let mut looks = 0u32;
    while tokio::time::Instant::now() < until {
        let s = lead.node.status();
        assert_eq!(s.role, "leader");
        let age = s
            .quorum_ack_ms
            .expect("a leader acknowledged once stays acknowledged");
        assert!(
            age <= LEASE_MS,
            "an idle healthy leader looked unacknowledged for {age} ms"
        );
        worst = worst.max(age);
        looks += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    reports.abort();
    eprintln!(
        "idle leader over {} ms: {} metrics reports, {looks} looks, worst acknowledgement age \
         {worst} ms, lease {LEASE_MS} ms",
        window.as_millis(),
        reported.load(Ordering::Relaxed)
    );
    for m in [&m1, &m2, &m3] {
        m.node.shutdown().await.unwrap();
    }
}
