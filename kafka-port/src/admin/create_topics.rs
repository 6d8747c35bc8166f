//! CreateTopics: a topic is a queue (created by a queue configure) and its partition count is
//! stored as the topic's floor. One broker holds every partition, so the only replication
//! factor is 1 (or -1, "the broker's default"). Topic configs go through
//! [`super::topic_configs`], as AlterConfigs' do: the ones that hold become queue options,
//! the others are refused with INVALID_CONFIG.

use std::collections::HashSet;

use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::{CreateTopicsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::codes::*;
use super::describe_configs::topic_configs;
use super::topic_configs::{options, row_changes, Change};
use super::{config_row, duplicates, floor, Refusal, MAX_ASSIGNMENTS, MAX_CONFIGS, MAX_TOPICS};
use crate::connection::{encode, Reply};
use crate::topics::{self, MAX_TOPIC_PARTITIONS};
use crate::wire::{Malformed, Reader};
use crate::{collisions, errors, Door};
use queenmq_protocol::kafka_topic_configs::TopicConfigs;
use queenmq_protocol::rows;

/// v2..=v7: v0/v1 differ only in the response; every client since 2018 sends v2 or later.
pub const VERSIONS: std::ops::RangeInclusive<i16> = 2..=7;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    pub name: String,
    pub num_partitions: i32,
    pub replication_factor: i16,
    /// `(partition index, broker ids)` per manually assigned partition.
    pub assignments: Vec<(i32, Vec<i32>)>,
    pub configs: Vec<(String, Option<String>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTopicsRequest {
    pub topics: Vec<NewTopic>,
    pub validate_only: bool,
}

fn bounded(n: Option<usize>, max: usize, what: &'static str) -> Result<usize, Malformed> {
    let n = n.unwrap_or(0);
    if n > max {
        return Err(Malformed(what));
    }
    Ok(n)
}

pub fn decode(r: &mut Reader) -> Result<CreateTopicsRequest, Malformed> {
    let n = bounded(r.array_len()?, MAX_TOPICS, "too many topics in one request")?;
    let mut topics = Vec::new();
    for _ in 0..n {
        let name = r.string()?;
        let num_partitions = r.i32()?;
        let replication_factor = r.i16()?;
        let na = bounded(
            r.array_len()?,
            MAX_ASSIGNMENTS,
            "too many replica assignments",
        )?;
        let mut assignments = Vec::new();
        for _ in 0..na {
            let index = r.i32()?;
            let nb = bounded(r.array_len()?, 1_000, "too many replicas in an assignment")?;
            let mut brokers = Vec::new();
            for _ in 0..nb {
                brokers.push(r.i32()?);
            }
            r.skip_tags()?;
            assignments.push((index, brokers));
        }
        let nc = bounded(
            r.array_len()?,
            MAX_CONFIGS,
            "too many configs for one topic",
        )?;
        let mut configs = Vec::new();
        for _ in 0..nc {
            let key = r.string()?;
            let value = r.nullable_string()?;
            r.skip_tags()?;
            configs.push((key, value));
        }
        r.skip_tags()?;
        topics.push(NewTopic {
            name,
            num_partitions,
            replication_factor,
            assignments,
            configs,
        });
    }
    let _timeout_ms = r.i32()?;
    let validate_only = r.bool()?;
    r.skip_tags()?;
    Ok(CreateTopicsRequest {
        topics,
        validate_only,
    })
}

/// The partition count a topic asks for, or why it cannot be made; checks nothing stored.
pub fn check(
    t: &NewTopic,
    brokers: &[i32],
    default_partitions: u32,
    max_request_bytes: usize,
) -> Result<u32, Refusal> {
    if !topics::valid_topic_name(&t.name) {
        return Err(Refusal::new(
            errors::INVALID_TOPIC_EXCEPTION,
            format!("topic name {:?} is not legal", t.name),
        ));
    }
    if let Err(e) = queenmq_protocol::limits::check_name("topic", &t.name) {
        return Err(Refusal::new(errors::INVALID_TOPIC_EXCEPTION, e.to_string()));
    }
    topic_options(t, max_request_bytes)?;
    if !t.assignments.is_empty() {
        if t.num_partitions != -1 || t.replication_factor != -1 {
            return Err(Refusal::new(
                INVALID_REQUEST,
                "both numPartitions or replicationFactor and replicasAssignments were set",
            ));
        }
        let n = t.assignments.len();
        let indexes: HashSet<i32> = t.assignments.iter().map(|(i, _)| *i).collect();
        let dense = indexes.len() == n && (0..n as i32).all(|i| indexes.contains(&i));
        if !dense {
            return Err(Refusal::new(
                INVALID_REPLICA_ASSIGNMENT,
                "partitions must be numbered 0 to n-1, each once",
            ));
        }
        if t.assignments
            .iter()
            .any(|(_, b)| !super::replicas_hold(b, brokers))
        {
            return Err(Refusal::new(
                INVALID_REPLICA_ASSIGNMENT,
                super::replicas_refusal(brokers),
            ));
        }
        return Ok(n as u32);
    }
    let rf = t.replication_factor;
    if rf != -1 && !(rf >= 1 && rf as usize <= brokers.len()) {
        return Err(Refusal::new(
            INVALID_REPLICATION_FACTOR,
            format!(
                "replication factor: {} larger than available brokers: {}",
                t.replication_factor,
                brokers.len()
            ),
        ));
    }
    match t.num_partitions {
        -1 => Ok(default_partitions.clamp(1, MAX_TOPIC_PARTITIONS)),
        n if n >= 1 && n as u32 <= MAX_TOPIC_PARTITIONS => Ok(n as u32),
        n => Err(Refusal::new(
            INVALID_PARTITIONS,
            format!("number of partitions {n} is not in 1..={MAX_TOPIC_PARTITIONS}"),
        )),
    }
}

fn exists(name: &str) -> Refusal {
    Refusal::new(
        TOPIC_ALREADY_EXISTS,
        format!("topic '{name}' already exists"),
    )
}

/// The queue options a topic's configs ask (the same code as AlterConfigs).
fn topic_options(
    t: &NewTopic,
    max_request_bytes: usize,
) -> Result<queenmq_protocol::QueueOptions, Refusal> {
    options(&changes(t), &topic_configs(max_request_bytes))
}

fn changes(t: &NewTopic) -> Vec<(String, Change)> {
    t.configs
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().map_or(Change::Default, Change::Set)))
        .collect()
}

