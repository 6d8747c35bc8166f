//! The cluster keys (`cluster_token`, `cluster_addr`, `node_id`, `peers`): what a node of a
//! multi-node Raft group needs, checked together. All unset is the single-node broker,
//! unchanged; any one set asks for all of them (docs/cluster.md).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use super::model::{split_host_port, Config, ValueError};

/// The shortest `cluster_token`: the token is a bearer secret that lets its holder vote and
/// append in every tenant's group (the Raft listener refuses to start under it too).
pub const MIN_CLUSTER_TOKEN: usize = 32;

/// A checked cluster configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub node_id: u64,
    /// The Raft listener of this node.
    pub addr: SocketAddr,
    /// Every member by id, this node included: `host:port` of its Raft listener.
    pub peers: BTreeMap<u64, String>,
    /// Members' HTTP addresses (`peer_http`), for the `leaderUrl` of a not_leader answer.
    pub peer_http: BTreeMap<u64, String>,
    /// Members' Kafka advertised addresses (`peer_kafka`, `host:port`), the brokers of a
    /// Kafka Metadata answer.
    pub peer_kafka: BTreeMap<u64, String>,
    /// `cluster_join`: never initialise the membership; wait to be added as a learner.
    pub join: bool,
    pub timing: Timing,
    /// `cluster_snapshot_catch_up` on: the entries kept below a snapshot
    /// (`cluster_snapshot_keep_entries`); None: off.
    pub snapshot_keep: Option<u64>,
    /// `cluster_tenant_groups`: tenants other than `default` are served, each in a Raft group
    /// of its own (docs/cluster.md "Tenants").
    pub tenant_groups: bool,
}

/// How often a cluster member's leader sends heartbeats and how long a follower waits for
/// one (`cluster_heartbeat_ms`, `cluster_election_timeout_ms`; review s16 B5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub heartbeat_ms: u64,
    /// The lower end of the election timeout; the upper end is twice it.
    pub election_timeout_ms: u64,
}

/// The least ratio of the election timeout to the heartbeat: a follower must miss several
/// heartbeats (each possibly late by a slow fsync) before it calls an election, and the
/// leader's lease (the election timeout less two heartbeats) keeps three heartbeats or more,
/// since a healthy leader's acknowledgement age under writes reaches two fsyncs and a round
/// trip (review s17 lead H2: at 3, the lease was one heartbeat and a healthy leader under
/// writes lost it after every append). With the timeout at most 7 s, the heartbeat is at
/// most 1.4 s, so the write limit's check (once per heartbeat) stays under the 30 s answer
/// bound too.
pub const MIN_ELECTION_HEARTBEATS: u64 = 5;

fn bad(key: &'static str, message: impl Into<String>) -> ValueError {
    ValueError::Bad {
        key,
        message: message.into(),
    }
}

/// `id=host:port` entries separated by commas (blanks around them ignored).
pub fn parse_peers(text: &str) -> Result<BTreeMap<u64, String>, ValueError> {
    let mut peers = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (id, addr) = entry
            .split_once('=')
            .ok_or_else(|| bad("peers", format!("entry {entry:?} is not id=host:port")))?;
        let id: u64 = id.trim().parse().ok().filter(|id| *id > 0).ok_or_else(|| {
            bad(
                "peers",
                format!("entry {entry:?}: the id must be a number above 0"),
            )
        })?;
        let addr = addr.trim();
        if split_host_port(addr).is_none() {
            return Err(bad(
                "peers",
                format!("entry {entry:?}: the address must be host:port with a port above 0"),
            ));
        }
        // One process answers at one address: two ids on it would count its acks and votes
        // twice toward a quorum (review s14 F1).
        if let Some((other, _)) = peers
            .iter()
            .find(|(_, a): &(&u64, &String)| queenmq_raft::member_addr::same_socket(a, addr))
        {
            return Err(bad(
                "peers",
                format!("nodes {other} and {id} have the same address {addr}"),
            ));
        }
        if peers.insert(id, addr.to_string()).is_some() {
            return Err(bad("peers", format!("node id {id} is named twice")));
        }
    }
    Ok(peers)
}

/// `id=http://host:port` entries separated by commas, each id above 0, each URL `http://` or
/// `https://` with a host and a port and nothing after it. An id need not be one of `peers`
/// (review s21 membership M8): a node that joins at run time names itself alone in `peers`
/// and the first boot's members here, the only place their HTTP addresses are kept.
pub fn parse_peer_http(text: &str) -> Result<BTreeMap<u64, String>, ValueError> {
    let mut out = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (id, url) = entry.split_once('=').ok_or_else(|| {
            bad(
                "peer_http",
                format!("entry {entry:?} is not id=http://host:port"),
            )
        })?;
        let id: u64 = id
            .trim()
            .parse()
            .ok()
            .filter(|id| *id > 0)
            .ok_or_else(|| bad("peer_http", format!("{id:?} is not a node id above 0")))?;
        let url = url.trim();
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .ok_or_else(|| bad("peer_http", format!("{url:?} does not start with http://")))?;
        if rest.contains('/') || split_host_port(rest).is_none() {
            return Err(bad(
                "peer_http",
                format!("{url:?} is not http://host:port (a port, no path)"),
            ));
        }
        if out.insert(id, url.to_string()).is_some() {
            return Err(bad("peer_http", format!("node id {id} is named twice")));
        }
    }
    Ok(out)
}

