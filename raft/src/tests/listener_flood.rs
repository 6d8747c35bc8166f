//! The cluster listener under a flood (review s14 F5, F6): silent connections from one source,
//! or from many, never evict a peer's connection waiting for its Hello; bodies declared and
//! stalled hold at most the body budget, are cut at the body deadline, and a real peer's
//! append is still answered.

use std::net::SocketAddr;
use std::time::Duration;

use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use openraft::{BasicNode, Vote};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::oneshot;

use crate::body_budget::BodyBudget;
use crate::tcp_server::{Groups, ServerConfig};
use crate::wire::{self, Kind};
use crate::TcpNetwork;

use super::fixtures::{open_stores, start_fresh};
use super::tcp_cluster::{limits, listen, server_config, GROUP, TOKEN};

/// A safety bound on every wait, never an assertion about time.
const BOUND: Duration = Duration::from_secs(30);
const SERVED: u64 = 1;

struct Served {
    addr: SocketAddr,
    _stop: oneshot::Sender<()>,
    node: crate::RaftNode,
    _dir: tempfile::TempDir,
}

async fn served(cfg: ServerConfig) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_stores(dir.path());
    let node = start_fresh(&log, &store).await;
    let groups = Groups::default();
    groups.add(GROUP, node.raft().clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = listen(listener, cfg, groups);
    Served {
        addr,
        _stop: stop,
        node,
        _dir: dir,
    }
}

/// A connection to `addr` from loopback address `from` (all of 127.0.0.0/8 is local on Linux).
async fn connect_from(from: &str, addr: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(format!("{from}:0").parse().unwrap()).unwrap();
    s.connect(addr).await.unwrap()
}

fn raw_frame(kind: Kind, id: u64, len: u32, body: &[u8]) -> Vec<u8> {
    let mut f = vec![kind as u8];
    f.extend_from_slice(&id.to_le_bytes());
    f.extend_from_slice(&len.to_le_bytes());
    f.extend_from_slice(body);
    f
}

fn hello() -> Vec<u8> {
    let body = wire::hello_body(9, SERVED, TOKEN);
    raw_frame(Kind::Hello, 0, body.len() as u32, &body)
}

/// Says Hello on `c` and votes: whether the vote was answered (an `Ok` reply).
async fn vote_on(mut c: TcpStream) -> bool {
    let vote = VoteRequest::<u64> {
        vote: Vote::new(1, 9),
        last_log_id: None,
    };
    let body = crate::rpc_codec::encode_vote(GROUP, &vote).unwrap();
    let mut out = hello();
    out.extend(raw_frame(Kind::Vote, 1, body.len() as u32, &body));
    if c.write_all(&out).await.is_err() {
        return false;
    }
    let reply = tokio::time::timeout(BOUND, wire::read_reply(&mut c, &limits(), 1))
        .await
        .expect("neither answered nor closed");
    matches!(reply, Ok(r) if r.first() == Some(&0))
}

fn config(max_pre_hello: usize, per_source: usize) -> ServerConfig {
    ServerConfig {
        max_pre_hello_per_source: per_source,
        ..server_config(SERVED, Duration::from_secs(3600), max_pre_hello)
    }
}

/// Review s14 F5: one source opening silent connections evicts only its own. The voter from
/// 127.0.0.2 connects first, then 127.0.0.1 opens more than the whole cap; a vote from
/// 127.0.0.3 proves the listener has taken them all in (it accepts in order) before the voter
/// says Hello. Under the old global FIFO the voter, the oldest, was closed every round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_one_source_never_evicts_another_sources_connection() {
    let s = served(config(16, 4)).await;
    for round in 0..50 {
        let voter = connect_from("127.0.0.2", s.addr).await;
        let mut flood = Vec::new();
        for _ in 0..20 {
            flood.push(connect_from("127.0.0.1", s.addr).await);
        }
        assert!(vote_on(connect_from("127.0.0.3", s.addr).await).await);
        assert!(vote_on(voter).await, "round {round}: the voter was evicted");
        // The flood's oldest were closed by the listener, unanswered.
        let mut oldest = flood.remove(0);
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(BOUND, oldest.read_to_end(&mut buf))
            .await
            .expect("a flooding connection past its source's cap was kept");
        assert!(buf.is_empty());
    }
    s.node.shutdown().await.unwrap();
}

/// Review s14 F5: a peer's connection waits in a pool of its own: silent connections from
/// many sources, each under its source's cap, fill the anonymous pool and evict its oldest,
/// never the peer's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_sources_never_evict_a_peers_connection() {
    let cfg = config(8, 2);
    cfg.peer_sources.set(["127.0.0.2".parse().unwrap()]);
    let s = served(cfg).await;
    for round in 0..10u8 {
        let voter = connect_from("127.0.0.2", s.addr).await;
        let mut flood = Vec::new();
        for n in 0..12u8 {
            flood.push(connect_from(&format!("127.0.{}.{n}", 10 + round), s.addr).await);
        }
        assert!(vote_on(connect_from("127.0.0.3", s.addr).await).await);
        assert!(vote_on(voter).await, "round {round}: the peer was evicted");
    }
    s.node.shutdown().await.unwrap();
}

