//! Planner behaviour when the log cannot be read, and against hostile numbers.

use queenmq_protocol::{ErrorCode, PopReq, PopSource, Subscription};

use super::fixture::{item, Fixture, MemLog, NOW};
use super::{Planner, PopPlan};
use crate::entry::Effect;
use crate::state::config::QueueConfig;
use crate::state::{Loc, State};

/// Queue "q" (dedup window 3600 s) with partitions "a" (pid 1, empty) and "b" (pid 2, one
/// message with transaction id "dup" stored in log entry 5), over a log whose every read
/// fails, as a failing disk would.
fn fixture() -> Fixture {
    let mut st = State::default();
    let loc = Loc { index: 5, pos: 0 };
    st.seed_queue(1, "q", QueueConfig::default(), &[(1, "a"), (2, "b")], loc);
    st.apply(
        &Effect::Append {
            pid: 2,
            base_offset: 0,
            hashes: vec![xxhash_rust::xxh3::xxh3_64(b"dup")],
            frames: &[0; 64],
        },
        NOW,
        loc,
    );
    st.last_cycle = 1;
    // As if entries up to 5 were applied: a checkpoint holds its runs to that.
    st.applied = Some((5, 1));
    let log = MemLog {
        failing: true,
        ..MemLog::default()
    };
    Fixture::over(st, log)
}

fn pop(partitions: u32, lease_seconds: Option<u64>) -> PopReq {
    PopReq {
        source: PopSource::Queue("q".into()),
        group: None,
        batch: 10,
        partitions,
        wait: false,
        timeout_ms: 0,
        auto_ack: false,
        subscription: Subscription::All,
        lease_seconds,
        autopilot: false,
        conflation: false,
        parked_echo: Default::default(),
    }
}

#[test]
fn a_dedup_lookup_that_cannot_read_its_frame_refuses_the_push() {
    let mut fx = fixture();
    let mut p = fx.planner();
    let e = p
        .plan_push(&[item("q", "a", "fresh"), item("q", "b", "dup")], None)
        .expect_err("the push must not be accepted as new");
    assert_eq!(e.code, ErrorCode::Unavailable);
    assert!(fx.cycle.appended.is_empty(), "no message was written");
    assert_eq!(fx.st.partitions.get(&1).unwrap().next_offset, 0);
    assert_eq!(fx.st.partitions.get(&2).unwrap().next_offset, 1);
}

#[test]
fn a_pop_whose_second_read_fails_claims_nothing() {
    let mut fx = fixture();
    let mut p = fx.planner();
    // "a" gets a message in this cycle (readable); "b" holds the unreadable one.
    p.plan_push(&[item("q", "a", "fresh")], None).unwrap();
    let Err(e) = p.plan_pop(&pop(2, None)) else {
        panic!("the pop must fail");
    };
    assert_eq!(e.code, ErrorCode::Internal);
    assert!(fx.st.groups.is_empty(), "a failed pop registers no group");
    assert!(fx.st.queues[&1].groups.is_empty());
    assert!(fx.st.leases.is_empty(), "no lease nobody holds");
    assert_eq!(fx.st.next_group_id, 0);
}

#[test]
fn a_pop_of_an_existing_group_whose_read_fails_puts_its_partitions_back() {
    let mut fx = fixture();
    fx.st.apply(
        &Effect::GroupRegister {
            qid: 1,
            gid: 1,
            name: queenmq_protocol::QUEUE_MODE_GROUP,
            start_from_us: i64::MIN,
        },
        NOW,
        Loc { index: 5, pos: 0 },
    );
    let mut p = fx.planner();
    p.plan_push(&[item("q", "a", "fresh")], None).unwrap();
    assert!(p.plan_pop(&pop(2, None)).is_err());
    let g = &fx.st.groups[&1];
    assert!(g.cursors.is_empty(), "no claim was kept");
    assert!(fx.st.leases.is_empty());
    assert!(g.in_ready.contains(&1) && g.in_ready.contains(&2));
}

