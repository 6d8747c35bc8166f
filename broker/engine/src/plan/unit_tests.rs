//! Each planner on the fixture: push, pop, ack, extend, transaction and admin. Every test ends
//! by checking that a follower and a checkpoint reach the leader's state.

use queenmq_protocol::{
    AckStatus, ConfigureReq, PopResult, PushStatus, Setting, TxnOp, TxnOpResult, TxnReq,
};

use super::fixture::{ack_items, item, opts, pop_req, Fixture, SECOND};
use super::PopPlan;
use crate::state::config::IMPLICIT_LEASE_SECONDS;

#[test]
fn a_push_creates_its_queue_and_partition_and_numbers_messages_in_order() {
    let mut fx = Fixture::new();
    let r = fx.push("q", "p", 3);
    let offsets: Vec<u64> = r.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, vec![0, 1, 2]);
    assert!(r.iter().all(|r| r.status == PushStatus::Queued));
    let q = fx.st.queue_named("q").expect("created by the push");
    assert!(!q.configured, "a push-created queue is not configured");
    assert_eq!(q.config.lease_time, IMPLICIT_LEASE_SECONDS);
    assert_eq!(q.counters.pushed, 3);
    let pid = r[0].partition_id;
    assert_eq!(fx.st.partitions.get(&pid).map(|p| p.next_offset), Some(3));
    fx.assert_replays();
}

#[test]
fn a_repeated_transaction_id_is_a_duplicate_of_the_first_message() {
    let mut fx = Fixture::new();
    let first = fx
        .planner()
        .plan_push(&[item("q", "p", "same")], None)
        .expect("pushed");
    fx.advance(SECOND);
    let again = fx
        .planner()
        .plan_push(&[item("q", "p", "same"), item("q", "p", "other")], None)
        .expect("answered per item");
    assert_eq!(again[0].status, PushStatus::Duplicate);
    assert_eq!(again[0].offset, first[0].offset);
    assert_eq!(again[0].message_id, first[0].message_id);
    assert_eq!((again[1].status, again[1].offset), (PushStatus::Queued, 1));
    fx.assert_replays();
}

#[test]
fn a_pop_delivers_in_offset_order_up_to_its_batch_under_one_lease() {
    let mut fx = Fixture::new();
    fx.push("q", "p", 5);
    fx.commit();
    let got = fx.pop("q", None, 3, None);
    let offsets: Vec<u64> = got.messages.iter().map(|m| m.offset).collect();
    assert_eq!(offsets, vec![0, 1, 2]);
    assert!(!got.lease_id.is_empty());
    assert!(got.messages.iter().all(|m| m.delivery_attempt == 1));
    let row = fx.group("q", None).cursors[&got.messages[0].partition_id];
    assert_eq!(row.committed, 0, "nothing is committed before an ack");
    assert_eq!(row.lease.map(|l| l.end), Some(3));
    fx.assert_replays();
}

#[test]
fn a_live_lease_is_never_handed_twice_but_other_groups_read_the_same_messages() {
    let mut fx = Fixture::new();
    fx.push("q", "p", 2);
    fx.commit();
    let first = fx.pop("q", Some("g"), 10, Some(30));
    assert_eq!(first.messages.len(), 2);
    fx.advance(29 * SECOND);
    assert!(fx.pop("q", Some("g"), 10, None).messages.is_empty());
    fx.push("q", "p", 1);
    assert!(
        fx.pop("q", Some("g"), 10, None).messages.is_empty(),
        "the leased partition stays with its holder, new messages too"
    );
    let other = fx.pop("q", Some("h"), 10, None);
    assert_eq!(other.messages.len(), 3);
    assert_ne!(other.lease_id, first.lease_id);
    fx.assert_replays();
}

#[test]
fn a_dotted_queue_a_push_creates_carries_its_labels_in_the_entry() {
    let mut fx = Fixture::new();
    fx.push("Orders.Ship.eu", "p", 1);
    fx.push("plain", "p", 1);
    fx.commit();
    let q = fx
        .st
        .queue_named("Orders.Ship.eu")
        .expect("created by the push");
    assert_eq!((q.namespace.as_str(), q.task.as_str()), ("Orders", "Ship"));
    let q = fx.st.queue_named("plain").expect("created by the push");
    assert_eq!((q.namespace.as_str(), q.task.as_str()), ("", ""));
    assert_eq!(super::push::dotted_labels("a.b"), ("a", "b"));
    assert_eq!(super::push::dotted_labels("a."), ("a", ""));
    fx.assert_replays();
}

/// `n` messages pushed to queue "q" and a claim of up to `batch` of them (both committed).
fn claimed(n: usize, batch: u32) -> (Fixture, PopResult) {
    let mut fx = Fixture::new();
    fx.push("q", "p", n);
    fx.commit();
    let got = fx.pop("q", None, batch, None);
    fx.commit();
    (fx, got)
}

fn offsets(popped: &PopResult) -> Vec<u64> {
    popped.messages.iter().map(|m| m.offset).collect()
}

