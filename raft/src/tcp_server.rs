//! The answering side of the Raft network: the cluster listener. It accepts, holds a
//! connection to `accept_hello` (the cluster token within a deadline), then reads one request
//! at a time, hands it to the named group's `Raft` handle and writes the `Reply` with the
//! request's id. Anything malformed closes that one connection; the listener keeps going.
//!
//! Connections that have not said `Hello` are capped per source and in all (`pre_hello`), so
//! an anonymous peer opening sockets and staying silent holds a few of them, each for at most
//! the Hello deadline, and never evicts a peer's. Bodies are read within the listener's body
//! budget and deadline (`body_budget`).

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use openraft::Raft;
use tokio::io::BufStream;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::body_budget::{self, BodyBudget, BodyError};
use crate::pre_hello::{PeerSources, PreHello};
use crate::rpc_codec;
use crate::types::TypeConfig;
use crate::vote_gate::{self, VoteGate};
use crate::warn_limit::WarnLimit;
use crate::wire::{self, Head, Kind, Limits, WireError};

/// A wrong token is warned about at most once per source address per minute...
const BAD_TOKEN_WARN_EVERY: Duration = Duration::from_secs(60);
/// ...tracking at most this many sources.
const BAD_TOKEN_SOURCES: usize = 1024;

/// One group as the listener serves it: its Raft handle and, for a broker's member, its
/// vote gate.
#[derive(Clone)]
struct Served {
    raft: Raft<TypeConfig>,
    gate: Option<VoteGate>,
    /// Whether its leader's process is gone (`leader_gone`), checked when a peer leaves.
    gone: Arc<crate::leader_gone::Watch>,
    /// Receives its snapshot chunks outside openraft (`snapshot_inbox`); without one they go
    /// to openraft's own receiver.
    inbox: Option<crate::SnapshotInbox>,
}

/// The groups this node answers for, by name. Clones share them.
#[derive(Clone, Default)]
pub struct Groups {
    inner: Arc<RwLock<HashMap<String, Served>>>,
}

impl Groups {
    /// A group whose member always votes (in-process tests).
    pub fn add(&self, name: &str, raft: Raft<TypeConfig>) {
        let gone = Arc::default();
        self.insert(
            name,
            Served {
                raft,
                gate: None,
                gone,
                inbox: None,
            },
        );
    }

    /// A group whose member votes only as `gate` allows (`VoteGate`: joining, M5).
    pub fn add_member(&self, name: &str, raft: Raft<TypeConfig>, gate: VoteGate) {
        let (gate, gone) = (Some(gate), Arc::default());
        self.insert(
            name,
            Served {
                raft,
                gate,
                gone,
                inbox: None,
            },
        );
    }

    /// From now on the snapshot chunks of group `name` (added before) go to `inbox`, which
    /// stages the install before openraft hears of it (`snapshot_inbox`). False when the group
    /// is not served here.
    pub fn receive_snapshots(&self, name: &str, inbox: crate::SnapshotInbox) -> bool {
        let mut groups = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        match groups.get_mut(name) {
            Some(served) => {
                served.inbox = Some(inbox);
                true
            }
            None => false,
        }
    }

    fn insert(&self, name: &str, served: Served) {
        self.inner
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_string(), served);
    }

    pub fn remove(&self, name: &str) {
        self.inner
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }

    /// A connection from node `from` ended: each group it leads here checks whether its
    /// process is gone (`leader_gone`).
    fn peer_left(&self, from: u64) {
        let groups = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        for served in groups.values() {
            crate::leader_gone::connection_ended(
                &served.raft,
                served.gate.as_ref(),
                &served.gone,
                from,
            );
        }
    }

    fn get(&self, name: &str) -> Option<Served> {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }
}

/// How the listener treats its peers.
#[derive(Clone)]
pub struct ServerConfig {
    /// This node's id: a Hello meant for another id is refused (review s14 F1).
    pub node_id: u64,
    pub token: Arc<[u8]>,
    pub limits: Limits,
    /// How long a new connection has to send its Hello (10 s in the broker).
    pub hello_deadline: Duration,
    /// How many anonymous connections may be waiting for their Hello at once.
    pub max_pre_hello: usize,
    /// ...and from one source (an IPv4 address, an IPv6 /64), peers included.
    pub max_pre_hello_per_source: usize,
    /// Where the peers connect from: their waiting connections are never evicted by others.
    pub peer_sources: PeerSources,
    /// The bytes all connections' request bodies may hold at once.
    pub body_budget: BodyBudget,
    /// How long a body may take from its header, its wait for budget included.
    pub body_deadline: Duration,
}

