//! The store's tests: charges, caps, refusals and the reviews' findings (s12 E*, s14 R*).

use super::*;

fn store(max_bytes: u64, tenant_max_bytes: u64) -> Store {
    store_with(max_bytes, tenant_max_bytes, LongPollSlots::new(10))
}

fn store_with(max_bytes: u64, tenant_max_bytes: u64, slots: Arc<LongPollSlots>) -> Store {
    Store::new(
        StoreLimits {
            enabled: true,
            max_bytes,
            tenant_max_bytes,
            implicit_idle: Duration::from_secs(300),
        },
        None,
        slots,
    )
}

fn ask<'a>(queue: &'a str, partition: Option<&'a str>, group: &'a str) -> PopAsk<'a> {
    PopAsk {
        queue,
        partition,
        group: Some(group),
        batch: 10_000,
        auto_ack: false,
        existing: false,
    }
}

pub(super) fn msgs(n: usize) -> Vec<String> {
    (0..n).map(|i| i.to_string()).collect()
}

/// The store's charge equals a recount from the rings and the indexes' entries (what the
/// sweep does, without what the sweep itself removes).
pub(super) fn assert_consistent(s: &Store) {
    let g = lock(&s.inner);
    let recount: u64 = g
        .tenants
        .values()
        .flat_map(|t| t.queues.iter())
        .map(|(name, q)| {
            let rings: u64 = q.rings.iter().map(|(p, r)| ring_charge(p, r)).sum();
            queue_cost(name) + rings + q.heads.recount() + q.due.recount() + q.gates.bytes()
        })
        .sum();
    assert_eq!(
        g.bytes, recount,
        "incremental charge drifted from the recount"
    );
}

#[test]
fn the_charge_returns_to_the_queue_cost_after_consumption_and_reset() {
    let s = store(1 << 30, 1 << 30);
    let empty = queue_cost("q");
    let options = EphemeralOptions {
        max_length: 100_000,
        ..EphemeralOptions::default()
    };
    s.declare("t", "q", options);
    s.push("t", "q", Some("p"), msgs(50_000)).unwrap();
    assert!(s.bytes() > 50_000 * ITEM_OVERHEAD);
    assert_consistent(&s);
    let mut a = ask("q", Some("p"), "g");
    a.auto_ack = true;
    assert_eq!(s.pop("t", &a).unwrap().len(), 10_000);
    assert_consistent(&s);
    while !s.pop("t", &a).unwrap().is_empty() {}
    // Drained: the slots went back; what is left is the ring, its cursor, a few slots.
    assert!(s.bytes() < empty + 2_048, "{}", s.bytes());
    assert_consistent(&s);
    s.push("t", "q", None, msgs(10)).unwrap();
    assert_eq!(s.reset("t", "q"), 10);
    assert_eq!(s.bytes(), empty);
    assert!(s.forget("t", "q"));
    assert_eq!(s.bytes(), 0);
}

/// E2: cursors and leases count, so many groups on many partitions hit the cap.
#[test]
fn fan_out_state_is_charged_and_refused_at_the_cap() {
    let s = store(1 << 20, 1 << 20);
    let mut refused = None;
    'outer: for p in 0..10_000 {
        let part = format!("p{p}");
        if let Err(e) = s.push("t", "q", Some(&part), msgs(1)) {
            refused = Some(e);
            break;
        }
        for g in 0..100 {
            if let Err(e) = s.pop("t", &ask("q", Some(&part), &format!("g{g}"))) {
                refused = Some(e);
                break 'outer;
            }
        }
    }
    assert!(
        matches!(refused, Some(EphemeralRefusal::Unavailable(_))),
        "{refused:?}"
    );
    assert!(s.bytes() <= (1 << 20) + (1 << 18), "{}", s.bytes());
    assert_consistent(&s);
}