#[test]
fn a_refused_push_creates_no_queue_or_partition() {
    let mut fx = fixture();
    let mut p = fx.planner();
    let mut other = item("q", "x", "fresh");
    other.queue = "new-queue".into();
    assert!(p
        .plan_push(
            &[other, item("q", "new-part", "g"), item("q", "b", "dup")],
            None
        )
        .is_err());
    assert!(fx.cycle.entry.is_empty(), "nothing was emitted");
    assert_eq!(fx.st.queues.len(), 1);
    assert_eq!(fx.st.partitions.len(), 2);
    assert_eq!((fx.st.next_queue_id, fx.st.next_partition_id), (2, 3));
}

#[test]
fn a_push_creating_queues_and_partitions_gets_the_ids_it_planned() {
    let mut fx = fixture();
    let mut p = fx.planner();
    let mut items = Vec::new();
    for (q, part) in [
        ("n1", "a"),
        ("q", "c"),
        ("n2", "a"),
        ("n1", "b"),
        ("n1", "a"),
    ] {
        let mut i = item("q", part, &format!("{q}-{part}"));
        i.queue = q.into();
        items.push(i);
    }
    let r = p.plan_push(&items, None).unwrap();
    let pids: Vec<u64> = r.iter().map(|r| r.partition_id).collect();
    assert_eq!(pids, vec![3, 4, 5, 6, 3]);
    assert_eq!(r[4].status, queenmq_protocol::PushStatus::Duplicate);
    for r in &r {
        let part = fx.st.partitions.get(&r.partition_id).expect("created");
        assert_eq!(fx.st.queues[&part.queue()].name, r.queue);
    }
    assert_eq!(fx.st.queue_named("n1").map(|q| q.id), Some(2));
    assert_eq!(fx.st.queue_named("n2").map(|q| q.id), Some(3));
    assert_eq!(fx.st.partitions.get(&4).map(|p| p.next_offset), Some(1));
}

#[test]
fn a_huge_lease_saturates_instead_of_wrapping() {
    let mut fx = fixture();
    let mut p = fx.planner();
    p.plan_push(&[item("q", "a", "fresh")], None).unwrap();
    let mut req = pop(1, Some(10_000_000_000_000));
    req.source = PopSource::Partition("q".into(), "a".into());
    let Ok(PopPlan::Delivered(r)) = p.plan_pop(&req) else {
        panic!("the message is delivered");
    };
    assert_eq!(r.messages.len(), 1);
    let row = fx.st.groups.values().next().unwrap().cursors[&1];
    let lease = row.lease.expect("leased");
    assert_eq!(lease.seconds, u32::MAX);
    assert!(
        lease.expires_us > NOW,
        "the lease is live, not wrapped into the past"
    );
    // A second pop of the same group gets nothing while the lease lives.
    let mut p = fx.planner();
    assert!(matches!(p.plan_pop(&req), Ok(PopPlan::Empty(_))));
}

/// Queue "t" without dedup, message X pushed and delivered under a lease (all in the cycle's
/// pending entry, so readable although the log is not). The lease id and the partition id.
fn delivered_x(p: &mut Planner<'_>) -> (String, String) {
    p.emit(Effect::QueueUpsert {
        qid: 2,
        name: "t",
        namespace: "",
        task: "",
        configured: true,
        config: QueueConfig {
            dedup_window_seconds: 0,
            ..QueueConfig::default()
        },
    });
    let mut x = item("q", "p", "X");
    x.queue = "t".into();
    p.plan_push(&[x], None).unwrap();
    let mut req = pop(1, None);
    req.source = PopSource::Queue("t".into());
    let Ok(PopPlan::Delivered(r)) = p.plan_pop(&req) else {
        panic!("X is delivered");
    };
    (r.lease_id, r.messages[0].partition_id.to_string())
}

fn txn_ops(lease: &str, pid: &str, ack_first: bool) -> queenmq_protocol::TxnReq {
    use queenmq_protocol::{AckItem, AckStatus, TxnOp};
    let mut x = item("q", "p", "X");
    x.queue = "t".into();
    let ack = TxnOp::Ack(AckItem {
        transaction_id: "X".into(),
        partition_id: pid.into(),
        status: AckStatus::Completed,
        error: None,
        lease_id: Some(lease.into()),
        group: None,
    });
    let push = TxnOp::Push(vec![x]);
    queenmq_protocol::TxnReq {
        ops: if ack_first {
            vec![ack, push]
        } else {
            vec![push, ack]
        },
        required_leases: Vec::new(),
        ..Default::default()
    }
}

