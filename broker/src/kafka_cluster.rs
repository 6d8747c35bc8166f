//! The cluster as the Kafka port shows it (kafka-port `cluster`, docs/kafka-compat.md
//! "Cluster"): every member with a Kafka address is a broker, the leader of the tenant's
//! group (`default`, or with `cluster_tenant_groups` the tenant's own) leads every partition
//! and coordinates every consumer group of that tenant, and a follower answers Metadata's
//! reads from its own applied state (its engine plans nothing, so it would refuse them).

use std::collections::BTreeMap;
use std::sync::Arc;

use queenmq_kafka_port::cluster::{Broker, ClusterView, Topology};
use queenmq_protocol::{Bus, BusFuture, Command, Outcome, QueenError, RequestCtx, DEFAULT_TENANT};
use queenmq_raft::member_addr;

use crate::group::Registry;

/// The `default` group's brokers and leader, for the Kafka port of a cluster member.
pub struct KafkaCluster {
    groups: Arc<Registry>,
    node_id: u64,
    /// This node's own advertised address (what its clients already reached).
    own: (String, u16),
    /// `peer_kafka`: members named at boot carry no Kafka address in the membership.
    peer_kafka: BTreeMap<u64, String>,
    reads: Arc<MetadataReads>,
}

impl std::fmt::Debug for KafkaCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaCluster")
            .field("node_id", &self.node_id)
            .field("own", &self.own)
            .field("peer_kafka", &self.peer_kafka)
            .finish_non_exhaustive()
    }
}

impl KafkaCluster {
    pub fn new(
        groups: Arc<Registry>,
        node_id: u64,
        own: (String, u16),
        peer_kafka: BTreeMap<u64, String>,
        engine: Arc<dyn Bus>,
    ) -> KafkaCluster {
        let reads = Arc::new(MetadataReads {
            groups: groups.clone(),
            engine,
            tenant_groups: false,
            node_id,
        });
        KafkaCluster {
            groups,
            node_id,
            own,
            peer_kafka,
            reads,
        }
    }

    /// `cluster_tenant_groups`: every tenant's Metadata, coordinator and follower reads come
    /// from its own group (review s27 tenants H3: naming this node the leader of every
    /// tenant's partitions sent produces to a follower for good, and gave each node its own
    /// coordinator of one consumer group).
    pub fn with_tenant_groups(mut self, on: bool) -> KafkaCluster {
        self.reads = Arc::new(MetadataReads {
            groups: self.reads.groups.clone(),
            engine: self.reads.engine.clone(),
            tenant_groups: on,
            node_id: self.node_id,
        });
        self
    }

    /// Whether `tenant`'s group is a clustered one here.
    fn clustered(&self, tenant: &str) -> bool {
        tenant == DEFAULT_TENANT || self.reads.tenant_groups
    }
}

/// `host:port` with a port above 0 (IPv6 brackets dropped, as Kafka names hosts).
fn host_port(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p > 0)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| (host.to_string(), port))
}

/// The topology from the membership (`(id, addr, voter)`), the leader openraft reports,
/// this node's id and address, and `peer_kafka`. A member whose id is no Kafka broker id
/// (above 2^31 - 1) or whose Kafka address is unknown is left out; a leader left out is no
/// leader to Kafka clients (LEADER_NOT_AVAILABLE until one they can reach leads).
pub fn topology(
    members: &[(u64, String, bool)],
    leader: Option<u64>,
    node_id: u64,
    own: &(String, u16),
    peer_kafka: &BTreeMap<u64, String>,
) -> Topology {
    let mut brokers = Vec::new();
    let mut replicas = Vec::new();
    let mut own_listed = false;
    for (id, addr, voter) in members {
        let Ok(kid) = i32::try_from(*id) else {
            continue;
        };
        let at = if *id == node_id {
            own_listed = true;
            Some(own.clone())
        } else {
            member_addr::kafka_part(addr)
                .or_else(|| peer_kafka.get(id).map(String::as_str))
                .and_then(host_port)
        };
        let Some((host, port)) = at else {
            continue;
        };
        brokers.push(Broker {
            id: kid,
            host,
            port,
        });
        if *voter {
            replicas.push(kid);
        }
    }
    // Before the membership is known (a node still starting), clients see this node.
    if !own_listed {
        if let Ok(kid) = i32::try_from(node_id) {
            brokers.push(Broker {
                id: kid,
                host: own.0.clone(),
                port: own.1,
            });
        }
    }
    brokers.sort_by_key(|b| b.id);
    replicas.sort_unstable();
    let leader = leader
        .and_then(|id| i32::try_from(id).ok())
        .filter(|id| brokers.iter().any(|b| b.id == *id));
    Topology {
        brokers,
        leader,
        replicas,
        term: 0,
    }
}

