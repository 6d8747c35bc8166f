//! Metadata: topics are queues. On a single node (and for a tenant whose group is not
//! clustered) this node is the only broker and leads every partition; on a cluster every
//! member with a Kafka address is a broker and the group's leader leads every partition
//! (docs/kafka-compat.md "Cluster").

use std::collections::HashSet;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use queenmq_protocol::ErrorCode;

use crate::cluster::Topology;
use crate::connection::{encode, Reply};
use crate::wire::{Malformed, Reader};
use crate::{collisions, errors, topics, Door};

/// v0..=v12: every version a client from 2017 on sends (v13 only moves an error code).
pub const VERSIONS: std::ops::RangeInclusive<i16> = 0..=12;
/// The cluster id clients log and some compare across reconnects.
pub const CLUSTER_ID: &str = "queenmq";

/// What a Metadata request asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataRequest {
    /// `None`: every topic.
    pub topics: Option<Vec<String>>,
    pub allow_auto_topic_creation: bool,
}

pub fn decode(version: i16, r: &mut Reader) -> Result<MetadataRequest, Malformed> {
    let topics = match r.array_len()? {
        None => None,
        // v0 had no null: an empty list meant every topic.
        Some(0) if version == 0 => None,
        Some(n) => {
            let mut names = Vec::new();
            for _ in 0..n {
                if version >= 10 {
                    // A topic id; topics have none yet (all-zero), so the name decides.
                    r.uuid()?;
                }
                let name = r.nullable_string()?;
                r.skip_tags()?;
                // A null name (v10+, asked by id only) matches no topic here.
                names.push(name.unwrap_or_default());
            }
            Some(names)
        }
    };
    let allow_auto_topic_creation = if version >= 4 { r.bool()? } else { true };
    if (8..=10).contains(&version) {
        let _include_cluster_authorized_operations = r.bool()?;
    }
    if version >= 8 {
        let _include_topic_authorized_operations = r.bool()?;
    }
    r.skip_tags()?;
    Ok(MetadataRequest {
        topics,
        allow_auto_topic_creation,
    })
}

/// Topics one Metadata request may name: each costs engine reads.
const MAX_TOPICS: usize = 10_000;
/// Topics one Metadata request may create; the rest answer LEADER_NOT_AVAILABLE (retried).
const MAX_CREATIONS: usize = 100;

/// Who leads the partitions of one answer, and which brokers hold them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Leadership {
    /// `None`: no leader known (a cluster between leaders): partitions answer
    /// LEADER_NOT_AVAILABLE, which clients retry after refreshing.
    leader: Option<BrokerId>,
    replicas: Vec<BrokerId>,
}

impl Leadership {
    fn of(door: &Door, topo: Option<&Topology>) -> Leadership {
        match topo {
            None => {
                let node = BrokerId(door.cfg.node_id);
                Leadership {
                    leader: Some(node),
                    replicas: vec![node],
                }
            }
            Some(t) => Leadership {
                leader: t.leader.map(BrokerId),
                replicas: t.replicas.iter().copied().map(BrokerId).collect(),
            },
        }
    }
}

/// The brokers of an answer: this node alone, or every member with a Kafka address.
fn brokers(door: &Door, topo: Option<&Topology>) -> Vec<MetadataResponseBroker> {
    match topo {
        None => vec![MetadataResponseBroker::default()
            .with_node_id(BrokerId(door.cfg.node_id))
            .with_host(StrBytes::from_string(door.cfg.advertised_host.clone()))
            .with_port(i32::from(door.cfg.advertised_port))],
        Some(t) => t
            .brokers
            .iter()
            .map(|b| {
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(b.id))
                    .with_host(StrBytes::from_string(b.host.clone()))
                    .with_port(i32::from(b.port))
            })
            .collect(),
    }
}

