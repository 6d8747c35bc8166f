//! OffsetFetch `require_stable` over a stub bus whose transaction commits right after the
//! committed offsets are read: the pending check must come first (review s16 kafka L1).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use queenmq_protocol::kafka_groups::{KafkaCommitted, KafkaGroupsOutcome, KafkaGroupsReq};
use queenmq_protocol::kafka_txn_reads::{KafkaTxnRead, KafkaTxnReadAnswer};
use queenmq_protocol::{
    Bus, BusFuture, Command, ErrorCode, Outcome, QueenError, ReadAnswer, ReadReq, RequestCtx,
};

use super::*;

/// Group "g" has offset 3 committed on ("t", 0) and 5 pending in an open transaction,
/// which commits as soon as the offsets have been read once.
#[derive(Default)]
struct Racing {
    committed: AtomicBool,
}

struct RacingBus(Arc<Racing>);

impl Bus for RacingBus {
    fn call(&self, _ctx: RequestCtx, command: Command) -> BusFuture {
        let done = self.0.committed.load(Ordering::SeqCst);
        let pending: Vec<(String, i32)> = if done {
            Vec::new()
        } else {
            vec![("t".into(), 0)]
        };
        let out = match command {
            Command::KafkaGroups(KafkaGroupsReq::Fetch { .. }) => {
                self.0.committed.store(true, Ordering::SeqCst);
                Ok(Outcome::KafkaGroups(KafkaGroupsOutcome::Fetched(vec![
                    KafkaCommitted {
                        topic: "t".into(),
                        partition: 0,
                        offset: if done { 5 } else { 3 },
                        leader_epoch: -1,
                        metadata: String::new(),
                        commit_time_us: 0,
                    },
                ])))
            }
            Command::Read(ReadReq::KafkaTxns(KafkaTxnRead::GroupPending { .. })) => Ok(
                Outcome::Read(ReadAnswer::KafkaTxns(KafkaTxnReadAnswer::GroupPending {
                    pairs: pending,
                    complete: true,
                })),
            ),
            Command::Read(ReadReq::KafkaTxns(KafkaTxnRead::PendingOffsets {
                partitions, ..
            })) => Ok(Outcome::Read(ReadAnswer::KafkaTxns(
                KafkaTxnReadAnswer::Pending(
                    partitions.iter().map(|p| pending.contains(p)).collect(),
                ),
            ))),
            other => Err(QueenError::new(
                ErrorCode::Internal,
                format!("the stub does not answer {other:?}"),
            )),
        };
        Box::pin(async move { out })
    }
}

#[tokio::test]
async fn with_every_partition_asked_a_commit_after_the_read_never_shows_the_old_offset_stable() {
    let door = crate::test_door::over(Arc::new(RacingBus(Arc::new(Racing::default()))));
    let (code, topics) = fetch_group_stable(&door, "g", &None, true).await;
    assert_eq!(code, e::NONE);
    assert_eq!(topics.len(), 1);
    let (topic, parts) = &topics[0];
    assert_eq!(topic, "t");
    let (index, committed, code) = &parts[0];
    assert_eq!(*index, 0);
    assert!(
        *code == e::UNSTABLE_OFFSET_COMMIT && committed.is_none(),
        "offset 3 was read while 5 was pending: it must not be shown stable ({code}, {committed:?})"
    );
}

#[tokio::test]
async fn with_partitions_asked_the_check_comes_first_too() {
    let door = crate::test_door::over(Arc::new(RacingBus(Arc::new(Racing::default()))));
    let asked = Some(vec![("t".to_string(), vec![0])]);
    let (code, topics) = fetch_group_stable(&door, "g", &asked, true).await;
    assert_eq!(code, e::NONE);
    assert_eq!(topics[0].1[0].2, e::UNSTABLE_OFFSET_COMMIT);
}

/// Group "g" has 100 000 partitions pending on topics of 200-byte names (20 MB of names)
/// and no committed offset; the offsets' read reports what the door holds meanwhile.
struct ManyPending {
    held_while_reading: std::sync::Mutex<Option<usize>>,
    room: Arc<crate::answer_room::AnswerRoom>,
}

struct ManyPendingBus(Arc<ManyPending>);

