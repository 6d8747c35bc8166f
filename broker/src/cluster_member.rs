//! This node as a member of a cluster (docs/cluster.md): the Raft listener every peer reaches,
//! the start of the `default` group's member over TCP, and the answer a follower gives to a
//! request it must not plan.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use queenmq_native_api::Leader;
use queenmq_protocol::{LeaderHint, QueenError};
use queenmq_raft::wire::Limits;
use queenmq_raft::{
    Abdication, ApplyHandler, BasicNode, ClusterStart, Groups, HandOver, RaftConfig, RaftError,
    RaftNode, ServerConfig, SnapshotFeed, SnapshotInbox, TcpNetwork, VoteGate, CLUSTER_ENTRY_MAX,
};
use queenmq_storage::{DiskDataDir, LogOptions, SegmentLog, StateStore};

use crate::config::{Cluster, Timing};
use crate::engine::log::LogStatus;
use crate::memory::{Memory, Pool};
use queenmq_raft::body_budget::{BodyBudget, Charge};
use queenmq_raft::pre_hello::PeerSources;

/// How long a new cluster connection has to send its Hello.
const HELLO_DEADLINE: Duration = Duration::from_secs(10);
/// Anonymous connections waiting for their Hello at once...
const MAX_PRE_HELLO: usize = 64;
/// ...and from one source (review s14 F5): a peer opens one connection per group it reaches,
/// each waiting for its Hello one round trip.
const MAX_PRE_HELLO_PER_SOURCE: usize = 8;
/// How long a request body may take from its header (its wait for the body budget included):
/// far above a 3 MiB snapshot chunk on a slow link, far below the hold a stalled peer would
/// otherwise have (review s14 F6).
const BODY_DEADLINE: Duration = Duration::from_secs(10);
/// openraft's `max_payload_entries` default: the entries one append may carry.
const MAX_APPEND_ENTRIES: u32 = 300;
/// The file in the data directory that says this node joined with an empty directory and has
/// not caught up as a learner yet (`VoteGate`): it grants no vote meanwhile.
pub const JOIN_MARKER: &str = "cluster-joining";
/// openraft's `snapshot_max_chunk_size` default.
const SNAPSHOT_CHUNK: u32 = 3 << 20;

/// Where a group's files are: its data directory and the options its log was opened with
/// (a snapshot install reopens the log there).
pub struct GroupFiles<'a> {
    pub data_dir: &'a std::path::Path,
    pub log_opts: LogOptions,
    /// A tenant's group (`cluster_tenant_groups`): the voters its committed declaration named,
    /// with their addresses. Only `hosted::preferred` of them initialises an empty directory;
    /// None: the `default` group, founded by the lowest id of `peers`.
    pub tenant_voters: Option<BTreeMap<u64, BasicNode>>,
    /// With `tenant_voters`: the directory was lost since this node first opened the group
    /// (`group::hosted`), so it starts joining: no vote, no founding, until it has caught up
    /// as a learner.
    pub tenant_lost: bool,
}

/// How a group starts here: its voters, whether this node initialises it, whether it starts
/// joining. `default` is founded by the lowest id of `peers` unless started to join
/// (`cluster_join`). A tenant's group is founded by the preferred of its declared voters only,
/// so tenants lead on different nodes, and never by a lost directory, which starts joining.
/// A standing joining marker (`marked`: the node has not caught up since it joined or lost
/// the directory) never initialises, whatever the rest says (review s22 membership M3).
fn start_role(
    me: u64,
    group: &str,
    default: (&BTreeMap<u64, BasicNode>, bool, bool),
    tenant_voters: Option<BTreeMap<u64, BasicNode>>,
    tenant_lost: bool,
    marked: bool,
) -> (BTreeMap<u64, BasicNode>, bool, bool) {
    let (peers, initialise, join) = match tenant_voters {
        Some(mut voters) => {
            let ids: Vec<u64> = voters.keys().copied().collect();
            let founds = crate::group::hosted::preferred(group, &ids) == Some(me);
            // A node added to the cluster after the declaration is none of its voters: it
            // hosts the group to be added to it as a learner (docs/cluster.md "Membership
            // with tenant groups"), founds nothing, and names itself so the start accepts it.
            if let (false, Some(own)) = (voters.contains_key(&me), default.0.get(&me)) {
                voters.insert(me, own.clone());
            }
            (voters, founds && !tenant_lost, tenant_lost)
        }
        None => (default.0.clone(), default.1, default.2),
    };
    (peers, initialise && !marked, join)
}

