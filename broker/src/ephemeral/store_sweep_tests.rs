//! Review s19 ephemeral M3: the sweep goes in slices of a budget of entries (a queue, a ring,
//! a cursor or a gate looked at), resumes where it stopped, and still finds every lease that
//! ended.

use tokio::sync::Notify;

use super::bounds_tests::store;
use super::tests::{assert_consistent, msgs};
use super::*;

/// Whether `gate` holds a wake (a `notify_one` no waiter took yet).
fn rung(gate: &Notify) -> bool {
    let n = gate.notified();
    tokio::pin!(n);
    n.as_mut().enable()
}

fn ask<'a>(partition: Option<&'a str>, batch: usize) -> PopAsk<'a> {
    PopAsk {
        queue: "q",
        partition,
        group: Some("g"),
        batch,
        auto_ack: false,
        existing: false,
    }
}

/// A store whose idle bound is `secs` seconds.
fn store_idle(secs: u64) -> Store {
    Store::new(
        StoreLimits {
            enabled: true,
            max_bytes: 1 << 30,
            tenant_max_bytes: 1 << 30,
            implicit_idle: Duration::from_secs(secs),
        },
        None,
        LongPollSlots::new(64),
    )
}

/// A queue of 11 rings, each holding a message leased to g whose lease ended, with a waiter
/// of g on each partition and one on the whole queue: 1 queue + 1 queue-wide gate + 11 rings
/// + 11 partition gates = 24 entries. With a budget of 4 a pass takes ceil(24 / 4) = 6
/// slices, the lock let go between them (a push lands between two), and every waiter whose
/// lease ended is rung.
#[tokio::test(start_paused = true)]
async fn a_pass_takes_ceil_entries_over_budget_slices_and_finds_every_ended_lease() {
    let s = store();
    let options = EphemeralOptions {
        lease_seconds: 1,
        ..EphemeralOptions::default()
    };
    s.declare("t", "q", options);
    let names: Vec<String> = (0..11).map(|i| format!("p{i:02}")).collect();
    for p in &names {
        s.push("t", "q", Some(p), msgs(1)).unwrap();
    }
    assert_eq!(s.pop("t", &ask(None, 11)).unwrap().len(), 11);
    let gates: Vec<_> = names
        .iter()
        .map(|p| s.wake("t", &ask(Some(p), 1)).unwrap().unwrap())
        .collect();
    let queue_wide = s.wake("t", &ask(None, 1)).unwrap().unwrap();
    tokio::time::advance(Duration::from_secs(2)).await;
    let now = now();
    let mut slices = 0;
    loop {
        slices += 1;
        if s.sweep_slice(now, 4) {
            break;
        }
        assert!(slices < 6, "a pass of 24 entries went past 6 slices");
        if slices == 1 {
            assert!(rung(&queue_wide), "the queue-wide waiter was not rung");
        }
        if slices == 3 {
            // Between slices the store serves: a push to a ring the pass has not reached.
            s.push("t", "q", Some("p10"), msgs(1)).unwrap();
            assert!(rung(&gates[10]) && rung(&queue_wide), "the push rang");
        }
    }
    assert_eq!(slices, 6);
    for (p, gate) in names.iter().zip(&gates) {
        assert!(rung(gate), "{p}: the ended lease was not found");
    }
    for p in &names {
        let got = s.pop("t", &ask(Some(p), 1)).unwrap();
        assert_eq!(got[0].attempts, 2, "{p}");
    }
    assert_consistent(&s);
}

/// A pass that starts over finds what came after its last one; queues made, emptied and
/// removed meanwhile are met or skipped by name, and the charges stay what a recount says.
#[test]
fn passes_resume_by_name_and_keep_the_charges_incremental() {
    let s = store_idle(1);
    for q in ["a", "b", "c"] {
        s.push("t", q, None, msgs(2)).unwrap();
    }
    let t0 = now();
    // Queue a and its ring; then a goes and a2 comes, met by name.
    assert!(!s.sweep_slice(t0, 2));
    assert!(s.forget("t", "a"));
    s.push("t", "a2", None, msgs(1)).unwrap();
    while !s.sweep_slice(t0, 2) {}
    assert_consistent(&s);
    // Idle past the bound: every implicit queue goes, in one pass.
    let later = t0 + Duration::from_secs(2);
    while !s.sweep_slice(later, 2) {}
    assert_eq!(s.bytes(), 0);
    assert_consistent(&s);
}