/// Serves `listener` until `shutdown` resolves; every connection task ends with it. Refuses
/// to start with a token under `wire::MIN_TOKEN` bytes.
pub async fn run(
    listener: TcpListener,
    cfg: ServerConfig,
    groups: Groups,
    shutdown: impl Future,
) -> Result<(), WireError> {
    if cfg.token.len() < wire::MIN_TOKEN {
        return Err(WireError::WeakToken);
    }
    // Either at 0 would close every peer, real ones included (review s14 F10).
    if cfg.max_pre_hello == 0
        || cfg.max_pre_hello_per_source == 0
        || cfg.hello_deadline.is_zero()
        || cfg.body_deadline.is_zero()
    {
        return Err(WireError::Config(
            "max_pre_hello, max_pre_hello_per_source, hello_deadline and body_deadline must \
             be above 0",
        ));
    }
    // Below the largest body a peer's append or snapshot chunk would never be read.
    if cfg.body_budget.bytes() < cfg.limits.largest_request() as usize {
        return Err(WireError::Config(
            "the body budget is below the largest request body (append or snapshot chunk)",
        ));
    }
    let pending = Arc::new(PreHello::new(
        cfg.max_pre_hello,
        cfg.max_pre_hello_per_source,
        cfg.peer_sources.clone(),
    ));
    let bad_token = Arc::new(WarnLimit::new(BAD_TOKEN_WARN_EVERY, BAD_TOKEN_SOURCES));
    let mut conns = JoinSet::new();
    let mut next = 0u64;
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            a = listener.accept() => a,
        };
        while conns.try_join_next().is_some() {}
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors and the like: the next accept may succeed.
                tracing::warn!(error = %e, "raft listener accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        next += 1;
        let id = next;
        let task = serve_conn(
            tcp,
            cfg.clone(),
            groups.clone(),
            pending.clone(),
            (id, peer),
            bad_token.clone(),
        );
        for why in pending.admit(id, peer.ip(), || conns.spawn(task)) {
            tracing::debug!(
                %peer,
                reason = why.name(),
                "raft listener: too many connections before Hello, closed the oldest"
            );
            crate::listener_metrics::closed(why.name());
        }
        tracing::trace!(conn = id, %peer, "raft connection accepted");
    }
}

async fn serve_conn(
    tcp: TcpStream,
    cfg: ServerConfig,
    groups: Groups,
    pending: Arc<PreHello>,
    (id, peer): (u64, SocketAddr),
    bad_token: Arc<WarnLimit>,
) {
    let _ = tcp.set_nodelay(true);
    let mut conn = BufStream::new(tcp);
    let hello = wire::accept_hello(&mut conn, &cfg.token, cfg.hello_deadline).await;
    pending.leave(id);
    if hello.is_err() {
        crate::listener_metrics::closed("hello_refused");
    }
    let ids = match hello {
        Ok(ids) => ids,
        Err(WireError::BadToken) => {
            // A node configured with another token looks, from its side, like this node
            // being down: say so here, once per source per period, never the token.
            if bad_token.allow(peer.ip(), Instant::now()) {
                tracing::warn!(
                    conn = id,
                    %peer,
                    "raft connection refused: its Hello carries a wrong cluster_token \
                     (is cluster_token the same on every node?)"
                );
            }
            return;
        }
        Err(e) => {
            tracing::debug!(conn = id, error = %e, "raft connection refused");
            return;
        }
    };
    if ids.to != cfg.node_id {
        crate::listener_metrics::closed("hello_refused");
        // A wrong or reused address in some node's membership: answering would count this
        // node's acks and votes as another member's.
        tracing::warn!(
            conn = id,
            from = ids.from,
            meant_for = ids.to,
            me = cfg.node_id,
            "raft connection refused: its Hello is meant for another node id (check peers)"
        );
        return;
    }
    // Past the Hello no read has a deadline: without keepalive a peer that vanished would
    // hold this task for ever (review s14 F7).
    if let Err(e) = crate::keepalive::enable(conn.get_ref()) {
        tracing::debug!(conn = id, error = %e, "raft connection closed: cannot set keepalive");
        return;
    }
    if let Err(e) = answer(&mut conn, &cfg, &groups, ids.from).await {
        tracing::debug!(conn = id, error = %e, "raft connection closed");
    }
    groups.peer_left(ids.from);
}