/// The config-row changes a topic's configs ask (range-checked: INVALID_CONFIG).
fn topic_row(t: &NewTopic) -> Result<Vec<(&'static str, Option<i32>)>, Refusal> {
    row_changes(&changes(t))
}

async fn create(
    door: &Door,
    t: &NewTopic,
    validate_only: bool,
    check_collision: &mut collisions::Check,
) -> Result<u32, Refusal> {
    // The queue's configure and its partition floor.
    super::authorized(
        door,
        &[rows::CONFIGURE, rows::KV],
        errors::TOPIC_AUTHORIZATION_FAILED,
    )?;
    let max = door.cfg.max_request_bytes;
    let count = check(
        t,
        &super::replica_brokers(door)?,
        door.cfg.default_partitions,
        max,
    )?;
    let opts = topic_options(t, max)?;
    let mut configs = TopicConfigs::default();
    for (name, value) in topic_row(t)? {
        configs.set(name, value);
    }
    let queen = |e: queenmq_protocol::QueenError| Refusal::from_queen(&e);
    match topics::exists(door, &t.name).await {
        Ok(true) => return Err(exists(&t.name)),
        Ok(false) => {}
        Err(e) => return Err(queen(e)),
    }
    if let Some(existing) = check_collision
        .existing(door, &t.name)
        .await
        .map_err(queen)?
    {
        return Err(Refusal::new(
            errors::INVALID_TOPIC_EXCEPTION,
            topics::collision_message(&t.name, &existing),
        ));
    }
    if validate_only {
        return Ok(count);
    }
    // A row left by a dead queue of the name is replaced, if no other request got there first.
    let seen = floor::get(door, &t.name).await.map_err(queen)?;
    // The floor first: a queue that exists always shows the count asked for, even to a
    // Metadata request that lands between the writes. Conditional, so of two requests
    // creating the name at once only one wins.
    let Some(pending) = floor::put(door, &t.name, count, None, seen.map(|r| r.version))
        .await
        .map_err(queen)?
    else {
        return Err(exists(&t.name));
    };
    // The config row likewise before the queue (naming no queue until it exists), so the
    // first produce already meets the topic's bound; a dead queue's row is replaced.
    let seen_row = match config_row::get(door, &t.name).await {
        Ok(row) => row.map(|(_, version)| version),
        Err(e) => return Err(take_back(door, &t.name, pending, None, queen(e)).await),
    };
    let row_pending = match config_row::write(door, &t.name, &configs, seen_row).await {
        Ok(Some(v)) => (!configs.is_empty()).then_some(v),
        Ok(None) => return Err(take_back(door, &t.name, pending, None, exists(&t.name)).await),
        Err(e) => return Err(take_back(door, &t.name, pending, None, queen(e)).await),
    };
    let queue_id = match topics::create_with(door, &t.name, opts).await {
        Ok(id) => id,
        Err(e) => return Err(take_back(door, &t.name, pending, row_pending, queen(e)).await),
    };
    check_collision.created(&t.name);
    if let Some(v) = row_pending {
        configs.queue = Some(queue_id.clone());
        match config_row::write(door, &t.name, &configs, Some(v)).await {
            Ok(Some(_)) => {}
            Ok(None) => return Err(exists(&t.name)),
            Err(e) => return Err(queen(e)),
        }
    }
    match floor::put(door, &t.name, count, Some(&queue_id), Some(pending)).await {
        Ok(Some(_)) => Ok(count),
        // Another CreateTopics rewrote the row after ours: it is the one that created it.
        Ok(None) => Err(exists(&t.name)),
        Err(e) => Err(queen(e)),
    }
}

