//! Review s28 M-3 over loopback TCP: a joining node's horizon is the commit read from the
//! group's leader (`join_read`, `commit_read`), not what an append says; a follower answers
//! a commit read with the leader it knows and its address; a peer with the wrong token gets
//! no answer; a joiner with nobody to ask is refused at start (review s33 H-1).

use std::collections::BTreeMap;
use std::time::Duration;

use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::AppendEntriesRequest;
use openraft::{BasicNode, Vote};
use tokio::net::TcpListener;

use crate::join_horizon::read_horizon;
use crate::rpc_codec::{CommitRead, LeaderAt};
use crate::types::log_id;
use crate::TcpNetwork;

use super::clustered_start::{propose, start_unread};
use super::fixtures::open_stores;
use super::rejoin::{gate, stop, three, TIMING};
use super::tcp_cluster::{limits, GROUP, TOKEN};

const BOUND: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_nodes_horizon_is_the_leaders_commit_read_not_a_stale_append() {
    let dir = tempfile::tempdir().unwrap();
    let (members, mut nodes, lead) = three(dir.path()).await;
    let committed = propose(&members[&lead], 20).await;
    let follower = (1..=3).find(|i| *i != lead).unwrap();

    // The frame itself: the leader answers its commit, a follower names the leader and its
    // address, a wrong token is answered by nothing.
    let net = TcpNetwork::new(9, GROUP, TOKEN, limits());
    match net.commit_read(lead, &nodes[&lead].addr, BOUND).await {
        Ok(CommitRead::Committed(c)) => assert!(c >= committed, "{c} < {committed}"),
        other => panic!("the leader answered {other:?}"),
    }
    assert_eq!(
        net.commit_read(follower, &nodes[&follower].addr, BOUND)
            .await
            .unwrap(),
        CommitRead::NotLeader(Some(LeaderAt {
            id: lead,
            addr: Some(nodes[&lead].addr.clone())
        }))
    );
    let wrong = TcpNetwork::new(9, GROUP, b"another token of at least 32 bytes!!", limits());
    assert!(wrong
        .commit_read(lead, &nodes[&lead].addr, Duration::from_secs(3))
        .await
        .is_err());

    // Node 4 joins (not yet added: no real leader sends it anything), its read not started
    // yet (review s33 L-4: started by the member, it raced the append below). A deposed
    // leader's append reaches it first, its commit far below the group's: refused.
    let l4 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    nodes.insert(4, BasicNode::new(l4.local_addr().unwrap().to_string()));
    let marker = dir.path().join("4-joining");
    let g4 = gate(dir.path(), 4);
    let stores = open_stores(&dir.path().join("4"));
    let m4 = start_unread(stores, 4, l4, &nodes, TIMING, Some((true, g4.clone())))
        .await
        .unwrap();
    assert!(g4.joining() && g4.needs_horizon());
    let stale = AppendEntriesRequest {
        vote: Vote::new_committed(1, lead),
        prev_log_id: None,
        entries: vec![],
        leader_commit: Some(log_id(1, 1)),
    };
    let mut c = TcpNetwork::new(lead, GROUP, TOKEN, limits())
        .new_client(4, &nodes[&4])
        .await;
    let answer = c.append_entries(stale, RPCOption::new(BOUND)).await;
    assert!(answer.is_err(), "taken without a horizon: {answer:?}");
    assert_eq!(
        read_horizon(&marker).unwrap(),
        None,
        "an append set the horizon"
    );

    // Asked first at a follower only, as a joiner whose `peers` is out of date would be.
    let only_follower =
        BTreeMap::from([(4, nodes[&4].clone()), (follower, nodes[&follower].clone())]);
    let read_net = TcpNetwork::new(4, GROUP, TOKEN, limits()).with_gate(g4.clone());
    let read = tokio::spawn(crate::read_join_horizon(
        g4.clone(),
        read_net,
        only_follower,
    ));
    tokio::time::timeout(BOUND, read)
        .await
        .expect("the read did not end")
        .unwrap();
    let horizon = read_horizon(&marker).unwrap().unwrap();
    assert!(
        horizon >= committed,
        "the horizon {horizon} is below the group's commit {committed} (a stale append's?)"
    );
    assert!(g4.before_append());
    for (_, m) in members {
        stop(m).await;
    }
    stop(m4).await;

    // A read still running for a stopped member ends at its next round (`join_read::run`):
    // node 5 joins a cluster that is gone, so no round finds a leader.
    let l5 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    nodes.insert(5, BasicNode::new(l5.local_addr().unwrap().to_string()));
    let g5 = gate(dir.path(), 5);
    let stores = open_stores(&dir.path().join("5"));
    let m5 = start_unread(stores, 5, l5, &nodes, TIMING, Some((true, g5.clone())))
        .await
        .unwrap();
    let read_net = TcpNetwork::new(5, GROUP, TOKEN, limits()).with_gate(g5.clone());
    let read = tokio::spawn(crate::read_join_horizon(
        g5.clone(),
        read_net,
        nodes.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!read.is_finished(), "a read ended without a leader");
    stop(m5).await;
    tokio::time::timeout(BOUND, read)
        .await
        .expect("the read of a stopped member did not end")
        .unwrap();
    assert!(g5.needs_horizon());
}

/// Review s33 H-1: a node started to join with `peers` naming only itself holds no
/// membership and would ask nobody; refused at start, and again at a restart that still
/// owes the read; with another member named it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_with_nobody_to_ask_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let l4 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr4 = l4.local_addr().unwrap().to_string();
    let alone = BTreeMap::from([(4, BasicNode::new(addr4.clone()))]);
    let g4 = gate(dir.path(), 4);
    let stores = open_stores(&dir.path().join("4"));
    let e = match start_unread(stores, 4, l4, &alone, TIMING, Some((true, g4))).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a joiner with nobody to ask started"),
    };
    assert!(e.contains("names no other node"), "{e}");
    // Restarted without cluster_join: the marker stands and the read is still owed.
    let l4 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stores = open_stores(&dir.path().join("4"));
    let again = start_unread(
        stores,
        4,
        l4,
        &alone,
        TIMING,
        Some((false, gate(dir.path(), 4))),
    );
    assert!(
        again.await.is_err(),
        "a restart that still owes the read started"
    );
    // Naming a member (down here) lets it start; it waits to be contacted.
    let l4 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut named = alone.clone();
    named.insert(1, BasicNode::new("127.0.0.1:1"));
    let g4 = gate(dir.path(), 4);
    let stores = open_stores(&dir.path().join("4"));
    let m4 = start_unread(stores, 4, l4, &named, TIMING, Some((true, g4.clone())))
        .await
        .unwrap();
    assert!(g4.needs_horizon());
    stop(m4).await;
}
