//! The calling side of the Raft network between `queen` processes: a `RaftNetworkFactory` whose
//! clients each open one TCP connection, lazily, on the peer's cluster address taken from the
//! membership (`BasicNode.addr`, never from a request), say `Hello` with the cluster token,
//! then send one request at a time and read its `Reply` (docs/raft-storage.md "the Raft
//! network").
//!
//! The connection is taken out of the client for the length of an RPC and put back only once
//! the reply was read: if openraft drops the RPC future at its timeout, the connection goes
//! with it, half-written frame or unread reply included, and the next RPC reconnects.

// openraft's network trait returns `RPCError` (~130 bytes) by value; helpers return the same
// type so `?` reaches the trait boundary without boxing.
#![allow(clippy::result_large_err)]

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, PayloadTooLarge, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::Deserialize;
use tokio::io::BufStream;
use tokio::net::TcpStream;

use crate::rpc_codec::{self, Reply};
use crate::types::{NodeId, TypeConfig};
use crate::wire::{self, Kind, Limits, WireError};

/// The Raft network of one group: what `RaftNode::start_with` takes in a cluster.
#[derive(Clone)]
pub struct TcpNetwork {
    /// This node's id, named in every Hello as its sender.
    me: NodeId,
    group: Arc<str>,
    token: Arc<[u8]>,
    limits: Limits,
    /// Told when a peer refuses a vote request as from a non-member (review s21 M6).
    gate: Option<crate::VoteGate>,
    /// With it, a snapshot is the durable checkpoint generation streamed from the group's log
    /// store (`snapshot_sender`).
    snapshots: Option<crate::SnapshotFeed>,
}

impl TcpNetwork {
    /// The network of a member whose `gate` learns when its peers no longer count it a
    /// member.
    pub fn with_gate(mut self, gate: crate::VoteGate) -> TcpNetwork {
        self.gate = Some(gate);
        self
    }

    /// `limits` must be those of the peers' listeners (the same configuration on every node):
    /// an append is kept under their `append` budget before it is sent.
    pub fn new(me: NodeId, group: &str, token: &[u8], limits: Limits) -> TcpNetwork {
        TcpNetwork {
            me,
            group: group.into(),
            token: token.into(),
            limits,
            gate: None,
            snapshots: None,
        }
    }

    /// A network whose snapshots are the durable checkpoint generations of the group's log
    /// store, streamed with their records (`snapshot_sender`); without it openraft's chunked
    /// sender reads the snapshot's own bytes.
    pub fn with_snapshots(mut self, feed: crate::SnapshotFeed) -> TcpNetwork {
        self.snapshots = Some(feed);
        self
    }
}

/// One peer, as openraft sees it: one connection, opened on first use.
pub struct PeerClient {
    net: TcpNetwork,
    target: NodeId,
    addr: String,
    conn: Option<BufStream<TcpStream>>,
    /// The last request id used; ids only need to be new on a connection.
    last_id: u64,
    /// The largest append body this client sends now: halved (to half the batch that failed)
    /// when an append of several entries times out, doubled back after each success, never
    /// above `limits.append` (review s14 F2: without it a batch too slow for the timeout was
    /// resent whole for ever).
    budget: u32,
    /// Whether the last call ended at its timeout.
    timed_out: bool,
    /// While the peer answered that it takes no snapshot streams (its
    /// `cluster_snapshot_catch_up` off): until when none is sent to it again, and the wait
    /// after its next such answer (`snapshot_sender`; review s27 snap: openraft retries every
    /// 500 ms, and each retry read and shipped a whole chunk).
    no_inbox: Option<(std::time::Instant, Duration)>,
}

/// The first wait after a peer answered that it takes no snapshot streams; doubled at each
/// such answer up to `NO_INBOX_MAX`, which bounds how late a peer whose key was turned on is
/// caught up.
const NO_INBOX_FIRST: Duration = Duration::from_secs(5);
const NO_INBOX_MAX: Duration = Duration::from_secs(300);

impl PeerClient {
    pub(crate) fn target(&self) -> NodeId {
        self.target
    }

    /// How long no snapshot is sent to this peer yet, after it answered that it takes none.
    pub(crate) fn no_inbox_wait(&self) -> Option<Duration> {
        let (until, _) = self.no_inbox?;
        until
            .checked_duration_since(std::time::Instant::now())
            .filter(|d| !d.is_zero())
    }

    /// The peer answered that it takes no snapshot streams: none is sent for the next wait,
    /// twice the last one (at most `NO_INBOX_MAX`). The wait it set.
    pub(crate) fn note_no_inbox(&mut self) -> Duration {
        let wait = self.no_inbox.map_or(NO_INBOX_FIRST, |(_, w)| {
            w.saturating_mul(2).min(NO_INBOX_MAX)
        });
        let until = std::time::Instant::now() + wait;
        self.no_inbox = Some((until, wait));
        wait
    }