/// Review s19 ephemeral L1: a group with a pop parked on the whole queue keeps its state past
/// the idle bound, so a lease of it that ends later is still found by the sweep and rings the
/// waiter (its cursor stays, held by another live lease, so nothing else rings it).
#[tokio::test(start_paused = true)]
async fn a_parked_groups_state_outlives_the_idle_bound() {
    let s = store_idle(2);
    let options = EphemeralOptions {
        lease_seconds: 10,
        ..EphemeralOptions::default()
    };
    s.declare("t", "q", options);
    s.push("t", "q", None, msgs(2)).unwrap();
    assert_eq!(s.pop("t", &ask(None, 1)).unwrap().len(), 1);
    let gate = s.wake("t", &ask(None, 1)).unwrap().unwrap();
    tokio::time::advance(Duration::from_secs(3)).await;
    let partition = ask(Some(DEFAULT_PARTITION), 1);
    assert_eq!(s.pop("t", &partition).unwrap().len(), 1);
    s.sweep(now());
    assert!(!rung(&gate), "no lease has ended yet");
    tokio::time::advance(Duration::from_secs(8)).await;
    s.sweep(now());
    assert!(rung(&gate), "the first lease's end was not found");
    assert_consistent(&s);
}

/// Review s20 ephemeral M1: 64 rings of 1 024 idle cursors each, swept at a budget of 1 024.
/// Each slice looks at no more than twice its budget of cursors (forgetting them, trimming
/// with those left), so the pass takes at least 64 slices; before the fix a ring counted one
/// entry whatever its cursors, and the first slice walked all 65 536.
#[test]
fn a_slice_looks_at_no_more_cursors_than_its_budget() {
    let s = store();
    s.declare("t", "q", EphemeralOptions::default());
    let names: Vec<String> = (0..64).map(|i| format!("p{i:02}")).collect();
    for p in &names {
        s.push("t", "q", Some(p), msgs(1)).unwrap();
    }
    for p in &names {
        for g in 0..MAX_GROUPS {
            let group = format!("g{g}");
            let a = PopAsk {
                group: Some(&group),
                auto_ack: true,
                ..ask(Some(p), 1)
            };
            s.pop("t", &a).unwrap();
        }
    }
    let later = now() + Duration::from_secs(301);
    super::super::ring::take_visits();
    let mut slices = 0;
    loop {
        slices += 1;
        let done = s.sweep_slice(later, 1_024);
        let visits = super::super::ring::take_visits();
        assert!(
            visits <= 2 * 1_024,
            "slice {slices} looked at {visits} cursors"
        );
        if done {
            break;
        }
    }
    assert!(
        slices >= 64,
        "a pass of 65 536 cursors took {slices} slices"
    );
    assert_eq!(
        s.queues("t")["queues"][0]["partitions"],
        0,
        "every cursor forgotten"
    );
    assert_eq!(s.bytes(), queue_cost("q"));
    assert_consistent(&s);
}

/// (states, slots of the groups map) of queue `q`'s due index.
fn group_states(s: &Store) -> (usize, usize) {
    let g = lock(&s.inner);
    let due = &g.tenants["t"].queues["q"].due;
    (due.groups_len(), due.groups_capacity())
}

