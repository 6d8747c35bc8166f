//! The collision check costs one engine read per request, whatever the request names: a
//! stub bus counts the reads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::BytesMut;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use queenmq_protocol::topic_collision::collide;
use queenmq_protocol::{
    Bus, BusFuture, Command, ErrorCode, Outcome, QueenError, ReadAnswer, ReadReq, RequestCtx,
};

use crate::wire::Reader;
use crate::{collisions, connection::Reply, errors, metadata, Door};

/// A tenant with one queue, `a.b`, in which every other topic is missing and every create
/// fails; it counts the collision reads and the names they ask about.
#[derive(Default)]
struct Stub {
    collision_reads: AtomicUsize,
    names_asked: AtomicUsize,
    configures: AtomicUsize,
}

const EXISTING: &str = "a.b";

/// The bus over a shared [`Stub`], so the test reads its counters.
struct StubBus(Arc<Stub>);

impl Bus for StubBus {
    fn call(&self, _ctx: RequestCtx, command: Command) -> BusFuture {
        let out = match command {
            Command::Read(ReadReq::TopicCollisions { names }) => {
                self.0.collision_reads.fetch_add(1, Ordering::SeqCst);
                self.0.names_asked.fetch_add(names.len(), Ordering::SeqCst);
                let hits = names
                    .iter()
                    .map(|n| collide(n, EXISTING).then(|| EXISTING.to_owned()))
                    .collect();
                Ok(Outcome::Read(ReadAnswer::TopicCollisions(hits)))
            }
            Command::Read(ReadReq::Queue { .. }) => Err(QueenError::not_found("Queue not found")),
            Command::Configure(_) => {
                self.0.configures.fetch_add(1, Ordering::SeqCst);
                Err(QueenError::new(
                    ErrorCode::Internal,
                    "the stub creates nothing",
                ))
            }
            other => Err(QueenError::new(
                ErrorCode::Internal,
                format!("the stub does not answer {other:?}"),
            )),
        };
        Box::pin(async move { out })
    }
}

fn door(stub: &Arc<Stub>) -> Door {
    crate::test_door::over(Arc::new(StubBus(stub.clone())))
}

/// Metadata v4 with auto-creation naming `names`; the error code of each answered topic.
async fn metadata(door: &Door, names: &[String]) -> Vec<(String, i16)> {
    let version = 4;
    let req = MetadataRequest::default()
        .with_topics(Some(
            names
                .iter()
                .map(|t| {
                    MetadataRequestTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
                })
                .collect(),
        ))
        .with_allow_auto_topic_creation(true);
    let mut buf = BytesMut::new();
    req.encode(&mut buf, version).expect("encodes");
    let Reply::Send { mut body, .. } =
        metadata::answer(door, version, Reader::new(buf.freeze(), false)).await
    else {
        panic!("metadata did not answer");
    };
    let resp = MetadataResponse::decode(&mut body, version).expect("decodes");
    resp.topics
        .into_iter()
        .map(|t| {
            (
                t.name.map(|n| n.0.to_string()).unwrap_or_default(),
                t.error_code,
            )
        })
        .collect()
}

#[tokio::test]
async fn one_metadata_request_checks_collisions_with_one_read() {
    let stub = Arc::new(Stub::default());
    let door = door(&stub);
    // One colliding name a thousand times: answered once, checked once.
    let same = vec!["a_b".to_string(); 1_000];
    let got = metadata(&door, &same).await;
    assert_eq!(
        got,
        vec![("a_b".to_string(), errors::INVALID_TOPIC_EXCEPTION)]
    );
    assert_eq!(stub.collision_reads.load(Ordering::SeqCst), 1);
    assert_eq!(stub.names_asked.load(Ordering::SeqCst), 1);
    assert_eq!(stub.configures.load(Ordering::SeqCst), 0);

    // Distinct names: refusals use up the creation budget; the rest are retriable.
    let many: Vec<String> = (0..1_000).map(|i| format!("a_b{i:04}.x")).collect();
    let got = metadata(&door, &many).await;
    assert_eq!(got.len(), 1_000);
    assert_eq!(stub.collision_reads.load(Ordering::SeqCst), 2);
    let tried = got
        .iter()
        .filter(|(_, code)| *code != errors::LEADER_NOT_AVAILABLE)
        .count();
    assert_eq!(tried, 100, "every attempt takes from the budget");
    assert!(stub.names_asked.load(Ordering::SeqCst) <= 1 + 100);
}

#[tokio::test]
async fn names_without_dots_or_underscores_cost_no_read() {
    let stub = Arc::new(Stub::default());
    let door = door(&stub);
    let names: Vec<String> = (0..50).map(|i| format!("t-{i}")).collect();
    metadata(&door, &names).await;
    assert_eq!(stub.collision_reads.load(Ordering::SeqCst), 0);
    assert_eq!(stub.configures.load(Ordering::SeqCst), 50);
}

#[tokio::test]
async fn a_name_made_by_the_same_request_counts() {
    let stub = Arc::new(Stub::default());
    let door = door(&stub);
    let mut check = collisions::Check::new(["x.y", "x_y", "a_b"]);
    assert_eq!(check.existing(&door, "x.y").await.ok(), Some(None));
    check.created("x.y");
    let hit = check.existing(&door, "x_y").await.ok().flatten();
    assert_eq!(hit.as_deref(), Some("x.y"));
    let hit = check.existing(&door, "a_b").await.ok().flatten();
    assert_eq!(hit.as_deref(), Some(EXISTING));
    assert_eq!(stub.collision_reads.load(Ordering::SeqCst), 1);
    // A name the request did not announce is an error, never a silent pass.
    assert!(check.existing(&door, "q.r").await.is_err());
}
