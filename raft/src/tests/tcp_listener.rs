//! The cluster listener against hostile peers on raw sockets: each bad connection is closed
//! and the listener still answers a proper client afterwards.

use std::net::SocketAddr;
use std::time::Duration;

use openraft::error::RPCError;
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::VoteRequest;
use openraft::{BasicNode, Vote};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::tcp_server::Groups;
use crate::wire::{self, Kind};
use crate::TcpNetwork;

use super::fixtures::{open_stores, start_fresh};
use super::tcp_cluster::{limits, listen, server_config, GROUP, TOKEN};

/// A safety bound on every wait, never an assertion about time.
const BOUND: Duration = Duration::from_secs(20);

struct Served {
    addr: SocketAddr,
    _stop: oneshot::Sender<()>,
    node: crate::RaftNode,
    _dir: tempfile::TempDir,
}

/// The id of the single voter `served` runs (`start_fresh`).
const SERVED: u64 = 1;

/// A single-voter group served on a fresh listener.
async fn served(hello_deadline: Duration, max_pre_hello: usize) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let (log, store) = open_stores(dir.path());
    let node = start_fresh(&log, &store).await;
    let groups = Groups::default();
    groups.add(GROUP, node.raft().clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = listen(
        listener,
        server_config(SERVED, hello_deadline, max_pre_hello),
        groups,
    );
    Served {
        addr,
        _stop: stop,
        node,
        _dir: dir,
    }
}

fn raw_frame(kind: u8, id: u64, len: u32, body: &[u8]) -> Vec<u8> {
    let mut f = vec![kind];
    f.extend_from_slice(&id.to_le_bytes());
    f.extend_from_slice(&len.to_le_bytes());
    f.extend_from_slice(body);
    f
}

fn hello(token: &[u8]) -> Vec<u8> {
    let body = wire::hello_body(9, SERVED, token);
    raw_frame(Kind::Hello as u8, 0, body.len() as u32, &body)
}

/// The listener closed `s` without answering: EOF (or a reset) and no byte.
async fn assert_closed_unanswered(mut s: TcpStream) {
    let mut buf = Vec::new();
    let r = tokio::time::timeout(BOUND, s.read_to_end(&mut buf))
        .await
        .expect("the listener kept the connection open");
    assert!(buf.is_empty(), "answered {buf:?} ({r:?})");
}

fn vote() -> VoteRequest<u64> {
    VoteRequest {
        vote: Vote::new(1, 9),
        last_log_id: None,
    }
}

/// A proper client of `group` votes; its answer or error.
async fn vote_on(
    addr: SocketAddr,
    group: &str,
) -> Result<
    openraft::raft::VoteResponse<u64>,
    RPCError<u64, BasicNode, openraft::error::RaftError<u64>>,
> {
    vote_as(addr, group, SERVED).await
}

/// A client that believes the node at `addr` is node `target` votes.
async fn vote_as(
    addr: SocketAddr,
    group: &str,
    target: u64,
) -> Result<
    openraft::raft::VoteResponse<u64>,
    RPCError<u64, BasicNode, openraft::error::RaftError<u64>>,
> {
    let mut net = TcpNetwork::new(9, group, TOKEN, limits());
    let mut c = net
        .new_client(target, &BasicNode::new(addr.to_string()))
        .await;
    c.vote(vote(), RPCOption::new(BOUND)).await
}

/// Review s14 F1: node 1's listener reached under node 4's address refuses to answer as
/// node 4, so a wrong or reused address cannot count one node's vote twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_meant_for_another_node_id_is_refused() {
    let s = served(Duration::from_secs(10), 64).await;
    let r = vote_as(s.addr, GROUP, 4).await;
    assert!(matches!(r, Err(RPCError::Unreachable(_))), "{r:?}");
    // A raw Hello naming node 4 is closed unanswered.
    let body = wire::hello_body(9, 4, TOKEN);
    let good = crate::rpc_codec::encode_vote(GROUP, &vote()).unwrap();
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(&raw_frame(Kind::Hello as u8, 0, body.len() as u32, &body))
        .await
        .unwrap();
    c.write_all(&raw_frame(Kind::Vote as u8, 1, good.len() as u32, &good))
        .await
        .unwrap();
    assert_closed_unanswered(c).await;
    still_answers(&s).await;
    s.node.shutdown().await.unwrap();
}

