//! A tiny in-memory Kafka broker (one node) for the Kafka driver's scenario tests: the APIs
//! and versions the driver speaks, topics as per-partition record logs, committed offsets
//! per group. Requests are decoded with `kafka-protocol` (they are this tool's own, so
//! trusted here). `KafkaFaults` makes it misbehave, to prove the tool notices.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::metadata_response::{
    MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{decode_request_header_from_buffer, Decodable, Encodable};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::requests;

/// Most records one fetched partition answers.
const FETCH_RECORDS: usize = 300;

#[derive(Default)]
struct State {
    /// Topic → partition → (key, value) at offset = index.
    topics: HashMap<String, Vec<Vec<(Bytes, Bytes)>>>,
    commits: HashMap<(String, String, i32), i64>,
    produced: usize,
}

/// How the mock misbehaves.
#[derive(Debug, Clone, Copy, Default)]
pub struct KafkaFaults {
    /// Answer every n-th produced record as stored but drop it.
    pub drop_every: Option<usize>,
    /// Answer every fetch of this partition with this error code.
    pub fail_partition: Option<(i32, i16)>,
    /// Answer every fetch from offset 0, whatever was asked.
    pub ignore_fetch_offset: bool,
    /// Refuse every produce to this partition with this error code (nothing stored).
    pub refuse_partition: Option<(i32, i16)>,
}

#[derive(Clone)]
pub struct MockKafka {
    state: Arc<Mutex<State>>,
    faults: KafkaFaults,
    /// Fetch requests served.
    fetches: Arc<AtomicUsize>,
}

