//! A node stopping, and parked polls, while the engine waits for an entry past the write
//! limit (review s20 lead B1 and B2): the wait's three behaviours beside the refusal of new
//! requests that supervise_tests.rs checks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use queenmq_protocol::{
    Bus, Command, ErrorCode, Outcome, PopReq, PopSource, PushItem, PushReq, Subscription,
};

use super::registry_tests::{ctx, open_with, push};
use super::supervise_tests::{armed_slow_group, stuck_after_a_late_push};
use crate::engine::{EngineBus, EngineConfig};

fn push_to(queue: &str, txn: &str) -> Command {
    Command::Push(PushReq {
        items: vec![PushItem {
            queue: queue.into(),
            partition: "p".into(),
            payload: bytes::Bytes::from(format!("\"{txn}\"")),
            transaction_id: Some(txn.into()),
            trace_id: None,
        }],
    })
}

fn pop(queue: &str, group: &str, wait: bool) -> Command {
    Command::Pop(PopReq {
        source: PopSource::Queue(queue.into()),
        group: Some(group.into()),
        batch: 10_000,
        partitions: 1,
        wait,
        timeout_ms: if wait { 60_000 } else { 0 },
        auto_ack: true,
        subscription: Subscription::All,
        lease_seconds: None,
        autopilot: false,
        conflation: false,
        parked_echo: Default::default(),
    })
}

/// Every message of queue `q` as popped by a fresh group, repeats kept.
async fn held(bus: &EngineBus) -> Vec<String> {
    match bus.call(ctx("a"), pop("q", "audit", false)).await {
        Ok(Outcome::Popped(r)) => r.messages.into_iter().map(|m| m.transaction_id).collect(),
        other => panic!("a pop answered {:?}", other.err()),
    }
}

/// B2: a stop during the late wait is no failure: the slot says the node is stopping (not
/// "being rebuilt"), no incarnation is started. B1: no final checkpoint is written over the
/// state planned ahead of the log: the restart holds what the log holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_the_late_wait_ends_the_group_without_a_rebuild_or_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (groups, bus, incarnations) =
        stuck_after_a_late_push(dir.path(), Duration::from_secs(5)).await;
    let opened = incarnations.load(Ordering::SeqCst);
    let group = groups.get("a").unwrap();
    groups.stop_all(Duration::from_secs(10)).await;
    match group.live.get_or_down() {
        Err(down) => assert!(
            down.why.contains("stopping") && !down.why.contains("rebuilt"),
            "{}",
            down.why
        ),
        Ok(_) => panic!("the group still serves after the stop"),
    }
    assert_eq!(incarnations.load(Ordering::SeqCst), opened);
    drop((group, bus, groups));

    let groups = open_with(dir.path(), HashMap::new(), EngineConfig::default()).await;
    let bus = EngineBus::new(groups.clone(), Arc::new(String::new));
    let held = held(&bus).await;
    // The held proposal was never written (its future is never polled past the hold): a
    // final checkpoint of the planned state would bring t-0 back without its record.
    assert!(held.is_empty(), "{held:?}");
    groups.stop_all(Duration::from_secs(10)).await;
}

/// B1: a long poll parked before the late cycle is answered (empty) when the wait begins, not
/// at its own 60 s timeout nor by a rebuild: the engine still refuses new requests after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_poll_is_answered_when_the_late_wait_begins() {
    let dir = tempfile::tempdir().unwrap();
    let armed = Arc::new(AtomicBool::new(false));
    let (groups, bus, _) = armed_slow_group(
        dir.path(),
        Duration::from_secs(3_600),
        Duration::from_millis(300),
        armed.clone(),
    )
    .await;
    // The poll's group has taken what `q` held, so its next poll parks.
    push(&bus, "a", "t-warm").await.unwrap();
    bus.call(ctx("a"), pop("q", "g", false)).await.unwrap();
    let polling = bus.clone();
    let parked = tokio::spawn(async move { polling.call(ctx("a"), pop("q", "g", true)).await });
    // A poll is parked once the engine has taken it: give the engine its cycle.
    tokio::time::sleep(Duration::from_millis(200)).await;
    armed.store(true, Ordering::SeqCst);
    // To another queue, so nothing in the late cycle is for the parked poll.
    let late = bus
        .call(ctx("a"), push_to("other", "t-0"))
        .await
        .unwrap_err();
    assert!(
        late.message.contains("may or may not be done"),
        "{}",
        late.message
    );
    let answered = tokio::time::timeout(Duration::from_secs(30), parked)
        .await
        .expect("the parked poll was not answered by the late wait")
        .unwrap();
    match answered {
        Ok(Outcome::Popped(r)) => assert!(r.messages.is_empty(), "{:?}", r.messages.len()),
        Err(e) => assert_eq!(e.code, ErrorCode::Unavailable, "{}", e.message),
        Ok(_) => panic!("a pop answered something else"),
    }
    // Still inside the wait (the entry never lands): the poll was answered by it.
    let refused = push(&bus, "a", "t-1").await.unwrap_err();
    assert!(
        refused
            .message
            .contains("waits for a write that did not commit"),
        "{}",
        refused.message
    );
    groups.stop_all(Duration::from_secs(10)).await;
}