pub async fn answer(door: &Door, version: i16, mut r: Reader) -> Reply {
    let req = match decode(version, &mut r) {
        Ok(req) => req,
        Err(e) => return Reply::Close(e.to_string()),
    };
    let topo = door.topology();
    // A follower answers the topics from its own applied state (its engine plans nothing);
    // an auto-creation still goes to the engine, which refuses it here (the client asks
    // again and reaches the leader).
    let follower_door;
    let door = match (&topo, &door.cfg.cluster) {
        (Some(t), Some(c)) if t.leader != Some(door.cfg.node_id) => {
            follower_door = door.over_bus(c.metadata_reads());
            &follower_door
        }
        _ => door,
    };
    let lead = Leadership::of(door, topo.as_ref());
    let wanted = match req.topics {
        Some(t) if t.len() > MAX_TOPICS => {
            return Reply::Close(format!(
                "{} topics in one Metadata request (at most {MAX_TOPICS})",
                t.len()
            ))
        }
        Some(t) => t,
        None => match topics::names(door).await {
            Ok(all) => all,
            // An empty list would tell the client its topics are gone.
            Err(e) => return Reply::Close(format!("listing the topics failed: {e}")),
        },
    };
    // Kafka answers a name once however often a request names it.
    let mut seen = HashSet::new();
    let wanted: Vec<String> = wanted
        .into_iter()
        .filter(|n| seen.insert(n.clone()))
        .collect();
    let mut counts = Vec::with_capacity(wanted.len());
    for name in &wanted {
        counts.push(match topics::valid_topic_name(name) {
            true => Some(topics::partition_count(door, name).await),
            false => None,
        });
    }
    // The names that will try to auto-create, in order: their collision check is one read.
    let creating = wanted
        .iter()
        .zip(&counts)
        .filter(|(_, c)| {
            req.allow_auto_topic_creation
                && matches!(c, Some(Err(e)) if e.code == ErrorCode::NotFound)
        })
        .map(|(n, _)| n.as_str())
        .take(MAX_CREATIONS);
    let mut creation = Creation {
        left: MAX_CREATIONS,
        check: collisions::Check::new(creating),
        refused: Vec::new(),
    };
    let mut out = Vec::with_capacity(wanted.len());
    for (name, count) in wanted.iter().zip(counts) {
        out.push(
            topic(
                door,
                &lead,
                name,
                count,
                req.allow_auto_topic_creation,
                &mut creation,
            )
            .await,
        );
    }
    if let Some(first) = creation.refused.first() {
        // Once per request: a client may name colliding topics at will.
        tracing::info!(
            refused = creation.refused.len(),
            first = %first,
            "metadata: auto-creations refused, the names collide with existing topics"
        );
    }
    let controller = match lead.leader {
        Some(id) if version >= 1 => id,
        _ => BrokerId(-1),
    };
    let resp = MetadataResponse::default()
        .with_brokers(brokers(door, topo.as_ref()))
        .with_cluster_id((version >= 2).then(|| StrBytes::from_static_str(CLUSTER_ID)))
        .with_controller_id(controller)
        .with_topics(out);
    encode(&resp, version)
}

/// What auto-creation has left in one request.
struct Creation {
    /// Creations still allowed; every attempt takes one, refused or not, so that the limit
    /// bounds what one request costs.
    left: usize,
    check: collisions::Check,
    /// Names refused for a collision (logged once per request).
    refused: Vec<String>,
}