    /// The peer took a snapshot chunk: it has an inbox now.
    pub(crate) fn note_snapshot_taken(&mut self) {
        self.no_inbox = None;
    }
}

/// The smallest budget a timeout shrinks to; a single entry is always sent whatever its size.
const MIN_BUDGET: u32 = 64 * 1024;

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        PeerClient {
            net: self.clone(),
            target,
            addr: crate::member_addr::cluster_part(&node.addr).to_string(),
            conn: None,
            last_id: 0,
            budget: self.limits.append,
            timed_out: false,
            no_inbox: None,
        }
    }
}

/// Why an RPC got no answer, before it is shaped as openraft's `RPCError`.
#[derive(Debug, thiserror::Error)]
enum CallError {
    /// The peer could not be reached or did not answer in time: openraft backs off.
    #[error("node {target} at {addr}: {why}")]
    Unreachable {
        target: NodeId,
        addr: String,
        why: String,
    },
    /// The peer answered something this node cannot read, or the request cannot be sent at
    /// all. Also `Unreachable` to openraft: it backs off only on that (review s14 F3), so any
    /// other error would be retried at once, reconnecting in a tight loop.
    #[error("node {target} at {addr} answered garbage: {why}")]
    Garbage {
        target: NodeId,
        addr: String,
        why: String,
    },
}

impl CallError {
    fn into_rpc<E: std::error::Error>(self) -> RPCError<NodeId, BasicNode, E> {
        match self {
            CallError::Unreachable { .. } | CallError::Garbage { .. } => {
                RPCError::Unreachable(Unreachable::new(&self))
            }
        }
    }
}

impl PeerClient {
    fn unreachable(&self, why: impl ToString) -> CallError {
        CallError::Unreachable {
            target: self.target,
            addr: self.addr.clone(),
            why: why.to_string(),
        }
    }

    fn garbage(&self, why: impl ToString) -> CallError {
        CallError::Garbage {
            target: self.target,
            addr: self.addr.clone(),
            why: why.to_string(),
        }
    }

    /// A connection that failed: one the peer closed right after our Hello most likely
    /// refused it, and a wrong token otherwise looks just like a node that is down (review
    /// s14 F9).
    fn closed(&self, fresh: bool, e: std::io::Error) -> CallError {
        use std::io::ErrorKind::{BrokenPipe, ConnectionReset, UnexpectedEof};
        if fresh && matches!(e.kind(), UnexpectedEof | ConnectionReset | BrokenPipe) {
            return self.unreachable(format!(
                "closed after Hello: wrong cluster_token? (or a peers entry naming another \
                 node at this address): {e}"
            ));
        }
        self.unreachable(e)
    }

    async fn connect(&self) -> Result<BufStream<TcpStream>, CallError> {
        if crate::undiallable::is_undiallable(&self.addr) {
            // Checked before the resolver sees it (review s31 member L5).
            return Err(
                self.unreachable("a removed member's reserved address (.invalid): never dialled")
            );
        }
        let tcp = TcpStream::connect(self.addr.as_str())
            .await
            .map_err(|e| self.unreachable(e))?;
        // One small frame per RPC: waiting to coalesce would only add latency.
        tcp.set_nodelay(true).map_err(|e| self.unreachable(e))?;
        crate::keepalive::enable(&tcp).map_err(|e| self.unreachable(e))?;
        let mut conn = BufStream::new(tcp);
        // Named to the target id: a node at this address that is not `target` refuses it.
        let hello = wire::hello_body(self.net.me, self.target, &self.net.token);
        wire::write_frame(&mut conn, Kind::Hello, 0, &hello)
            .await
            .map_err(|e| self.unreachable(e))?;
        Ok(conn)
    }

    /// Sends one request and reads its reply body, within `ttl`.
    async fn call(&mut self, kind: Kind, body: &[u8], ttl: Duration) -> Result<Vec<u8>, CallError> {
        let r = tokio::time::timeout(ttl, self.exchange(kind, body)).await;
        self.timed_out = r.is_err();
        match r {
            Ok(r) => r,
            Err(_) => Err(self.unreachable(format!("no reply within {ttl:?}"))),
        }
    }

    async fn exchange(&mut self, kind: Kind, body: &[u8]) -> Result<Vec<u8>, CallError> {
        // Taken, not borrowed: a cancelled call drops the connection with itself.
        let (mut conn, fresh) = match self.conn.take() {
            Some(c) => (c, false),
            None => (self.connect().await?, true),
        };
        self.last_id += 1;
        let id = self.last_id;
        match wire::write_frame(&mut conn, kind, id, body).await {
            Ok(()) => {}
            Err(WireError::Io(e)) => return Err(self.closed(fresh, e)),
            Err(e) => return Err(self.unreachable(e)),
        }
        let reply = match wire::read_reply(&mut conn, &self.net.limits, id).await {
            Ok(r) => r,
            Err(WireError::Io(e)) => return Err(self.closed(fresh, e)),
            Err(e) => return Err(self.garbage(e)),
        };
        self.conn = Some(conn);
        Ok(reply)
    }