/// Takes back the rows a refused CreateTopics wrote before its queue, and answers `why`.
/// Left in place, the refused request's count and configs would go to the next queue of the
/// name (an auto-create); a crash here leaves them, documented.
async fn take_back(
    door: &Door,
    topic: &str,
    floor_at: u64,
    row_at: Option<u64>,
    why: Refusal,
) -> Refusal {
    if let Err(back) = floor::take_back(door, topic, floor_at).await {
        tracing::warn!(topic = %topic, error = %back, "kafka CreateTopics: floor left");
    }
    if let Some(v) = row_at {
        if let Err(back) = config_row::take_back(door, topic, v).await {
            tracing::warn!(topic = %topic, error = %back, "kafka CreateTopics: config row left");
        }
    }
    why
}

pub async fn answer(door: &Door, version: i16, mut r: Reader) -> Reply {
    let req = match decode(&mut r) {
        Ok(req) => req,
        Err(e) => return Reply::Close(e.to_string()),
    };
    let names: Vec<String> = req.topics.iter().map(|t| t.name.clone()).collect();
    let twice = duplicates(&names);
    // One engine read checks every new name (at most MAX_TOPICS) for collisions.
    let mut check_collision = collisions::Check::new(
        names
            .iter()
            .filter(|n| !twice.contains(*n) && topics::valid_topic_name(n))
            .map(String::as_str),
    );
    // Every voter holds every partition: the factor a created topic really has, whatever
    // was asked (review s23 lead L3).
    let factor =
        super::replica_brokers(door).map_or(1, |b| i16::try_from(b.len()).unwrap_or(i16::MAX));
    let mut out = Vec::new();
    for t in &req.topics {
        let verdict = if twice.contains(&t.name) {
            Err(Refusal::new(
                INVALID_REQUEST,
                format!("topic '{}' is named more than once", t.name),
            ))
        } else {
            create(door, t, req.validate_only, &mut check_collision).await
        };
        out.push(result(version, &t.name, verdict, factor));
    }
    let resp = CreateTopicsResponse::default().with_topics(out);
    encode(&resp, version)
}