/// What a clustered group needs to start and to answer as a follower. Clones share the
/// listener's table of groups.
#[derive(Clone)]
pub struct Member {
    pub node_id: u64,
    /// Every voter's Raft listener by id, this node included.
    peers: BTreeMap<u64, BasicNode>,
    /// Members' HTTP addresses (`peer_http`), named in a not_leader answer.
    peer_http: BTreeMap<u64, String>,
    /// Members' Kafka advertised addresses (`peer_kafka`), the brokers of a Metadata answer.
    pub peer_kafka: BTreeMap<u64, String>,
    /// `cluster_join`: this node never initialises the membership.
    join: bool,
    token: Arc<[u8]>,
    pub timing: Timing,
    /// The groups the cluster listener answers for.
    pub groups: Groups,
    /// `cluster_snapshot_catch_up`: the entries kept below a snapshot; None: off.
    snapshot_keep: Option<u64>,
    /// `cluster_tenant_groups`: tenants other than `default` get clustered groups.
    pub tenant_groups: bool,
    /// With `tenant_groups`: where the `default` group's apply records the declarations.
    pub declarations: Option<crate::group::hosted::Declarations>,
}

impl std::fmt::Debug for Member {
    // The token never reaches a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("node_id", &self.node_id)
            .field("peers", &self.peers)
            .field("peer_http", &self.peer_http)
            .field("timing", &self.timing)
            .finish_non_exhaustive()
    }
}

/// Append and snapshot limits, the same on the listener and the client side.
fn limits() -> Limits {
    // CLUSTER_ENTRY_MAX is under 2 MiB: it fits a u32.
    let entry = u32::try_from(CLUSTER_ENTRY_MAX).unwrap_or(u32::MAX);
    Limits::new(entry, MAX_APPEND_ENTRIES, SNAPSHOT_CHUNK)
}

impl Member {
    pub fn new(c: &Cluster, token: &str) -> Member {
        Member {
            node_id: c.node_id,
            peers: c
                .peers
                .iter()
                .map(|(id, addr)| (*id, BasicNode::new(addr.clone())))
                .collect(),
            peer_http: c.peer_http.clone(),
            peer_kafka: c.peer_kafka.clone(),
            join: c.join,
            token: Arc::from(token.as_bytes()),
            timing: c.timing,
            groups: Groups::default(),
            snapshot_keep: c.snapshot_keep,
            tenant_groups: c.tenant_groups,
            declarations: None,
        }
    }

    /// Every voter of the first boot (`peers`) by id.
    pub fn peer_nodes(&self) -> BTreeMap<u64, BasicNode> {
        self.peers.clone()
    }

    /// Members' HTTP addresses as `peer_http` names them.
    pub fn peer_http(&self) -> &BTreeMap<u64, String> {
        &self.peer_http
    }

