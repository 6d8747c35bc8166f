//! OffsetFetch, ListGroups and DescribeGroups over a stub bus (review s19 kafka H2): the
//! engine's refusal past its grant and a door without room both answer the retriable
//! COORDINATOR_LOAD_IN_PROGRESS, the room is given back, and DescribeGroups asks only for
//! the groups it names.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::BytesMut;
use kafka_protocol::messages::{
    DescribeGroupsRequest, DescribeGroupsResponse, GroupId, ListGroupsResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use queenmq_protocol::kafka_groups::{
    KafkaCommitted, KafkaGroupInfo, KafkaGroupsOutcome, KafkaGroupsReq,
};
use queenmq_protocol::{Bus, BusFuture, Command, ErrorCode, Outcome, QueenError, RequestCtx};

use super::{admin, offsets};
use crate::answer_room::AnswerRoom;
use crate::connection::Reply;
use crate::errors as e;
use crate::wire::Reader;

/// Group "g" holds `rows` offsets of 2 000 bytes of metadata each (20 MB for 10 000); a
/// List is refused past the engine's grant; `lists` counts the Lists asked.
struct Stub {
    rows: usize,
    over_budget: bool,
    lists: AtomicUsize,
}

struct StubBus(Arc<Stub>);

impl Bus for StubBus {
    fn call(&self, _ctx: RequestCtx, command: Command) -> BusFuture {
        let out = match command {
            Command::KafkaGroups(KafkaGroupsReq::Fetch { .. }) if self.0.over_budget => {
                Ok(KafkaGroupsOutcome::OverBudget)
            }
            Command::KafkaGroups(KafkaGroupsReq::Fetch { .. }) => {
                let meta = "m".repeat(2_000);
                Ok(KafkaGroupsOutcome::Fetched(
                    (0..self.0.rows)
                        .map(|p| KafkaCommitted {
                            topic: "t".into(),
                            partition: p as i32,
                            offset: 1,
                            leader_epoch: -1,
                            metadata: meta.clone(),
                            commit_time_us: 0,
                        })
                        .collect(),
                ))
            }
            Command::KafkaGroups(KafkaGroupsReq::List) => {
                self.0.lists.fetch_add(1, Ordering::SeqCst);
                Ok(KafkaGroupsOutcome::OverBudget)
            }
            Command::KafkaGroups(KafkaGroupsReq::Infos { groups }) => {
                Ok(KafkaGroupsOutcome::Infos(
                    groups
                        .iter()
                        .map(|g| {
                            (g == "g").then(|| KafkaGroupInfo {
                                group: g.clone(),
                                generation: 3,
                                protocol_type: "consumer".into(),
                                protocol_name: "range".into(),
                                offsets: 1,
                            })
                        })
                        .collect(),
                ))
            }
            other => {
                return Box::pin(async move {
                    Err(QueenError::new(
                        ErrorCode::Internal,
                        format!("the stub does not answer {other:?}"),
                    ))
                })
            }
        };
        Box::pin(async move { out.map(Outcome::KafkaGroups) })
    }
}

fn stub(rows: usize, over_budget: bool) -> Arc<Stub> {
    Arc::new(Stub {
        rows,
        over_budget,
        lists: AtomicUsize::new(0),
    })
}

fn every_offset_of(group: &str) -> Vec<offsets::FetchGroup> {
    vec![(group.to_string(), None)]
}

/// Review s19 kafka H2: 20 MB of offsets answered by the engine find no room in a 4 MiB
/// door room another answer holds part of (alone, an answer above the room takes all of
/// it): the group is refused retriably, and the room is whole afterwards; with room the
/// answer holds it until it is written.
#[tokio::test]
async fn a_groups_offsets_without_room_are_refused_retriably_and_with_room_held() {
    const ROOM: usize = 4 << 20;
    let room = AnswerRoom::new(ROOM);
    let mut door = crate::test_door::over(Arc::new(StubBus(stub(10_000, false))));
    door.answers = room.clone();
    let busy = room.take(1 << 20).expect("room");
    let (answers, held) = offsets::fetch_groups(&door, &every_offset_of("g"), false).await;
    assert_eq!(answers.len(), 1);
    let (code, topics) = &answers[0].1;
    assert_eq!(*code, e::COORDINATOR_LOAD_IN_PROGRESS);
    assert!(topics.is_empty(), "never a cut answer");
    drop(held);
    drop(busy);
    assert_eq!(room.free(), ROOM);

    let mut door = crate::test_door::over(Arc::new(StubBus(stub(1_000, false))));
    door.answers = room.clone();
    let (answers, held) = offsets::fetch_groups(&door, &every_offset_of("g"), false).await;
    let (code, topics) = &answers[0].1;
    assert_eq!(*code, e::NONE);
    assert_eq!(topics[0].1.len(), 1_000);
    assert!(
        ROOM - room.free() >= 1_000 * 2 * 2_000,
        "held until written"
    );
    drop(held);
    assert_eq!(room.free(), ROOM);
}

#[tokio::test]
async fn a_groups_offsets_refused_by_the_engine_are_retriable_for_the_group() {
    let door = crate::test_door::over(Arc::new(StubBus(stub(10, true))));
    let (answers, _held) = offsets::fetch_groups(&door, &every_offset_of("g"), false).await;
    let (code, topics) = &answers[0].1;
    assert_eq!(*code, e::COORDINATOR_LOAD_IN_PROGRESS);
    assert!(topics.is_empty());
}

/// Review s20 kafka H1: OffsetFetch v1 (v0 is not served) has no group-level error: a refused group's code
/// goes on every asked partition, never an empty answer a client reads as no offsets.
#[tokio::test]
async fn an_old_offset_fetch_refused_carries_the_code_on_every_asked_partition() {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse, TopicName};
    let door = crate::test_door::over(Arc::new(StubBus(stub(10, true))));
    for version in [1i16] {
        let req = OffsetFetchRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("g")))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_partition_indexes(vec![0, 1])]));
        let mut buf = BytesMut::new();
        req.encode(&mut buf, version).expect("encodes");
        let reply = offsets::fetch(&door, version, Reader::new(buf.freeze(), false)).await;
        let resp = OffsetFetchResponse::decode(&mut body(reply), version).expect("decodes");
        let got: Vec<(String, i32, i16)> = resp
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.name.0.to_string(), p.partition_index, p.error_code))
            })
            .collect();
        let code = e::COORDINATOR_LOAD_IN_PROGRESS;
        assert_eq!(
            got,
            vec![("t".to_string(), 0, code), ("t".to_string(), 1, code)],
            "v{version}"
        );
    }
}