/// The leader Kafka clients are sent to. This node names itself only while a majority
/// acknowledged it within the lease: openraft 0.9 keeps a leader cut off from the majority
/// leading, and it would name itself leader, controller and coordinator while its produces
/// time out, which clients retry there without asking for metadata again (review s22 kmeta
/// M2). Without that contact: no leader (LEADER_NOT_AVAILABLE, COORDINATOR_NOT_AVAILABLE),
/// so clients ask again until the majority's leader is known.
fn kafka_leader(s: &queenmq_engine::log::LogStatus, node_id: u64) -> Option<u64> {
    if s.role == "leader" {
        s.quorum_contact.then_some(node_id)
    } else {
        s.leader.filter(|id| *id != node_id)
    }
}

impl ClusterView for KafkaCluster {
    fn topology(&self, tenant: &str) -> Option<Topology> {
        // Without `cluster_tenant_groups` only the default tenant's group is clustered (the
        // others are refused before they reach a group); with it, every tenant's own group
        // names its leader, and a group not open here yet names none (clients ask again).
        if !self.clustered(tenant) {
            return None;
        }
        let group = self.groups.get(tenant);
        if let Some(g) = group.as_ref().filter(|_| tenant != DEFAULT_TENANT) {
            if crate::leader_lookup::outside(g, self.node_id) {
                // Open here as an outsider (review s32 t2 M1): its membership is empty or
                // lacks this node, so it would list this node alone and a client would never
                // learn of the others. `default`'s members are listed, with no leader for the
                // tenant (LEADER_NOT_AVAILABLE, retried).
                let members = self
                    .groups
                    .get(DEFAULT_TENANT)
                    .and_then(|d| d.live.get().ok())
                    .map(|d| d.node.members_now())
                    .unwrap_or_default();
                return Some(topology(
                    &members,
                    None,
                    self.node_id,
                    &self.own,
                    &self.peer_kafka,
                ));
            }
        }
        let live = group.and_then(|g| g.live.get().ok());
        let (members, leader, term) = match live {
            Some(live) => {
                let s = live.log.status();
                (
                    live.node.members_now(),
                    kafka_leader(&s, self.node_id),
                    s.term,
                )
            }
            // Being rebuilt: no leader known from here.
            None => (Vec::new(), None, 0),
        };
        let mut t = topology(&members, leader, self.node_id, &self.own, &self.peer_kafka);
        t.term = term;
        Some(t)
    }

    fn metadata_reads(&self) -> Arc<dyn Bus> {
        self.reads.clone()
    }
}

/// The bus of a follower's Metadata: the reads it may answer from its applied state are
/// answered here, everything else (and everything on the leader) goes to the engine.
struct MetadataReads {
    groups: Arc<Registry>,
    engine: Arc<dyn Bus>,
    tenant_groups: bool,
    node_id: u64,
}

impl MetadataReads {
    /// The answer from this node's applied state; `None` when the engine must answer
    /// (this node leads, the group is not running, or the command is not such a read).
    fn applied(&self, tenant: &str, cmd: &Command) -> Option<Result<Outcome, QueenError>> {
        let group = self.groups.get(tenant)?;
        if tenant != DEFAULT_TENANT
            && matches!(cmd, Command::Read(_) | Command::Kv(_))
            && crate::leader_lookup::outside(&group, self.node_id)
        {
            // An outsider's applied state is empty: answered from it, a Metadata would list
            // no topics, which clients take as gone, not as "retry" (review s32 t2 M1).
            return Some(Err(QueenError::not_leader(None)));
        }
        let live = group.live.get().ok()?;
        if live.log.status().role == "leader" {
            return None;
        }
        let st = live.shared.lock();
        match cmd {
            Command::Read(r) => {
                crate::reads::applied_metadata(&st, r).map(|a| a.map(Outcome::Read))
            }
            Command::Kv(req) => {
                let now = crate::time::wall_clock_us();
                queenmq_engine::plan::applied_gets(&st, now, req).map(|a| a.map(Outcome::Kv))
            }
            _ => None,
        }
    }
}

