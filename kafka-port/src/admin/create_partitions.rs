//! CreatePartitions: raises a topic's partition floor. Every named topic gets a result
//! (an empty results array makes clients wait for answers that never come).

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::codes::*;
use super::{duplicates, floor, Refusal, MAX_ASSIGNMENTS, MAX_TOPICS};
use crate::connection::{encode, Reply};
use crate::topics::{self, MAX_TOPIC_PARTITIONS};
use crate::wire::{Malformed, Reader};
use crate::{errors, Door};
use queenmq_protocol::rows;

pub const VERSIONS: std::ops::RangeInclusive<i16> = 0..=3;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Growth {
    pub name: String,
    pub count: i32,
    /// Broker ids per new partition, when the client assigns them.
    pub assignments: Option<Vec<Vec<i32>>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePartitionsRequest {
    pub topics: Vec<Growth>,
    pub validate_only: bool,
}

pub fn decode(r: &mut Reader) -> Result<CreatePartitionsRequest, Malformed> {
    let n = r.array_len()?.unwrap_or(0);
    if n > MAX_TOPICS {
        return Err(Malformed("too many topics in one request"));
    }
    let mut topics = Vec::new();
    for _ in 0..n {
        let name = r.string()?;
        let count = r.i32()?;
        let assignments = match r.array_len()? {
            None => None,
            Some(na) if na > MAX_ASSIGNMENTS => {
                return Err(Malformed("too many partition assignments"))
            }
            Some(na) => {
                let mut all = Vec::new();
                for _ in 0..na {
                    let nb = r.array_len()?.unwrap_or(0);
                    if nb > 1_000 {
                        return Err(Malformed("too many replicas in an assignment"));
                    }
                    let mut brokers = Vec::new();
                    for _ in 0..nb {
                        brokers.push(r.i32()?);
                    }
                    r.skip_tags()?;
                    all.push(brokers);
                }
                Some(all)
            }
        };
        r.skip_tags()?;
        topics.push(Growth {
            name,
            count,
            assignments,
        });
    }
    let _timeout_ms = r.i32()?;
    let validate_only = r.bool()?;
    r.skip_tags()?;
    Ok(CreatePartitionsRequest {
        topics,
        validate_only,
    })
}

/// Whether growing from `current` partitions as `g` asks is allowed, as Kafka judges it.
pub fn check(g: &Growth, current: u32, brokers: &[i32]) -> Result<u32, Refusal> {
    let asked = u32::try_from(g.count).unwrap_or(0);
    if asked <= current {
        return Err(Refusal::new(
            INVALID_PARTITIONS,
            format!(
                "topic currently has {current} partitions, which is higher than or equal to the requested {}",
                g.count
            ),
        ));
    }
    if asked > MAX_TOPIC_PARTITIONS {
        return Err(Refusal::new(
            INVALID_PARTITIONS,
            format!("at most {MAX_TOPIC_PARTITIONS} partitions per topic"),
        ));
    }
    if let Some(a) = &g.assignments {
        if a.len() as u32 != asked - current {
            return Err(Refusal::new(
                INVALID_REPLICA_ASSIGNMENT,
                format!(
                    "{} assignments given for {} new partitions",
                    a.len(),
                    asked - current
                ),
            ));
        }
        if a.iter().any(|b| !super::replicas_hold(b, brokers)) {
            return Err(Refusal::new(
                INVALID_REPLICA_ASSIGNMENT,
                super::replicas_refusal(brokers),
            ));
        }
    }
    Ok(asked)
}

/// Rounds of read, judge, conditional write one growth gets before it gives up (each lost
/// round means another admin request changed the topic in between).
const ATTEMPTS: usize = 8;

async fn grow(door: &Door, g: &Growth, validate_only: bool) -> Result<(), Refusal> {
    // The partition floor is a KV row.
    super::authorized(door, &[rows::KV], errors::TOPIC_AUTHORIZATION_FAILED)?;
    if !topics::valid_topic_name(&g.name) {
        return Err(Refusal::new(
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            format!("topic {:?} does not exist", g.name),
        ));
    }
    for _ in 0..ATTEMPTS {
        let topic = topics::lookup(door, &g.name)
            .await
            .map_err(|e| Refusal::from_queen(&e))?;
        let asked = check(g, topic.count, &super::replica_brokers(door)?)?;
        if validate_only {
            return Ok(());
        }
        // Conditional on the row read with the count: two growths judged against the same
        // count cannot both land (the later one could lower the count the earlier was told).
        let seen = topic.floor.as_ref().map(|f| f.version);
        match floor::put(door, &g.name, asked, Some(&topic.queue_id), seen).await {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => continue,
            Err(e) => return Err(Refusal::from_queen(&e)),
        }
    }
    Err(Refusal::new(
        errors::REQUEST_TIMED_OUT,
        format!("topic '{}' kept changing under this request; retry", g.name),
    ))
}

pub async fn answer(door: &Door, version: i16, mut r: Reader) -> Reply {
    let req = match decode(&mut r) {
        Ok(req) => req,
        Err(e) => return Reply::Close(e.to_string()),
    };
    let names: Vec<String> = req.topics.iter().map(|t| t.name.clone()).collect();
    let twice = duplicates(&names);
    let mut out = Vec::new();
    for g in &req.topics {
        let verdict = if twice.contains(&g.name) {
            Err(Refusal::new(
                INVALID_REQUEST,
                format!("topic '{}' is named more than once", g.name),
            ))
        } else {
            grow(door, g, req.validate_only).await
        };
        let base = CreatePartitionsTopicResult::default()
            .with_name(TopicName(StrBytes::from_string(g.name.clone())));
        out.push(match verdict {
            Ok(()) => base,
            Err(Refusal { code, message }) => base
                .with_error_code(code)
                .with_error_message(Some(StrBytes::from_string(message))),
        });
    }
    encode(
        &CreatePartitionsResponse::default().with_results(out),
        version,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::create_partitions_request::{
        CreatePartitionsAssignment, CreatePartitionsTopic,
    };
    use kafka_protocol::messages::{BrokerId, CreatePartitionsRequest as KReq};
    use kafka_protocol::protocol::Encodable;

    #[test]
    fn every_served_version_decodes_what_clients_encode() {
        let req = KReq::default()
            .with_topics(vec![
                CreatePartitionsTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("a")))
                    .with_count(5)
                    .with_assignments(Some(vec![
                        CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(1)])
                    ])),
                CreatePartitionsTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("b")))
                    .with_count(2)
                    .with_assignments(None),
            ])
            .with_timeout_ms(1000)
            .with_validate_only(true);
        for v in VERSIONS {
            let mut buf = BytesMut::new();
            req.encode(&mut buf, v).expect("encodes");
            let mut r = Reader::new(buf.freeze(), v >= 2);
            let got = decode(&mut r).expect("decodes");
            assert_eq!(r.remaining(), 0, "v{v}");
            assert!(got.validate_only);
            assert_eq!(got.topics[0].assignments, Some(vec![vec![1]]), "v{v}");
            assert_eq!(
                (got.topics[1].count, &got.topics[1].assignments),
                (2, &None)
            );
        }
    }

    #[test]
    fn only_growth_is_allowed() {
        let g = |count, assignments| Growth {
            name: "t".into(),
            count,
            assignments,
        };
        assert_eq!(check(&g(5, None), 4, &[1]), Ok(5));
        assert_eq!(check(&g(6, Some(vec![vec![1], vec![1]])), 4, &[1]), Ok(6));
        for (growth, code) in [
            (g(4, None), INVALID_PARTITIONS),
            (g(3, None), INVALID_PARTITIONS),
            (g(-1, None), INVALID_PARTITIONS),
            (g(10_001, None), INVALID_PARTITIONS),
            (g(6, Some(vec![vec![1]])), INVALID_REPLICA_ASSIGNMENT),
            (g(5, Some(vec![vec![2]])), INVALID_REPLICA_ASSIGNMENT),
        ] {
            assert_eq!(check(&growth, 4, &[1]).map_err(|r| r.code), Err(code));
        }
    }
}
