//! The door's side of DescribeTransactions and DescribeProducers over a stub bus that
//! counts what reaches the engine: repeats are dropped, ids no coordinator keeps are not
//! asked, each topic is looked up once (review s16 kafka H1, M1, L4).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, DescribeTransactionsRequest,
    DescribeTransactionsResponse, TopicName, TransactionalId,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use queenmq_protocol::kafka_txn_reads::*;
use queenmq_protocol::{
    Bus, BusFuture, Command, ErrorCode, Outcome, QueenError, ReadAnswer, ReadReq, RequestCtx,
};

use super::reads;
use crate::connection::Reply;
use crate::errors;
use crate::wire::Reader;

/// Every topic is missing; every transactional id is unknown but "over", which is past the
/// answer's budget. It records the ids the engine was asked and counts topic look-ups.
#[derive(Default)]
struct Stub {
    asked_ids: Mutex<Vec<String>>,
    txn_reads: AtomicUsize,
    lookups: AtomicUsize,
}

struct StubBus(Arc<Stub>);

impl Bus for StubBus {
    fn call(&self, _ctx: RequestCtx, command: Command) -> BusFuture {
        let out = match command {
            Command::Read(ReadReq::KafkaTxns(KafkaTxnRead::Describe { txn_ids })) => {
                self.0.txn_reads.fetch_add(1, Ordering::SeqCst);
                let answer = txn_ids
                    .iter()
                    .map(|id| {
                        if id == "over" {
                            TxnDescribed::OverBudget
                        } else {
                            TxnDescribed::Unknown
                        }
                    })
                    .collect();
                if let Ok(mut seen) = self.0.asked_ids.lock() {
                    seen.extend(txn_ids);
                }
                Ok(Outcome::Read(ReadAnswer::KafkaTxns(
                    KafkaTxnReadAnswer::Described(answer),
                )))
            }
            Command::Read(ReadReq::KafkaTxns(_)) => {
                self.0.txn_reads.fetch_add(1, Ordering::SeqCst);
                Err(QueenError::new(ErrorCode::Internal, "not asked here"))
            }
            Command::Read(ReadReq::Queue { .. }) => {
                self.0.lookups.fetch_add(1, Ordering::SeqCst);
                Err(QueenError::not_found("Queue not found"))
            }
            other => Err(QueenError::new(
                ErrorCode::Internal,
                format!("the stub does not answer {other:?}"),
            )),
        };
        Box::pin(async move { out })
    }
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

async fn describe(stub: &Arc<Stub>, ids: &[String]) -> Vec<(String, i16)> {
    let door = crate::test_door::over(Arc::new(StubBus(stub.clone())));
    let req = DescribeTransactionsRequest::default()
        .with_transactional_ids(ids.iter().map(|i| TransactionalId(s(i))).collect());
    let mut buf = BytesMut::new();
    req.encode(&mut buf, 0).expect("encodes");
    let (Reply::Send { mut body, .. } | Reply::Held { mut body, .. }) =
        reads::describe(&door, 0, Reader::new(buf.freeze(), true)).await
    else {
        panic!("no answer");
    };
    DescribeTransactionsResponse::decode(&mut body, 0)
        .expect("decodes")
        .transaction_states
        .into_iter()
        .map(|t| (t.transactional_id.0.to_string(), t.error_code))
        .collect()
}

#[tokio::test]
async fn describe_asks_the_engine_each_keepable_id_once() {
    let stub = Arc::new(Stub::default());
    let long = "x".repeat(1025);
    let mut ids = vec!["a".to_string(); 9_000];
    ids.push(long.clone());
    ids.push(String::new());
    ids.push("over".into());
    ids.push("a".into());
    ids.push(long.clone());
    let got = describe(&stub, &ids).await;
    assert_eq!(
        got,
        vec![
            ("a".to_string(), reads::TRANSACTIONAL_ID_NOT_FOUND),
            (long, reads::TRANSACTIONAL_ID_NOT_FOUND),
            (String::new(), reads::TRANSACTIONAL_ID_NOT_FOUND),
            ("over".to_string(), errors::COORDINATOR_LOAD_IN_PROGRESS),
        ],
        "each id once, in its first place"
    );
    assert_eq!(stub.txn_reads.load(Ordering::SeqCst), 1);
    assert_eq!(
        *stub.asked_ids.lock().expect("lock"),
        vec!["a".to_string(), "over".to_string()],
        "neither repeats nor ids past 1024 bytes reach the engine"
    );
}

#[tokio::test]
async fn describe_of_only_unkeepable_ids_never_asks_the_engine() {
    let stub = Arc::new(Stub::default());
    let got = describe(&stub, &["y".repeat(5_000)]).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, reads::TRANSACTIONAL_ID_NOT_FOUND);
    assert_eq!(stub.txn_reads.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn describe_producers_looks_each_topic_up_once() {
    let stub = Arc::new(Stub::default());
    let door = crate::test_door::over(Arc::new(StubBus(stub.clone())));
    let mut topics: Vec<TopicRequest> = (0..999)
        .map(|n| {
            TopicRequest::default()
                .with_name(TopicName(s("t")))
                .with_partition_indexes(vec![n % 3, 0])
        })
        .collect();
    topics.push(
        TopicRequest::default()
            .with_name(TopicName(s("bad name!")))
            .with_partition_indexes(vec![0]),
    );
    let req = DescribeProducersRequest::default().with_topics(topics);
    let mut buf = BytesMut::new();
    req.encode(&mut buf, 0).expect("encodes");
    let (Reply::Send { mut body, .. } | Reply::Held { mut body, .. }) =
        reads::producers(&door, 0, Reader::new(buf.freeze(), true)).await
    else {
        panic!("no answer");
    };
    let resp = DescribeProducersResponse::decode(&mut body, 0).expect("decodes");
    let got: Vec<(String, Vec<(i32, i16)>)> = resp
        .topics
        .into_iter()
        .map(|t| {
            (
                t.name.0.to_string(),
                t.partitions
                    .into_iter()
                    .map(|p| (p.partition_index, p.error_code))
                    .collect(),
            )
        })
        .collect();
    let unknown = errors::UNKNOWN_TOPIC_OR_PARTITION;
    assert_eq!(
        got,
        vec![
            (
                "t".to_string(),
                vec![(0, unknown), (1, unknown), (2, unknown)]
            ),
            (
                "bad name!".to_string(),
                vec![(0, errors::INVALID_TOPIC_EXCEPTION)]
            ),
        ],
        "each topic once, each partition once"
    );
    assert_eq!(
        stub.lookups.load(Ordering::SeqCst),
        1,
        "one look-up for the topic named 999 times, none for a name no topic has"
    );
    assert_eq!(
        stub.txn_reads.load(Ordering::SeqCst),
        0,
        "no partition exists"
    );
}

/// A DescribeTransactions frame naming more ids than the cap closes the connection.
#[test]
fn decode_refuses_more_ids_than_the_cap_and_drops_repeats() {
    let encode = |n: usize| {
        let req = DescribeTransactionsRequest::default()
            .with_transactional_ids((0..n).map(|_| TransactionalId(s("r"))).collect());
        let mut buf = BytesMut::new();
        req.encode(&mut buf, 0).expect("encodes");
        buf.freeze()
    };
    let mut r = Reader::new(encode(MAX_TXNS_PER_ANSWER + 1), true);
    assert!(reads::decode_describe(&mut r).is_err());
    let mut r = Reader::new(encode(MAX_TXNS_PER_ANSWER), true);
    assert_eq!(
        reads::decode_describe(&mut r).expect("decodes"),
        vec!["r".to_string()]
    );
}

fn list_request(ids: usize) -> bytes::Bytes {
    let req = kafka_protocol::messages::ListTransactionsRequest::default()
        .with_producer_id_filters(
            (0..ids as i64)
                .map(kafka_protocol::messages::ProducerId)
                .collect(),
        );
    let mut buf = BytesMut::new();
    req.encode(&mut buf, 0).expect("encodes");
    buf.freeze()
}

/// Review s17 lead L2: the door's own cap on producer id filters (it closed Java's
/// find-hanging at 1000), tested at the door rather than only in the engine.
#[test]
fn list_takes_thousands_of_producer_id_filters_and_refuses_past_its_cap() {
    let mut r = Reader::new(list_request(5_000), true);
    let (states, ids) = reads::decode_list(&mut r).expect("5000 filters decode");
    assert!(states.is_empty());
    assert_eq!(ids.len(), 5_000);
    assert_eq!(ids.last(), Some(&4_999));
    let mut r = Reader::new(list_request(MAX_LIST_PRODUCER_FILTERS + 1), true);
    let err = reads::decode_list(&mut r).expect_err("past the cap");
    assert!(
        err.to_string().contains("100000 producer id filters"),
        "{err}"
    );
}