async fn still_answers(s: &Served) {
    let r = vote_on(s.addr, GROUP).await;
    assert!(r.is_ok(), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_peers_are_closed_and_the_listener_keeps_answering() {
    let s = served(Duration::from_secs(1), 64).await;
    still_answers(&s).await;

    // A wrong token.
    let mut wrong = TOKEN.to_vec();
    wrong[5] ^= 1;
    let good = crate::rpc_codec::encode_vote(GROUP, &vote()).unwrap();
    let good_vote = raw_frame(Kind::Vote as u8, 1, good.len() as u32, &good);
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(&hello(&wrong)).await.unwrap();
    c.write_all(&good_vote).await.unwrap();
    assert_closed_unanswered(c).await;
    still_answers(&s).await;

    // A request before any Hello.
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(&good_vote).await.unwrap();
    assert_closed_unanswered(c).await;

    // An oversized frame after a good Hello: refused from its header.
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(&hello(TOKEN)).await.unwrap();
    c.write_all(&raw_frame(Kind::Append as u8, 1, limits().append + 1, b""))
        .await
        .unwrap();
    assert_closed_unanswered(c).await;
    still_answers(&s).await;

    // A Hello trickled and never finished: cut at the deadline.
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(&hello(TOKEN)[..6]).await.unwrap();
    assert_closed_unanswered(c).await;
    still_answers(&s).await;

    // Garbage bodies after a good Hello: a group length past the body, bad JSON in a vote, an
    // append whose entry count outruns its bytes, an unknown kind byte.
    let garbage = [
        raw_frame(Kind::Vote as u8, 1, 7, b"garbage"),
        raw_frame(Kind::Vote as u8, 1, 4, &[1, 0, b'g', b'{']),
        raw_frame(
            Kind::Append as u8,
            1,
            10,
            &[1, 0, b'g', 1, 0, 0, 0, b'{', 0, 0],
        ),
        raw_frame(Kind::Reply as u8, 1, 0, b""),
        raw_frame(42, 1, 0, b""),
    ];
    for g in garbage {
        let mut c = TcpStream::connect(s.addr).await.unwrap();
        c.write_all(&hello(TOKEN)).await.unwrap();
        c.write_all(&g).await.unwrap();
        assert_closed_unanswered(c).await;
    }
    still_answers(&s).await;

    // A group this node does not serve: answered, as unreachable, and the connection lives.
    let r = vote_on(s.addr, "not-here").await;
    assert!(matches!(r, Err(RPCError::Unreachable(_))), "{r:?}");
    still_answers(&s).await;
    s.node.shutdown().await.unwrap();
}

/// Past `max_pre_hello` silent connections the oldest is closed, long before its deadline,
/// and a proper peer still gets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_past_the_cap_evict_the_oldest() {
    let s = served(Duration::from_secs(3600), 2).await;
    let oldest = TcpStream::connect(s.addr).await.unwrap();
    let mut others = Vec::new();
    for _ in 0..2 {
        others.push(TcpStream::connect(s.addr).await.unwrap());
    }
    assert_closed_unanswered(oldest).await;
    // The proper client is the newest and evicts one more silent one, never itself.
    still_answers(&s).await;
    s.node.shutdown().await.unwrap();
}

/// The wire of a good exchange as the listener writes it, read on a raw socket: the reply
/// echoes the request's id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_echo_the_request_id_in_order() {
    let s = served(Duration::from_secs(10), 64).await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(&hello(TOKEN)).await.unwrap();
    let body = crate::rpc_codec::encode_vote(GROUP, &vote()).unwrap();
    for id in [7u64, 3, 1 << 40] {
        wire::write_frame(&mut c, Kind::Vote, id, &body)
            .await
            .unwrap();
    }
    for id in [7u64, 3, 1 << 40] {
        let reply = wire::read_reply(&mut c, &limits(), id).await.unwrap();
        assert_eq!(reply[0], 0, "{reply:?}");
    }
    s.node.shutdown().await.unwrap();
}

/// Review s14 F10: a listener that would close every peer refuses to start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_that_would_refuse_everyone_does_not_start() {
    for cfg in [
        server_config(SERVED, Duration::from_secs(10), 0),
        server_config(SERVED, Duration::ZERO, 64),
    ] {
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
}

/// Review s14 F9: a client with another token is closed after its Hello, and its error says
/// why it probably was, instead of looking like a node that is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_named_on_the_calling_side() {
    let s = served(BOUND, 16).await;
    let other = b"another cluster token, also over 32 bytes long";
    let mut net = TcpNetwork::new(2, GROUP, other, limits());
    let mut c = net
        .new_client(SERVED, &BasicNode::new(s.addr.to_string()))
        .await;
    let r = c.vote(vote(), RPCOption::new(BOUND)).await;
    match r {
        Err(RPCError::Unreachable(u)) => {
            let text = u.to_string();
            assert!(text.contains("wrong cluster_token?"), "{text}");
            assert!(!text.contains("another cluster token"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    still_answers(&s).await;
}

/// Review s26 snap H1: a checkpoint stream from a leader with `cluster_snapshot_catch_up` on
/// reaching a node with it off (no inbox) is refused before openraft or the disk sees it, as
/// Unreachable on the sending side (openraft backs off and retries), and the node goes on as
/// it was: still the leader of its own term (the stream's higher vote never reached openraft),
/// nothing purged, no snapshot installed, and it still commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_stream_to_a_node_without_an_inbox_is_unreachable_and_changes_nothing() {
    let s = served(Duration::from_secs(10), 64).await;
    s.node.propose(b"before".to_vec()).await.unwrap();
    let before = s.node.raft_handle().metrics().borrow().clone();
    let at = Some(openraft::LogId::new(
        openraft::CommittedLeaderId::new(9, 2),
        500,
    ));
    let req = openraft::raft::InstallSnapshotRequest {
        vote: Vote::new_committed(9, 2),
        meta: openraft::SnapshotMeta {
            last_log_id: at,
            last_membership: openraft::StoredMembership::default(),
            snapshot_id: format!("{}9-500-400-0000abcd", crate::tcp_server::CHECKPOINT_STREAM),
        },
        offset: 0,
        data: vec![7; 64],
        done: true,
    };
    let mut net = TcpNetwork::new(2, GROUP, TOKEN, limits());
    let mut c = net
        .new_client(SERVED, &BasicNode::new(s.addr.to_string()))
        .await;
    let r = c.install_snapshot(req, RPCOption::new(BOUND)).await;
    assert!(matches!(r, Err(RPCError::Unreachable(_))), "{r:?}");
    let after = s.node.raft_handle().metrics().borrow().clone();
    assert_eq!(after.vote, before.vote);
    assert_eq!(after.purged, before.purged);
    assert_eq!(after.snapshot, before.snapshot);
    s.node.propose(b"after".to_vec()).await.unwrap();
    let files: Vec<String> = std::fs::read_dir(s._dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("snapshot"))
        .collect();
    assert!(files.is_empty(), "{files:?}");
    s.node.shutdown().await.unwrap();
}
