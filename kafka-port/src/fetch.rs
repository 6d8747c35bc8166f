//! Fetch: records of partitions from an offset, as uncompressed record batches v2 with their
//! real offsets, read through the engine's "fetch by offset" (no lease, no cursor).
//!
//! No fetch sessions: every answer has session id 0, which clients read as "sessionless"
//! and so send full requests. read_committed and read_uncommitted answer the same while no
//! transactions are served. A fetch that finds nothing waits up to `max_wait_ms` (at most
//! [`MAX_WAIT`]) by asking again every [`RECHECK`].

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record as KafkaRecord, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use queenmq_protocol::fetch::{
    FetchEntry, FetchError, FetchedEntry, FetchedRecord, MAX_FETCH_BYTES,
};
use queenmq_protocol::QueenError;

use crate::connection::{encode, Reply};
use crate::wire::{Malformed, Reader};
use crate::{errors, offset_reads, topics, unmapping, Door};

/// v4 (the first with record batches v2) ..= v12 (v13 names topics by id).
pub const VERSIONS: std::ops::RangeInclusive<i16> = 4..=12;
/// The longest a fetch that found nothing waits before answering empty.
pub const MAX_WAIT: Duration = Duration::from_secs(30);
/// How often a waiting fetch asks the engine again.
pub const RECHECK: Duration = Duration::from_millis(50);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartition {
    pub index: i32,
    pub offset: i64,
    pub max_bytes: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    pub max_bytes: i32,
    pub topics: Vec<(String, Vec<FetchPartition>)>,
}

pub fn decode(version: i16, r: &mut Reader) -> Result<FetchRequest, Malformed> {
    let _replica_id = r.i32()?;
    let max_wait_ms = r.i32()?;
    let min_bytes = r.i32()?;
    let max_bytes = r.i32()?;
    let _isolation_level = r.i8()?;
    if version >= 7 {
        let _session_id = r.i32()?;
        let _session_epoch = r.i32()?;
    }
    let mut topics = Vec::new();
    for _ in 0..r.array_len()?.unwrap_or(0) {
        let name = r.string()?;
        let mut parts = Vec::new();
        for _ in 0..r.array_len()?.unwrap_or(0) {
            let index = r.i32()?;
            if version >= 9 {
                let _current_leader_epoch = r.i32()?;
            }
            let offset = r.i64()?;
            if version >= 12 {
                let _last_fetched_epoch = r.i32()?;
            }
            if version >= 5 {
                let _log_start_offset = r.i64()?;
            }
            let max_bytes = r.i32()?;
            r.skip_tags()?;
            parts.push(FetchPartition {
                index,
                offset,
                max_bytes,
            });
        }
        r.skip_tags()?;
        topics.push((name, parts));
    }
    if version >= 7 {
        // Forgotten topics only matter to fetch sessions, which are not kept.
        for _ in 0..r.array_len()?.unwrap_or(0) {
            let _topic = r.string()?;
            for _ in 0..r.array_len()?.unwrap_or(0) {
                let _partition = r.i32()?;
            }
            r.skip_tags()?;
        }
    }
    if version >= 11 {
        let _rack_id = r.string()?;
    }
    r.skip_tags()?;
    Ok(FetchRequest {
        max_wait_ms,
        min_bytes,
        max_bytes,
        topics,
    })
}

/// A client's byte count as a budget: at least 1, at most what one read serves.
fn budget(n: i32) -> usize {
    usize::try_from(n).map_or(1, |n| n.clamp(1, MAX_FETCH_BYTES))
}

/// What each partition asks, or the error it gets without asking the engine.
fn plan(req: &FetchRequest) -> (Vec<Result<usize, i16>>, Vec<FetchEntry>) {
    let mut plan = Vec::new();
    let mut entries = Vec::new();
    for (topic, parts) in &req.topics {
        for p in parts {
            let code = if !topics::valid_topic_name(topic) {
                Some(errors::INVALID_TOPIC_EXCEPTION)
            } else if !u32::try_from(p.index).is_ok_and(|i| i < topics::MAX_TOPIC_PARTITIONS) {
                Some(errors::UNKNOWN_TOPIC_OR_PARTITION)
            } else if p.offset < 0 {
                Some(errors::OFFSET_OUT_OF_RANGE)
            } else {
                None
            };
            plan.push(match code {
                Some(code) => Err(code),
                None => {
                    entries.push(FetchEntry {
                        queue: topic.clone(),
                        partition: p.index.to_string(),
                        offset: p.offset.unsigned_abs(),
                        max_bytes: budget(p.max_bytes),
                    });
                    Ok(entries.len() - 1)
                }
            });
        }
    }
    (plan, entries)
}