/// E6: a reset does not let an old id settle a new delivery of the same sequence.
#[test]
fn an_id_from_before_a_reset_answers_unknown() {
    let s = store(1 << 30, 1 << 30);
    s.push("t", "q", None, msgs(1)).unwrap();
    let old = s.pop("t", &ask("q", None, "g")).unwrap().remove(0);
    s.reset("t", "q");
    s.push("t", "q", None, msgs(1)).unwrap();
    let new = s.pop("t", &ask("q", None, "g")).unwrap().remove(0);
    assert_ne!(old.id, new.id);
    let done = |id: &str| vec![(id.to_string(), AckStatus::Completed)];
    assert_eq!(
        s.ack("t", "q", Some("g"), &done(&old.id)),
        [AckOutcome::Unknown]
    );
    assert_eq!(
        s.ack("t", "q", Some("g"), &done(&new.id)),
        [AckOutcome::Acked]
    );
    // Another queue's ack of the id finds no lease either.
    assert_eq!(
        s.ack("t", "r", Some("g"), &done(&new.id)),
        [AckOutcome::Unknown]
    );
}

/// E9: a ring that refuses the group does not throw away what others gave.
#[test]
fn a_refusal_at_a_later_partition_keeps_what_was_taken() {
    let s = store(1 << 30, 1 << 30);
    s.push("t", "q", Some("a"), msgs(1)).unwrap();
    s.push("t", "q", Some("b"), msgs(3)).unwrap();
    for g in 0..super::super::ring::MAX_GROUPS {
        s.pop("t", &ask("q", Some("a"), &format!("g{g}"))).unwrap();
    }
    let mut a = ask("q", None, "new");
    a.auto_ack = true;
    let got = s.pop("t", &a).unwrap();
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(|m| m.partition == "b"));
    let only_a = ask("q", Some("a"), "new");
    assert!(matches!(
        s.pop("t", &only_a),
        Err(EphemeralRefusal::Quota(_))
    ));
}

/// E11: a tenant's share refuses it with 403 while another tenant still pushes.
#[test]
fn a_tenant_past_its_share_gets_quota_and_others_still_push() {
    let s = store(1 << 20, 1 << 19);
    let big = vec!["x".repeat(1_000); 100];
    let mut last = Ok(0);
    for _ in 0..10 {
        last = s.push("a", "q", None, big.clone());
        if last.is_err() {
            break;
        }
    }
    assert!(matches!(last, Err(EphemeralRefusal::Quota(_))), "{last:?}");
    assert_eq!(s.push("b", "q", None, big.clone()), Ok(100));
    assert_consistent(&s);
}

/// E4: the sweep forgets idle groups, so the group bound is not a permanent wall.
#[test]
fn the_sweep_forgets_idle_groups_and_drops_vacant_rings() {
    let s = store(1 << 30, 1 << 30);
    s.push("t", "q", Some("p"), msgs(1)).unwrap();
    let mut a = ask("q", Some("p"), "g");
    a.auto_ack = true;
    assert_eq!(s.pop("t", &a).unwrap().len(), 1);
    s.sweep(Instant::now() + Duration::from_secs(301));
    // The implicit queue went idle too: gone with its charge.
    assert_eq!(s.bytes(), 0);
    s.declare("t", "d", EphemeralOptions::default());
    s.push("t", "d", Some("p"), msgs(1)).unwrap();
    assert_eq!(s.pop("t", &ask("q", Some("p"), "g")).unwrap().len(), 0);
    let mut d = ask("d", Some("p"), "g");
    d.auto_ack = true;
    assert_eq!(s.pop("t", &d).unwrap().len(), 1);
    s.sweep(Instant::now() + Duration::from_secs(301));
    let depth = s.depth("t", "d").unwrap();
    assert_eq!(depth["partitions"], 0, "{depth}");
}

