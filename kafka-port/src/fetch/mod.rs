//! Fetch: records of partitions from an offset, as uncompressed record batches v2 with their
//! real offsets, read through the engine's "fetch by offset" (no lease, no cursor).
//!
//! From v7 a consumer may keep a fetch session ([`crate::fetch_sessions`]): its full fetch
//! is answered whole and offered a session id, then its incremental fetches read all the
//! session's partitions and are answered only those with something new. Records of Kafka
//! transactions travel in transactional batches and their commit/abort markers in control
//! batches, at their offsets; read_committed stops at the last stable offset and lists the
//! aborted transactions of what it answers (docs/kafka-transactions.md). A fetch that finds
//! nothing waits up to `max_wait_ms` (at most [`MAX_WAIT`]) by asking again every
//! [`RECHECK`], incremental or not.

pub(crate) mod batches;
mod request;

use std::sync::Arc;
use std::time::Duration;

use batches::Framing;
use bytes::Bytes;
use kafka_protocol::messages::fetch_response::AbortedTransaction;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::ProducerId;
use kafka_protocol::messages::{FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use queenmq_protocol::fetch::{
    FetchEntry, FetchError, FetchedEntry, FetchedRecord, TxnMark, TxnMarkKind, MAX_FETCH_BYTES,
};
use queenmq_protocol::QueenError;

use crate::connection::{encode, Reply};
use crate::fetch_sessions::session::{Cached, Key, Owner, Seen, Told};
use crate::fetch_sessions::{Begin, NO_SESSION};
use crate::wire::Reader;
use crate::{errors, offset_reads, topics, unmapping, Door};
pub use request::{decode, FetchPartition, FetchRequest};

/// v4 (the first with record batches v2) ..= v12 (v13 names topics by id).
pub const VERSIONS: std::ops::RangeInclusive<i16> = 4..=12;
/// The longest a fetch that found nothing waits before answering empty.
pub const MAX_WAIT: Duration = Duration::from_secs(30);
/// How often a waiting fetch asks the engine again.
pub const RECHECK: Duration = Duration::from_millis(50);
/// The first version with fetch sessions (KIP-227).
pub const SESSION_VERSION: i16 = 7;

/// A partition to read: its topic and what is asked of it.
type Asked = (Arc<str>, FetchPartition);

/// A client's byte count as a budget: at least 1, at most what one read serves.
fn budget(n: i32) -> usize {
    usize::try_from(n).map_or(1, |n| n.clamp(1, MAX_FETCH_BYTES))
}

/// What each partition asks, or the error it gets without asking the engine.
fn plan(asked: &[Asked]) -> (Vec<Result<usize, i16>>, Vec<FetchEntry>) {
    let mut plan = Vec::with_capacity(asked.len());
    let mut entries = Vec::new();
    for (topic, p) in asked {
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
                    queue: topic.to_string(),
                    partition: p.index.to_string(),
                    offset: p.offset.unsigned_abs(),
                    max_bytes: budget(p.max_bytes),
                });
                Ok(entries.len() - 1)
            }
        });
    }
    (plan, entries)
}

/// A control record's key: version 0, type 0 (abort) or 1 (commit).
fn control_key(commit: bool) -> Bytes {
    Bytes::from_static(if commit { &[0, 0, 0, 1] } else { &[0, 0, 0, 0] })
}

/// A control record's value: version 0, coordinator epoch 0.
const CONTROL_VALUE: &[u8] = &[0, 0, 0, 0, 0, 0];