    /// One RPC end to end: the reply decoded, a refusal as `RemoteError`, a peer stopped or
    /// not hosting the group as `Unreachable`.
    async fn rpc<T, E>(
        &mut self,
        kind: Kind,
        body: Result<Vec<u8>, rpc_codec::DecodeError>,
        ttl: Duration,
    ) -> Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        T: for<'de> Deserialize<'de>,
        E: std::error::Error + for<'de> Deserialize<'de>,
    {
        let body = body.map_err(|e| self.garbage(format!("cannot encode: {e}")).into_rpc())?;
        let reply = self
            .call(kind, &body, ttl)
            .await
            .map_err(CallError::into_rpc)?;
        match rpc_codec::decode_reply::<T, RaftError<NodeId, E>>(&reply) {
            Ok(Reply::Ok(v)) => Ok(v),
            // A peer whose core stopped is gone from the caller's side, as an unreachable one.
            Ok(Reply::Refused(RaftError::Fatal(f))) => Err(self.unreachable(f).into_rpc()),
            Ok(Reply::Refused(e)) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            Ok(Reply::Unavailable(why)) => Err(self.unreachable(why).into_rpc()),
            Ok(Reply::NotMember(why)) => {
                if let Some(gate) = &self.net.gate {
                    gate.note_removed(self.target);
                }
                Err(self.unreachable(why).into_rpc())
            }
            Err(e) => {
                // Out of step with the peer: start over on a new connection.
                self.conn = None;
                Err(self.garbage(e).into_rpc())
            }
        }
    }
}

impl TcpNetwork {
    /// Asks `target` (at `addr`, its membership entry) to campaign at once: this node leads
    /// the group in `term` and hands the lead over (`RaftNode::hand_over`). Ok once the
    /// target accepted the request, not once it won; Err says why it refused or could not be
    /// reached within `ttl`.
    pub(crate) async fn elect_now(
        &self,
        target: NodeId,
        addr: &str,
        term: u64,
        ttl: Duration,
    ) -> Result<(), String> {
        let mut client = self.clone().new_client(target, &BasicNode::new(addr)).await;
        let body = rpc_codec::encode_elect(&self.group, term).map_err(|e| e.to_string())?;
        let reply = client
            .call(Kind::Elect, &body, ttl)
            .await
            .map_err(|e| e.to_string())?;
        match rpc_codec::decode_reply::<(), String>(&reply) {
            Ok(Reply::Ok(())) => Ok(()),
            Ok(Reply::Refused(why) | Reply::Unavailable(why) | Reply::NotMember(why)) => {
                Err(format!("node {target} refused to campaign: {why}"))
            }
            Err(e) => Err(format!("node {target} answered garbage: {e}")),
        }
    }
}