/// E8: a window longer than half the lease is cut to it, so no lease of what a waiting
/// pop took can end while the answer is held.
#[test]
fn a_window_buffer_never_outlasts_half_the_lease() {
    let s = store(1 << 30, 1 << 30);
    let window = |lease_seconds, window_ms| {
        s.declare(
            "t",
            "q",
            EphemeralOptions {
                lease_seconds,
                window_ms,
                window_count: 100,
                ..EphemeralOptions::default()
            },
        );
        s.window("t", "q")
    };
    assert_eq!(window(1, 5_000), (500, 100));
    assert_eq!(window(30, 5_000), (5_000, 100));
    assert_eq!(window(30, 60_000), (15_000, 100));
    assert_eq!(window(30, 0), (0, 100));
}

/// E7: pops without a partition do not stay on one ring: they alternate between the rings
/// pushed to since the group looked (oldest push first) and those it must look at again
/// (review s19 ephemeral H1), and dropOldest takes the oldest message of the whole queue
/// first across partitions.
#[test]
fn pops_rotate_over_partitions_and_drop_oldest_goes_by_age_across_them() {
    let s = store(1 << 30, 1 << 30);
    for p in ["a", "b", "c"] {
        s.push("t", "q", Some(p), msgs(2)).unwrap();
    }
    let mut one = ask("q", None, "g");
    one.batch = 1;
    one.auto_ack = true;
    let firsts: Vec<String> = (0..4)
        .map(|_| s.pop("t", &one).unwrap().remove(0).partition)
        .collect();
    // The log gives a0, the set a1 (a is done), the log b0, the set b1.
    assert_eq!(firsts, ["a", "a", "b", "b"]);
    s.push("t", "q", Some("a"), msgs(2)).unwrap();
    let firsts: Vec<String> = (0..2)
        .map(|_| s.pop("t", &one).unwrap().remove(0).partition)
        .collect();
    // The log gives c0 (pushed before the new a's), the set c1.
    assert_eq!(firsts, ["c", "c"]);
    s.push("t", "q", Some("b"), msgs(1)).unwrap();
    s.push("t", "q", Some("c"), msgs(1)).unwrap();
    // A batch past one ring goes on to the next ones: what "g" left is a's two, b's, c's.
    let mut all = ask("q", None, "h");
    all.auto_ack = true;
    let mut parts: Vec<String> = s
        .pop("t", &all)
        .unwrap()
        .into_iter()
        .map(|m| m.partition)
        .collect();
    parts.sort();
    assert_eq!(parts, ["a", "a", "b", "c"]);

    let options = EphemeralOptions {
        max_length: 3,
        drop_oldest: true,
        ..EphemeralOptions::default()
    };
    s.declare("t", "d", options);
    s.push("t", "d", Some("y"), vec!["y0".into()]).unwrap();
    s.push("t", "d", Some("x"), vec!["x0".into()]).unwrap();
    s.push("t", "d", Some("y"), vec!["y1".into()]).unwrap();
    // Two more push out y0 then x0 (the two oldest, in two rings).
    s.push("t", "d", Some("z"), vec!["z0".into(), "z1".into()])
        .unwrap();
    let mut drain = ask("d", None, "g");
    drain.auto_ack = true;
    let mut left: Vec<String> = s
        .pop("t", &drain)
        .unwrap()
        .into_iter()
        .map(|m| m.payload.to_string())
        .collect();
    left.sort();
    assert_eq!(left, ["y1", "z0", "z1"]);
    assert_consistent(&s);
}

