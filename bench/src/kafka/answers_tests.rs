//! The answer readers against answers encoded by `kafka-protocol` (as the broker encodes
//! them), and against every cut of those answers: a reader drift or a missing length check
//! fails here.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ApiVersionsResponse, BrokerId, FetchResponse, MetadataResponse, OffsetCommitResponse,
    OffsetFetchResponse, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};

use super::answers;
use super::reader::Reader;
use super::records;
use super::requests;

fn body<M: Encodable>(message: &M, api: (kafka_protocol::messages::ApiKey, i16)) -> Bytes {
    let mut buf = BytesMut::new();
    assert!(message.encode(&mut buf, api.1).is_ok());
    buf.freeze()
}

fn topic() -> TopicName {
    TopicName(StrBytes::from_static_str("t"))
}

/// Every proper prefix of `whole` is an error or a shorter answer, never a panic.
fn cuts<T>(whole: &Bytes, read: impl Fn(Reader) -> anyhow::Result<T>) {
    for cut in 0..whole.len() {
        let _ = read(Reader::new(whole.slice(..cut)));
    }
}

#[test]
fn produce_answers_give_each_partitions_error() -> anyhow::Result<()> {
    let parts = [(0, 0i16), (3, 6)].map(|(index, error_code)| {
        PartitionProduceResponse::default()
            .with_index(index)
            .with_error_code(error_code)
    });
    let resp = ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
        .with_name(topic())
        .with_partition_responses(parts.to_vec())]);
    let whole = body(&resp, requests::PRODUCE);
    let got = answers::produce(Reader::new(whole.clone()))?;
    assert_eq!(got.get(&("t".to_string(), 0)), Some(&0));
    assert_eq!(got.get(&("t".to_string(), 3)), Some(&6));
    cuts(&whole, answers::produce);
    for cut in 0..whole.len() {
        assert!(answers::produce(Reader::new(whole.slice(..cut))).is_err());
    }
    Ok(())
}

#[test]
fn fetch_answers_carry_records_and_errors() -> anyhow::Result<()> {
    let batch = records::encode_batch(
        [(Bytes::from_static(b"7"), Bytes::from_static(b"{}"))].into_iter(),
        1,
    )?;
    let parts = vec![
        PartitionData::default()
            .with_partition_index(2)
            .with_records(Some(batch)),
        PartitionData::default()
            .with_partition_index(5)
            .with_error_code(1),
    ];
    let resp = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
        .with_topic(topic())
        .with_partitions(parts)]);
    let whole = body(&resp, requests::FETCH);
    let got = answers::fetch(Reader::new(whole.clone()))?;
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].partition, got[0].error), (2, 0));
    let recs = records::decode_batches(got[0].records.clone().unwrap_or_default())?.records;
    assert_eq!(recs[0].key.as_deref(), Some(&b"7"[..]));
    assert_eq!((got[1].partition, got[1].error), (5, 1));
    cuts(&whole, answers::fetch);
    Ok(())
}

#[test]
fn offset_answers_read_committed_offsets_and_commit_errors() -> anyhow::Result<()> {
    let resp =
        OffsetFetchResponse::default().with_topics(vec![OffsetFetchResponseTopic::default()
            .with_name(topic())
            .with_partitions(vec![
                OffsetFetchResponsePartition::default()
                    .with_partition_index(1)
                    .with_committed_offset(42),
                OffsetFetchResponsePartition::default()
                    .with_partition_index(4)
                    .with_committed_offset(-1),
            ])]);
    let whole = body(&resp, requests::OFFSET_FETCH);
    let got = answers::offset_fetch(Reader::new(whole.clone()), "t")?;
    assert_eq!(got.get(&1), Some(&(42, 0)));
    assert_eq!(got.get(&4), Some(&(-1, 0)));
    cuts(&whole, |r| answers::offset_fetch(r, "t"));

    let resp =
        OffsetCommitResponse::default().with_topics(vec![OffsetCommitResponseTopic::default()
            .with_name(topic())
            .with_partitions(vec![OffsetCommitResponsePartition::default()
                .with_partition_index(1)
                .with_error_code(22)])]);
    let whole = body(&resp, requests::OFFSET_COMMIT);
    assert_eq!(
        answers::offset_commit(Reader::new(whole.clone()), "t")?.get(&1),
        Some(&22)
    );
    assert!(answers::offset_commit(Reader::new(whole.clone()), "u")?.is_empty());
    cuts(&whole, |r| answers::offset_commit(r, "t"));
    Ok(())
}

#[test]
fn metadata_and_api_versions_are_read() -> anyhow::Result<()> {
    let partition = MetadataResponsePartition::default()
        .with_replica_nodes(vec![BrokerId(1)])
        .with_isr_nodes(vec![BrokerId(1)]);
    let resp = MetadataResponse::default()
        .with_brokers(vec![MetadataResponseBroker::default()
            .with_node_id(BrokerId(1))
            .with_host(StrBytes::from_static_str("localhost"))
            .with_port(9092)])
        .with_topics(vec![MetadataResponseTopic::default()
            .with_name(Some(topic()))
            .with_partitions(vec![partition; 3])]);
    let whole = body(&resp, requests::METADATA);
    assert_eq!(
        answers::metadata(Reader::new(whole.clone()))?,
        vec![("t".to_string(), 0, 3)]
    );
    cuts(&whole, answers::metadata);

    let resp = ApiVersionsResponse::default().with_api_keys(vec![ApiVersion::default()
        .with_api_key(0)
        .with_min_version(3)
        .with_max_version(12)]);
    let whole = body(&resp, requests::API_VERSIONS);
    assert_eq!(
        answers::api_versions(Reader::new(whole.clone()))?.get(&0),
        Some(&(3, 12))
    );
    cuts(&whole, answers::api_versions);
    Ok(())
}

/// A count the body cannot hold is refused before anything is allocated for it.
#[test]
fn a_huge_count_is_an_error() {
    let mut huge = BytesMut::new();
    huge.put_i32(0); // throttle
    huge.put_i16(0); // error
    huge.put_i32(0); // session
    huge.put_i32(i32::MAX); // topics
    assert!(answers::fetch(Reader::new(huge.freeze())).is_err());
}