impl Bus for MetadataReads {
    fn call(&self, ctx: RequestCtx, command: Command) -> BusFuture {
        if ctx.tenant == DEFAULT_TENANT || self.tenant_groups {
            // The engine's bus checks the caller's roles; so must an answer given here.
            if let Err(e) = ctx.authorize(command.meta()) {
                return Box::pin(async move { Err(e) });
            }
            if let Some(out) = self.applied(&ctx.tenant, &command) {
                return Box::pin(async move { out });
            }
        }
        self.engine.call(ctx, command)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own() -> (String, u16) {
        ("10.0.0.2".to_string(), 9092)
    }

    #[test]
    fn members_with_a_kafka_address_are_brokers_and_voters_their_replicas() {
        let members = vec![
            (1, "10.0.0.1:7100".to_string(), true),
            (2, "10.0.0.2:7100".to_string(), true),
            (3, "10.0.0.3:7100".to_string(), true),
            // Added at run time with its Kafka address in the membership.
            (
                4,
                member_addr::compose(
                    "10.0.0.4:7100",
                    Some("http://10.0.0.4:6632"),
                    Some("[::1]:9094"),
                ),
                false,
            ),
            // Added with no Kafka address and not in peer_kafka: not a broker.
            (5, "10.0.0.5:7100;http://10.0.0.5:6632".to_string(), false),
        ];
        let peer_kafka = BTreeMap::from([
            (1, "10.0.0.1:9092".to_string()),
            (3, "10.0.0.3:19092".to_string()),
            // This node's own entry is its advertised address, whatever peer_kafka says.
            (2, "elsewhere:1".to_string()),
        ]);
        let t = topology(&members, Some(3), 2, &own(), &peer_kafka);
        let ids: Vec<i32> = t.brokers.iter().map(|b| b.id).collect();
        assert_eq!(ids, vec![1, 2, 3, 4]);
        assert_eq!(
            t.broker(2).map(|b| (b.host.as_str(), b.port)),
            Some(("10.0.0.2", 9092))
        );
        assert_eq!(t.broker(3).map(|b| b.port), Some(19092));
        assert_eq!(t.broker(4).map(|b| b.host.as_str()), Some("::1"));
        assert_eq!(t.replicas, vec![1, 2, 3]);
        assert_eq!(t.leader, Some(3));
        assert_eq!(t.leader_broker().map(|b| b.port), Some(19092));
    }

    #[test]
    fn a_leader_clients_cannot_reach_is_no_leader() {
        let members = vec![
            (1, "10.0.0.1:7100".to_string(), true),
            (2, "10.0.0.2:7100".to_string(), true),
        ];
        let t = topology(&members, Some(1), 2, &own(), &BTreeMap::new());
        assert_eq!(t.leader, None, "node 1 has no Kafka address");
        assert_eq!(t.brokers.len(), 1);
        assert_eq!(
            topology(&members, None, 2, &own(), &BTreeMap::new()).leader,
            None
        );
        // An id past Kafka's broker ids is left out, as a leader too.
        let big = vec![(3_000_000_000, "h:7100;;h:9092".to_string(), true)];
        let t = topology(&big, Some(3_000_000_000), 2, &own(), &BTreeMap::new());
        assert_eq!((t.leader, t.brokers.len()), (None, 1));
    }

    #[test]
    fn a_node_whose_membership_is_not_known_yet_shows_itself() {
        let t = topology(&[], None, 2, &own(), &BTreeMap::new());
        assert_eq!(t.brokers.len(), 1);
        assert_eq!(t.brokers[0].id, 2);
        assert!(t.replicas.is_empty());
        assert_eq!(t.leader, None);
    }

    #[test]
    fn a_leader_without_a_majoritys_recent_ack_names_no_leader() {
        use queenmq_engine::log::LogStatus;
        let lead = |contact| LogStatus {
            role: "leader",
            leader: Some(2),
            quorum_contact: contact,
            ..LogStatus::default()
        };
        assert_eq!(kafka_leader(&lead(true), 2), Some(2));
        // Cut off from the majority: clients must ask again, not retry here.
        assert_eq!(kafka_leader(&lead(false), 2), None);
        let follower = LogStatus {
            role: "follower",
            leader: Some(3),
            ..LogStatus::default()
        };
        assert_eq!(kafka_leader(&follower, 2), Some(3));
        // A follower whose last known leader is itself (deposed, not yet told) names none.
        let deposed = LogStatus {
            role: "follower",
            leader: Some(2),
            ..LogStatus::default()
        };
        assert_eq!(kafka_leader(&deposed, 2), None);
    }
}