impl TcpNetwork {
    /// Asks `target` (at `addr`) for its group's committed index, confirmed as its leader
    /// (`commit_read`): a follower's answer names the leader it knows. Err says why no answer
    /// came within `ttl` (unreachable, refused, a garbled reply).
    pub(crate) async fn commit_read(
        &self,
        target: NodeId,
        addr: &str,
        ttl: Duration,
    ) -> Result<rpc_codec::CommitRead, String> {
        let mut client = self.clone().new_client(target, &BasicNode::new(addr)).await;
        let body = rpc_codec::encode_commit_read(&self.group).map_err(|e| e.to_string())?;
        let reply = client
            .call(Kind::CommitRead, &body, ttl)
            .await
            .map_err(|e| {
                let e = e.to_string();
                if e.contains("closed after Hello") {
                    // Kind 7 is unknown to a listener before session 32, which closes the
                    // connection just as a wrong token does (review s33 M-2).
                    format!(
                        "{e}; or the peer runs a build without the commit read (before session 32)"
                    )
                } else {
                    e
                }
            })?;
        match rpc_codec::decode_reply::<rpc_codec::CommitRead, String>(&reply) {
            Ok(Reply::Ok(answer)) => Ok(answer),
            Ok(Reply::Refused(why) | Reply::Unavailable(why) | Reply::NotMember(why)) => {
                Err(format!("node {target} did not answer a commit read: {why}"))
            }
            Err(e) => Err(format!("node {target} answered garbage: {e}")),
        }
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let n = rpc.entries.len() as u64;
        // Sized from the payload lengths: a batch over the budget is refused before a byte of
        // it is copied (review s14 F4).
        let len = rpc_codec::append_len(&self.net.group, &rpc)
            .map_err(|e| self.garbage(format!("cannot encode: {e}")).into_rpc())?;
        if n > 1 && len > u64::from(self.budget) {
            // openraft retries with at most the hinted number of entries.
            let hint = (n * u64::from(self.budget) / len).clamp(1, n - 1);
            return Err(PayloadTooLarge::new_entries_hint(hint).into());
        }
        if len > u64::from(self.net.limits.append) {
            // One entry too big for any append cannot be sent (docs/raft-storage.md, the
            // append budget); Unreachable, so openraft backs off (review s14 F3).
            let why = format!(
                "one entry of {len} bytes is over the append budget of {} bytes",
                self.net.limits.append
            );
            return Err(self.garbage(why).into_rpc());
        }
        let body = rpc_codec::encode_append(&self.net.group, &rpc);
        let r = self.rpc(Kind::Append, body, option.hard_ttl()).await;
        if r.is_ok() {
            self.budget = self.budget.saturating_mul(2).min(self.net.limits.append);
        } else if self.timed_out && n > 1 {
            // Too slow for the timeout: the next batch is half of this one.
            self.budget = u32::try_from(len / 2).unwrap_or(u32::MAX).max(MIN_BUDGET);
        }
        r
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let body = rpc_codec::encode_snapshot(&self.net.group, &rpc);
        if let Ok(b) = &body {
            if b.len() as u64 > u64::from(self.net.limits.snapshot) {
                // The peer would close at the header and the same chunk would be retried
                // unseen: say why, send nothing (review s14 F11).
                let why = format!(
                    "a snapshot chunk of {} bytes is over the limit of {} bytes \
                     (snapshot_max_chunk_size must be the same on every node)",
                    b.len(),
                    self.net.limits.snapshot
                );
                return Err(self.garbage(why).into_rpc());
            }
        }
        self.rpc(Kind::Snapshot, body, option.hard_ttl()).await
    }

    async fn full_snapshot(
        &mut self,
        vote: openraft::Vote<NodeId>,
        snapshot: openraft::Snapshot<TypeConfig>,
        cancel: impl std::future::Future<Output = openraft::error::ReplicationClosed>
            + openraft::OptionalSend
            + 'static,
        option: RPCOption,
    ) -> Result<
        openraft::raft::SnapshotResponse<NodeId>,
        openraft::error::StreamingError<TypeConfig, openraft::error::Fatal<NodeId>>,
    > {
        use openraft::network::snapshot_transport::{Chunked, SnapshotTransport};
        let Some(feed) = self.net.snapshots.clone() else {
            if snapshot.snapshot.get_ref().is_empty() {
                // A position only (`StateMachine::get_current_snapshot`: a node that reclaimed
                // with `cluster_snapshot_catch_up` on, restarted with it off): a peer's
                // openraft cannot install it and its core would stop (review s27 snap, key
                // turned back off). Unreachable: openraft backs off; nothing is sent.
                let why = format!(
                    "snapshot {} carries no state (this node reclaimed its log with \
                     cluster_snapshot_catch_up on; turn it on again to catch this peer up)",
                    snapshot.meta.snapshot_id
                );
                return Err(openraft::error::StreamingError::Unreachable(
                    Unreachable::new(&self.unreachable(why)),
                ));
            }
            return Chunked::send_snapshot(self, vote, snapshot, cancel, option).await;
        };
        let chunk = self.net.limits.snapshot.saturating_sub(wire::ENVELOPE) as usize;
        let what = (vote, snapshot);
        crate::snapshot_sender::send(self, &feed, chunk, what, cancel, option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let body = rpc_codec::encode_vote(&self.net.group, &rpc);
        self.rpc(Kind::Vote, body, option.hard_ttl()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The refusal comes before any lookup: the error is the network's own, whatever the
    /// host's resolver would answer for the name.
    #[tokio::test]
    async fn a_removed_members_address_is_refused_without_a_dial() {
        let limits = Limits {
            append: 1 << 20,
            vote: 1 << 10,
            snapshot: 1 << 20,
            reply: 1 << 20,
        };
        let mut net = TcpNetwork::new(1, "acme", b"token", limits);
        let addr = crate::undiallable::address(3);
        let client = net.new_client(3, &BasicNode::new(&addr)).await;
        let Err(e) = client.connect().await else {
            panic!("{addr} was dialled");
        };
        assert!(e.to_string().contains("never dialled"), "{e}");
        // A composed addr (HTTP part too) is judged by its cluster part.
        let composed = crate::member_addr::compose(&addr, Some("http://h:1"), None);
        let client = net.new_client(3, &BasicNode::new(&composed)).await;
        assert!(client.connect().await.is_err());
    }
}
