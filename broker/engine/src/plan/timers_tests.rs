//! Timers on the fixture: schedule, cancel and the fire, each ending with the replay check
//! (a follower and a checkpoint reach the leader's state).

use bytes::Bytes;
use queenmq_protocol::{
    ErrorCode, TimerOp, TimerSchedule, TimerStatus, TimersReq, MAX_TIMER_DELAY_MS,
};

use super::fixture::{Fixture, SECOND};

const MS: i64 = 1000;

fn schedule(queue: &str, key: &str, delay_ms: i64, payload: &str) -> TimerOp {
    TimerOp::Schedule(TimerSchedule {
        queue: queue.into(),
        key: key.into(),
        partition: "Default".into(),
        payload: Bytes::copy_from_slice(payload.as_bytes()),
        delay_ms,
        txn: format!("txn-{key}-{payload}"),
    })
}

fn cancel(queue: &str, key: &str) -> TimerOp {
    TimerOp::Cancel {
        queue: queue.into(),
        key: key.into(),
        txn: None,
    }
}

fn plan(fx: &mut Fixture, ops: Vec<TimerOp>) -> Vec<TimerStatus> {
    match fx.planner().plan_timers(&TimersReq { ops }) {
        Ok(r) => r.iter().map(|r| r.status).collect(),
        Err(e) => panic!("timers refused: {}", e.message),
    }
}

fn fire(fx: &mut Fixture) -> usize {
    fx.planner().fire_timers(256, 4 << 20, 4 << 20)
}

#[test]
fn a_schedule_is_an_upsert_and_a_cancel_removes_it_once() {
    let mut fx = Fixture::new();
    assert_eq!(
        plan(&mut fx, vec![schedule("q", "k", 60_000, "1")]),
        [TimerStatus::Scheduled]
    );
    assert_eq!(
        plan(&mut fx, vec![schedule("q", "k", 500, "2")]),
        [TimerStatus::Rescheduled]
    );
    assert_eq!(fx.st.timers.len(), 1);
    assert_eq!(
        fx.st.timers.get("q", "k").map(|r| r.payload.clone()),
        Some(b"2".to_vec())
    );
    assert_eq!(
        plan(&mut fx, vec![cancel("q", "k")]),
        [TimerStatus::Cancelled]
    );
    assert_eq!(plan(&mut fx, vec![cancel("q", "k")]), [TimerStatus::Absent]);
    assert!(fx.st.timers.is_empty());
    fx.assert_replays();
}

#[test]
fn a_due_timer_fires_once_as_a_push_in_the_same_entry_as_its_removal() {
    let mut fx = Fixture::new();
    let r = fx
        .planner()
        .plan_timers(&TimersReq {
            ops: vec![schedule("q", "k", 500, "{\"a\":1}")],
        })
        .expect("scheduled");
    fx.advance(100 * MS);
    assert_eq!(fire(&mut fx), 0, "not due yet");
    fx.advance(SECOND);
    assert_eq!(fire(&mut fx), 1);
    let index = fx.commit().expect("the fire is an entry");
    assert!(fx.st.timers.is_empty());
    let entry = fx.log.entries.get(&index).expect("committed");
    let (_, effects) = crate::entry::decode_entry(entry).expect("decodes");
    let kinds: Vec<_> = effects
        .iter()
        .map(|(e, _)| std::mem::discriminant(e))
        .collect();
    assert!(effects
        .iter()
        .any(|(e, _)| matches!(e, crate::entry::Effect::Append { .. })));
    assert!(effects
        .iter()
        .any(|(e, _)| matches!(e, crate::entry::Effect::TimerDelete { .. })));
    assert!(kinds.len() >= 3, "queue, partition, append and delete");
    assert_eq!(fire(&mut fx), 0, "a fired timer is gone");
    let got = fx.pop("q", None, 10, None);
    assert_eq!(got.messages.len(), 1);
    let m = &got.messages[0];
    assert_eq!(&m.payload[..], b"{\"a\":1}");
    assert_eq!(m.transaction_id, "txn-k-{\"a\":1}");
    assert_eq!(Some(m.id.clone()), r[0].message_id, "the promised id");
    fx.assert_replays();
}

#[test]
fn a_past_delay_fires_on_the_next_cycle_and_the_fire_is_bounded() {
    let mut fx = Fixture::new();
    let ops = (0..5)
        .map(|i| schedule("q", &format!("k{i}"), -10_000, "0"))
        .collect();
    plan(&mut fx, ops);
    fx.advance(MS);
    assert_eq!(fx.planner().fire_timers(2, 4 << 20, 4 << 20), 2);
    assert_eq!(fx.st.timers.len(), 3);
    fx.advance(MS);
    assert_eq!(
        fx.planner().fire_timers(10, 0, 0),
        0,
        "no room in the entry"
    );
    assert_eq!(fire(&mut fx), 3);
    fx.assert_replays();
}

