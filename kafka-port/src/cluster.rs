//! The cluster as Kafka clients see it (docs/kafka-compat.md "Cluster"): which members are
//! brokers, and which one leads the tenant's group. The broker answers these from its Raft
//! membership and status; the door only renders them. A tenant whose group is not clustered
//! (a single node, and every tenant but `default` today) has no topology: its answers name
//! this node alone, as before.

use std::sync::Arc;

use queenmq_protocol::Bus;

/// One member that serves Kafka clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    /// Its Raft node id.
    pub id: i32,
    pub host: String,
    pub port: u16,
}

/// A clustered tenant's brokers and leader, at the moment of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Every member with a known Kafka address, this node included, by id.
    pub brokers: Vec<Broker>,
    /// The group's leader when one is known and is one of `brokers`: the leader of every
    /// partition, the controller, and every coordinator.
    pub leader: Option<i32>,
    /// The voters among `brokers`: every partition's replicas (each holds the whole log).
    pub replicas: Vec<i32>,
    /// The group's Raft term as this node knows it: a node that leads again under a new
    /// term forgets the groups it held in memory.
    pub term: u64,
}

impl Topology {
    pub fn broker(&self, id: i32) -> Option<&Broker> {
        self.brokers.iter().find(|b| b.id == id)
    }

    /// The leader's entry, when one is known.
    pub fn leader_broker(&self) -> Option<&Broker> {
        self.leader.and_then(|id| self.broker(id))
    }
}

/// What the broker tells the door about its cluster.
pub trait ClusterView: Send + Sync + std::fmt::Debug {
    /// `tenant`'s topology now; `None` when its group is not clustered.
    fn topology(&self, tenant: &str) -> Option<Topology>;
    /// A bus that answers the reads of a Metadata answer (the queue list, one queue's
    /// partitions, the door's KV rows, collision checks) from this node's applied state when
    /// it does not lead, and passes every other command to the engine (which refuses it on a
    /// follower). A follower's state may trail the leader's by what is not yet applied here,
    /// as a Kafka broker's metadata cache may.
    fn metadata_reads(&self) -> Arc<dyn Bus>;
}