fn body(reply: Reply) -> BytesMut {
    let (Reply::Send { body, .. } | Reply::Held { body, .. }) = reply else {
        panic!("no answer");
    };
    body
}

#[tokio::test]
async fn a_list_of_groups_refused_by_the_engine_is_retriable() {
    let door = crate::test_door::over(Arc::new(StubBus(stub(0, false))));
    let reply = admin::list(&door, 0, Reader::new(BytesMut::new().freeze(), false)).await;
    let resp = ListGroupsResponse::decode(&mut body(reply), 0).expect("decodes");
    assert_eq!(resp.error_code, e::COORDINATOR_LOAD_IN_PROGRESS);
    assert!(resp.groups.is_empty());
}

/// A cluster whose leader a test sets; this node is node 1.
#[derive(Debug)]
struct Led(Option<i32>);

impl crate::cluster::ClusterView for Led {
    fn topology(&self, _tenant: &str) -> Option<crate::cluster::Topology> {
        Some(crate::cluster::Topology {
            brokers: Vec::new(),
            leader: self.0,
            replicas: vec![1, 2, 3],
            term: 4,
        })
    }

    fn metadata_reads(&self) -> Arc<dyn queenmq_protocol::Bus> {
        unreachable!("not asked by ListGroups")
    }
}

/// Review s23 lead2 M2: a node that does not lead lists no group while another node leads
/// (the leader lists them), and answers a retriable error while no leader is known, rather
/// than an empty listing every node would give.
#[tokio::test]
async fn a_listing_with_no_leader_known_is_retriable_not_empty() {
    for (leader, code) in [(Some(2), e::NONE), (None, e::COORDINATOR_NOT_AVAILABLE)] {
        let mut door = crate::test_door::over(Arc::new(StubBus(stub(3, false))));
        let mut cfg = (*door.cfg).clone();
        cfg.cluster = Some(Arc::new(Led(leader)));
        door.cfg = Arc::new(cfg);
        let reply = admin::list(&door, 0, Reader::new(BytesMut::new().freeze(), false)).await;
        let resp = ListGroupsResponse::decode(&mut body(reply), 0).expect("decodes");
        assert_eq!(resp.error_code, code, "leader {leader:?}");
        assert!(resp.groups.is_empty());
    }
}

/// Review s19 kafka H2: describing a group asks the engine for that group only; before, it
/// listed every group (and failed with it).
#[tokio::test]
async fn describing_a_group_asks_for_it_alone_and_never_lists_every_group() {
    let s = stub(0, false);
    let door = crate::test_door::over(Arc::new(StubBus(s.clone())));
    let req = DescribeGroupsRequest::default().with_groups(vec![
        GroupId(StrBytes::from_static_str("g")),
        GroupId(StrBytes::from_static_str("other")),
    ]);
    let mut buf = BytesMut::new();
    req.encode(&mut buf, 0).expect("encodes");
    let reply = admin::describe(&door, 0, Reader::new(buf.freeze(), false)).await;
    let resp = DescribeGroupsResponse::decode(&mut body(reply), 0).expect("decodes");
    let got: Vec<(String, i16, String, String)> = resp
        .groups
        .into_iter()
        .map(|g| {
            (
                g.group_id.0.to_string(),
                g.error_code,
                g.group_state.to_string(),
                g.protocol_type.to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("g".into(), e::NONE, "Empty".into(), "consumer".into()),
            ("other".into(), e::NONE, "Dead".into(), String::new()),
        ]
    );
    assert_eq!(s.lists.load(Ordering::SeqCst), 0);
}