#[test]
fn a_transaction_ack_names_the_message_its_earlier_push_wrote_and_refuses_whole() {
    let mut fx = fixture();
    let mut p = fx.planner();
    let (lease, pid) = delivered_x(&mut p);
    let before = p.cycle.entry.len();
    let e = p
        .plan_transaction(&txn_ops(&lease, &pid, false), None)
        .expect_err("the ack names the new X, outside the lease");
    assert!(e.message.contains("operation 1"), "{}", e.message);
    assert_eq!(p.cycle.entry.len(), before, "nothing was emitted");
    let next = fx
        .st
        .queue_named("t")
        .and_then(|q| q.partition_order.get(0));
    assert_eq!(
        next.and_then(|pid| fx.st.partitions.get(&pid))
            .map(|p| p.next_offset),
        Some(1)
    );
}

#[test]
fn a_transaction_ack_before_a_push_of_the_same_id_acks_the_delivered_message() {
    let mut fx = fixture();
    let mut p = fx.planner();
    let (lease, pid) = delivered_x(&mut p);
    let r = p
        .plan_transaction(&txn_ops(&lease, &pid, true), None)
        .expect("both operations pass");
    let ok: Vec<bool> = r
        .results
        .iter()
        .map(|r| match r {
            queenmq_protocol::TxnOpResult::Ack(a) => a.success,
            queenmq_protocol::TxnOpResult::Timer(t) => t.status.ok(),
            queenmq_protocol::TxnOpResult::Push(p) => p.error.is_none(),
            queenmq_protocol::TxnOpResult::Kv(_) => false,
        })
        .collect();
    assert_eq!(ok, vec![true, true]);
    let pid: u64 = pid.parse().unwrap();
    let gid = fx
        .st
        .queue_named("t")
        .unwrap()
        .groups
        .values()
        .next()
        .copied()
        .unwrap();
    let row = fx.st.groups[&gid].cursors[&pid];
    assert_eq!(row.committed, 1, "the delivered X (offset 0) is committed");
    assert!(row.lease.is_none());
    assert_eq!(fx.st.partitions.get(&pid).unwrap().next_offset, 2);
}

#[test]
fn partitions_past_the_checkpoint_limit_are_refused_per_item() {
    use crate::state::{decode_state, encode_state, MAX_NEXT_PARTITION_ID};
    use queenmq_protocol::PushStatus;
    let mut fx = fixture();
    fx.st.next_partition_id = MAX_NEXT_PARTITION_ID - 1;
    let mut p = fx.planner();
    let mut other = item("q", "x", "elsewhere");
    other.queue = "new-queue".into();
    let r = p
        .plan_push(
            &[
                item("q", "last", "1"),
                item("q", "one-too-many", "2"),
                other,
                item("q", "a", "3"),
                item("q", "last", "4"),
            ],
            None,
        )
        .expect("refusals are per item");
    let status: Vec<PushStatus> = r.iter().map(|r| r.status).collect();
    use PushStatus::{Failed, Queued};
    assert_eq!(status, vec![Queued, Failed, Failed, Queued, Queued]);
    assert_eq!(r[0].partition_id, MAX_NEXT_PARTITION_ID - 1);
    assert_eq!(r[4].partition_id, MAX_NEXT_PARTITION_ID - 1);
    let why = r[1].error.as_ref().map_or("", |e| e.message.as_str());
    assert!(why.contains("no partition can be created"), "{why}");
    assert!(
        fx.st.queue_named("new-queue").is_none(),
        "no queue for a partition that cannot be"
    );
    assert_eq!(fx.st.next_partition_id, MAX_NEXT_PARTITION_ID);
    assert_eq!(fx.st.next_queue_id, 2);
    // The checkpoint of a state at the limit reads back (taken between cycles, as always:
    // a checkpoint refuses runs still being planned).
    fx.commit();
    let back = decode_state(&encode_state(&fx.st)).expect("the checkpoint is readable");
    assert_eq!(back.next_partition_id, MAX_NEXT_PARTITION_ID);
    let mut p = fx.planner();
    let r = p.plan_push(&[item("q", "later", "5")], None).unwrap();
    assert_eq!(r[0].status, PushStatus::Failed);
}

