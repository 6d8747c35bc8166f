//! The requests this client sends, built and encoded with `kafka-protocol`, each in one fixed
//! non-flexible version (so `answers.rs` reads one layout per API).

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, BrokerId, CreateTopicsRequest, FetchRequest, GroupId,
    MetadataRequest, OffsetCommitRequest, OffsetFetchRequest, ProduceRequest, RequestHeader,
    TopicName,
};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};

/// The version of each API this client speaks; `connect` checks the broker serves them.
pub const API_VERSIONS: (ApiKey, i16) = (ApiKey::ApiVersions, 0);
pub const CREATE_TOPICS: (ApiKey, i16) = (ApiKey::CreateTopics, 4);
pub const METADATA: (ApiKey, i16) = (ApiKey::Metadata, 1);
pub const PRODUCE: (ApiKey, i16) = (ApiKey::Produce, 7);
pub const FETCH: (ApiKey, i16) = (ApiKey::Fetch, 11);
pub const OFFSET_FETCH: (ApiKey, i16) = (ApiKey::OffsetFetch, 5);
pub const OFFSET_COMMIT: (ApiKey, i16) = (ApiKey::OffsetCommit, 7);

/// Every API above but ApiVersions itself, for the check at connect.
pub const NEEDED: [(ApiKey, i16); 6] = [
    CREATE_TOPICS,
    METADATA,
    PRODUCE,
    FETCH,
    OFFSET_FETCH,
    OFFSET_COMMIT,
];

const CLIENT_ID: &str = "queen-bench";

/// A request's frame body: header then message, without the length prefix.
pub fn frame<M: Encodable + HeaderVersion>(
    api: (ApiKey, i16),
    correlation_id: i32,
    message: &M,
) -> anyhow::Result<Bytes> {
    let (key, version) = api;
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, M::header_version(version))?;
    message.encode(&mut buf, version)?;
    Ok(buf.freeze())
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

pub fn api_versions() -> ApiVersionsRequest {
    ApiVersionsRequest::default()
}

pub fn create_topic(topic: &str, partitions: i32, timeout_ms: i32) -> CreateTopicsRequest {
    CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(-1)])
        .with_timeout_ms(timeout_ms)
}

pub fn metadata(topic: &str) -> MetadataRequest {
    MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(topic_name(topic)))
    ]))
}

/// acks=-1: every answer comes after the records are committed.
pub fn produce(topic: &str, batches: Vec<(i32, Bytes)>, timeout_ms: i32) -> ProduceRequest {
    let partitions = batches
        .into_iter()
        .map(|(index, records)| {
            PartitionProduceData::default()
                .with_index(index)
                .with_records(Some(records))
        })
        .collect();
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(timeout_ms)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic_name(topic))
            .with_partition_data(partitions)])
}

/// A sessionless fetch (no incremental sessions) of `positions` (partition, offset).
pub fn fetch(
    topic: &str,
    positions: &[(i32, i64)],
    max_wait_ms: i32,
    max_bytes: i32,
    partition_max_bytes: i32,
) -> FetchRequest {
    let partitions = positions
        .iter()
        .map(|&(partition, offset)| {
            FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(partition_max_bytes)
        })
        .collect();
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(partitions)])
}

pub fn offset_fetch(group: &str, topic: &str, partitions: Vec<i32>) -> OffsetFetchRequest {
    OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(topic_name(topic))
            .with_partition_indexes(partitions)]))
}

/// A simple consumer's commit: generation -1 and no member id, as Kafka allows outside a
/// group's membership. `offsets` are (partition, next offset to read).
pub fn offset_commit(group: &str, topic: &str, offsets: &[(i32, i64)]) -> OffsetCommitRequest {
    let partitions = offsets
        .iter()
        .map(|&(partition, offset)| {
            OffsetCommitRequestPartition::default()
                .with_partition_index(partition)
                .with_committed_offset(offset)
                .with_committed_leader_epoch(-1)
        })
        .collect();
    OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(StrBytes::from_static_str(""))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(partitions)])
}