/// E10: ephemeral waits take the node's long-poll slots, which durable pops hold too,
/// and a tenant stops at its part of them while another still parks.
#[test]
fn waits_share_the_node_slots_and_a_tenant_stops_at_its_part() {
    let slots = LongPollSlots::new(10);
    let s = store_with(1 << 30, 1 << 30, slots.clone());
    let durable: Vec<_> = (0..8).filter_map(|_| slots.try_take()).collect();
    assert_eq!(durable.len(), 8);
    let a = s.wait_slot("a");
    let b = s.wait_slot("b");
    assert!(a.is_some() && b.is_some());
    assert!(s.wait_slot("a").is_none(), "the node's ten are taken");
    drop(durable);
    drop(a);
    assert_eq!(slots.held(), 1, "a wait gives its slot back");

    // 200 slots over four group engines: a part of 64 each (the floor).
    let slots = LongPollSlots::new(200);
    let _groups: Vec<_> = (0..4).map(|_| slots.join()).collect();
    let s = store_with(1 << 30, 1 << 30, slots.clone());
    let held: Vec<_> = (0..64).filter_map(|_| s.wait_slot("a")).collect();
    assert_eq!(held.len(), 64);
    assert!(s.wait_slot("a").is_none(), "tenant a is at its part");
    assert!(s.wait_slot("b").is_some(), "tenant b still parks");
    drop(held);
    assert!(s.wait_slot("a").is_some());
}

/// R2 (review s14): a tenant's durable polls and ephemeral waits are one count, so the
/// tenant holds its part of the cap once, not once per kind.
#[test]
fn durable_polls_and_ephemeral_waits_of_a_tenant_share_its_part() {
    let slots = LongPollSlots::new(200);
    let _groups: Vec<_> = (0..4).map(|_| slots.join()).collect();
    let s = store_with(1 << 30, 1 << 30, slots.clone());
    let a: Arc<str> = Arc::from("a");
    let durable: Vec<_> = (0..40)
        .filter_map(|_| slots.try_take_for(&a).ok())
        .collect();
    assert_eq!(durable.len(), 40);
    let waits: Vec<_> = (0..64).filter_map(|_| s.wait_slot("a")).collect();
    assert_eq!(waits.len(), 24, "64 for the tenant, 40 of them durable");
    assert!(s.wait_slot("b").is_some(), "tenant b still parks");
    drop(durable);
    assert!(s.wait_slot("a").is_some());
    drop(waits);
    assert_eq!(slots.tenant_held("a"), 0);
}

/// E13: a queue deleted while a pop waits is not brought back by the waiter.
#[test]
fn a_waiter_of_a_deleted_queue_does_not_bring_it_back() {
    let s = store(1 << 30, 1 << 30);
    s.declare("t", "q", EphemeralOptions::default());
    let waiting = ask("q", None, "g");
    assert!(s.wake("t", &waiting).unwrap().is_some());
    assert!(s.forget("t", "q"));
    assert!(s.wake("t", &waiting).unwrap().is_none());
    // R6 (review s14): nor by the waiter's next pop, when the DELETE came between its
    // `wake` and that pop.
    let mut again = ask("q", None, "g");
    again.existing = true;
    assert_eq!(s.pop("t", &again), Err(EphemeralRefusal::NotFound));
    assert_eq!(s.queues("t")["queues"], json!([]));
    assert_eq!(s.bytes(), 0);
}

/// A dropOldest feed of `max_length` 1 000-byte messages in one partition, at a node cap
/// with less room left than one message: only the push's balance lets one more in.
fn a_full_feed_takes_one_more_at_the_node_cap(max_length: u32) -> Store {
    let options = EphemeralOptions {
        max_length,
        drop_oldest: true,
        ..EphemeralOptions::default()
    };
    let fill = |s: &Store| {
        s.declare("t", "d", options);
        for _ in 0..max_length {
            s.push("t", "d", None, vec!["x".repeat(1_000)]).unwrap();
        }
    };
    let a = store(1 << 30, 1 << 30);
    fill(&a);
    let full = a.bytes();
    let cap = full + 64;
    let s = store(cap, cap);
    fill(&s);
    assert_eq!(s.bytes(), full);
    assert_eq!(s.push("t", "d", None, vec!["y".repeat(1_000)]), Ok(1));
    assert!(s.bytes() <= cap, "{} > {cap}", s.bytes());
    assert_consistent(&s);
    s
}