#[test]
fn a_transaction_creating_a_partition_past_the_limit_rolls_back_whole() {
    use queenmq_protocol::{TxnOp, TxnReq};
    let mut fx = fixture();
    fx.st.next_partition_id = crate::state::MAX_NEXT_PARTITION_ID;
    let mut p = fx.planner();
    let req = TxnReq {
        ops: vec![TxnOp::Push(vec![
            item("q", "a", "ok"),
            item("q", "new", "refused"),
        ])],
        ..Default::default()
    };
    let e = p.plan_transaction(&req, None).expect_err("rolled back");
    assert!(
        e.message.contains("no partition can be created"),
        "{}",
        e.message
    );
    assert!(fx.cycle.entry.is_empty(), "nothing was emitted");
    assert_eq!(fx.st.partitions.get(&1).map(|p| p.next_offset), Some(0));
}

/// Session 35: a partition's row holds its queue's id in 32 bits, so a checkpoint whose
/// queue of partitions has an id past that (never handed out: `MAX_NEXT_QUEUE_ID`) is refused
/// rather than read into a truncated id.
#[test]
fn a_checkpoint_with_partitions_in_a_queue_past_32_bits_is_refused() {
    use crate::state::{decode_state, encode_state};
    let fx = fixture();
    let blob = encode_state(&fx.st);
    decode_state(&blob).expect("queue 1 reads back");
    // Queue 1's record starts with its id, then its name "q" (u32 length, bytes).
    let mut record = 1u64.to_le_bytes().to_vec();
    record.extend_from_slice(&1u32.to_le_bytes());
    record.push(b'q');
    let at = blob
        .windows(record.len())
        .position(|w| w == record.as_slice())
        .expect("queue 1's record");
    let mut bad = blob.clone();
    bad[at..at + 8].copy_from_slice(&(1u64 << 32).to_le_bytes());
    let Err(e) = decode_state(&bad) else {
        panic!("a queue id past 32 bits with partitions must be refused");
    };
    assert!(e.to_string().contains("past 32 bits"), "{e}");
}

