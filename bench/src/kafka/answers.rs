//! The answers this client reads, in the fixed non-flexible versions it asks for
//! (`requests.rs`), each read with `Reader`'s checked lengths.

use std::collections::HashMap;

use anyhow::bail;
use bytes::Bytes;

use super::reader::Reader;

/// Kafka error codes this tool names; any other is shown by number.
pub fn error_name(code: i16) -> String {
    let name = match code {
        1 => "OFFSET_OUT_OF_RANGE",
        2 => "CORRUPT_MESSAGE",
        3 => "UNKNOWN_TOPIC_OR_PARTITION",
        5 => "LEADER_NOT_AVAILABLE",
        6 => "NOT_LEADER_OR_FOLLOWER",
        7 => "REQUEST_TIMED_OUT",
        10 => "MESSAGE_TOO_LARGE",
        15 => "COORDINATOR_NOT_AVAILABLE",
        16 => "NOT_COORDINATOR",
        19 => "NOT_ENOUGH_REPLICAS",
        22 => "ILLEGAL_GENERATION",
        25 => "UNKNOWN_MEMBER_ID",
        27 => "REBALANCE_IN_PROGRESS",
        35 => "UNSUPPORTED_VERSION",
        36 => "TOPIC_ALREADY_EXISTS",
        37 => "INVALID_PARTITIONS",
        _ => return format!("Kafka error {code}"),
    };
    name.to_string()
}

/// Error code 0.
pub const NONE: i16 = 0;
pub const TOPIC_ALREADY_EXISTS: i16 = 36;

/// ApiVersions v0: every served API key with its version range.
pub fn api_versions(mut r: Reader) -> anyhow::Result<HashMap<i16, (i16, i16)>> {
    let error = r.i16()?;
    if error != NONE {
        bail!("ApiVersions: {}", error_name(error));
    }
    let keys = r.array(6, |r| Ok((r.i16()?, (r.i16()?, r.i16()?))))?;
    Ok(keys.into_iter().collect())
}

/// CreateTopics v4: per topic, its error code and message.
pub fn create_topics(mut r: Reader) -> anyhow::Result<Vec<(String, i16, Option<String>)>> {
    let _throttle = r.i32()?;
    r.array(6, |r| Ok((r.string()?, r.i16()?, r.nullable_string()?)))
}

/// Metadata v1: per topic, its error code and partition count.
pub fn metadata(mut r: Reader) -> anyhow::Result<Vec<(String, i16, usize)>> {
    r.array(12, |r| {
        let _node = r.i32()?;
        let _host = r.string()?;
        let _port = r.i32()?;
        let _rack = r.nullable_string()?;
        Ok(())
    })?;
    let _controller = r.i32()?;
    r.array(9, |r| {
        let error = r.i16()?;
        let name = r.string()?;
        let _internal = r.bool()?;
        let partitions = r.array(18, |r| {
            let _error = r.i16()?;
            let _index = r.i32()?;
            let _leader = r.i32()?;
            r.array(4, Reader::i32)?;
            r.array(4, Reader::i32)?;
            Ok(())
        })?;
        Ok((name, error, partitions.len()))
    })
}

/// Produce v7: per (topic, partition), its error code.
pub fn produce(mut r: Reader) -> anyhow::Result<HashMap<(String, i32), i16>> {
    let mut out = HashMap::new();
    let topics = r.array(6, |r| {
        let name = r.string()?;
        let parts = r.array(30, |r| {
            let index = r.i32()?;
            let error = r.i16()?;
            let _base_offset = r.i64()?;
            let _log_append_time = r.i64()?;
            let _log_start = r.i64()?;
            Ok((index, error))
        })?;
        Ok((name, parts))
    })?;
    for (name, parts) in topics {
        for (index, error) in parts {
            out.insert((name.clone(), index), error);
        }
    }
    let _throttle = r.i32()?;
    Ok(out)
}

/// One partition of a fetch answer.
#[derive(Debug)]
pub struct FetchedPartition {
    pub topic: String,
    pub partition: i32,
    pub error: i16,
    pub records: Option<Bytes>,
}

/// Fetch v11: the top-level error, then every partition with its records.
pub fn fetch(mut r: Reader) -> anyhow::Result<Vec<FetchedPartition>> {
    let _throttle = r.i32()?;
    let error = r.i16()?;
    if error != NONE {
        bail!("fetch: {}", error_name(error));
    }
    let _session = r.i32()?;
    let topics = r.array(6, |r| {
        let topic = r.string()?;
        let parts = r.array(42, |r| {
            let partition = r.i32()?;
            let error = r.i16()?;
            let _high_watermark = r.i64()?;
            let _last_stable = r.i64()?;
            let _log_start = r.i64()?;
            r.array(16, |r| Ok((r.i64()?, r.i64()?)))?;
            let _preferred_replica = r.i32()?;
            let records = r.nullable_bytes()?;
            Ok((partition, error, records))
        })?;
        Ok((topic, parts))
    })?;
    Ok(topics
        .into_iter()
        .flat_map(|(topic, parts)| {
            parts
                .into_iter()
                .map(move |(partition, error, records)| FetchedPartition {
                    topic: topic.clone(),
                    partition,
                    error,
                    records,
                })
        })
        .collect())
}

/// OffsetFetch v5: per partition of the topic, its committed offset (-1 = none) or error.
pub fn offset_fetch(mut r: Reader, topic: &str) -> anyhow::Result<HashMap<i32, (i64, i16)>> {
    let _throttle = r.i32()?;
    let topics = r.array(6, |r| {
        let name = r.string()?;
        let parts = r.array(20, |r| {
            let index = r.i32()?;
            let offset = r.i64()?;
            let _epoch = r.i32()?;
            let _metadata = r.nullable_string()?;
            let error = r.i16()?;
            Ok((index, (offset, error)))
        })?;
        Ok((name, parts))
    })?;
    let error = r.i16()?;
    if error != NONE {
        bail!("offset fetch: {}", error_name(error));
    }
    Ok(topics
        .into_iter()
        .filter(|(name, _)| name == topic)
        .flat_map(|(_, parts)| parts)
        .collect())
}

/// OffsetCommit v7: per partition of the topic, its error code.
pub fn offset_commit(mut r: Reader, topic: &str) -> anyhow::Result<HashMap<i32, i16>> {
    let _throttle = r.i32()?;
    let topics = r.array(6, |r| {
        let name = r.string()?;
        let parts = r.array(6, |r| Ok((r.i32()?, r.i16()?)))?;
        Ok((name, parts))
    })?;
    Ok(topics
        .into_iter()
        .filter(|(name, _)| name == topic)
        .flat_map(|(_, parts)| parts)
        .collect())
}