impl Bus for ManyPendingBus {
    fn call(&self, _ctx: RequestCtx, command: Command) -> BusFuture {
        let out = match command {
            Command::KafkaGroups(KafkaGroupsReq::Fetch { .. }) => {
                if let Ok(mut seen) = self.0.held_while_reading.lock() {
                    *seen = Some(self.0.room.free());
                }
                Ok(Outcome::KafkaGroups(KafkaGroupsOutcome::Fetched(vec![])))
            }
            Command::Read(ReadReq::KafkaTxns(KafkaTxnRead::GroupPending { .. })) => {
                let topic = "p".repeat(200);
                Ok(Outcome::Read(ReadAnswer::KafkaTxns(
                    KafkaTxnReadAnswer::GroupPending {
                        pairs: (0..100_000).map(|i| (topic.clone(), i)).collect(),
                        complete: true,
                    },
                )))
            }
            other => Err(QueenError::new(
                ErrorCode::Internal,
                format!("the stub does not answer {other:?}"),
            )),
        };
        Box::pin(async move { out })
    }
}

/// Review s18 kafka H1: a whole group's pending set is held across the offsets' read, so
/// its room is taken first; without room the group is refused retriably before the read.
#[tokio::test]
async fn a_groups_pending_set_holds_its_room_across_the_read_and_is_refused_without_it() {
    const ROOM: usize = 64 << 20;
    let room = crate::answer_room::AnswerRoom::new(ROOM);
    let state = Arc::new(ManyPending {
        held_while_reading: std::sync::Mutex::new(None),
        room: room.clone(),
    });
    let mut door = crate::test_door::over(Arc::new(ManyPendingBus(state.clone())));
    door.answers = room.clone();
    let (code, _) = fetch_group_stable(&door, "g", &None, true).await;
    assert_eq!(code, e::NONE);
    let free = state.held_while_reading.lock().ok().and_then(|s| *s);
    let held = ROOM - free.expect("the offsets were read");
    assert!(held >= 100_000 * 200, "the names are held: {held}");
    assert_eq!(room.free(), ROOM, "given back after the fetch");

    let busy = room.take(ROOM - held / 2).expect("room");
    *state.held_while_reading.lock().expect("lock") = None;
    let (code, topics) = fetch_group_stable(&door, "g", &None, true).await;
    assert_eq!(code, e::COORDINATOR_LOAD_IN_PROGRESS);
    assert!(topics.is_empty());
    assert!(
        state.held_while_reading.lock().expect("lock").is_none(),
        "refused before the offsets are read"
    );
    drop(busy);
    assert_eq!(room.free(), ROOM);
}

/// The engine refuses group "g"'s pending set whole (past its cycle's grant); the offsets'
/// read records that it ran.
struct RefusedBus(Arc<AtomicBool>);

impl Bus for RefusedBus {
    fn call(&self, _ctx: RequestCtx, command: Command) -> BusFuture {
        let out = match command {
            Command::KafkaGroups(KafkaGroupsReq::Fetch { .. }) => {
                self.0.store(true, Ordering::SeqCst);
                Ok(Outcome::KafkaGroups(KafkaGroupsOutcome::Fetched(vec![])))
            }
            Command::Read(ReadReq::KafkaTxns(KafkaTxnRead::GroupPending { .. })) => {
                Ok(Outcome::Read(ReadAnswer::KafkaTxns(
                    KafkaTxnReadAnswer::GroupPendingOverBudget,
                )))
            }
            other => Err(QueenError::new(
                ErrorCode::Internal,
                format!("the stub does not answer {other:?}"),
            )),
        };
        Box::pin(async move { out })
    }
}

/// Review s19 kafka H1: a pending set the engine refused whole is answered retriably for
/// the group, before the offsets are read.
#[tokio::test]
async fn a_pending_set_refused_by_the_engine_is_retriable_for_the_group() {
    let read = Arc::new(AtomicBool::new(false));
    let door = crate::test_door::over(Arc::new(RefusedBus(read.clone())));
    let (code, topics) = fetch_group_stable(&door, "g", &None, true).await;
    assert_eq!(code, e::COORDINATOR_LOAD_IN_PROGRESS);
    assert!(topics.is_empty());
    assert!(!read.load(Ordering::SeqCst), "refused before the offsets");
}