#[test]
fn one_key_twice_in_a_call_and_a_delay_past_the_horizon_are_refused_whole() {
    let mut fx = Fixture::new();
    let twice = fx.planner().plan_timers(&TimersReq {
        ops: vec![schedule("q", "a", 1, "1"), cancel("q", "a")],
    });
    assert_eq!(twice.map_err(|e| e.code).err(), Some(ErrorCode::BadRequest));
    let far = fx.planner().plan_timers(&TimersReq {
        ops: vec![
            schedule("q", "b", 1, "1"),
            schedule("q", "c", MAX_TIMER_DELAY_MS + 1, "1"),
        ],
    });
    assert_eq!(far.map_err(|e| e.code).err(), Some(ErrorCode::Forbidden));
    assert!(
        fx.st.timers.is_empty(),
        "nothing of a refused call is applied"
    );
    assert!(fx.cycle.entry.is_empty());
}

#[test]
fn a_fire_after_a_restart_reads_the_timer_from_the_replayed_log() {
    let mut fx = Fixture::new();
    plan(&mut fx, vec![schedule("q", "k", 1000, "7")]);
    fx.advance(2 * SECOND);
    fx.rebuild();
    assert_eq!(fire(&mut fx), 1);
    fx.commit();
    fx.rebuild();
    assert_eq!(fire(&mut fx), 0, "fired once, also after the restart");
    assert_eq!(fx.pop("q", None, 10, None).messages.len(), 1);
    fx.assert_replays();
}

#[test]
fn a_timer_rider_is_applied_with_its_bundle_and_answered_after_its_results() {
    use queenmq_protocol::{TxnOp, TxnOpResult, TxnReq};
    let mut fx = Fixture::new();
    plan(&mut fx, vec![schedule("q", "old", 60_000, "1")]);
    let req = TxnReq {
        ops: vec![TxnOp::Push(vec![super::fixture::item("q", "p", "m1")])],
        timers: vec![schedule("q", "new", 500, "2"), cancel("q", "old")],
        ..Default::default()
    };
    let r = fx
        .planner()
        .plan_transaction(&req, None)
        .expect("committed");
    let kinds: Vec<_> = r
        .results
        .iter()
        .map(|r| match r {
            TxnOpResult::Push(_) => "push",
            TxnOpResult::Ack(_) => "ack",
            TxnOpResult::Timer(t) => t.status.as_str(),
            TxnOpResult::Kv(_) => "kv",
        })
        .collect();
    assert_eq!(kinds, ["push", "scheduled", "cancelled"]);
    assert!(fx.st.timers.get("q", "new").is_some());
    assert!(fx.st.timers.get("q", "old").is_none());
    fx.assert_replays();
}

#[test]
fn a_refused_bundle_schedules_nothing() {
    use queenmq_protocol::{AckItem, AckStatus, TxnOp, TxnReq};
    let mut fx = Fixture::new();
    let req = TxnReq {
        ops: vec![TxnOp::Ack(AckItem {
            transaction_id: "nobody".into(),
            partition_id: "999".into(),
            status: AckStatus::Completed,
            error: None,
            lease_id: None,
            group: None,
        })],
        timers: vec![schedule("q", "k", 500, "1")],
        ..Default::default()
    };
    assert!(fx.planner().plan_transaction(&req, None).is_err());
    assert!(fx.st.timers.is_empty());
    assert!(fx.cycle.entry.is_empty());
    let timer_only = TxnReq {
        timers: vec![schedule("q", "k", 500, "1")],
        ..Default::default()
    };
    assert!(fx.planner().plan_transaction(&timer_only, None).is_ok());
    assert_eq!(fx.st.timers.len(), 1);
    fx.assert_replays();
}

/// A budget that refuses every write that grows the state.
struct Pressed;

impl crate::plan::MemoryGate for Pressed {
    fn pressed(&self) -> bool {
        true
    }
    fn refusal(&self) -> queenmq_protocol::QueenError {
        queenmq_protocol::QueenError::unavailable("memory")
    }
    fn answer_room(&self) -> usize {
        usize::MAX
    }
}