impl MockKafka {
    /// Starts listening on a free loopback port; returns `host:port` and the broker (to read
    /// its counters).
    pub async fn start(faults: KafkaFaults) -> anyhow::Result<(String, MockKafka)> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let broker = MockKafka {
            state: Arc::default(),
            faults,
            fetches: Arc::default(),
        };
        let handle = broker.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let broker = broker.clone();
                tokio::spawn(async move {
                    let _ = broker.serve(stream).await;
                });
            }
        });
        Ok((addr.to_string(), handle))
    }

    /// Fetch requests served so far.
    pub fn fetches(&self) -> usize {
        self.fetches.load(Ordering::Relaxed)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn serve(&self, mut stream: TcpStream) -> anyhow::Result<()> {
        stream.set_nodelay(true)?;
        loop {
            let len = stream.read_i32().await?;
            let mut body = vec![0u8; usize::try_from(len)?];
            stream.read_exact(&mut body).await?;
            let mut buf = Bytes::from(body);
            let header = decode_request_header_from_buffer(&mut buf)?;
            let version = header.request_api_version;
            // Length (filled in last) and correlation id, then the body: one write.
            let mut answer = BytesMut::new();
            answer.put_i32(0);
            answer.put_i32(header.correlation_id);
            match ApiKey::try_from(header.request_api_key) {
                Ok(ApiKey::ApiVersions) => {
                    let keys = requests::NEEDED
                        .iter()
                        .map(|&(key, v)| {
                            ApiVersion::default()
                                .with_api_key(key as i16)
                                .with_min_version(v)
                                .with_max_version(v)
                        })
                        .collect();
                    ApiVersionsResponse::default()
                        .with_api_keys(keys)
                        .encode(&mut answer, version)?;
                }
                Ok(ApiKey::CreateTopics) => {
                    let req = CreateTopicsRequest::decode(&mut buf, version)?;
                    let mut state = self.state();
                    let topics = req
                        .topics
                        .into_iter()
                        .map(|t| {
                            let name = t.name.0.to_string();
                            let exists = state.topics.contains_key(&name);
                            let n = usize::try_from(t.num_partitions).unwrap_or(1);
                            state
                                .topics
                                .entry(name)
                                .or_insert_with(|| vec![Vec::new(); n]);
                            CreatableTopicResult::default()
                                .with_name(t.name)
                                .with_error_code(if exists { 36 } else { 0 })
                        })
                        .collect();
                    CreateTopicsResponse::default()
                        .with_topics(topics)
                        .encode(&mut answer, version)?;
                }
                Ok(ApiKey::Metadata) => {
                    let req = MetadataRequest::decode(&mut buf, version)?;
                    let state = self.state();
                    let topics = (req.topics.unwrap_or_default().into_iter())
                        .filter_map(|t| t.name)
                        .map(|name| {
                            let n = state.topics.get(&name.0.to_string()).map_or(0, Vec::len);
                            let parts = (0..n as i32)
                                .map(|p| {
                                    MetadataResponsePartition::default().with_partition_index(p)
                                })
                                .collect();
                            MetadataResponseTopic::default()
                                .with_name(Some(name))
                                .with_error_code(if n == 0 { 3 } else { 0 })
                                .with_partitions(parts)
                        })
                        .collect();
                    MetadataResponse::default()
                        .with_topics(topics)
                        .encode(&mut answer, version)?;
                }
                Ok(ApiKey::Produce) => self
                    .produce(ProduceRequest::decode(&mut buf, version)?)?
                    .encode(&mut answer, version)?,
                Ok(ApiKey::Fetch) => self
                    .fetch(FetchRequest::decode(&mut buf, version)?)
                    .await?
                    .encode(&mut answer, version)?,
                Ok(ApiKey::OffsetFetch) => {
                    let req = OffsetFetchRequest::decode(&mut buf, version)?;
                    let group = req.group_id.0.to_string();
                    let state = self.state();
                    let topics = (req.topics.unwrap_or_default().into_iter())
                        .map(|t| {
                            let name = t.name.0.to_string();
                            let parts = t
                                .partition_indexes
                                .iter()
                                .map(|&p| {
                                    let key = (group.clone(), name.clone(), p);
                                    OffsetFetchResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_committed_offset(
                                            *state.commits.get(&key).unwrap_or(&-1),
                                        )
                                })
                                .collect();
                            OffsetFetchResponseTopic::default()
                                .with_name(t.name)
                                .with_partitions(parts)
                        })
                        .collect();
                    OffsetFetchResponse::default()
                        .with_topics(topics)
                        .encode(&mut answer, version)?;
                }
                Ok(ApiKey::OffsetCommit) => {
                    let req = OffsetCommitRequest::decode(&mut buf, version)?;
                    let group = req.group_id.0.to_string();
                    let mut state = self.state();
                    let topics = req
                        .topics
                        .into_iter()
                        .map(|t| {
                            let name = t.name.0.to_string();
                            let parts = t
                                .partitions
                                .iter()
                                .map(|p| {
                                    let key = (group.clone(), name.clone(), p.partition_index);
                                    state.commits.insert(key, p.committed_offset);
                                    OffsetCommitResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                })
                                .collect();
                            OffsetCommitResponseTopic::default()
                                .with_name(t.name)
                                .with_partitions(parts)
                        })
                        .collect();
                    OffsetCommitResponse::default()
                        .with_topics(topics)
                        .encode(&mut answer, version)?;
                }
                other => anyhow::bail!("mock Kafka: no {other:?}"),
            }
            let len = i32::try_from(answer.len() - 4)?;
            (&mut answer[..4]).put_i32(len);
            stream.write_all(&answer).await?;
        }
    }

    fn produce(&self, req: ProduceRequest) -> anyhow::Result<ProduceResponse> {
        let mut state = self.state();
        let mut responses = Vec::new();
        for t in req.topic_data {
            let name = t.name.0.to_string();
            let mut parts = Vec::new();
            for p in t.partition_data {
                let mut records = p.records.unwrap_or_default();
                let set = RecordBatchDecoder::decode(&mut records)?;
                if let Some((_, code)) = self
                    .faults
                    .refuse_partition
                    .filter(|&(bad, _)| bad == p.index)
                {
                    parts.push(
                        PartitionProduceResponse::default()
                            .with_index(p.index)
                            .with_error_code(code),
                    );
                    continue;
                }
                let mut error = 0;
                for r in set.records {
                    state.produced += 1;
                    let drop = self
                        .faults
                        .drop_every
                        .is_some_and(|n| state.produced % n == 0);
                    let log = state
                        .topics
                        .get_mut(&name)
                        .and_then(|t| t.get_mut(usize::try_from(p.index).ok()?));
                    match log {
                        Some(log) if !drop => {
                            log.push((r.key.unwrap_or_default(), r.value.unwrap_or_default()))
                        }
                        Some(_) => {}
                        None => error = 3,
                    }
                }
                parts.push(
                    PartitionProduceResponse::default()
                        .with_index(p.index)
                        .with_error_code(error),
                );
            }
            responses.push(
                TopicProduceResponse::default()
                    .with_name(t.name)
                    .with_partition_responses(parts),
            );
        }
        Ok(ProduceResponse::default().with_responses(responses))
    }

    async fn fetch(&self, req: FetchRequest) -> anyhow::Result<FetchResponse> {
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let until = Instant::now() + Duration::from_millis(u64::try_from(req.max_wait_ms)?);
        loop {
            let (responses, any) = self.fetch_now(&req)?;
            if any || Instant::now() >= until {
                return Ok(FetchResponse::default().with_responses(responses));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn fetch_now(&self, req: &FetchRequest) -> anyhow::Result<(Vec<FetchableTopicResponse>, bool)> {
        let state = self.state();
        let mut any = false;
        let mut responses = Vec::new();
        for t in &req.topics {
            let log = state.topics.get(&t.topic.0.to_string());
            let mut parts = Vec::new();
            for p in &t.partitions {
                let asked = if self.faults.ignore_fetch_offset {
                    0
                } else {
                    p.fetch_offset
                };
                let from = usize::try_from(asked)?;
                let records: Vec<Record> = log
                    .and_then(|l| l.get(usize::try_from(p.partition).ok()?))
                    .map(|l| l.iter().enumerate().skip(from).take(FETCH_RECORDS))
                    .into_iter()
                    .flatten()
                    .map(|(offset, (key, value))| record(offset as i64, key, value))
                    .collect();
                let mut data = PartitionData::default().with_partition_index(p.partition);
                if let Some((_, code)) = self
                    .faults
                    .fail_partition
                    .filter(|&(bad, _)| bad == p.partition)
                {
                    parts.push(data.with_error_code(code));
                    continue;
                }
                if !records.is_empty() {
                    any = true;
                    let mut buf = BytesMut::new();
                    let options = RecordEncodeOptions {
                        version: 2,
                        compression: Compression::None,
                    };
                    RecordBatchEncoder::encode(&mut buf, &records, &options)?;
                    data = data.with_records(Some(buf.freeze()));
                }
                parts.push(data);
            }
            responses.push(
                FetchableTopicResponse::default()
                    .with_topic(t.topic.clone())
                    .with_partitions(parts),
            );
        }
        Ok((responses, any))
    }
}

fn record(offset: i64, key: &Bytes, value: &Bytes) -> Record {
    Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset,
        sequence: -1,
        timestamp: 0,
        key: Some(key.clone()),
        value: Some(value.clone()),
        headers: IndexMap::new(),
    }
}
