//! The door's room for the big admin answers, over a stub bus whose engine answers large
//! lists (review s18 kafka H1, L1): an answer that finds no room is refused retriably and
//! holds nothing, and one that finds it holds its bytes until the reply is dropped.

use std::sync::Arc;

use bytes::BytesMut;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, ListTransactionsRequest,
    ListTransactionsResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use queenmq_protocol::kafka_txn_reads::*;
use queenmq_protocol::{
    Bus, BusFuture, Command, ErrorCode, KvOutcome, KvResult, MessageTotals, Outcome, PageInfo,
    QueenError, QueueDoc, QueueView, ReadAnswer, ReadReq, RequestCtx,
};

use super::reads;
use crate::answer_room::AnswerRoom;
use crate::connection::Reply;
use crate::errors;
use crate::wire::Reader;

/// Topic "t" exists with one partition (the door's default count), which has 1 000
/// producers; ListTransactions lists 1 000 ids of 1 000 bytes, or is over the cycle's
/// grant when `over`.
struct Engine {
    over: bool,
}

fn topic_doc() -> QueueDoc {
    QueueDoc {
        queue: QueueView {
            id: "q".into(),
            name: "t".into(),
            namespace: String::new(),
            task: String::new(),
            partitions: 0,
            messages: MessageTotals::default(),
            retained_bytes: 0,
            options: crate::admin::topic_configs::tests::settings(),
            created_us: 0,
        },
        partitions: Vec::new(),
        page: PageInfo {
            limit: 0,
            offset: 0,
            total: 0,
        },
    }
}

impl Bus for Engine {
    fn call(&self, _ctx: RequestCtx, command: Command) -> BusFuture {
        let read = |a| Ok(Outcome::Read(ReadAnswer::KafkaTxns(a)));
        let out = match command {
            Command::Read(ReadReq::Queue { .. }) => {
                Ok(Outcome::Read(ReadAnswer::Queue(topic_doc())))
            }
            Command::Kv(_) => Ok(Outcome::Kv(KvOutcome::Results(vec![KvResult::Get(None)]))),
            Command::Read(ReadReq::KafkaTxns(KafkaTxnRead::Producers { partitions })) => {
                let view = |i: i64| ProducerView {
                    producer_id: i,
                    epoch: 1,
                    last_sequence: 7,
                    last_ms: 1,
                    txn_start_offset: -1,
                };
                read(KafkaTxnReadAnswer::Producers(
                    partitions
                        .iter()
                        .map(|_| PartitionProducers::Listed((0..1_000).map(view).collect()))
                        .collect(),
                ))
            }
            Command::Read(ReadReq::KafkaTxns(KafkaTxnRead::List { .. })) if self.over => {
                read(KafkaTxnReadAnswer::ListOverBudget)
            }
            Command::Read(ReadReq::KafkaTxns(KafkaTxnRead::List { .. })) => {
                read(KafkaTxnReadAnswer::Listed {
                    rows: (0..1_000)
                        .map(|n| TxnListed {
                            txn_id: format!("{n:04}{}", "x".repeat(996)),
                            producer_id: n,
                            state: TxnStateName::Empty,
                        })
                        .collect(),
                    unknown_states: Vec::new(),
                })
            }
            other => Err(QueenError::new(
                ErrorCode::Internal,
                format!("the stub does not answer {other:?}"),
            )),
        };
        Box::pin(async move { out })
    }
}

const ROOM: usize = 4 << 20;

fn door(over: bool) -> crate::Door {
    let mut door = crate::test_door::over(Arc::new(Engine { over }));
    door.answers = AnswerRoom::new(ROOM);
    door
}

fn list_request() -> Reader {
    let mut buf = BytesMut::new();
    ListTransactionsRequest::default()
        .encode(&mut buf, 0)
        .expect("encodes");
    Reader::new(buf.freeze(), true)
}

fn listed(reply: &Reply) -> (i16, usize) {
    let (Reply::Send { body, .. } | Reply::Held { body, .. }) = reply else {
        panic!("no answer");
    };
    let resp = ListTransactionsResponse::decode(&mut body.clone(), 0).expect("decodes");
    (resp.error_code, resp.transaction_states.len())
}

/// Review s18 kafka H1: a ListTransactions answer of 1 000 ids of 1 KB holds its room until
/// it is written, and one that finds no room is refused retriably with nothing held.
#[tokio::test]
async fn a_list_holds_its_room_until_written_and_is_refused_without_it() {
    let door = door(false);
    let reply = reads::list(&door, 0, list_request()).await;
    assert_eq!(listed(&reply), (errors::NONE, 1_000));
    let held = ROOM - door.answers.free();
    assert!(held >= 3_000_000, "the ids three times over: {held}");
    drop(reply);
    assert_eq!(door.answers.free(), ROOM);
    let busy = door.answers.take(ROOM - held / 2).expect("room");
    let refused = reads::list(&door, 0, list_request()).await;
    assert_eq!(
        listed(&refused),
        (errors::COORDINATOR_LOAD_IN_PROGRESS, 0),
        "retriable, top level"
    );
    drop(refused);
    drop(busy);
    assert_eq!(door.answers.free(), ROOM, "nothing left held");
}

/// Review s18 kafka H1: past the engine's grant the list is refused retriably.
#[tokio::test]
async fn a_list_over_the_cycles_grant_is_refused_retriably() {
    let door = door(true);
    let reply = reads::list(&door, 0, list_request()).await;
    assert_eq!(listed(&reply), (errors::COORDINATOR_LOAD_IN_PROGRESS, 0));
}

fn producers_request() -> Reader {
    let mut buf = BytesMut::new();
    DescribeProducersRequest::default()
        .with_topics(vec![TopicRequest::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_indexes(vec![0])])
        .encode(&mut buf, 0)
        .expect("encodes");
    Reader::new(buf.freeze(), true)
}

fn producers_codes(reply: &Reply) -> Vec<(i16, usize)> {
    let (Reply::Send { body, .. } | Reply::Held { body, .. }) = reply else {
        panic!("no answer");
    };
    DescribeProducersResponse::decode(&mut body.clone(), 0)
        .expect("decodes")
        .topics
        .into_iter()
        .flat_map(|t| t.partitions)
        .map(|p| (p.error_code, p.active_producers.len()))
        .collect()
}

/// Review s18 kafka L1: the door's reservation for DescribeProducers, which no test
/// covered: the answer holds its room until it is written, and without room every listed
/// partition is retried alone.
#[tokio::test]
async fn a_producers_answer_holds_its_room_and_is_refused_per_partition_without_it() {
    let door = door(false);
    let reply = reads::producers(&door, 0, producers_request()).await;
    assert_eq!(producers_codes(&reply), vec![(errors::NONE, 1_000)]);
    let held = ROOM - door.answers.free();
    assert!(held >= 32_000, "the views and the frame: {held}");
    drop(reply);
    assert_eq!(door.answers.free(), ROOM);
    let busy = door.answers.take(ROOM - held / 2).expect("room");
    let refused = reads::producers(&door, 0, producers_request()).await;
    assert_eq!(
        producers_codes(&refused),
        vec![(errors::NOT_LEADER_OR_FOLLOWER, 0)]
    );
    drop(refused);
    drop(busy);
    assert_eq!(door.answers.free(), ROOM, "nothing left held");
}