    /// Binds `addr` and serves every group in `groups` until `stop` turns true; the bodies
    /// it reads are charged to `memory`'s `cluster_bodies` pool, within their share.
    pub async fn listen(
        &self,
        addr: std::net::SocketAddr,
        mut stop: tokio::sync::watch::Receiver<bool>,
        memory: &Arc<Memory>,
    ) -> anyhow::Result<tokio::task::JoinHandle<()>> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding cluster_addr {addr}"))?;
        let limits = limits();
        let largest = limits.largest_request() as usize;
        let pool = memory.clone();
        let charge: Charge = Arc::new(move |d: isize| {
            if d >= 0 {
                pool.pools.add(Pool::ClusterBodies, d.unsigned_abs());
            } else {
                pool.pools.sub(Pool::ClusterBodies, d.unsigned_abs());
            }
        });
        let budget = BodyBudget::new(memory.budget.cluster_bodies_bytes(largest), Some(charge));
        let peer_sources = PeerSources::default();
        let others = self
            .peers
            .iter()
            .filter(|(id, _)| **id != self.node_id)
            .map(|(_, n)| n.addr.clone())
            .collect();
        tokio::spawn(crate::cluster_peer_sources::keep_resolved(
            others,
            peer_sources.clone(),
            stop.clone(),
        ));
        tracing::info!(
            body_budget = budget.bytes(),
            "raft cluster listener: request bodies in flight capped"
        );
        let cfg = ServerConfig {
            node_id: self.node_id,
            token: self.token.clone(),
            limits,
            hello_deadline: HELLO_DEADLINE,
            max_pre_hello: MAX_PRE_HELLO,
            max_pre_hello_per_source: MAX_PRE_HELLO_PER_SOURCE,
            peer_sources,
            body_budget: budget,
            body_deadline: BODY_DEADLINE,
        };
        let groups = self.groups.clone();
        tracing::info!(%addr, node = self.node_id, "raft cluster listener");
        Ok(tokio::spawn(async move {
            let stopped = async move {
                while !*stop.borrow() {
                    if stop.changed().await.is_err() {
                        break;
                    }
                }
            };
            if let Err(e) = queenmq_raft::serve_cluster(listener, cfg, groups, stopped).await {
                tracing::error!(error = %e, "the raft cluster listener stopped");
            }
        }))
    }

    /// Starts this node's member of `group` (in `files`): the lowest id of `peers` initialises an empty
    /// directory unless started to join (`cluster_join`), the others wait to be contacted; returns once it has applied what it knew
    /// committed, whoever leads.
    pub async fn start(
        &self,
        group: &str,
        log: Arc<SegmentLog>,
        store: Arc<StateStore>,
        handler: Arc<dyn ApplyHandler>,
        entry_limit: u64,
        files: GroupFiles<'_>,
    ) -> Result<RaftNode, RaftError> {
        let GroupFiles {
            data_dir,
            log_opts,
            tenant_voters,
            tenant_lost,
        } = files;
        // Wider than a single node's (review s16 B5): openraft's heartbeat is also the whole
        // timeout of an append, the follower's fsync included, and peers on loaded machines
        // must not call elections on every late heartbeat.
        let cfg = RaftConfig {
            node_id: self.node_id,
            heartbeat_ms: self.timing.heartbeat_ms,
            election_timeout_min_ms: self.timing.election_timeout_ms,
            election_timeout_max_ms: self.timing.election_timeout_ms.saturating_mul(2),
        };
        // One gate for the listener, the network and the node (review s21 membership M5, M6).
        let mut gate = VoteGate::new(self.node_id, data_dir.join(JOIN_MARKER));
        if tenant_voters.is_some() {
            // Only the `default` group's apply reads a joining horizon (review s28 M-2).
            gate = gate.without_horizon();
        }
        let mut network =
            TcpNetwork::new(self.node_id, group, &self.token, limits()).with_gate(gate.clone());
        // Catch-up by snapshot (issue 13): the feed gets the group's log store as it opens;
        // the network streams from it and the listener's inbox stages into it.
        let feed = match self.snapshot_keep {
            Some(keep) => {
                // Streams carry the group's id files too, so a peer caught up this way knows
                // the ids this node spilled (docs/storage-format.md "The id files in the
                // stream").
                let ids_dir = data_dir.join(queenmq_storage::IDS_DIR);
                let ids = queenmq_storage::FileBackend::new(&ids_dir).map_err(|e| {
                    RaftError::Startup(format!("opening {} for snapshots: {e}", ids_dir.display()))
                })?;
                // Links of streams a crash or kill cut short pin files a merge or an expiry
                // removed: no stream of this group runs before this point.
                if let Err(e) = queenmq_storage::remove_send_links(&ids) {
                    tracing::warn!(dir = %ids_dir.display(), error = %e, "leftover snapshot links in ids/ were not removed");
                }
                Some(SnapshotFeed::new(group, keep).with_ids(Arc::new(ids)))
            }
            None => None,
        };
        let inbox = match &feed {
            Some(feed) => {
                network = network.with_snapshots(feed.clone());
                let dir = DiskDataDir::new(data_dir).map_err(|e| {
                    RaftError::Startup(format!("opening {} for snapshots: {e}", data_dir.display()))
                })?;
                let admit = crate::snapshot_admit::admit(data_dir.to_path_buf());
                Some(SnapshotInbox::new(
                    feed.clone(),
                    Arc::new(dir),
                    log_opts,
                    admit,
                ))
            }
            None => None,
        };
        // A node whose joining marker stands was started to join once and has not caught up
        // as a learner: it never initialises, whatever this start's `cluster_join` says (review
        // s22 membership M3: restarted without the flag it founded a group of its own, whose
        // acknowledged writes the real group's log then truncated).
        let marked = data_dir.join(JOIN_MARKER).exists();
        // A tenant's group is founded by the preferred of its declared voters, so tenants
        // lead on different nodes; `cluster_join` is the default group's (a node that joins
        // the cluster learns of tenants from its log, after they were founded).
        let is_tenant = tenant_voters.is_some();
        // Not among the declared voters (added to the cluster later): never a founder, by
        // preference or by the fallback.
        let outsider = tenant_voters
            .as_ref()
            .is_some_and(|v| !v.contains_key(&self.node_id));
        let (peers, initialise, join) = start_role(
            self.node_id,
            group,
            (&self.peers, self.initialises(), self.join),
            tenant_voters,
            tenant_lost,
            marked,
        );
        // A tenant's record is marked opened only now: its state store is created and its
        // name fsynced (`StateStore::open`), and Raft has not started, so no vote was granted
        // yet. Marked earlier, a crash or an I/O error before the store stood would read as a
        // lost directory at the next try, and the preferred node would never found the
        // group (review s27 tenants H1).
        let mut opened_before = true;
        if let (true, Some(d)) = (is_tenant, &self.declarations) {
            let (root, name) = (d.data_dir().to_path_buf(), group.to_owned());
            opened_before = tokio::task::spawn_blocking(move || {
                crate::group::hosted::mark_opened(&root, &name)
            })
            .await
            .map_err(|e| RaftError::Startup(format!("marking {group:?} opened stopped: {e}")))?
            .map_err(|e| RaftError::Startup(format!("marking {group:?} opened: {e:#}")))?;
        }
        // A tenant's preferred voter may be down: a fresh directory elsewhere in V founds the
        // group after a wait if nothing of it arrives (`group::founding_fallback`).
        let voter_ids: Vec<u64> = peers.keys().copied().collect();
        let fallback = is_tenant
            .then(|| {
                crate::group::founding_fallback::fallback_after(
                    self.node_id,
                    group,
                    &voter_ids,
                    self.timing.election_timeout_ms,
                    crate::group::founding_fallback::Directory {
                        first_open: !opened_before,
                        lost: tenant_lost || join,
                        marked,
                    },
                )
            })
            .flatten()
            .filter(|_| !initialise && !outsider)
            .map(|after| (after, peers.clone()));
        let start = ClusterStart {
            peers,
            initialise,
            entry_limit,
            join,
            gate: Some(gate.clone()),
            snapshots: feed,
        };
        let groups = self.groups.clone();
        let name = group.to_string();
        let (read_gate, read_net) = (gate.clone(), network.clone());
        let node =
            RaftNode::start_clustered(cfg, log, store, handler, network, start, move |raft| {
                groups.add_member(&name, raft, gate);
                if let Some(inbox) = inbox {
                    groups.receive_snapshots(&name, inbox);
                }
            })
            .await?;
        // A joining `default` member takes no append until its horizon is read from the
        // leader (review s28 M-3); the read ends with the horizon written or the core stopped.
        if read_gate.needs_horizon() {
            tokio::spawn(queenmq_raft::read_join_horizon(
                read_gate,
                read_net,
                self.peers.clone(),
            ));
        }
        if let Some((after, voters)) = fallback {
            tokio::spawn(crate::group::founding_fallback::run(
                node.raft_handle(),
                group.to_owned(),
                voters,
                after,
            ));
        }
        Ok(node)
    }

    /// Hands over the lead of every group this node leads (SIGTERM, before the doors close),
    /// one after another, each within `Timing::hand_over_bound`. A group not handed over
    /// (no voter caught up, no answer) is logged, and every other voter is asked to
    /// campaign before its Raft node may stop (`RaftNode::hand_over_at_stop`, review s24
    /// failover M2): the process's listener lives on through the drain, so the followers'
    /// fast failover (`leader_gone`) would not see it gone.
    pub async fn hand_over_all(&self, groups: &crate::group::Registry) {
        for group in groups.running() {
            let Ok(live) = group.live.get() else {
                continue;
            };
            let tenant = group.tenant.clone();
            let net = TcpNetwork::new(self.node_id, &tenant, &self.token, limits());
            let started = std::time::Instant::now();
            let bound = self.timing.hand_over_bound();
            let (out, abdication) = live.node.hand_over_at_stop(&net, bound).await;
            match out {
                HandOver::NotLeading => {}
                HandOver::Moved { to, leader } => tracing::info!(
                    %tenant, to, leader, ms = started.elapsed().as_millis() as u64,
                    "handed the lead over"
                ),
                HandOver::Kept(why) => {
                    tracing::warn!(%tenant, %why, "the lead was not handed over")
                }
                HandOver::TimedOut { to } => tracing::warn!(
                    %tenant, to, ?bound,
                    "no other leader within the hand-over bound"
                ),
            }
            match abdication {
                None => {}
                Some(Abdication::Elected(leader)) => tracing::info!(
                    %tenant, leader,
                    "every other voter was asked to campaign: another leads"
                ),
                Some(Abdication::Abandoned) => tracing::warn!(
                    %tenant,
                    "every other voter was asked to campaign and none was seen to lead: this \
                     node plans nothing more and stops its raft node now"
                ),
            }
        }
    }

    /// Whether this node initialises an empty directory's membership: the lowest id of
    /// `peers`, unless started to join a running group (a wiped node that would otherwise
    /// found a second group with the same ids: review s15 A2).
    fn initialises(&self) -> bool {
        !self.join && self.peers.keys().next() == Some(&self.node_id)
    }

    /// Who leads the group whose status is `s`, for the door's forwarding decision
    /// (native-api `forward`): a leader answers here whatever its lease or apply state (its
    /// engine refuses retriably meanwhile: relaying to itself could not help). The leader's
    /// URL is the one its membership entry carries (`joined_url`, a member added at run
    /// time), else its `peer_http` entry.
    pub fn leader(&self, s: &LogStatus, joined_url: impl FnOnce(u64) -> Option<String>) -> Leader {
        match s.leader {
            _ if s.role == "leader" => Leader::Here,
            // Named leader but not (or no longer) in the role: a hand-over under way; the
            // engine answers as it does today.
            Some(id) if id == self.node_id => Leader::Here,
            Some(id) => Leader::Other {
                id,
                url: joined_url(id).or_else(|| self.peer_http.get(&id).cloned()),
            },
            None => Leader::Unknown,
        }
    }

    /// The refusal of a request that reached this node while it may not plan: naming the
    /// leader when one is known and it is another node; "no majority" when this node leads
    /// without a majority's acknowledgement within its lease; "applying" when it leads, is
    /// acknowledged, and has not applied its whole log yet (just elected).
    pub fn refusal(&self, s: &LogStatus) -> QueenError {
        match s.leader {
            // Stopping and handing the lead over: the next leader is not known yet, and the
            // client retries (or is relayed) once it is.
            _ if s.handing_over => QueenError::not_leader(None),
            // openraft 0.9 has no check-quorum: a leader cut off from the majority stays
            // leader, and only the missing acknowledgements tell (review s16 B1). Tested
            // first: a leader reloaded while cut off has its given-up entry unapplied, and
            // "applying" would hide the partition (review s17 C6).
            Some(id) if id == self.node_id && !s.quorum_contact => {
                QueenError::unavailable(match s.quorum_ack_ms {
                    Some(ms) => format!(
                        "this node leads but no majority has acknowledged it for {ms} ms (cut \
                         off from the cluster?); retry, or ask another node"
                    ),
                    None => "this node leads but no majority has acknowledged it yet (just \
                             elected, or cut off from the cluster?); retry, or ask another node"
                        .to_string(),
                })
            }
            Some(id) if id == self.node_id => QueenError::unavailable(
                "this node was just elected leader and is applying its log; retry",
            ),
            leader => QueenError::not_leader(leader.map(|id| LeaderHint {
                id,
                url: self.peer_http.get(&id).cloned(),
            })),
        }
    }
}