/// E14: at the node's cap a full dropOldest feed still takes a message that pushes out
/// one of its own size.
#[test]
fn a_full_drop_oldest_feed_is_judged_on_its_balance_at_the_node_cap() {
    let s = a_full_feed_takes_one_more_at_the_node_cap(100);
    // Another queue of the tenant, which frees nothing, is still refused.
    assert!(s.push("t", "other", None, vec!["z".repeat(1_000)]).is_err());
}

/// R1 (review s14): a waiting pop that finds no free long-poll slot answers at once what
/// is there, and is refused only when that is nothing: what it takes is never dropped.
#[tokio::test]
async fn a_waiting_pop_without_a_slot_answers_what_is_there_or_is_refused() {
    let slots = LongPollSlots::new(1);
    let s = store_with(1 << 30, 1 << 30, slots.clone());
    let durable = slots.try_take();
    assert!(durable.is_some());
    let mut a = ask("q", None, "g");
    a.auto_ack = true;
    s.push("t", "q", None, msgs(1)).unwrap();
    let got = queenmq_native_api::ephemeral_wait::pop_waiting(&s, "t", &a, 0).await;
    assert_eq!(
        got.unwrap().len(),
        1,
        "a waiting message is answered without a slot"
    );
    let refused = queenmq_native_api::ephemeral_wait::pop_waiting(&s, "t", &a, 0).await;
    assert!(matches!(refused, Err(EphemeralRefusal::Unavailable(_))));
    drop(durable);
    s.push("t", "q", None, msgs(1)).unwrap();
    let got = queenmq_native_api::ephemeral_wait::pop_waiting(&s, "t", &a, 0).await;
    assert_eq!(got.unwrap().len(), 1);
}

/// R3 (review s14): dropOldest's estimate is read from counters: nothing while the queue
/// is under its bounds, and past them no more than the drops really give back.
#[test]
fn drop_oldest_frees_is_a_counter_bound() {
    let s = store(1 << 30, 1 << 30);
    let options = EphemeralOptions {
        max_length: 3,
        drop_oldest: true,
        ..EphemeralOptions::default()
    };
    s.declare("t", "d", options);
    s.push("t", "d", Some("a"), vec!["x".repeat(500)]).unwrap();
    s.push("t", "d", Some("b"), vec!["y".into()]).unwrap();
    s.push("t", "d", Some("c"), vec!["z".repeat(900)]).unwrap();
    let mut g = lock(&s.inner);
    let q = g.queue("t", "d", Instant::now()).unwrap();
    assert_eq!(q.least_item, 1 + ITEM_OVERHEAD);
    // Over by two: at least two drops, each at least the least message less its slot,
    // though the two oldest (500 and 1 bytes) give back more.
    assert_eq!(
        drop_oldest_frees(q, 2, 2),
        (2, 2 * (1 + ITEM_OVERHEAD - SLOT))
    );
    q.options.max_length = 10;
    assert_eq!(
        drop_oldest_frees(q, 2, 2),
        (0, 0),
        "under its bounds nothing is freed"
    );
}

/// R2 (review s14): a waiting pop refused at the node's cap asks every group to forget
/// the durable polls whose clients are gone, as a durable refusal does.
#[test]
fn a_wait_refused_at_the_node_cap_asks_for_a_sweep() {
    let slots = LongPollSlots::new(1);
    let s = store_with(1 << 30, 1 << 30, slots.clone());
    let _durable = slots.try_take();
    let epoch = slots.sweep_epoch();
    assert!(s.wait_slot("t").is_none());
    assert!(slots.sweep_epoch() > epoch);
}

/// R4 (review s14): a lone ring full to its deque's capacity (16) still takes a
/// dropOldest push at the node cap: the drop frees the slot the push needs.
#[test]
fn a_drop_oldest_ring_at_its_capacity_is_judged_on_its_balance() {
    a_full_feed_takes_one_more_at_the_node_cap(16);
}