fn result(
    version: i16,
    name: &str,
    verdict: Result<u32, Refusal>,
    factor: i16,
) -> CreatableTopicResult {
    let base = CreatableTopicResult::default()
        .with_name(TopicName(StrBytes::from_string(name.to_owned())));
    match verdict {
        Ok(count) => {
            let base = base.with_error_code(errors::NONE);
            if version >= 5 {
                base.with_num_partitions(count as i32)
                    .with_replication_factor(factor)
                    .with_configs(Some(Vec::new()))
            } else {
                base
            }
        }
        Err(Refusal { code, message }) => {
            if code != TOPIC_ALREADY_EXISTS {
                tracing::info!(topic = name, code, %message, "kafka CreateTopics refused");
            }
            base.with_error_code(code)
                .with_error_message(Some(StrBytes::from_string(message)))
                .with_num_partitions(-1)
                .with_replication_factor(-1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::create_topics_request::{
        CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
    };
    use kafka_protocol::messages::{BrokerId, CreateTopicsRequest as KReq};
    use kafka_protocol::protocol::Encodable;

    fn topic(name: &str, parts: i32, rf: i16) -> NewTopic {
        NewTopic {
            name: name.into(),
            num_partitions: parts,
            replication_factor: rf,
            assignments: vec![],
            configs: vec![],
        }
    }

    #[test]
    fn every_served_version_decodes_what_clients_encode() {
        let t = CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(vec![CreatableReplicaAssignment::default()
                .with_partition_index(0)
                .with_broker_ids(vec![BrokerId(1)])])
            .with_configs(vec![CreatableTopicConfig::default()
                .with_name(StrBytes::from_static_str("retention.ms"))
                .with_value(Some(StrBytes::from_static_str("1000")))]);
        let req = KReq::default()
            .with_topics(vec![t])
            .with_timeout_ms(5000)
            .with_validate_only(true);
        for v in VERSIONS {
            let mut buf = BytesMut::new();
            req.encode(&mut buf, v).expect("encodes");
            let mut r = Reader::new(buf.freeze(), v >= 5);
            let got = decode(&mut r).expect("decodes");
            assert_eq!(r.remaining(), 0, "v{v}");
            assert!(got.validate_only, "v{v}");
            assert_eq!(got.topics[0].assignments, vec![(0, vec![1])], "v{v}");
            assert_eq!(
                got.topics[0].configs,
                vec![("retention.ms".into(), Some("1000".into()))]
            );
        }
    }

    #[test]
    fn counts_and_replication_are_checked_as_kafka_does() {
        assert_eq!(check(&topic("t", 7, 1), &[1], 4, 1 << 20), Ok(7));
        assert_eq!(check(&topic("t", -1, -1), &[1], 4, 1 << 20), Ok(4));
        for bad in [0, -2, 10_001] {
            assert_eq!(
                check(&topic("t", bad, 1), &[1], 4, 1 << 20).map_err(|r| r.code),
                Err(INVALID_PARTITIONS)
            );
        }
        assert_eq!(
            check(&topic("t", 3, 3), &[1], 4, 1 << 20).map_err(|r| r.code),
            Err(INVALID_REPLICATION_FACTOR)
        );
        assert_eq!(
            check(&topic("a b", 3, 1), &[1], 4, 1 << 20).map_err(|r| r.code),
            Err(errors::INVALID_TOPIC_EXCEPTION)
        );
        let mut cfg = topic("t", 1, 1);
        cfg.configs
            .push(("cleanup.policy".into(), Some("compact".into())));
        assert_eq!(
            check(&cfg, &[1], 4, 1 << 20).map_err(|r| r.code),
            Err(INVALID_CONFIG)
        );
        cfg.configs = vec![("retention.ms".into(), Some("60000".into()))];
        assert_eq!(check(&cfg, &[1], 4, 1 << 20), Ok(1), "a config that holds");
    }

    #[test]
    fn on_a_cluster_any_voters_are_replicas() {
        let voters = [1, 2, 3];
        assert_eq!(check(&topic("t", 3, 3), &voters, 4, 1 << 20), Ok(3));
        assert_eq!(
            check(&topic("t", 3, 4), &voters, 4, 1 << 20).map_err(|r| r.code),
            Err(INVALID_REPLICATION_FACTOR)
        );
        let mut t = topic("t", -1, -1);
        // A list copied from Metadata.
        t.assignments = vec![(0, vec![1, 2, 3]), (1, vec![3, 1])];
        assert_eq!(check(&t, &voters, 4, 1 << 20), Ok(2));
        for bad in [vec![4], vec![1, 1], vec![]] {
            t.assignments[1] = (1, bad);
            assert_eq!(
                check(&t, &voters, 4, 1 << 20).map_err(|r| r.code),
                Err(INVALID_REPLICA_ASSIGNMENT)
            );
        }
    }

    #[test]
    fn manual_assignments_must_be_dense_and_on_this_broker() {
        let mut t = topic("t", -1, -1);
        t.assignments = vec![(0, vec![1]), (1, vec![1])];
        assert_eq!(check(&t, &[1], 4, 1 << 20), Ok(2));
        t.assignments[1] = (2, vec![1]);
        assert_eq!(
            check(&t, &[1], 4, 1 << 20).map_err(|r| r.code),
            Err(INVALID_REPLICA_ASSIGNMENT)
        );
        t.assignments[1] = (1, vec![1, 2]);
        assert_eq!(
            check(&t, &[1], 4, 1 << 20).map_err(|r| r.code),
            Err(INVALID_REPLICA_ASSIGNMENT)
        );
        t.num_partitions = 2;
        assert_eq!(
            check(&t, &[1], 4, 1 << 20).map_err(|r| r.code),
            Err(INVALID_REQUEST)
        );
    }
}