impl Timing {
    /// How long a SIGTERM waits for the hand-over of each group this node leads: three
    /// election timeouts, a lease of openraft's (two, the election range's maximum) for a
    /// voter that refuses the first campaign (a group of five) and one for the campaign
    /// after it. A group of three is handed over in a fraction of it (docs/cluster.md). A
    /// failed hand-over's abdication takes its last third (`RaftNode::hand_over_at_stop`),
    /// so the pod's grace period, which allows for this bound, holds both.
    pub fn hand_over_bound(&self) -> Duration {
        Duration::from_millis(self.election_timeout_ms.saturating_mul(3))
    }

    /// How long a leader may go unacknowledged by a majority and still plan: a follower that
    /// heard nothing for the election timeout may call an election, so past it another node
    /// may lead (and commit) while this one would still plan on a state that no longer
    /// counts. Two heartbeats short of it: openraft's acknowledgement age is up to one and
    /// a half heartbeats old when read, and the engine reads it once per cycle (review s17
    /// C5). The configuration keeps the election timeout at 5 heartbeats or more.
    pub fn lease_ms(&self) -> u64 {
        self.election_timeout_ms
            .saturating_sub(self.heartbeat_ms.saturating_mul(2))
            .max(self.heartbeat_ms)
    }

    /// The longest one proposal may wait to commit while this node keeps its lease (a quorum
    /// that acknowledges heartbeats but does not commit: stuck disks): four election timeouts
    /// (review s16 B1), but short enough that the check, made once a heartbeat, gives the
    /// write up before the bus's answer bound (`BusWaits::default().answer`) answers it "a
    /// stalled disk?", with a second of margin for the wait before its cycle started (review
    /// s17 C4, lead L1).
    pub fn write_limit(&self) -> Duration {
        let heartbeats = Duration::from_millis(self.heartbeat_ms.saturating_mul(2));
        let room = crate::engine::BusWaits::default()
            .answer
            .saturating_sub(heartbeats)
            .saturating_sub(Duration::from_secs(1));
        Duration::from_millis(self.election_timeout_ms.saturating_mul(4)).min(room)
    }
}

