//! `PeerClient` against a scripted peer on a raw socket: a cancelled RPC never leaves its
//! connection to the next one, and each kind of failure maps to the openraft error the design
//! names (docs/raft-storage.md "Errors").

// The replies are openraft's own `Result`s, large error and all.
#![allow(clippy::result_large_err)]

use std::time::Duration;

use openraft::error::{Fatal, InstallSnapshotError, RPCError, RaftError, SnapshotMismatch};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{InstallSnapshotRequest, VoteRequest, VoteResponse};
use openraft::{BasicNode, SnapshotMeta, SnapshotSegmentId, Vote};
use tokio::net::{TcpListener, TcpStream};

use crate::rpc_codec;
use crate::tcp_client::PeerClient;
use crate::types::TypeConfig;
use crate::wire::{self, Frame, Kind};
use crate::TcpNetwork;

use super::tcp_cluster::{limits, GROUP, TOKEN};

const BOUND: Duration = Duration::from_secs(20);

fn vote() -> VoteRequest<u64> {
    VoteRequest {
        vote: Vote::new(2, 1),
        last_log_id: None,
    }
}

fn granted() -> Result<VoteResponse<u64>, RaftError<u64>> {
    Ok(VoteResponse {
        vote: Vote::new(2, 1),
        vote_granted: true,
        last_log_id: None,
    })
}

async fn client(listener: &TcpListener) -> PeerClient {
    let addr = listener.local_addr().unwrap().to_string();
    let mut net = TcpNetwork::new(1, GROUP, TOKEN, limits());
    net.new_client(2, &BasicNode::new(addr)).await
}

/// The scripted peer's side: accept, check the Hello, read one request.
async fn accept_request(listener: &TcpListener) -> (TcpStream, Frame) {
    let (mut s, _) = tokio::time::timeout(BOUND, listener.accept())
        .await
        .expect("no connection came")
        .unwrap();
    let ids = wire::accept_hello(&mut s, TOKEN, BOUND).await.unwrap();
    assert_eq!((ids.from, ids.to), (1, 2));
    let f = wire::read_frame(&mut s, &limits()).await.unwrap();
    let (group, _) = rpc_codec::group_of(&f.body).unwrap();
    assert_eq!(group, GROUP);
    (s, f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_rpc_gives_up_its_connection_and_the_next_reconnects() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut c = client(&listener).await;
    let peer = async {
        // The first connection is held and never answered (whether its request arrived
        // before the client gave up does not matter).
        let (first, _) = tokio::time::timeout(BOUND, listener.accept())
            .await
            .expect("no connection came")
            .unwrap();
        // The next RPC comes on a new connection, with a new Hello.
        let (mut second, f) = accept_request(&listener).await;
        let reply = rpc_codec::encode_reply(&granted());
        wire::write_frame(&mut second, Kind::Reply, f.id, &reply)
            .await
            .unwrap();
        (first, second)
    };
    let calls = async {
        let r = c
            .vote(vote(), RPCOption::new(Duration::from_millis(200)))
            .await;
        assert!(matches!(r, Err(RPCError::Unreachable(_))), "{r:?}");
        c.vote(vote(), RPCOption::new(BOUND)).await
    };
    let (_conns, r) = tokio::join!(peer, calls);
    assert!(r.unwrap().vote_granted);
}

/// A future dropped mid-RPC (openraft's own timeout) takes its connection with it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_rpc_future_gives_up_its_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut c = client(&listener).await;
    let (sent, sent_rx) = tokio::sync::oneshot::channel();
    let peer = async {
        let (first, _) = accept_request(&listener).await;
        let _ = sent.send(());
        let (mut second, f) = accept_request(&listener).await;
        let reply = rpc_codec::encode_reply(&granted());
        wire::write_frame(&mut second, Kind::Reply, f.id, &reply)
            .await
            .unwrap();
        (first, second)
    };
    let calls = async {
        {
            let pending = c.vote(vote(), RPCOption::new(BOUND));
            tokio::pin!(pending);
            // Polled until the peer has read the request, then dropped unanswered.
            tokio::select! {
                r = &mut pending => panic!("answered without a reply: {r:?}"),
                _ = sent_rx => {}
            }
        }
        c.vote(vote(), RPCOption::new(BOUND)).await
    };
    let (_conns, r) = tokio::join!(peer, calls);
    assert!(r.unwrap().vote_granted);
}