#[test]
fn a_completed_ack_commits_releases_and_lets_the_next_pop_continue() {
    let (mut fx, got) = claimed(4, 2);
    let acked = fx.ack(&got, AckStatus::Completed);
    assert!(acked.iter().all(|a| a.success), "{acked:?}");
    assert!(acked.last().is_some_and(|a| a.lease_released));
    assert!(fx.st.leases.is_empty());
    assert_eq!(offsets(&fx.pop("q", None, 10, None)), vec![2, 3]);
    assert_eq!(fx.st.queue_named("q").map(|q| q.counters.acked), Some(2));
    fx.assert_replays();
}

#[test]
fn a_batch_nack_of_a_whole_claim_succeeds_once_and_the_claim_comes_back() {
    let (mut fx, got) = claimed(3, 10);
    let nacked = fx.ack(&got, AckStatus::Failed);
    assert!(nacked.iter().all(|a| a.success), "{nacked:?}");
    let released: Vec<bool> = nacked.iter().map(|a| a.lease_released).collect();
    assert_eq!(
        released,
        vec![true, false, false],
        "the lease is released once"
    );
    fx.commit();
    let again = fx.pop("q", None, 10, None);
    assert_eq!(offsets(&again), vec![0, 1, 2]);
    let attempts: Vec<u32> = again.messages.iter().map(|m| m.delivery_attempt).collect();
    assert_eq!(attempts, vec![2, 2, 2]);
    fx.assert_replays();
}

#[test]
fn a_batch_nack_clamps_the_cursor_at_its_first_failure_and_refuses_a_later_completion() {
    let (mut fx, got) = claimed(4, 10);
    let mut items = ack_items(&got, AckStatus::Failed);
    items[0].status = AckStatus::Completed;
    items[3].status = AckStatus::Completed;
    let group = Some(got.consumer_group.clone());
    let r = fx.planner().plan_acks(&items, &group);
    let success: Vec<bool> = r.iter().map(|a| a.success).collect();
    assert_eq!(success, vec![true, true, true, false], "{r:?}");
    assert!(r[3]
        .error
        .as_ref()
        .is_some_and(|e| e.message.contains("not committed")));
    fx.commit();
    let again = fx.pop("q", None, 10, None);
    assert_eq!(
        offsets(&again),
        vec![1, 2, 3],
        "completed before the nack stays done"
    );
    fx.assert_replays();
}

#[test]
fn an_ack_under_another_lease_is_refused_and_changes_nothing() {
    let (mut fx, mut got) = claimed(1, 1);
    got.lease_id = uuid::Uuid::from_u128(7).to_string();
    let r = fx.ack(&got, AckStatus::Completed);
    assert!(!r[0].success);
    assert!(fx.cycle.entry.is_empty(), "nothing was emitted");
    fx.assert_replays();
}

#[test]
fn an_extend_renews_a_live_lease_from_now_and_not_an_expired_one() {
    let mut fx = Fixture::new();
    fx.push("q", "p", 1);
    fx.commit();
    let got = fx.pop("q", None, 1, Some(10));
    fx.advance(8 * SECOND);
    let (renewed, expires) = fx.planner().plan_extend(&got.lease_id);
    assert_eq!(renewed, 1);
    assert_eq!(expires, Some(fx.cycle.now_us + 10 * SECOND));
    fx.advance(9 * SECOND);
    assert!(
        fx.pop("q", None, 1, None).messages.is_empty(),
        "still leased"
    );
    fx.advance(2 * SECOND);
    assert_eq!(fx.planner().plan_extend(&got.lease_id), (0, None));
    fx.assert_replays();
}

/// A message of queue "in" popped (committed), and a bundle of `ops` built from it.
fn popped_in() -> (Fixture, PopResult) {
    let mut fx = Fixture::new();
    fx.push("in", "p", 1);
    fx.commit();
    let got = fx.pop("in", None, 1, None);
    fx.commit();
    (fx, got)
}

fn bundle(ops: Vec<TxnOp>) -> TxnReq {
    TxnReq {
        ops,
        required_leases: Vec::new(),
        ..Default::default()
    }
}

#[test]
fn a_transaction_acks_and_pushes_in_one_entry() {
    let (mut fx, got) = popped_in();
    let ack = ack_items(&got, AckStatus::Completed).remove(0);
    let req = bundle(vec![
        TxnOp::Ack(ack),
        TxnOp::Push(vec![item("out", "p", "result")]),
    ]);
    let r = fx.planner().plan_transaction(&req, None).expect("passes");
    assert!(matches!(&r.results[0], TxnOpResult::Ack(a) if a.success));
    assert!(matches!(&r.results[1], TxnOpResult::Push(p) if p.error.is_none()));
    assert_eq!(fx.commit(), Some(3), "one entry for the whole bundle");
    assert_eq!(fx.st.queue_named("in").map(|q| q.counters.acked), Some(1));
    assert_eq!(fx.pop("out", None, 1, None).messages.len(), 1);
    fx.assert_replays();
}