/// Review s14 F6: connections that say Hello, declare a large append body and stall hold at
/// most the listener's body budget between them (the rest wait for it), are cut at the body
/// deadline and give it back; a real peer's append is answered meanwhile or, at the latest,
/// once they are cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_hold_at_most_the_budget_and_are_cut() {
    const BODY: u32 = 1 << 20;
    // Three stalled bodies fit (the floor: one snapshot chunk, 3 MiB + 64 KiB), seven wait.
    let budget = BodyBudget::new(limits().snapshot as usize, None);
    let cfg = ServerConfig {
        body_budget: budget.clone(),
        body_deadline: Duration::from_secs(2),
        ..server_config(SERVED, Duration::from_secs(10), 64)
    };
    let s = served(cfg).await;
    let mut stalled = Vec::new();
    for _ in 0..10 {
        let mut c = TcpStream::connect(s.addr).await.unwrap();
        let mut out = hello();
        out.extend(raw_frame(Kind::Append, 1, BODY, &[0; 100]));
        c.write_all(&out).await.unwrap();
        stalled.push(c);
    }
    let fits = budget.bytes() / BODY as usize;
    let bound = std::time::Instant::now() + BOUND;
    while budget.held() < fits * BODY as usize {
        assert!(std::time::Instant::now() < bound, "held {}", budget.held());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(budget.held() <= budget.bytes());

    let mut net = TcpNetwork::new(9, GROUP, TOKEN, limits());
    let mut c = net
        .new_client(SERVED, &BasicNode::new(s.addr.to_string()))
        .await;
    let append = || AppendEntriesRequest {
        // A leader of an older term: answered with the node's higher vote, nothing changes.
        vote: Vote::new_committed(0, 9),
        prev_log_id: None,
        entries: vec![],
        leader_commit: None,
    };
    // A heartbeat is a small body: answered at once from the reserve (retried only in case
    // the client's connection is cut).
    loop {
        match c.append_entries(append(), RPCOption::new(BOUND)).await {
            Ok(_) => break,
            Err(e) => assert!(std::time::Instant::now() < bound, "never answered: {e}"),
        }
    }
    for mut c in stalled {
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(BOUND, c.read_to_end(&mut buf))
            .await
            .expect("a stalled body was never cut");
        assert!(buf.is_empty(), "a stalled body was answered");
    }
    assert_eq!(budget.held(), 0);
    s.node.shutdown().await.unwrap();
}

/// Review s26-port M4: while stalled large bodies hold the whole budget and more wait for it
/// (the deadline an hour away), a vote is answered, and they still hold the budget after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_is_answered_while_stalled_bodies_hold_the_budget() {
    const BODY: u32 = 1 << 20;
    let budget = BodyBudget::new(limits().snapshot as usize, None);
    let cfg = ServerConfig {
        body_budget: budget.clone(),
        body_deadline: Duration::from_secs(3600),
        ..server_config(SERVED, Duration::from_secs(10), 64)
    };
    let s = served(cfg).await;
    let mut stalled = Vec::new();
    for _ in 0..6 {
        let mut c = TcpStream::connect(s.addr).await.unwrap();
        let mut out = hello();
        out.extend(raw_frame(Kind::Append, 1, BODY, &[0; 100]));
        c.write_all(&out).await.unwrap();
        stalled.push(c);
    }
    let held = budget.bytes() / BODY as usize * BODY as usize;
    let bound = std::time::Instant::now() + BOUND;
    while budget.held() < held {
        assert!(std::time::Instant::now() < bound, "held {}", budget.held());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for _ in 0..5 {
        assert!(vote_on(TcpStream::connect(s.addr).await.unwrap()).await);
    }
    assert_eq!(budget.held(), held);
    drop(stalled);
    s.node.shutdown().await.unwrap();
}

/// A body budget below the largest body would never read a peer's snapshot chunk: the
/// listener refuses to start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_budget_below_the_largest_body_does_not_start() {
    let cfg = ServerConfig {
        body_budget: BodyBudget::new(limits().snapshot as usize - 1, None),
        ..server_config(SERVED, Duration::from_secs(10), 64)
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let r = crate::serve_cluster(
        listener,
        cfg,
        Groups::default(),
        std::future::pending::<()>(),
    )
    .await;
    assert!(matches!(r, Err(wire::WireError::Config(_))), "{r:?}");
}