fn snapshot() -> InstallSnapshotRequest<TypeConfig> {
    InstallSnapshotRequest {
        vote: Vote::new_committed(2, 1),
        meta: SnapshotMeta::default(),
        offset: 0,
        data: vec![5; 100],
        done: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_garbage_and_foreign_ids_map_to_their_errors() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut c = client(&listener).await;
    let peer = async {
        let (mut s, f) = accept_request(&listener).await;
        // The group is not served there (yet): unreachable.
        let text = rpc_codec::encode_unavailable("not here");
        wire::write_frame(&mut s, Kind::Reply, f.id, &text)
            .await
            .unwrap();
        // The peer's Raft stopped: unreachable too.
        let f = wire::read_frame(&mut s, &limits()).await.unwrap();
        let stopped: Result<VoteResponse<u64>, RaftError<u64>> =
            Err(RaftError::Fatal(Fatal::Stopped));
        let reply = rpc_codec::encode_reply(&stopped);
        wire::write_frame(&mut s, Kind::Reply, f.id, &reply)
            .await
            .unwrap();
        // The peer's Raft refuses a snapshot chunk: a remote error.
        let f = wire::read_frame(&mut s, &limits()).await.unwrap();
        assert_eq!(f.kind, Kind::Snapshot);
        let seg = |offset| SnapshotSegmentId {
            id: "s".into(),
            offset,
        };
        let refused: Result<VoteResponse<u64>, RaftError<u64, InstallSnapshotError>> = Err(
            RaftError::APIError(InstallSnapshotError::SnapshotMismatch(SnapshotMismatch {
                expect: seg(0),
                got: seg(7),
            })),
        );
        let reply = rpc_codec::encode_reply(&refused);
        wire::write_frame(&mut s, Kind::Reply, f.id, &reply)
            .await
            .unwrap();
        // Garbage with the right id.
        let f = wire::read_frame(&mut s, &limits()).await.unwrap();
        let junk = b"\x00not json";
        wire::write_frame(&mut s, Kind::Reply, f.id, junk)
            .await
            .unwrap();
        // The next request comes on a new connection; it is answered with another id.
        let (mut s2, f) = accept_request(&listener).await;
        let reply = rpc_codec::encode_reply(&granted());
        wire::write_frame(&mut s2, Kind::Reply, f.id + 1, &reply)
            .await
            .unwrap();
        (s, s2)
    };
    let calls = async {
        let r = c.vote(vote(), RPCOption::new(BOUND)).await;
        assert!(matches!(r, Err(RPCError::Unreachable(_))), "{r:?}");
        let r = c.vote(vote(), RPCOption::new(BOUND)).await;
        assert!(matches!(r, Err(RPCError::Unreachable(_))), "{r:?}");
        let r = c.install_snapshot(snapshot(), RPCOption::new(BOUND)).await;
        assert!(matches!(r, Err(RPCError::RemoteError(_))), "{r:?}");
        // Review s14 F3: garbage and a foreign id are Unreachable, so openraft backs off
        // instead of reconnecting at once (it retries `Network` errors without a pause).
        let r = c.vote(vote(), RPCOption::new(BOUND)).await;
        assert!(matches!(r, Err(RPCError::Unreachable(_))), "{r:?}");
        let r = c.vote(vote(), RPCOption::new(BOUND)).await;
        assert!(matches!(r, Err(RPCError::Unreachable(_))), "{r:?}");
    };
    let _ = tokio::join!(peer, calls);
}

/// Review s14 F3: a peer that is not a queen listener (here an HTTP server answering 400, as
/// when `peers` names the HTTP port) is Unreachable, which openraft backs off on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_answer_is_unreachable() {
    use tokio::io::AsyncWriteExt;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut c = client(&listener).await;
    let peer = async {
        let (mut s, _) = listener.accept().await.unwrap();
        s.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        s
    };
    let (r, _s) = tokio::join!(c.vote(vote(), RPCOption::new(BOUND)), peer);
    assert!(matches!(r, Err(RPCError::Unreachable(_))), "{r:?}");
}

