//! ListOffsets: the earliest, latest, first-at-or-after-a-time and max-time offsets of
//! partitions. Times are the engine's store times (a record's Kafka timestamp is not indexed).

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use queenmq_protocol::fetch::{OffsetAt, OffsetFound, OffsetQuery};

use crate::connection::{encode, Reply};
use crate::wire::{Malformed, Reader};
use crate::{errors, offset_reads, topics, Door};

/// v1 (offsets, not v0's offset arrays) ..= v8 (v9 only adds a timeout we do not need).
pub const VERSIONS: std::ops::RangeInclusive<i16> = 1..=8;

pub const LATEST: i64 = -1;
pub const EARLIEST: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsRequest {
    pub topics: Vec<(String, Vec<(i32, i64)>)>,
}

pub fn decode(version: i16, r: &mut Reader) -> Result<ListOffsetsRequest, Malformed> {
    let _replica_id = r.i32()?;
    if version >= 2 {
        let _isolation_level = r.i8()?;
    }
    let mut topics = Vec::new();
    for _ in 0..r.array_len()?.unwrap_or(0) {
        let name = r.string()?;
        let mut parts = Vec::new();
        for _ in 0..r.array_len()?.unwrap_or(0) {
            let index = r.i32()?;
            if version >= 4 {
                let _leader_epoch = r.i32()?;
            }
            let timestamp = r.i64()?;
            r.skip_tags()?;
            parts.push((index, timestamp));
        }
        r.skip_tags()?;
        topics.push((name, parts));
    }
    r.skip_tags()?;
    Ok(ListOffsetsRequest { topics })
}

/// What one partition asks, or the error it gets without asking the engine.
fn query(topic: &str, index: i32, timestamp: i64) -> Result<OffsetQuery, i16> {
    if !topics::valid_topic_name(topic) {
        return Err(errors::INVALID_TOPIC_EXCEPTION);
    }
    if !u32::try_from(index).is_ok_and(|i| i < topics::MAX_TOPIC_PARTITIONS) {
        return Err(errors::UNKNOWN_TOPIC_OR_PARTITION);
    }
    let at = match timestamp {
        LATEST => OffsetAt::Latest,
        EARLIEST => OffsetAt::Earliest,
        MAX_TIMESTAMP => OffsetAt::MaxTime,
        // Milliseconds; the engine keeps microseconds.
        t if t >= 0 => OffsetAt::Time(t.saturating_mul(1000)),
        // -4 (earliest local), -5 (earliest tiered) and other specials: no tiers here.
        _ => return Err(errors::UNSUPPORTED_VERSION),
    };
    Ok(OffsetQuery {
        queue: topic.to_owned(),
        partition: index.to_string(),
        at,
    })
}

fn response(
    version: i16,
    index: i32,
    code: i16,
    found: OffsetFound,
) -> ListOffsetsPartitionResponse {
    let time_ms = if found.time_us < 0 {
        -1
    } else {
        found.time_us / 1000
    };
    let r = ListOffsetsPartitionResponse::default()
        .with_partition_index(index)
        .with_error_code(code)
        .with_offset(found.offset)
        .with_timestamp(time_ms);
    // The field exists from v4 on; setting it for an older version fails the encode.
    if version >= 4 {
        r.with_leader_epoch(0)
    } else {
        r
    }
}

pub async fn answer(door: &Door, version: i16, mut r: Reader) -> Reply {
    let req = match decode(version, &mut r) {
        Ok(req) => req,
        Err(e) => return Reply::Close(e.to_string()),
    };
    let mut plan = Vec::new();
    let mut queries = Vec::new();
    for (topic, parts) in &req.topics {
        for (index, timestamp) in parts {
            plan.push(match query(topic, *index, *timestamp) {
                Ok(q) => {
                    queries.push(q);
                    Ok(queries.len() - 1)
                }
                Err(code) => Err(code),
            });
        }
    }
    let found = if queries.is_empty() {
        Ok(Vec::new())
    } else {
        offset_reads::offsets(door, queries).await
    };
    let none = OffsetFound {
        offset: -1,
        time_us: -1,
        unknown: false,
    };
    let mut plan = plan.into_iter();
    let topics_out = req
        .topics
        .iter()
        .map(|(topic, parts)| {
            let partitions = parts
                .iter()
                .map(|(index, _)| match (plan.next(), &found) {
                    (Some(Ok(i)), Ok(found)) => match found.get(i) {
                        Some(f) if f.unknown => {
                            response(version, *index, errors::UNKNOWN_TOPIC_OR_PARTITION, none)
                        }
                        Some(f) => response(version, *index, errors::NONE, *f),
                        None => response(version, *index, errors::UNKNOWN_SERVER_ERROR, none),
                    },
                    (Some(Ok(_)), Err(e)) => response(version, *index, errors::from_queen(e), none),
                    (Some(Err(code)), _) => response(version, *index, code, none),
                    (None, _) => response(version, *index, errors::UNKNOWN_SERVER_ERROR, none),
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(TopicName(StrBytes::from_string(topic.clone())))
                .with_partitions(partitions)
        })
        .collect();
    encode(
        &ListOffsetsResponse::default().with_topics(topics_out),
        version,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_encode_at_every_served_version() {
        let found = OffsetFound {
            offset: 4,
            time_us: 5_000,
            unknown: false,
        };
        for v in VERSIONS {
            let resp = ListOffsetsResponse::default().with_topics(vec![
                ListOffsetsTopicResponse::default()
                    .with_name(TopicName(StrBytes::from_static_str("t")))
                    .with_partitions(vec![response(v, 0, errors::NONE, found)]),
            ]);
            assert!(matches!(encode(&resp, v), Reply::Send { .. }), "v{v}");
        }
    }

    #[test]
    fn special_timestamps_map_to_their_reads() {
        let at = |t| query("t", 0, t).map(|q| q.at);
        assert_eq!(at(EARLIEST), Ok(OffsetAt::Earliest));
        assert_eq!(at(LATEST), Ok(OffsetAt::Latest));
        assert_eq!(at(MAX_TIMESTAMP), Ok(OffsetAt::MaxTime));
        assert_eq!(at(7), Ok(OffsetAt::Time(7_000)));
        assert!(at(-4).is_err());
        assert_eq!(
            query("t", -1, 0).map(|q| q.at),
            Err(errors::UNKNOWN_TOPIC_OR_PARTITION)
        );
    }
}