/// Whether a leader acknowledged by a majority `quorum_ack_ms` ago is within its lease.
pub fn quorum_contact(quorum_ack_ms: Option<u64>, timing: &Timing) -> bool {
    quorum_ack_ms.is_some_and(|ms| ms <= timing.lease_ms())
}

/// Whether an engine may plan now: only the leader, once it has applied its whole log (the
/// planner changes the state before it proposes, so it must start from every entry), and
/// while a majority acknowledged it within the lease (openraft 0.9 keeps a leader cut off
/// from the majority leading: review s16 B1), and not while it hands its lead over (its
/// proposals are refused: `RaftNode::hand_over`).
pub fn may_plan(s: &LogStatus) -> bool {
    s.role == "leader" && s.applied >= s.last_log_index && s.quorum_contact && !s.handing_over
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member() -> Member {
        let c = Cluster {
            node_id: 2,
            addr: "127.0.0.1:7102".parse().unwrap(),
            peers: (1..=3).map(|i| (i, format!("127.0.0.1:710{i}"))).collect(),
            peer_http: BTreeMap::from([(1, "http://127.0.0.1:6631".to_string())]),
            peer_kafka: BTreeMap::new(),
            join: false,
            timing: TIMING,
            snapshot_keep: None,
            tenant_groups: false,
        };
        Member::new(&c, &"t".repeat(32))
    }

    const TIMING: Timing = Timing {
        heartbeat_ms: 500,
        election_timeout_ms: 5_000,
    };

    fn status(role: &'static str, leader: Option<u64>, applied: u64, last: u64) -> LogStatus {
        LogStatus {
            role,
            leader,
            applied,
            last_log_index: last,
            quorum_ack_ms: (role == "leader").then_some(10),
            quorum_contact: role == "leader",
            ..LogStatus::default()
        }
    }

    #[test]
    fn only_a_leader_that_applied_its_log_plans() {
        assert!(may_plan(&status("leader", Some(2), 9, 9)));
        assert!(!may_plan(&status("leader", Some(2), 8, 9)));
        assert!(!may_plan(&status("follower", Some(1), 9, 9)));
        assert!(!may_plan(&status("candidate", None, 9, 9)));
    }

    /// Review s16 B1: a leader no majority acknowledged within the lease (cut off from the
    /// cluster, or not yet acknowledged once elected) plans nothing, and says why.
    #[test]
    fn a_leader_without_recent_quorum_contact_does_not_plan() {
        let lease = TIMING.lease_ms();
        let with_ack = |ms| LogStatus {
            quorum_ack_ms: ms,
            quorum_contact: quorum_contact(ms, &TIMING),
            ..status("leader", Some(2), 9, 9)
        };
        assert!(may_plan(&with_ack(Some(lease))));
        assert!(!may_plan(&with_ack(Some(lease + 1))));
        assert!(!may_plan(&with_ack(None)));
        // Review s17 C5: the lease is two heartbeats short of the election timeout.
        assert_eq!(lease, TIMING.election_timeout_ms - 2 * TIMING.heartbeat_ms);
        let e = member().refusal(&with_ack(Some(lease + 1)));
        assert_eq!(e.code, queenmq_protocol::ErrorCode::Unavailable);
        assert!(e.message.contains("no majority"), "{}", e.message);
    }

    /// Review s17 C6: a leader reloaded while cut off restores its leadership with its
    /// given-up entry still in its log, unapplied: the refusal names the missing majority,
    /// not an apply.
    #[test]
    fn a_cut_off_leader_behind_its_log_says_no_majority() {
        let cut_off = LogStatus {
            quorum_ack_ms: None,
            quorum_contact: false,
            ..status("leader", Some(2), 8, 9)
        };
        let e = member().refusal(&cut_off);
        assert_eq!(e.code, queenmq_protocol::ErrorCode::Unavailable);
        assert!(e.message.contains("no majority"), "{}", e.message);
        let stale = LogStatus {
            quorum_ack_ms: Some(TIMING.lease_ms() + 1),
            ..cut_off
        };
        assert!(member().refusal(&stale).message.contains("no majority"));
        let applying = member().refusal(&status("leader", Some(2), 8, 9));
        assert!(
            applying.message.contains("applying"),
            "{}",
            applying.message
        );
    }

    #[test]
    fn a_follower_names_the_leader_and_its_url() {
        let m = member();
        let e = m.refusal(&status("follower", Some(1), 3, 3));
        assert_eq!(e.code, queenmq_protocol::ErrorCode::NotLeader);
        let hint = e.leader.unwrap();
        assert_eq!(
            (hint.id, hint.url.as_deref()),
            (1, Some("http://127.0.0.1:6631"))
        );
        let e = m.refusal(&status("follower", Some(3), 3, 3));
        assert_eq!(e.leader.unwrap().url, None);
        let e = m.refusal(&status("candidate", None, 3, 3));
        assert!(e.leader.is_none());
        let e = m.refusal(&status("leader", Some(2), 3, 4));
        assert_eq!(e.code, queenmq_protocol::ErrorCode::Unavailable);
    }

    /// A leader handing its lead over plans nothing and answers the retriable not_leader.
    #[test]
    fn a_leader_handing_over_plans_nothing_and_answers_not_leader() {
        let handing = LogStatus {
            handing_over: true,
            ..status("leader", Some(2), 9, 9)
        };
        assert!(!may_plan(&handing));
        let e = member().refusal(&handing);
        assert_eq!(e.code, queenmq_protocol::ErrorCode::NotLeader);
        assert!(e.leader.is_none());
    }

    #[test]
    fn the_hand_over_bound_covers_a_lease_and_a_campaign() {
        assert_eq!(TIMING.hand_over_bound(), Duration::from_secs(15));
    }

    /// The door's view of who leads: the engine's refusal names the same node and URL.
    #[test]
    fn the_door_sees_the_leader_the_engine_names() {
        let m = member();
        assert_eq!(
            m.leader_of_test(&status("leader", Some(2), 3, 4)),
            Leader::Here
        );
        let cut_off = LogStatus {
            quorum_contact: false,
            ..status("leader", Some(2), 3, 3)
        };
        assert_eq!(m.leader_of_test(&cut_off), Leader::Here);
        assert_eq!(
            m.leader_of_test(&status("follower", Some(1), 3, 3)),
            Leader::Other {
                id: 1,
                url: Some("http://127.0.0.1:6631".into())
            }
        );
        assert_eq!(
            m.leader_of_test(&status("follower", Some(3), 3, 3)),
            Leader::Other { id: 3, url: None }
        );
        assert_eq!(
            m.leader_of_test(&status("candidate", None, 3, 3)),
            Leader::Unknown
        );
        assert_eq!(
            m.leader_of_test(&status("follower", Some(2), 3, 3)),
            Leader::Here
        );
    }

    impl Member {
        fn leader_of_test(&self, s: &LogStatus) -> Leader {
            self.leader(s, |_| None)
        }
    }

    /// A leader added at run time is reached at the HTTP address its membership entry
    /// carries, which wins over a stale `peer_http` entry.
    #[test]
    fn a_joined_leader_is_reached_at_its_membership_url() {
        let m = member();
        let joined = |id: u64| (id == 4).then(|| "http://127.0.0.1:6634".to_string());
        assert_eq!(
            m.leader(&status("follower", Some(4), 3, 3), joined),
            Leader::Other {
                id: 4,
                url: Some("http://127.0.0.1:6634".into())
            }
        );
        assert_eq!(
            m.leader(&status("follower", Some(1), 3, 3), joined),
            Leader::Other {
                id: 1,
                url: Some("http://127.0.0.1:6631".into())
            }
        );
    }

    /// Review s15 A2: a node started to join never initialises, even as the lowest id.
    #[test]
    fn a_joining_node_never_initialises() {
        let mut m = member();
        assert!(!m.initialises());
        m.node_id = 1;
        assert!(m.initialises());
        m.join = true;
        assert!(!m.initialises());
    }

    #[test]
    fn the_lowest_id_initialises() {
        let m = member();
        assert_eq!(m.peers.keys().next(), Some(&1));
        assert!(format!("{m:?}").contains("node_id: 2"));
        assert!(!format!("{m:?}").contains("tttt"));
    }

    #[test]
    fn only_the_preferred_voter_of_a_sound_tenant_group_founds_it() {
        let voters: BTreeMap<u64, BasicNode> = (1..=3)
            .map(|i| (i, BasicNode::new(format!("127.0.0.1:710{i}"))))
            .collect();
        let ids: Vec<u64> = voters.keys().copied().collect();
        let founder = crate::group::hosted::preferred("acme", &ids).unwrap();
        let peers = voters.clone();
        let default = (&peers, true, false);
        for me in 1..=3u64 {
            let role = |lost, marked| {
                let (p, init, join) =
                    start_role(me, "acme", default, Some(voters.clone()), lost, marked);
                assert_eq!(p, voters, "a tenant's group has its declared voters");
                (init, join)
            };
            // Sound: the preferred founds, the others wait to be contacted; none joins.
            assert_eq!(role(false, false), (me == founder, false), "node {me}");
            // Lost since it was opened here: nobody founds, and it starts joining (gated).
            assert_eq!(role(true, false), (false, true), "node {me}");
            // A joining marker stands (a rejoin, or an earlier lost start): never founds.
            assert_eq!(role(false, true), (false, false), "node {me}");
        }
        // A node added later (4) is none of the declared voters: it names itself among the
        // group's peers (the start refuses a node its peers do not name) and never founds.
        let mut with_four = peers.clone();
        with_four.insert(4, BasicNode::new("127.0.0.1:7104"));
        let (p, init, join) = start_role(
            4,
            "acme",
            (&with_four, false, true),
            Some(voters.clone()),
            false,
            false,
        );
        assert!(
            p.contains_key(&4) && voters.keys().all(|id| p.contains_key(id)),
            "{p:?}"
        );
        assert_eq!((init, join), (false, false));
        // `default` keeps its own rule: the founder of `peers` unless joining or marked.
        assert!(start_role(1, "default", default, None, false, false).1);
        assert!(!start_role(1, "default", default, None, false, true).1);
        let joining = (&peers, false, true);
        assert_eq!(
            start_role(1, "default", joining, None, false, false),
            (peers.clone(), false, true)
        );
    }
}