#[derive(Debug, thiserror::Error)]
enum ConnError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error(transparent)]
    Decode(#[from] rpc_codec::DecodeError),
    #[error("a {0:?} frame where a request belongs")]
    NotARequest(Kind),
    #[error(transparent)]
    Body(#[from] BodyError),
}

/// Answers requests in order until the peer leaves or sends something malformed. `from`: the
/// peer's node id, as its Hello named it.
async fn answer(
    conn: &mut BufStream<TcpStream>,
    cfg: &ServerConfig,
    groups: &Groups,
    from: u64,
) -> Result<(), ConnError> {
    loop {
        let Head { kind, id, len } = match wire::read_head(conn, &cfg.limits).await {
            Ok(h) => h,
            Err(WireError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let (permit, body) =
            body_budget::read_within(conn, len, &cfg.body_budget, cfg.body_deadline).await?;
        // The request runs to its end even if the peer leaves: dispatch is not cancel-safe
        // (vote_gate's marker removal, a snapshot's staging would stop half done), and
        // openraft's append timeout makes peers drop connections mid-request often. A peer
        // gone meanwhile reads no answer, so its body's budget goes back at once instead.
        let reply = {
            let work = dispatch(kind, &body, groups, from);
            tokio::pin!(work);
            tokio::select! {
                r = &mut work => r?,
                () = crate::peer_closed::closed(conn) => {
                    drop(permit);
                    work.await?;
                    return Ok(());
                }
            }
        };
        drop((permit, body));
        wire::write_frame(conn, Kind::Reply, id, &reply).await?;
    }
}

/// How the id of a snapshot streamed from a durable checkpoint generation begins
/// (`StateMachine::durable`); openraft's own snapshots never begin so.
pub(crate) const CHECKPOINT_STREAM: &str = "ckpt-";

/// The refusal of a checkpoint stream by a node with no inbox for the group, which the sender
/// recognises to wait before it asks that peer again (`PeerClient::note_no_inbox`). Nodes of
/// session 27 send the same text.
pub(crate) const NO_INBOX: &str =
    "this node does not take snapshot streams (cluster_snapshot_catch_up is off here)";

async fn dispatch(
    kind: Kind,
    body: &[u8],
    groups: &Groups,
    from: u64,
) -> Result<Vec<u8>, ConnError> {
    if !matches!(
        kind,
        Kind::Append | Kind::Vote | Kind::Snapshot | Kind::Elect | Kind::CommitRead
    ) {
        return Err(ConnError::NotARequest(kind));
    }
    let (group, rest) = rpc_codec::group_of(body)?;
    // Decoded before the group is looked up: garbage closes the connection either way.
    let request = match kind {
        Kind::Append => Request::Append(rpc_codec::decode_append(rest)?),
        Kind::Vote => Request::Vote(rpc_codec::decode_vote(rest)?),
        Kind::Elect => Request::Elect(rpc_codec::decode_elect(rest)?),
        Kind::CommitRead => {
            rpc_codec::decode_commit_read(rest)?;
            Request::CommitRead
        }
        _ => Request::Snapshot(rpc_codec::decode_snapshot(rest)?),
    };
    let Some(Served {
        raft,
        gate,
        gone,
        inbox,
    }) = groups.get(group)
    else {
        return Ok(rpc_codec::encode_unavailable(&format!(
            "group {group:?} is not served by this node"
        )));
    };
    Ok(match request {
        Request::Append(r) => {
            // Stamped before any refusal: what counts is that a live leader still sends.
            gone.appended();
            if gate.as_ref().is_some_and(|g| !g.before_append()) {
                // Unavailable: the sender takes it as unreachable and sends again later.
                return Ok(rpc_codec::encode_unavailable(
                    "this joining node has not read its joining horizon from the leader yet; \
                     try again",
                ));
            }
            if let Some(refusal) = append_refusal(&raft, gate.as_ref(), &r) {
                return Ok(refusal);
            }
            let leader_commit = r.leader_commit.map(|l| l.index);
            let answer = rpc_codec::encode_reply(&raft.append_entries(r).await);
            if let Some(gate) = &gate {
                gate.after_append(leader_commit).await;
            }
            answer
        }
        Request::Vote(r) => {
            if let Some(refusal) = vote_refusal(&raft, gate.as_ref(), &r).await {
                return Ok(refusal);
            }
            rpc_codec::encode_reply(&raft.vote(r).await)
        }
        Request::Snapshot(r) => match inbox {
            Some(inbox) => rpc_codec::encode_reply(&inbox.receive(&raft, r).await),
            // A stream of a checkpoint generation from a leader with `cluster_snapshot_catch_up`
            // on, to this node with it off (review s26 snap H1): openraft's own receiver would
            // purge the log to `A` and hand the stream to the engine's restore, which fails,
            // leaving a node that cannot restart. Refused before anything is written, as
            // unavailable, which the sender takes as Unreachable and retries later.
            None if r.meta.snapshot_id.starts_with(CHECKPOINT_STREAM) => {
                rpc_codec::encode_unavailable(NO_INBOX)
            }
            None => rpc_codec::encode_reply(&raft.install_snapshot(r).await),
        },
        Request::Elect(term) => crate::elect_now::answer(&raft, gate.as_ref(), from, term).await,
        Request::CommitRead => crate::commit_read::answer(&raft).await,
    })
}

/// The answer to an append a joining node refuses before openraft sees it: one that would make
/// it hold a membership naming it a voter, or any append once its own does (review s22
/// membership H2). A wiped voter rejoining under its old id has forgotten its vote as well as
/// its log: a leader of an older term could otherwise count its acknowledgements toward a
/// commit the current leader never saw. So it acknowledges nothing, and the operator removes
/// it and adds it back (docs/cluster.md). A fresh learner is unaffected until it is promoted.
fn append_refusal(
    raft: &Raft<TypeConfig>,
    gate: Option<&VoteGate>,
    r: &openraft::raft::AppendEntriesRequest<TypeConfig>,
) -> Option<Vec<u8>> {
    let gate = gate?;
    if !gate.joining() {
        return None;
    }
    let me = gate.me();
    let voter_now = raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .voter_ids()
        .any(|v| v == me);
    let voter_next = r.entries.iter().any(|e| match &e.payload {
        openraft::EntryPayload::Membership(m) => m.voter_ids().any(|v| v == me),
        _ => false,
    });
    (voter_now || voter_next).then(|| {
        rpc_codec::encode_unavailable(
            "this node joined with an empty directory but the group holds it as a voter: it \
             acknowledges nothing (remove it and add it back as a learner)",
        )
    })
}

/// The answer to a vote request a gated member refuses before openraft sees it (so it moves
/// no term): while joining (M5), and from a candidate its memberships do not name (M6).
async fn vote_refusal(
    raft: &Raft<TypeConfig>,
    gate: Option<&VoteGate>,
    r: &openraft::raft::VoteRequest<u64>,
) -> Option<Vec<u8>> {
    let gate = gate?;
    if gate.joining() {
        return Some(rpc_codec::encode_unavailable(
            "this node joined with an empty directory and grants no vote until it has caught \
             up as a learner",
        ));
    }
    let candidate = r.vote.leader_id().voted_for()?;
    let members = raft
        .with_raft_state(|st| {
            let ids = |m: &openraft::Membership<u64, openraft::BasicNode>| {
                m.nodes()
                    .map(|(id, _)| *id)
                    .collect::<std::collections::BTreeSet<u64>>()
            };
            (
                ids(st.membership_state.committed().membership()),
                ids(st.membership_state.effective().membership()),
            )
        })
        .await
        .ok()?;
    let theirs = r
        .last_log_id
        .as_ref()
        .map(|l| (crate::types::term_of(l), l.index));
    let mine = gate.last_log();
    vote_gate::not_a_member(candidate, (&members.0, &members.1), mine, theirs).then(|| {
        rpc_codec::encode_not_member(&format!(
            "node {candidate} is not a member of this node's membership"
        ))
    })
}

enum Request {
    Append(openraft::raft::AppendEntriesRequest<TypeConfig>),
    Vote(openraft::raft::VoteRequest<u64>),
    Snapshot(openraft::raft::InstallSnapshotRequest<TypeConfig>),
    /// "Elect now" from the leader of this term (`elect_now`).
    Elect(u64),
    /// A joining node asks for the committed index (`commit_read`).
    CommitRead,
}
