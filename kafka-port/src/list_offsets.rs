//! ListOffsets: the earliest, latest, first-at-or-after-a-time and max-time offsets of
//! partitions.
//!
//! A time query is answered by the records' own timestamps, as Kafka does (the producer's,
//! kept in the envelope; a bare payload's is its store time). The engine indexes store times
//! only, so the port starts at the first record stored at or after the time and reads on to
//! the first whose own timestamp is there too, within [`TIME_SCAN_BYTES`].

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use queenmq_protocol::fetch::{
    FetchEntry, FetchedRecord, OffsetAt, OffsetFound, OffsetQuery, FETCH_RECORD_OVERHEAD,
};

use crate::connection::{encode, Reply};
use crate::wire::{Malformed, Reader};
use crate::{errors, offset_reads, topics, unmapping, Door};

/// v1 (offsets, not v0's offset arrays) ..= v8 (v9 only adds a timeout we do not need).
pub const VERSIONS: std::ops::RangeInclusive<i16> = 1..=8;

pub const LATEST: i64 = -1;
pub const EARLIEST: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;

/// What one time query reads at most (stored bytes, plus the per-record overhead) past the
/// store-time answer before it settles for that answer.
pub const TIME_SCAN_BYTES: usize = 4 << 20;
/// What the time queries of one request read at most, all partitions together.
pub const TIME_SCAN_REQUEST_BYTES: usize = 16 << 20;
/// One read of a scan.
const TIME_SCAN_STEP: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsRequest {
    /// Isolation level 1 (v2+): LATEST is the last stable offset.
    pub read_committed: bool,
    pub topics: Vec<(String, Vec<(i32, i64)>)>,
}

pub fn decode(version: i16, r: &mut Reader) -> Result<ListOffsetsRequest, Malformed> {
    let _replica_id = r.i32()?;
    let read_committed = version >= 2 && r.i8()? == 1;
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
    Ok(ListOffsetsRequest {
        read_committed,
        topics,
    })
}