/// The records as uncompressed batches v2 with their stored offsets: a transaction's stretch
/// in transactional batches of its producer, each marker in a control batch of its own.
/// `marks` are the transactions' stretches among them, in offset order.
pub fn encode_records(records: &[FetchedRecord], marks: &[TxnMark]) -> Result<Bytes, String> {
    let mut marks = marks.iter().peekable();
    let records: Vec<_> = records
        .iter()
        .map(|r| {
            while marks
                .peek()
                .is_some_and(|m| m.base_offset.saturating_add(u64::from(m.count)) <= r.offset)
            {
                marks.next();
            }
            let mark = marks.peek().filter(|m| m.base_offset <= r.offset);
            let offset = i64::try_from(r.offset).map_err(|_| "offset beyond int64".to_string())?;
            let ms = r.created_us.div_euclid(1000);
            let framing = mark.map_or(Framing::PLAIN, |m| Framing {
                producer_id: m.producer_id,
                epoch: m.epoch,
                transactional: true,
                control: m.kind != TxnMarkKind::Data,
            });
            let record = match mark.map(|m| m.kind) {
                Some(kind @ (TxnMarkKind::CommitMarker | TxnMarkKind::AbortMarker)) => {
                    crate::records::Record {
                        timestamp: ms,
                        key: Some(control_key(kind == TxnMarkKind::CommitMarker)),
                        value: Some(Bytes::from_static(CONTROL_VALUE)),
                        headers: Vec::new(),
                    }
                }
                Some(TxnMarkKind::Data) | None => unmapping::record(&r.payload, ms),
            };
            Ok((offset, framing, record))
        })
        .collect::<Result<_, String>>()?;
    Ok(batches::encode(&records))
}

fn partition_data(
    version: i16,
    index: i32,
    read_committed: bool,
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
        // A stored payload that does not open: this partition only (the others are answered).
        Some(FetchError::Corrupt) => errors::CORRUPT_MESSAGE,
        // Nothing pushed to it yet: an empty partition, fetched from 0.
        Some(FetchError::UnknownPartition) => errors::NONE,
    };
    let lso = i64::try_from(e.last_stable).unwrap_or(i64::MAX);
    // Kafka answers null (not empty) to read_uncommitted and where nothing was aborted.
    let aborted = (read_committed && !e.aborted.is_empty()).then(|| {
        e.aborted
            .iter()
            .map(|a| {
                AbortedTransaction::default()
                    .with_producer_id(ProducerId(a.producer_id))
                    .with_first_offset(i64::try_from(a.first_offset).unwrap_or(i64::MAX))
            })
            .collect()
    });
    Ok(p.with_error_code(code)
        .with_high_watermark(hw)
        .with_last_stable_offset(lso)
        .with_log_start_offset(low)
        .with_aborted_transactions(aborted)
        .with_records(Some(encode_records(&e.records, &e.txn_marks)?)))
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

