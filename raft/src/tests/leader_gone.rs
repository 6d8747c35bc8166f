//! A leader whose process is gone (its listener closed, then its connections) is replaced
//! well before openraft 0.9's follower lease would let anyone campaign (`leader_gone`): the
//! survivors see its connections end and its address refuse, campaign, and one of them
//! leads with everything the old leader committed.

use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

use super::clustered_start::{propose, wait_until, Member};
use super::hand_over::{one_leader, three_timed};

/// Heartbeat and election timeout: the followers' lease is the range's maximum, 6 s, and
/// openraft alone first campaigns a lease plus a drawn 3-6 s after the last heartbeat.
const TIMING: (u64, u64) = (200, 3000);
const LEASE: Duration = Duration::from_millis(TIMING.1 * 2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_process_is_gone_is_replaced_well_before_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let mut members = three_timed(dir.path(), TIMING).await;
    let old = one_leader(&members).unwrap();
    let committed = propose(&members[&old], 20).await;
    let term = members[&old].node.status().term;
    let addr = members[&old]
        .node
        .members_now()
        .into_iter()
        .find(|(id, _, _)| *id == old)
        .map(|(_, addr, _)| crate::member_addr::cluster_part(&addr).to_string())
        .unwrap();

    // As a SIGKILL leaves it: the listener closed (connects refused), then every connection
    // the leader opened ends.
    let gone = members.remove(&old).unwrap();
    let killed = Instant::now();
    drop(gone._stop);
    wait_until("the old leader's address refuses", || {
        std::net::TcpStream::connect(&addr).is_err()
    })
    .await;
    gone.node.shutdown().await.unwrap();
    assert!(TcpStream::connect(&addr).await.is_err());

    wait_until("a survivor leads", || {
        let leaders: Vec<_> = members.values().map(|m| m.node.status().leader).collect();
        leaders.iter().all(|l| l.is_some() && *l != Some(old)) && leaders[0] == leaders[1]
    })
    .await;
    let took = killed.elapsed();
    // Generous: openraft alone takes a lease and a draw (9-12 s here), never less than the
    // lease, whatever the machine's load.
    assert!(took < LEASE, "a new leader after {took:?}");
    let new = members
        .values()
        .next()
        .unwrap()
        .node
        .status()
        .leader
        .unwrap();
    assert!(members[&new].node.status().term > term);
    // Another election may still follow (a survivor whose metrics lagged its grant): the
    // write goes to whoever leads then.
    let mut next = None;
    wait_until_async_propose(&members, &mut next).await;
    assert!(
        next.unwrap() > committed,
        "the new leader holds the old one's log"
    );
    for (_, m) in members {
        let _ = m.node.shutdown().await;
    }
}

/// Proposes one entry through whichever survivor leads, until one is committed.
async fn wait_until_async_propose(
    members: &std::collections::BTreeMap<u64, Member>,
    next: &mut Option<u64>,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while next.is_none() {
        assert!(Instant::now() < deadline, "no survivor took a write");
        for m in members.values() {
            match m.node.propose(b"after".to_vec()).await {
                Ok((index, _)) => {
                    *next = Some(index);
                    break;
                }
                Err(e) => eprintln!("node {}: {e}", m.node.id()),
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