/// What one partition asks, or the error it gets without asking the engine.
fn query(
    topic: &str,
    index: i32,
    timestamp: i64,
    read_committed: bool,
) -> Result<OffsetQuery, i16> {
    if !topics::valid_topic_name(topic) {
        return Err(errors::INVALID_TOPIC_EXCEPTION);
    }
    if !u32::try_from(index).is_ok_and(|i| i < topics::MAX_TOPIC_PARTITIONS) {
        return Err(errors::UNKNOWN_TOPIC_OR_PARTITION);
    }
    let at = match timestamp {
        LATEST if read_committed => OffsetAt::Stable,
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

/// What a scan of records for a time found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// The first record whose own timestamp (ms) is at or past the time.
    Found { offset: i64, ms: i64 },
    /// Every record up to `next` is earlier: read on from there.
    Before { next: u64 },
}

fn first_at_or_after(records: &[FetchedRecord], ms: i64) -> Option<(i64, i64)> {
    records.iter().find_map(|r| {
        let own = unmapping::record(&r.payload, r.created_us.div_euclid(1000)).timestamp;
        (own >= ms).then(|| (i64::try_from(r.offset).unwrap_or(i64::MAX), own))
    })
}

fn scan_step(records: &[FetchedRecord], ms: i64, from: u64) -> Scan {
    match first_at_or_after(records, ms) {
        Some((offset, ms)) => Scan::Found { offset, ms },
        None => Scan::Before {
            next: records.last().map_or(from, |r| r.offset.saturating_add(1)),
        },
    }
}

/// Kafka's answer to a time query whose store-time answer is `stored`: the first record at or
/// after it whose own timestamp is at or past `ms`, or none (-1) when no later record is.
/// A record is stamped before it is stored, so (clocks agreeing) no record stored earlier
/// than the time can carry a timestamp at or past it. Keeps `stored` when the scan would read
/// more than its share of `budget`, or the partition changed under it.
async fn by_own_time(
    door: &Door,
    q: &OffsetQuery,
    ms: i64,
    stored: OffsetFound,
    budget: &mut usize,
) -> OffsetFound {
    let Ok(mut from) = u64::try_from(stored.offset) else {
        return stored;
    };
    let mut share = TIME_SCAN_BYTES.min(*budget);
    while share > 0 {
        let step = TIME_SCAN_STEP.min(share);
        let entry = FetchEntry {
            queue: q.queue.clone(),
            partition: q.partition.clone(),
            offset: from,
            max_bytes: step,
        };
        let read = match offset_reads::fetch(door, vec![entry], step, false).await {
            Ok(mut got) if got.len() == 1 => got.swap_remove(0),
            _ => return stored,
        };
        if read.error.is_some() {
            return stored;
        }
        let spent: usize = read
            .records
            .iter()
            .map(|r| r.payload.len().saturating_add(FETCH_RECORD_OVERHEAD))
            .sum();
        *budget = budget.saturating_sub(spent);
        share = share.saturating_sub(spent.max(1));
        match scan_step(&read.records, ms, from) {
            Scan::Found { offset, ms } => {
                return OffsetFound {
                    offset,
                    time_us: ms.saturating_mul(1000),
                    unknown: false,
                }
            }
            Scan::Before { next } if next >= read.high_watermark => {
                return OffsetFound {
                    offset: -1,
                    time_us: -1,
                    unknown: false,
                }
            }
            // Nothing read although the end is further: the partition changed; keep the
            // store-time answer rather than guess.
            Scan::Before { next } if next == from => return stored,
            Scan::Before { next } => from = next,
        }
    }
    stored
}

/// Replaces the store-time answers of time queries by the records' own timestamps.
async fn settle_times(door: &Door, queries: &[OffsetQuery], found: &mut [OffsetFound]) {
    let mut budget = TIME_SCAN_REQUEST_BYTES;
    for (q, f) in queries.iter().zip(found.iter_mut()) {
        if let OffsetAt::Time(us) = q.at {
            if !f.unknown && f.offset >= 0 && budget > 0 {
                *f = by_own_time(door, q, us.div_euclid(1000), *f, &mut budget).await;
            }
        }
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
            plan.push(match query(topic, *index, *timestamp, req.read_committed) {
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
        match offset_reads::offsets(door, queries.clone()).await {
            Ok(mut found) => {
                settle_times(door, &queries, &mut found).await;
                Ok(found)
            }
            Err(e) => Err(e),
        }
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
    fn a_time_finds_the_first_record_whose_own_timestamp_is_there() {
        let enveloped = |offset, ms| FetchedRecord {
            offset,
            transaction_id: String::new(),
            payload: crate::mapping::payload(&crate::records::Record {
                timestamp: ms,
                key: None,
                value: Some(bytes::Bytes::from_static(b"not json")),
                headers: Vec::new(),
            }),
            // Stored long after the producer stamped them, as librdkafka's 0054 does.
            created_us: 1_800_000_000_000_000,
        };
        let bare = FetchedRecord {
            offset: 9,
            transaction_id: String::new(),
            payload: bytes::Bytes::from_static(b"{\"a\":1}"),
            created_us: 1_800_000_000_000_000,
        };
        let records = vec![enveloped(4, 1234), enveloped(5, 999_999_999_999), bare];
        assert_eq!(
            scan_step(&records, 1234, 4),
            Scan::Found {
                offset: 4,
                ms: 1234
            }
        );
        assert_eq!(
            scan_step(&records, 1235, 4),
            Scan::Found {
                offset: 5,
                ms: 999_999_999_999
            }
        );
        // A bare payload has no timestamp of its own: its store time is.
        assert_eq!(
            scan_step(&records, 1_000_000_000_000, 4),
            Scan::Found {
                offset: 9,
                ms: 1_800_000_000_000
            }
        );
        assert_eq!(scan_step(&records, i64::MAX, 4), Scan::Before { next: 10 });
        assert_eq!(scan_step(&[], 7, 4), Scan::Before { next: 4 });
    }

    #[test]
    fn special_timestamps_map_to_their_reads() {
        let at = |t| query("t", 0, t, false).map(|q| q.at);
        assert_eq!(at(EARLIEST), Ok(OffsetAt::Earliest));
        assert_eq!(at(LATEST), Ok(OffsetAt::Latest));
        assert_eq!(
            query("t", 0, LATEST, true).map(|q| q.at),
            Ok(OffsetAt::Stable)
        );
        assert_eq!(at(MAX_TIMESTAMP), Ok(OffsetAt::MaxTime));
        assert_eq!(at(7), Ok(OffsetAt::Time(7_000)));
        assert!(at(-4).is_err());
        assert_eq!(
            query("t", -1, 0, false).map(|q| q.at),
            Err(errors::UNKNOWN_TOPIC_OR_PARTITION)
        );
    }
}