#[test]
fn due_timers_still_fire_under_memory_pressure_a_few_per_cycle() {
    let mut fx = Fixture::new();
    let ops = (0..40)
        .map(|i| schedule("q", &format!("k{i}"), 10, "0"))
        .collect();
    plan(&mut fx, ops);
    fx.commit();
    fx.advance(SECOND);
    fx.commit();
    let mut planner = fx.planner();
    planner.memory = Some(&Pressed);
    let fired = planner.fire_timers(256, 4 << 20, 4 << 20);
    assert!(fired > 0, "pressure froze the timers");
    assert!(fired < 40, "pressure did not slow the fires");
    fx.commit();
    fx.assert_replays();
}

#[test]
fn a_timer_larger_than_the_cycle_cap_fires_alone_and_does_not_block_the_rest() {
    let mut fx = Fixture::new();
    let big = "x".repeat(8 << 10);
    plan(
        &mut fx,
        vec![
            schedule("q", "a", 10, &big),
            schedule("q", "b", 20, &big),
            schedule("q", "c", 30, "0"),
        ],
    );
    fx.commit();
    fx.advance(SECOND);
    for left in [2, 1, 0] {
        assert_eq!(fx.planner().fire_timers(256, 1 << 10, 1 << 20), 1);
        fx.commit();
        assert_eq!(fx.st.timers.len(), left);
    }
    assert_eq!(fx.pop("q", None, 10, None).messages.len(), 3);
    fx.assert_replays();
}

#[test]
fn the_fire_bound_covers_what_a_fire_really_writes() {
    let mut fx = Fixture::new();
    let key = "k".repeat(queenmq_protocol::MAX_TIMER_KEY_BYTES);
    let op = TimerOp::Schedule(TimerSchedule {
        queue: "q".repeat(100),
        key: key.clone(),
        partition: "p".repeat(100),
        payload: Bytes::from_static(b"1"),
        delay_ms: 10,
        txn: "t".repeat(200),
    });
    plan(&mut fx, vec![op]);
    fx.commit();
    fx.advance(SECOND);
    assert_eq!(fx.planner().fire_timers(256, 4 << 20, 4 << 20), 1);
    let bound = super::timers::fire_bound(
        &"q".repeat(100),
        &key,
        &"p".repeat(100),
        &"t".repeat(200),
        1,
    );
    assert!(
        fx.cycle.entry.len() <= bound,
        "a fire wrote {} bytes, its bound is {bound}",
        fx.cycle.entry.len()
    );
    fx.commit();
    fx.assert_replays();
}

#[test]
fn a_quota_refusal_is_forbidden_not_a_retriable_unavailable() {
    let mut fx = Fixture::new();
    let payload = Bytes::from(vec![b'1'; queenmq_protocol::MAX_TIMER_PAYLOAD_BYTES]);
    let n = (queenmq_protocol::MAX_TIMER_BYTES_PER_TENANT / payload.len()) + 1;
    let ops: Vec<TimerOp> = (0..n)
        .map(|i| {
            TimerOp::Schedule(TimerSchedule {
                queue: "q".into(),
                key: format!("k{i}"),
                partition: "Default".into(),
                payload: payload.clone(),
                delay_ms: 60_000,
                txn: format!("t{i}"),
            })
        })
        .collect();
    let e = fx.planner().check_timers(&ops).expect_err("over the quota");
    assert_eq!(e.code, ErrorCode::Forbidden);
    assert!(e
        .message
        .starts_with(queenmq_protocol::TIMERS_QUOTA_REFUSAL));
}

#[test]
fn a_delay_far_in_the_past_is_due_now() {
    let mut fx = Fixture::new();
    plan(
        &mut fx,
        vec![schedule("q", "k", -MAX_TIMER_DELAY_MS - 1, "1")],
    );
    let row = fx.st.timers.get("q", "k").map(|r| r.deliver_at_us);
    assert!(row.is_some_and(|at| at >= super::fixture::NOW));
    fx.advance(MS);
    assert_eq!(fire(&mut fx), 1);
    fx.commit();
    fx.assert_replays();
}

#[test]
fn a_rider_past_the_horizon_is_refused_as_forbidden_not_rolled_back() {
    use queenmq_protocol::TxnReq;
    let mut fx = Fixture::new();
    let req = TxnReq {
        timers: vec![schedule("q", "k", MAX_TIMER_DELAY_MS + 1, "1")],
        ..Default::default()
    };
    let e = fx.planner().plan_transaction(&req, None).err();
    assert_eq!(e.map(|e| e.code), Some(ErrorCode::Forbidden));
    assert!(fx.cycle.entry.is_empty());
}
