//! Review s28 M-3 over loopback TCP: a joining node's horizon is the commit read from the
//! group's leader (`join_read`, `commit_read`), not what an append says; a follower answers
//! a commit read with the leader it knows; a peer with the wrong token gets no answer.

use std::time::Duration;

use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::AppendEntriesRequest;
use openraft::{BasicNode, Vote};
use tokio::net::TcpListener;

use crate::join_horizon::read_horizon;
use crate::rpc_codec::CommitRead;
use crate::types::log_id;
use crate::TcpNetwork;

use super::clustered_start::{propose, wait_until};
use super::rejoin::{member, stop, three};
use super::tcp_cluster::{limits, GROUP, TOKEN};

const BOUND: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_nodes_horizon_is_the_leaders_commit_read_not_a_stale_append() {
    let dir = tempfile::tempdir().unwrap();
    let (members, mut nodes, lead) = three(dir.path()).await;
    let committed = propose(&members[&lead], 20).await;
    let follower = (1..=3).find(|i| *i != lead).unwrap();

    // The frame itself: the leader answers its commit, a follower names the leader, a
    // wrong token is answered by nothing.
    let net = TcpNetwork::new(9, GROUP, TOKEN, limits());
    match net.commit_read(lead, &nodes[&lead].addr, BOUND).await {
        Ok(CommitRead::Committed(c)) => assert!(c >= committed, "{c} < {committed}"),
        other => panic!("the leader answered {other:?}"),
    }
    assert_eq!(
        net.commit_read(follower, &nodes[&follower].addr, BOUND)
            .await
            .unwrap(),
        CommitRead::NotLeader(Some(lead))
    );
    let wrong = TcpNetwork::new(9, GROUP, b"another token of at least 32 bytes!!", limits());
    assert!(wrong
        .commit_read(lead, &nodes[&lead].addr, Duration::from_secs(3))
        .await
        .is_err());

    // Node 4 joins (not yet added: no real leader sends it anything). A deposed leader's
    // append reaches it first, its commit far below the group's.
    let l4 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr4 = l4.local_addr().unwrap().to_string();
    nodes.insert(4, BasicNode::new(addr4.clone()));
    let marker = dir.path().join("4-joining");
    let (m4, g4) = member(dir.path(), 4, l4, &nodes, true).await;
    assert!(g4.joining());
    let stale = AppendEntriesRequest {
        vote: Vote::new_committed(1, lead),
        prev_log_id: None,
        entries: vec![],
        leader_commit: Some(log_id(1, 1)),
    };
    let mut c = TcpNetwork::new(lead, GROUP, TOKEN, limits())
        .new_client(4, &nodes[&4])
        .await;
    let before = read_horizon(&marker).unwrap();
    let answer = c.append_entries(stale, RPCOption::new(BOUND)).await;
    if before.is_none() {
        // Refused while no horizon stood, never taken as one.
        assert!(answer.is_err(), "{answer:?}");
    }
    wait_until("node 4's horizon written", || {
        read_horizon(&marker).unwrap().is_some()
    })
    .await;
    let horizon = read_horizon(&marker).unwrap().unwrap();
    assert!(
        horizon >= committed,
        "the horizon {horizon} is below the group's commit {committed} (a stale append's?)"
    );
    for (_, m) in members {
        stop(m).await;
    }
    assert!(!g4.core_stopped());
    stop(m4).await;
    // A read still running for a stopped member ends at its next round (`join_read::run`).
    assert!(g4.core_stopped());
}