/// Reads `asked` (waiting up to the request's `max_wait_ms` for `min_bytes`): per
/// partition what was read, or its error code.
async fn read(
    door: &Door,
    version: i16,
    req: &FetchRequest,
    asked: &[Asked],
) -> Vec<Result<FetchedEntry, i16>> {
    let (plan, entries) = plan(asked);
    let wait = Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0)).min(MAX_WAIT);
    let deadline = tokio::time::Instant::now() + wait;
    let min_bytes = usize::try_from(req.min_bytes).unwrap_or(0);
    let read: Result<Vec<FetchedEntry>, QueenError> = loop {
        if entries.is_empty() {
            break Ok(Vec::new());
        }
        let asked = entries.clone();
        match offset_reads::fetch(door, asked, budget(req.max_bytes), req.read_committed).await {
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
    let mut got: Vec<Option<FetchedEntry>> = match read {
        Ok(got) => got.into_iter().map(Some).collect(),
        Err(e) => {
            // KAFKA_STORAGE_ERROR from Fetch v6 on, as Kafka.
            let code = errors::from_queen_in(&e, version >= 6);
            return plan
                .into_iter()
                .map(|p| Err(p.err().unwrap_or(code)))
                .collect();
        }
    };
    plan.into_iter()
        .map(|p| match p {
            Ok(i) => got
                .get_mut(i)
                .and_then(Option::take)
                .ok_or(errors::UNKNOWN_SERVER_ERROR),
            Err(code) => Err(code),
        })
        .collect()
}

/// What a session remembers of an answered partition.
fn seen(d: &PartitionData) -> Seen {
    Seen {
        records: d.records.as_ref().is_some_and(|r| !r.is_empty()),
        error: d.error_code != errors::NONE,
        told: Told {
            high_watermark: d.high_watermark,
            last_stable: d.last_stable_offset,
            log_start: d.log_start_offset,
        },
    }
}

/// The answered partitions grouped by topic, consecutive ones together (as Kafka does: a
/// session whose partitions moved may name a topic twice).
fn by_topic(answered: Vec<(Arc<str>, PartitionData)>) -> Vec<FetchableTopicResponse> {
    let mut out: Vec<FetchableTopicResponse> = Vec::new();
    let mut last: Option<Arc<str>> = None;
    for (topic, d) in answered {
        match out.last_mut() {
            Some(t) if last.as_deref() == Some(&*topic) => t.partitions.push(d),
            _ => {
                out.push(
                    FetchableTopicResponse::default()
                        .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                        .with_partitions(vec![d]),
                );
                last = Some(topic);
            }
        }
    }
    out
}

pub async fn answer(door: &Door, version: i16, mut r: Reader) -> Reply {
    let req = match decode(version, &mut r) {
        Ok(req) => req,
        Err(e) => return Reply::Close(e.to_string()),
    };
    let owner = Owner::of(&door.ctx);
    let begin = if version >= SESSION_VERSION {
        door.fetch_sessions.begin(
            &owner,
            req.session_id,
            req.session_epoch,
            &req.topics,
            &req.forgotten,
            tokio::time::Instant::now(),
        )
    } else {
        Begin::Sessionless
    };
    let asked: Vec<Asked> = match &begin {
        Begin::Refused(code) => {
            let resp = FetchResponse::default()
                .with_error_code(*code)
                .with_session_id(NO_SESSION);
            return encode(&resp, version);
        }
        Begin::Incremental { parts, .. } => parts
            .iter()
            .map(|((topic, index), c)| {
                let p = FetchPartition {
                    index: *index,
                    offset: c.offset,
                    max_bytes: c.max_bytes,
                };
                (topic.clone(), p)
            })
            .collect(),
        Begin::Sessionless | Begin::Full => req
            .topics
            .iter()
            .flat_map(|(topic, parts)| {
                let name: Arc<str> = Arc::from(topic.as_str());
                parts.iter().map(move |p| (name.clone(), p.clone()))
            })
            .collect(),
    };
    let read = read(door, version, &req, &asked).await;
    let mut answered = Vec::with_capacity(asked.len());
    for ((topic, p), one) in asked.iter().zip(&read) {
        match partition_data(
            version,
            p.index,
            req.read_committed,
            one.as_ref().map_err(|c| *c),
        ) {
            Ok(d) => answered.push((topic.clone(), d)),
            Err(e) => return Reply::Close(format!("fetch records did not encode: {e}")),
        }
    }
    let now = tokio::time::Instant::now();
    let (session_id, answered) = match begin {
        Begin::Full => {
            let cached: Vec<(Key, Cached)> = asked
                .iter()
                .zip(&answered)
                .map(|((topic, p), (_, d))| {
                    ((topic.clone(), p.index), Cached::answered(p, &seen(d)))
                })
                .collect();
            (door.fetch_sessions.create(owner, &cached, now), answered)
        }
        Begin::Incremental { id, parts } => {
            let seen: Vec<(Key, Seen)> = parts
                .iter()
                .zip(&answered)
                .map(|((key, _), (_, d))| (key.clone(), seen(d)))
                .collect();
            let news: Vec<bool> = parts
                .iter()
                .zip(&seen)
                .map(|((_, c), (_, s))| c.must_respond(s))
                .collect();
            door.fetch_sessions.settle(&owner, id, &seen, now);
            let news = answered
                .into_iter()
                .zip(news)
                .filter_map(|(a, new)| new.then_some(a))
                .collect();
            (id, news)
        }
        Begin::Sessionless | Begin::Refused(_) => (NO_SESSION, answered),
    };
    encode(
        &FetchResponse::default()
            .with_session_id(session_id)
            .with_responses(by_topic(answered)),
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
        let mut bytes = encode_records(&records, &[]).expect("encodes");
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
        assert!(encode_records(&[], &[]).expect("empty").is_empty());
    }

    #[test]
    fn transaction_stretches_encode_as_transactional_and_control_batches() {
        let rec = |offset| FetchedRecord {
            offset,
            transaction_id: String::new(),
            payload: Bytes::from_static(b"1"),
            created_us: 0,
        };
        let mark = |base_offset, count, kind| TxnMark {
            base_offset,
            count,
            producer_id: 9,
            epoch: 2,
            kind,
        };
        let records: Vec<_> = (0..5).map(rec).collect();
        let marks = [
            mark(0, 2, TxnMarkKind::Data),
            mark(2, 1, TxnMarkKind::AbortMarker),
            mark(4, 1, TxnMarkKind::CommitMarker),
        ];
        let mut bytes = encode_records(&records, &marks).expect("encodes");
        let mut batches = Vec::new();
        while !bytes.is_empty() {
            batches.push(
                RecordBatchDecoder::decode(&mut bytes)
                    .expect("decodes")
                    .records,
            );
        }
        let shape: Vec<Vec<(i64, bool, bool, i64)>> = batches
            .iter()
            .map(|b| {
                b.iter()
                    .map(|r| (r.offset, r.transactional, r.control, r.producer_id))
                    .collect()
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                vec![(0, true, false, 9), (1, true, false, 9)],
                vec![(2, true, true, 9)],
                vec![(3, false, false, -1)],
                vec![(4, true, true, 9)],
            ]
        );
        let key = |b: &Vec<kafka_protocol::records::Record>| b[0].key.clone().expect("control key");
        assert_eq!(&key(&batches[1])[..], &[0, 0, 0, 0], "abort");
        assert_eq!(&key(&batches[3])[..], &[0, 0, 0, 1], "commit");
        assert_eq!(batches[1][0].producer_epoch, 2);
    }

    #[test]
    fn answers_encode_at_every_served_version() {
        let read = FetchedEntry {
            high_watermark: 3,
            log_start: 1,
            next_offset: 2,
            records: vec![FetchedRecord {
                offset: 1,
                transaction_id: String::new(),
                payload: Bytes::from_static(b"1"),
                created_us: 0,
            }],
            error: None,
            last_stable: 1,
            txn_marks: Vec::new(),
            aborted: vec![queenmq_protocol::fetch::AbortedTxn {
                producer_id: 4,
                first_offset: 0,
            }],
        };
        for v in VERSIONS {
            let parts = vec![
                partition_data(v, 0, true, Ok(&read)).expect("data"),
                partition_data(v, 1, false, Err(errors::UNKNOWN_TOPIC_OR_PARTITION)).expect("data"),
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
        let t: Arc<str> = Arc::from("t");
        let asked = [
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
        ]
        .map(|p| (t.clone(), p));
        let (plan, entries) = plan(&asked);
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

    #[test]
    fn consecutive_partitions_of_a_topic_share_its_entry() {
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let d = |i| PartitionData::default().with_partition_index(i);
        let grouped = by_topic(vec![
            (a.clone(), d(0)),
            (a.clone(), d(1)),
            (b, d(0)),
            (a, d(2)),
        ]);
        let shape: Vec<(String, Vec<i32>)> = grouped
            .iter()
            .map(|t| {
                let idx = t.partitions.iter().map(|p| p.partition_index).collect();
                (t.topic.0.to_string(), idx)
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                ("a".into(), vec![0, 1]),
                ("b".into(), vec![0]),
                ("a".into(), vec![2])
            ]
        );
    }
}