fn append(n: u64, bytes: usize) -> openraft::raft::AppendEntriesRequest<TypeConfig> {
    openraft::raft::AppendEntriesRequest {
        vote: Vote::new_committed(2, 1),
        prev_log_id: None,
        entries: (1..=n)
            .map(|i| openraft::Entry {
                log_id: crate::types::log_id(2, i),
                payload: openraft::EntryPayload::Normal(vec![7; bytes]),
            })
            .collect(),
        leader_commit: None,
    }
}

/// Review s14 F2: an append of several entries that times out halves the client's budget, so
/// the same batch is then refused with `PayloadTooLarge` (nothing sent) and openraft retries
/// with fewer entries; a batch within the budget is sent. Review s14 F4/F3: a batch over the
/// listener's limit is `PayloadTooLarge` and one entry over it `Unreachable`, unsent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_append_shrinks_the_next_batch() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut c = client(&listener).await;
    let peer = async {
        // The first append is never answered; the second comes on a new connection.
        let (first, _) = accept_request(&listener).await;
        let (second, f) = accept_request(&listener).await;
        (first, second, f)
    };
    let calls = async {
        let r = c
            .append_entries(
                append(40, 10_000),
                RPCOption::new(Duration::from_millis(300)),
            )
            .await;
        assert!(matches!(r, Err(RPCError::Unreachable(_))), "{r:?}");
        let r = c
            .append_entries(append(40, 10_000), RPCOption::new(BOUND))
            .await;
        match r {
            Err(RPCError::PayloadTooLarge(p)) => {
                assert!((1..40).contains(&p.entries_hint()), "{p:?}")
            }
            other => panic!("{other:?}"),
        }
        // Over the listener's limit whatever the budget: refused before sending.
        let r = c
            .append_entries(append(4, 1 << 20), RPCOption::new(BOUND))
            .await;
        assert!(matches!(r, Err(RPCError::PayloadTooLarge(_))), "{r:?}");
        let r = c
            .append_entries(append(1, 3 << 20), RPCOption::new(BOUND))
            .await;
        assert!(matches!(r, Err(RPCError::Unreachable(_))), "{r:?}");
        // A quarter of the batch fits and is sent (the peer holds it unanswered).
        let r = c
            .append_entries(
                append(10, 10_000),
                RPCOption::new(Duration::from_millis(300)),
            )
            .await;
        assert!(matches!(r, Err(RPCError::Unreachable(_))), "{r:?}");
    };
    let ((_a, _b, f), ()) = tokio::join!(peer, calls);
    assert_eq!(f.kind, Kind::Append);
}

/// Review s14 F11: a snapshot chunk over the peers' limit is refused before anything is sent,
/// with a message naming the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_chunk_over_the_limit_is_not_sent() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut c = client(&listener).await;
    let mut big = snapshot();
    big.data = vec![5; limits().snapshot as usize];
    let r = c.install_snapshot(big, RPCOption::new(BOUND)).await;
    match r {
        Err(RPCError::Unreachable(u)) => assert!(u.to_string().contains("over the limit"), "{u}"),
        other => panic!("{other:?}"),
    }
    let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(accepted.is_err(), "a connection was opened");
}