/// Review s20 ephemeral M2: 100 000 pops without a partition, each of a new group, leave as
/// many states; once idle, a slice of budget 1 000 forgets at most 1 000 of them, the pass
/// still forgets them all, and the groups map gives its slots back. Before the fix one unit
/// forgot all 100 000 and the map kept its peak capacity.
#[test]
fn idle_group_states_are_forgotten_a_budget_at_a_time() {
    let s = store_idle(1);
    s.declare("t", "q", EphemeralOptions::default());
    for g in 0..100_000 {
        let group = format!("g{g}");
        let a = PopAsk {
            group: Some(&group),
            ..ask(None, 1)
        };
        assert!(s.pop("t", &a).unwrap().is_empty());
    }
    assert_eq!(group_states(&s).0, 100_000);
    let later = now() + Duration::from_secs(2);
    let mut slices = 0;
    loop {
        let (before, _) = group_states(&s);
        slices += 1;
        let done = s.sweep_slice(later, 1_000);
        let (after, _) = group_states(&s);
        assert!(
            before - after <= 1_000,
            "slice {slices} forgot {}",
            before - after
        );
        if done {
            break;
        }
    }
    assert!(slices >= 100, "{slices} slices");
    let (states, slots) = group_states(&s);
    assert_eq!(states, 0);
    assert!(slots <= 64, "the groups map kept {slots} slots");
    assert_eq!(s.bytes(), queue_cost("q"));
    assert_consistent(&s);
}

/// Review s20 ephemeral L1: a pass stopped in queue q's rings; q is deleted and declared again
/// between two slices, with a queue-wide waiter whose lease ends. The new q is another queue
/// to the pass: its own step runs and rings the waiter. Before the fix the pass went on at
/// the old q's rings after p0, skipping the new one's step (and its ring `a`).
#[tokio::test(start_paused = true)]
async fn a_queue_made_again_between_slices_gets_its_own_step() {
    let s = store();
    s.declare("t", "q", EphemeralOptions::default());
    for p in ["p0", "p1", "p2"] {
        s.push("t", "q", Some(p), msgs(1)).unwrap();
    }
    let t0 = now();
    assert!(!s.sweep_slice(t0, 1), "the queue's step");
    assert!(!s.sweep_slice(t0, 1), "its idle states, then ring p0");
    assert!(s.forget("t", "q"));
    let options = EphemeralOptions {
        lease_seconds: 1,
        ..EphemeralOptions::default()
    };
    s.declare("t", "q", options);
    s.push("t", "q", Some("a"), msgs(1)).unwrap();
    assert_eq!(s.pop("t", &ask(None, 1)).unwrap().len(), 1);
    let gate = s.wake("t", &ask(None, 1)).unwrap().unwrap();
    tokio::time::advance(Duration::from_secs(2)).await;
    while !s.sweep_slice(now(), 1) {}
    assert!(rung(&gate), "the new queue's ended lease was not found");
    assert_consistent(&s);
}

/// Review s21 ephemeral M1: forgetting a group's state costs one unit plus the entries it
/// holds. Two groups each leased one message in each of 3 000 rings, leases ended: a slice of
/// budget 1 000 forgets the first (3 000 entries dropped) and leaves the second to the next
/// slice; before the fix both went in one slice, as two units.
#[tokio::test(start_paused = true)]
async fn forgetting_a_group_state_costs_what_it_holds() {
    let s = store_idle(1);
    let options = EphemeralOptions {
        lease_seconds: 1,
        ..EphemeralOptions::default()
    };
    s.declare("t", "q", options);
    let names: Vec<String> = (0..3_000).map(|i| format!("p{i:04}")).collect();
    for p in &names {
        s.push("t", "q", Some(p), msgs(1)).unwrap();
    }
    for group in ["g1", "g2"] {
        let a = PopAsk {
            group: Some(group),
            ..ask(None, 3_000)
        };
        assert_eq!(s.pop("t", &a).unwrap().len(), 3_000);
    }
    assert_eq!(group_states(&s).0, 2);
    let later = now() + Duration::from_secs(5);
    let mut slices = 0;
    while group_states(&s).0 == 2 {
        slices += 1;
        assert!(slices < 100, "the groups were never forgotten");
        s.sweep_slice(later, 1_000);
    }
    assert_eq!(
        group_states(&s).0,
        1,
        "two states of 3 000 entries in one slice"
    );
    while !s.sweep_slice(later, 1_000) {}
    assert_eq!(group_states(&s).0, 0);
    assert_consistent(&s);
}