#[test]
fn a_transaction_with_one_bad_ack_writes_nothing_at_all() {
    let (mut fx, got) = popped_in();
    let mut ack = ack_items(&got, AckStatus::Completed).remove(0);
    ack.lease_id = Some(uuid::Uuid::from_u128(9).to_string());
    let req = bundle(vec![
        TxnOp::Push(vec![item("out", "p", "result")]),
        TxnOp::Ack(ack),
    ]);
    let e = fx
        .planner()
        .plan_transaction(&req, None)
        .expect_err("the ack's lease is not the live one");
    assert!(e.message.contains("operation 1"), "{}", e.message);
    assert!(fx.cycle.entry.is_empty(), "nothing was emitted");
    assert!(
        fx.st.queue_named("out").is_none(),
        "the push did not happen"
    );
    assert_eq!(fx.st.leases.len(), 1, "the lease is untouched");
    fx.assert_replays();
}

#[test]
fn configure_merges_options_and_refuses_a_bad_name_whole() {
    let mut fx = Fixture::new();
    fx.configure(
        "q",
        opts(|o| {
            o.lease_time = Some(Setting::Value(5));
            o.retry_limit = Some(Setting::Value(1));
        }),
    );
    fx.configure("q", opts(|o| o.retry_limit = Some(Setting::Value(2))));
    let q = fx.st.queue_named("q").expect("configured");
    assert!(q.configured);
    assert_eq!((q.config.lease_time, q.config.retry_limit), (5, 2));
    fx.commit();
    let bad = ConfigureReq {
        queue: "q\u{1}".into(),
        options: opts(|o| o.lease_time = Some(Setting::Value(9))),
        ..Default::default()
    };
    assert!(fx.planner().plan_configure(&bad).is_err());
    assert!(fx.cycle.entry.is_empty());
    // The queue's lease time is what a pop without its own lease gets.
    fx.push("q", "p", 1);
    fx.commit();
    fx.pop("q", None, 1, None);
    let row = fx
        .st
        .groups
        .values()
        .next()
        .unwrap()
        .cursors
        .values()
        .next()
        .copied();
    let lease = row.and_then(|r| r.lease).expect("leased");
    assert_eq!(lease.seconds, 5);
    assert_eq!(lease.expires_us, fx.cycle.now_us + 5 * SECOND);
    fx.assert_replays();
}

#[test]
fn deleting_a_queue_drops_its_partitions_groups_and_leases_and_a_push_makes_it_anew() {
    let mut fx = Fixture::new();
    fx.push("q", "p", 2);
    fx.push("keep", "p", 1);
    fx.commit();
    fx.pop("q", Some("g"), 1, None);
    fx.pop("keep", Some("g"), 1, None);
    fx.commit();
    let old = fx.st.queue_named("q").map(|q| q.id).unwrap();
    let out = fx.planner().plan_delete_queue("q");
    assert!(out.existed);
    assert!(fx.st.queue_named("q").is_none());
    assert_eq!(fx.st.partitions.len(), 1, "only keep's partition is left");
    assert_eq!(fx.st.groups.len(), 1);
    assert_eq!(fx.st.leases.len(), 1, "keep's lease is left");
    let again = fx.planner().plan_delete_queue("q");
    assert!(!again.existed);
    fx.commit();
    let r = fx.push("q", "p", 1);
    assert_eq!(r[0].offset, 0, "a new queue starts from nothing");
    assert_ne!(fx.st.queue_named("q").map(|q| q.id), Some(old));
    fx.assert_replays();
}

#[test]
fn an_empty_pop_of_an_unknown_queue_emits_nothing() {
    let mut fx = Fixture::new();
    let plan = fx.planner().plan_pop(&pop_req("nowhere", 1));
    assert!(matches!(plan, Ok(PopPlan::Empty(_))));
    assert!(fx.cycle.entry.is_empty());
    assert!(fx.st.groups.is_empty());
}

#[test]
fn a_strict_transaction_whose_ack_is_covered_is_a_replay_that_writes_nothing() {
    let (mut fx, got) = popped_in();
    let ack = ack_items(&got, AckStatus::Completed).remove(0);
    let req = TxnReq {
        strict_acks: true,
        ack_queue: Some("in".into()),
        ..bundle(vec![
            TxnOp::Ack(ack),
            TxnOp::Push(vec![item("out", "p", "result")]),
        ])
    };
    let first = fx.planner().plan_transaction(&req, None).expect("passes");
    assert!(!first.replayed);
    fx.commit();
    let again = fx
        .planner()
        .plan_transaction(&req, None)
        .expect("a replay is not an error");
    assert!(again.replayed && again.results.is_empty());
    assert!(fx.cycle.entry.is_empty(), "nothing was emitted");
    let elsewhere = TxnReq {
        ack_queue: Some("other".into()),
        ..req.clone()
    };
    let e = fx
        .planner()
        .plan_transaction(&elsewhere, None)
        .expect_err("the ack is not on the named queue");
    assert!(e.message.contains("is not of queue other"), "{}", e.message);
    assert_eq!(fx.pop("out", None, 10, None).messages.len(), 1);
    fx.commit();
    fx.assert_replays();
}