/// `count`: the topic's partition count as read, `None` for a name Kafka does not allow.
async fn topic(
    door: &Door,
    lead: &Leadership,
    name: &str,
    count: Option<Result<u32, queenmq_protocol::QueenError>>,
    auto_create: bool,
    creation: &mut Creation,
) -> MetadataResponseTopic {
    let base = MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(name.to_owned()))));
    let Some(mut count) = count else {
        return base.with_error_code(errors::INVALID_TOPIC_EXCEPTION);
    };
    if auto_create && matches!(&count, Err(e) if e.code == ErrorCode::NotFound) {
        if creation.left == 0 {
            // Retriable: the client asks again and the next request creates the next ones.
            return base.with_error_code(errors::LEADER_NOT_AVAILABLE);
        }
        creation.left -= 1;
        match creation.check.existing(door, name).await {
            Ok(None) => {}
            Ok(Some(existing)) => {
                let why = topics::collision_message(name, &existing);
                tracing::debug!(topic = name, why = %why, "metadata: auto-creation refused");
                creation.refused.push(name.to_owned());
                return base.with_error_code(errors::INVALID_TOPIC_EXCEPTION);
            }
            Err(e) => return base.with_error_code(errors::from_queen(&e)),
        }
        count = match topics::create(door, name).await {
            Ok(_) => {
                creation.check.created(name);
                topics::partition_count(door, name).await
            }
            Err(e) => Err(e),
        };
    }
    match count {
        Ok(n) => base.with_partitions(
            (0..n)
                .map(|i| {
                    let p = MetadataResponsePartition::default()
                        .with_partition_index(i as i32)
                        .with_leader_epoch(0)
                        .with_replica_nodes(lead.replicas.clone())
                        .with_isr_nodes(lead.replicas.clone());
                    match lead.leader {
                        Some(id) => p.with_leader_id(id),
                        // Per partition, retriable: the client refreshes and asks again.
                        None => p
                            .with_leader_id(BrokerId(-1))
                            .with_error_code(errors::LEADER_NOT_AVAILABLE),
                    }
                })
                .collect(),
        ),
        // An auto-creation a follower's engine refused: retriable, the client asks again
        // (and reaches the leader, which creates it).
        Err(e) if e.code == ErrorCode::NotLeader => {
            base.with_error_code(errors::LEADER_NOT_AVAILABLE)
        }
        Err(e) => {
            if e.code != ErrorCode::NotFound {
                tracing::info!(topic = name, error = %e, "metadata: topic refused");
            }
            base.with_error_code(errors::from_queen(&e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::messages::MetadataRequest as KMetadataRequest;
    use kafka_protocol::protocol::Encodable;

    /// A request encoded by kafka-protocol reads back the same through our decoder.
    fn roundtrip(version: i16, topics: Option<Vec<&str>>, auto: bool) -> MetadataRequest {
        use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
        let req = KMetadataRequest::default()
            .with_topics(topics.map(|ts| {
                ts.into_iter()
                    .map(|t| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(t.to_owned()))))
                    })
                    .collect()
            }))
            .with_allow_auto_topic_creation(auto);
        let mut buf = BytesMut::new();
        req.encode(&mut buf, version).expect("encodes");
        let mut r = Reader::new(buf.freeze(), version >= 9);
        let out = decode(version, &mut r).expect("decodes");
        assert_eq!(r.remaining(), 0, "v{version} read to the end");
        out
    }

    #[test]
    fn every_served_version_decodes_what_clients_encode() {
        for v in VERSIONS {
            let auto = v < 4 || v % 2 == 0;
            let got = roundtrip(v, Some(vec!["a", "b"]), auto);
            assert_eq!(
                got.topics,
                Some(vec!["a".to_owned(), "b".to_owned()]),
                "v{v}"
            );
            assert_eq!(got.allow_auto_topic_creation, auto, "v{v}");
            if v >= 1 {
                assert_eq!(roundtrip(v, None, auto).topics, None, "v{v}: null is all");
            }
        }
        assert_eq!(
            roundtrip(0, Some(vec![]), true).topics,
            None,
            "v0: empty is all"
        );
        assert_eq!(roundtrip(1, Some(vec![]), true).topics, Some(vec![]));
    }

    #[test]
    fn a_lying_topic_count_is_refused() {
        let mut b = BytesMut::new();
        b.put_i32(i32::MAX);
        b.put_i16(1);
        let mut r = Reader::new(b.freeze(), false);
        assert!(decode(1, &mut r).is_err());
        let mut empty = Reader::new(Bytes::new(), false);
        assert!(decode(4, &mut empty).is_err());
    }
}