/// `id=host:port` entries separated by commas, each id above 0 and a Kafka broker id (at
/// most 2^31 - 1), each address `host:port` with a port above 0, no two ids at one address
/// however spelled (a client would take them for one broker). An id need not be one of
/// `peers`, as for `peer_http` (review s21 membership M8: a node joining at run time names
/// the first boot's members here).
pub fn parse_peer_kafka(text: &str) -> Result<BTreeMap<u64, String>, ValueError> {
    let mut out: BTreeMap<u64, String> = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (id, addr) = entry
            .split_once('=')
            .ok_or_else(|| bad("peer_kafka", format!("entry {entry:?} is not id=host:port")))?;
        let id: u64 = id
            .trim()
            .parse()
            .ok()
            .filter(|id| *id > 0)
            .ok_or_else(|| bad("peer_kafka", format!("{id:?} is not a node id above 0")))?;
        if i32::try_from(id).is_err() {
            return Err(bad(
                "peer_kafka",
                format!("node {id} is above 2147483647, the largest Kafka broker id"),
            ));
        }
        let addr = addr.trim();
        if addr.contains('/') || split_host_port(addr).is_none() {
            return Err(bad(
                "peer_kafka",
                format!("entry {entry:?}: the address must be host:port with a port above 0"),
            ));
        }
        if let Some((other, _)) = out
            .iter()
            .find(|(_, a)| queenmq_raft::member_addr::same_socket(a, addr))
        {
            return Err(bad(
                "peer_kafka",
                format!("nodes {other} and {id} have the same address {addr}"),
            ));
        }
        if out.insert(id, addr.to_string()).is_some() {
            return Err(bad("peer_kafka", format!("node id {id} is named twice")));
        }
    }
    Ok(out)
}

impl Config {
    /// The cluster this node belongs to: `None` for the single-node broker (none of
    /// `cluster_token`, `cluster_addr`, `peers` set; `node_id` is then ignored).
    pub fn cluster(&self) -> Result<Option<Cluster>, ValueError> {
        let any = self.cluster_token.is_some()
            || self.cluster_addr.is_some()
            || self.peers.is_some()
            || self.peer_http.is_some()
            || self.peer_kafka.is_some();
        if !any {
            // `node_id` alone changes nothing: the single-node group is node 1.
            return Ok(None);
        }
        let token = self
            .cluster_token
            .as_ref()
            .ok_or_else(|| bad("cluster_token", "is unset while other cluster keys are set"))?;
        if token.expose().len() < MIN_CLUSTER_TOKEN {
            return Err(bad(
                "cluster_token",
                format!("is shorter than {MIN_CLUSTER_TOKEN} bytes; use a long random secret"),
            ));
        }
        // A longer token passes every node's config and is then refused at every Hello
        // (review s14 F8).
        if token.expose().len() > queenmq_raft::wire::MAX_TOKEN {
            return Err(bad(
                "cluster_token",
                format!(
                    "is longer than {} bytes, the most a Hello carries",
                    queenmq_raft::wire::MAX_TOKEN
                ),
            ));
        }
        let addr = self
            .cluster_addr
            .ok_or_else(|| bad("cluster_addr", "is unset while other cluster keys are set"))?;
        let text = self
            .peers
            .as_deref()
            .ok_or_else(|| bad("peers", "is unset while other cluster keys are set"))?;
        let peers = parse_peers(text)?;
        if !peers.contains_key(&self.node_id) {
            return Err(bad(
                "peers",
                format!("does not name this node (node_id = {})", self.node_id),
            ));
        }
        // The listener binds `cluster_addr`; the others reach this node at its `peers` entry.
        let own_port = split_host_port(&peers[&self.node_id]).map(|(_, p)| p);
        if own_port != Some(addr.port()) {
            return Err(bad(
                "cluster_addr",
                format!(
                    "listens on port {} but peers names node {} at {}",
                    addr.port(),
                    self.node_id,
                    peers[&self.node_id]
                ),
            ));
        }
        let peer_http = match self.peer_http.as_deref() {
            Some(text) => parse_peer_http(text)?,
            None => BTreeMap::new(),
        };
        let peer_kafka = match self.peer_kafka.as_deref() {
            Some(text) => parse_peer_kafka(text)?,
            None => BTreeMap::new(),
        };
        if self.cluster_election_timeout_ms < MIN_ELECTION_HEARTBEATS * self.cluster_heartbeat_ms {
            return Err(bad(
                "cluster_election_timeout_ms",
                format!(
                    "{} ms is under {MIN_ELECTION_HEARTBEATS} x cluster_heartbeat_ms ({} ms): \
                     followers would call elections on late heartbeats",
                    self.cluster_election_timeout_ms, self.cluster_heartbeat_ms
                ),
            ));
        }
        Ok(Some(Cluster {
            node_id: self.node_id,
            addr,
            peers,
            peer_http,
            peer_kafka,
            join: self.cluster_join,
            timing: Timing {
                heartbeat_ms: self.cluster_heartbeat_ms,
                election_timeout_ms: self.cluster_election_timeout_ms,
            },
            snapshot_keep: self
                .cluster_snapshot_catch_up
                .then_some(self.cluster_snapshot_keep_entries),
            tenant_groups: self.cluster_tenant_groups,
        }))
    }
}