#[test]
fn queues_and_groups_past_their_limit_are_refused_and_apply_does_not_overflow() {
    use queenmq_protocol::{ConfigureReq, GroupAdminReq};
    let mut fx = fixture();
    // Queue ids stop at 2^32 (session 35: a partition's row holds its queue's id in 32 bits).
    fx.st.next_queue_id = crate::state::MAX_NEXT_QUEUE_ID;
    fx.st.next_group_id = u64::MAX;
    let mut p = fx.planner();
    let configure = |queue: &str| ConfigureReq {
        queue: queue.into(),
        namespace: None,
        task: None,
        options: Default::default(),
        replace: false,
    };
    let e = p
        .plan_configure(&configure("fresh"))
        .expect_err("no queue id left");
    assert!(
        e.message.contains("no queue can be created"),
        "{}",
        e.message
    );
    p.plan_configure(&configure("q"))
        .expect("an existing queue is still configured");
    let mut fresh = item("q", "x", "y");
    fresh.queue = "fresh".into();
    let r = p.plan_push(&[fresh, item("q", "a", "z")], None).unwrap();
    assert_eq!(r[0].status, queenmq_protocol::PushStatus::Failed);
    assert_eq!(r[1].status, queenmq_protocol::PushStatus::Queued);
    let Err(e) = p.plan_pop(&pop(1, None)) else {
        panic!("a new group needs an id");
    };
    assert!(e.message.contains("no consumer group"), "{}", e.message);
    assert!(p.st.groups.is_empty(), "no stand-in is left behind");
    // Apply at the edge: no overflow, and no group row a checkpoint would misread (taken
    // between cycles, as always).
    fx.commit();
    let loc = Loc { index: 6, pos: 0 };
    fx.st.apply(
        &Effect::GroupRegister {
            qid: 1,
            gid: u64::MAX,
            name: "g",
            start_from_us: 0,
        },
        NOW,
        loc,
    );
    assert!(fx.st.groups.is_empty());
    fx.st.apply(
        &Effect::QueueUpsert {
            qid: u64::MAX,
            name: "edge",
            namespace: "",
            task: "",
            configured: true,
            config: QueueConfig::default(),
        },
        NOW,
        loc,
    );
    // Skipped (review s35 p M): kept, a push to "edge" was answered Queued with no
    // partition to hold it.
    assert!(!fx.st.queues.contains_key(&u64::MAX));
    assert_eq!(fx.st.next_queue_id, crate::state::MAX_NEXT_QUEUE_ID);
    fx.st.apply(
        &Effect::PartitionCreate {
            qid: u64::MAX,
            pid: u64::MAX,
            name: "p",
        },
        NOW,
        loc,
    );
    assert_eq!(fx.st.next_partition_id, 3);
    // A partition of a queue past 32 bits (an older build's log) is skipped alike, its id
    // within limits: the row could not hold its queue.
    fx.st.apply(
        &Effect::PartitionCreate {
            qid: u64::MAX,
            pid: 3,
            name: "p",
        },
        NOW,
        loc,
    );
    assert_eq!(fx.st.next_partition_id, 3);
    assert!(fx.st.partitions.get(&3).is_none());
    crate::state::decode_state(&crate::state::encode_state(&fx.st)).expect("readable");
    // Re-subscribing renews every group under a new id: refused before deleting any.
    fx.st.next_group_id = 1;
    fx.st.apply(
        &Effect::GroupRegister {
            qid: 1,
            gid: 1,
            name: "g",
            start_from_us: 0,
        },
        NOW,
        loc,
    );
    fx.st.next_group_id = u64::MAX;
    let mut p = fx.planner();
    let req = GroupAdminReq::Subscription {
        group: "g".into(),
        timestamp_us: NOW,
    };
    assert!(p.plan_group_admin(&req).is_err());
    assert!(fx.st.groups.contains_key(&1), "the group was not deleted");
}

/// The id limit's edge, where the `u32` the creation order holds would truncate: 2^32 and
/// just past it are skipped whole (2^32 kept as id 0 would make `changed`, depth and queue
/// delete address partition 0 and orphan the queue's own), and 2^32 - 1 is kept whole.
#[test]
fn a_partition_create_at_or_past_2_pow_32_is_skipped_and_just_below_is_kept() {
    let mut fx = fixture();
    fx.commit();
    let loc = Loc { index: 6, pos: 0 };
    let order = |st: &State| st.queues[&1].partition_order.iter().collect::<Vec<u64>>();
    let before = order(&fx.st);
    for pid in [1 << 32, (1 << 32) + 5] {
        fx.st.apply(
            &Effect::PartitionCreate {
                qid: 1,
                pid,
                name: "edge",
            },
            NOW,
            loc,
        );
        assert_eq!(order(&fx.st), before, "pid {pid}");
        assert!(fx.st.partitions.get(&pid).is_none(), "pid {pid}");
        assert!(
            fx.st.partitions.get(&(pid % (1 << 32))).is_none(),
            "pid {pid}"
        );
        assert_eq!(fx.st.next_partition_id, 3, "pid {pid}");
    }
    let top = crate::state::MAX_NEXT_PARTITION_ID - 1;
    fx.st.apply(
        &Effect::PartitionCreate {
            qid: 1,
            pid: top,
            name: "top",
        },
        NOW,
        loc,
    );
    assert_eq!(order(&fx.st).last(), Some(&top));
    assert_eq!(fx.st.partitions.get(&top).map(|p| p.id()), Some(top));
    assert_eq!(fx.st.next_partition_id, crate::state::MAX_NEXT_PARTITION_ID);
    let back = crate::state::decode_state(&crate::state::encode_state(&fx.st)).expect("readable");
    assert_eq!(order(&back), order(&fx.st));
}