/// The records as uncompressed batches v2 (the encoder starts a new batch where record
/// properties change), with their stored offsets.
pub fn encode_records(records: &[FetchedRecord]) -> Result<Bytes, String> {
    if records.is_empty() {
        return Ok(Bytes::new());
    }
    let batch: Vec<KafkaRecord> = records
        .iter()
        .map(|r| {
            let rec = unmapping::record(&r.payload, r.created_us.div_euclid(1000));
            let headers: IndexMap<StrBytes, Option<Bytes>> = rec
                .headers
                .into_iter()
                .map(|(k, v)| (StrBytes::from_string(k), v))
                .collect();
            KafkaRecord {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i64::try_from(r.offset).unwrap_or(i64::MAX),
                sequence: -1,
                timestamp: rec.timestamp,
                key: rec.key,
                value: rec.value,
                headers,
            }
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, &batch, &options).map_err(|e| e.to_string())?;
    Ok(buf.freeze())
}

fn partition_data(
    version: i16,
    index: i32,
    read: Result<&FetchedEntry, i16>,
) -> Result<PartitionData, String> {
    let p = PartitionData::default().with_partition_index(index);
    let e = match read {
        Err(code) => {
            return Ok(p
                .with_error_code(code)
                .with_high_watermark(-1)
                .with_last_stable_offset(-1))
        }
        Ok(e) => e,
    };
    let hw = i64::try_from(e.high_watermark).unwrap_or(i64::MAX);
    // The field exists from v5 on; setting it for v4 fails the encode.
    let low = if version >= 5 {
        i64::try_from(e.log_start).unwrap_or(i64::MAX)
    } else {
        -1
    };
    let code = match e.error {
        None => errors::NONE,
        Some(FetchError::OffsetOutOfRange) => errors::OFFSET_OUT_OF_RANGE,
        Some(FetchError::UnknownQueue) => errors::UNKNOWN_TOPIC_OR_PARTITION,
        // Nothing pushed to it yet: an empty partition, fetched from 0.
        Some(FetchError::UnknownPartition) => errors::NONE,
    };
    Ok(p.with_error_code(code)
        .with_high_watermark(hw)
        .with_last_stable_offset(hw)
        .with_log_start_offset(low)
        .with_records(Some(encode_records(&e.records)?)))
}

/// Whether an answer is worth sending now rather than waiting for more.
fn ready(entries: &[FetchedEntry], min_bytes: usize) -> bool {
    let bytes: usize = entries
        .iter()
        .flat_map(|e| &e.records)
        .map(|r| r.payload.len())
        .sum();
    let errored = entries.iter().any(|e| {
        matches!(
            e.error,
            Some(FetchError::OffsetOutOfRange | FetchError::UnknownQueue)
        )
    });
    errored || (bytes > 0 && bytes >= min_bytes)
}

/// Unknown-partition entries at offset 0 are empty partitions; at any other offset they are
/// out of range, as an empty Kafka partition would answer.
fn settle_unknown(entries: &mut [FetchedEntry], asked: &[FetchEntry]) {
    for (e, a) in entries.iter_mut().zip(asked) {
        if e.error == Some(FetchError::UnknownPartition) && a.offset > 0 {
            e.error = Some(FetchError::OffsetOutOfRange);
        }
    }
}

pub async fn answer(door: &Door, version: i16, mut r: Reader) -> Reply {
    let req = match decode(version, &mut r) {
        Ok(req) => req,
        Err(e) => return Reply::Close(e.to_string()),
    };
    let (plan, entries) = plan(&req);
    let wait = Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0)).min(MAX_WAIT);
    let deadline = tokio::time::Instant::now() + wait;
    let min_bytes = usize::try_from(req.min_bytes).unwrap_or(0);
    let read: Result<Vec<FetchedEntry>, QueenError> = loop {
        if entries.is_empty() {
            break Ok(Vec::new());
        }
        match offset_reads::fetch(door, entries.clone(), budget(req.max_bytes)).await {
            Ok(mut got) => {
                settle_unknown(&mut got, &entries);
                let now = tokio::time::Instant::now();
                if ready(&got, min_bytes) || now >= deadline {
                    break Ok(got);
                }
                tokio::time::sleep(RECHECK.min(deadline - now)).await;
            }
            Err(e) => break Err(e),
        }
    };
    let mut plan = plan.into_iter();
    let mut responses = Vec::new();
    for (topic, parts) in &req.topics {
        let mut partitions = Vec::with_capacity(parts.len());
        for p in parts {
            let one = match (plan.next(), &read) {
                (Some(Ok(i)), Ok(got)) => match got.get(i) {
                    Some(e) => Ok(e),
                    None => Err(errors::UNKNOWN_SERVER_ERROR),
                },
                // KAFKA_STORAGE_ERROR from Fetch v6 on, as Kafka.
                (Some(Ok(_)), Err(e)) => Err(errors::from_queen_in(e, version >= 6)),
                (Some(Err(code)), _) => Err(code),
                (None, _) => Err(errors::UNKNOWN_SERVER_ERROR),
            };
            match partition_data(version, p.index, one) {
                Ok(d) => partitions.push(d),
                Err(e) => return Reply::Close(format!("fetch records did not encode: {e}")),
            }
        }
        responses.push(
            FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_string(topic.clone())))
                .with_partitions(partitions),
        );
    }
    encode(
        &FetchResponse::default()
            .with_session_id(0)
            .with_responses(responses),
        version,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::RecordBatchDecoder;

    #[test]
    fn records_encode_as_one_batch_with_their_offsets_and_mapping() {
        let enveloped = crate::mapping::payload(&crate::records::Record {
            timestamp: 1_700_000_000_123,
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(b"v")),
            headers: vec![("h".into(), Some(Bytes::from_static(b"x")))],
        });
        let records = vec![
            FetchedRecord {
                offset: 7,
                transaction_id: "t".into(),
                payload: Bytes::from_static(b"{\"a\":1}"),
                created_us: 5_000_999,
            },
            FetchedRecord {
                offset: 8,
                transaction_id: String::new(),
                payload: enveloped,
                created_us: 6_000_000,
            },
        ];
        let mut bytes = encode_records(&records).expect("encodes");
        let mut all = Vec::new();
        while !bytes.is_empty() {
            all.extend(
                RecordBatchDecoder::decode(&mut bytes)
                    .expect("decodes")
                    .records,
            );
        }
        let got: Vec<_> = all
            .iter()
            .map(|r| (r.offset, r.timestamp, r.key.clone(), r.value.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (7, 5_000, None, Some(Bytes::from_static(b"{\"a\":1}"))),
                (
                    8,
                    1_700_000_000_123,
                    Some(Bytes::from_static(b"k")),
                    Some(Bytes::from_static(b"v"))
                ),
            ]
        );
        assert_eq!(all[1].headers.len(), 1);
        assert!(encode_records(&[]).expect("empty").is_empty());
    }

    #[test]
    fn answers_encode_at_every_served_version() {
        let read = FetchedEntry {
            high_watermark: 3,
            log_start: 1,
            records: vec![FetchedRecord {
                offset: 1,
                transaction_id: String::new(),
                payload: Bytes::from_static(b"1"),
                created_us: 0,
            }],
            error: None,
        };
        for v in VERSIONS {
            let parts = vec![
                partition_data(v, 0, Ok(&read)).expect("data"),
                partition_data(v, 1, Err(errors::UNKNOWN_TOPIC_OR_PARTITION)).expect("data"),
            ];
            let resp =
                FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
                    .with_topic(TopicName(StrBytes::from_static_str("t")))
                    .with_partitions(parts)]);
            assert!(matches!(encode(&resp, v), Reply::Send { .. }), "v{v}");
        }
    }

    #[test]
    fn bad_partitions_are_answered_without_the_engine() {
        let req = FetchRequest {
            max_wait_ms: 0,
            min_bytes: 1,
            max_bytes: i32::MAX,
            topics: vec![(
                "t".into(),
                vec![
                    FetchPartition {
                        index: 0,
                        offset: 3,
                        max_bytes: -5,
                    },
                    FetchPartition {
                        index: -1,
                        offset: 0,
                        max_bytes: 10,
                    },
                    FetchPartition {
                        index: 1,
                        offset: -2,
                        max_bytes: 10,
                    },
                ],
            )],
        };
        let (plan, entries) = plan(&req);
        assert_eq!(
            plan,
            vec![
                Ok(0),
                Err(errors::UNKNOWN_TOPIC_OR_PARTITION),
                Err(errors::OFFSET_OUT_OF_RANGE)
            ]
        );
        assert_eq!((entries[0].offset, entries[0].max_bytes), (3, 1));
        assert_eq!(budget(i32::MAX), MAX_FETCH_BYTES);
    }
}
