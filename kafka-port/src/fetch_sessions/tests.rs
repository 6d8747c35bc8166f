use std::sync::Arc;
use std::time::Duration;

use super::session::Told;
use super::*;

fn owner(name: &str) -> Owner {
    Owner {
        tenant: "default".into(),
        principal: Some(name.into()),
    }
}

fn answered(topic: &str, n: i32) -> Vec<(Key, Cached)> {
    (0..n)
        .map(|i| {
            (
                (Arc::from(topic), i),
                Cached {
                    offset: 0,
                    max_bytes: 100,
                    told: Told {
                        high_watermark: 0,
                        last_stable: 0,
                        log_start: 0,
                    },
                },
            )
        })
        .collect()
}

fn asked(topic: &str, indexes: &[i32]) -> Vec<(String, Vec<FetchPartition>)> {
    vec![(
        topic.into(),
        indexes
            .iter()
            .map(|&index| FetchPartition {
                index,
                offset: 1,
                max_bytes: 100,
            })
            .collect(),
    )]
}

const NOT_FOUND: Begin = Begin::Refused(errors::FETCH_SESSION_ID_NOT_FOUND);

fn on(b: &Begin) -> bool {
    matches!(b, Begin::Incremental { .. })
}

/// An incremental fetch naming nothing new.
fn poll(c: &FetchSessions, who: &Owner, id: i32, epoch: i32) -> Begin {
    c.begin(who, id, epoch, &[], &[], Instant::now())
}

fn parts(b: &Begin) -> Vec<(String, i32)> {
    match b {
        Begin::Incremental { parts, .. } => parts
            .iter()
            .map(|((t, i), _)| (t.to_string(), *i))
            .collect(),
        other => panic!("not incremental: {other:?}"),
    }
}

#[test]
fn a_session_goes_on_epoch_by_epoch() {
    let c = FetchSessions::new(10);
    let alice = owner("alice");
    let now = Instant::now();
    assert_eq!(c.begin(&alice, 0, 0, &[], &[], now), Begin::Full);
    let id = c.create(alice.clone(), &answered("t", 2), now);
    assert!(id > 0);
    assert_eq!(
        parts(&poll(&c, &alice, id, 1)),
        [("t".into(), 0), ("t".into(), 1)]
    );
    // The same epoch again (a retried request) is refused; the session stays.
    assert_eq!(
        poll(&c, &alice, id, 1),
        Begin::Refused(errors::INVALID_FETCH_SESSION_EPOCH)
    );
    assert_eq!(
        poll(&c, &alice, id, 5),
        Begin::Refused(errors::INVALID_FETCH_SESSION_EPOCH)
    );
    let b = c.begin(
        &alice,
        id,
        2,
        &asked("u", &[3]),
        &[("t".into(), vec![0])],
        now,
    );
    assert_eq!(parts(&b), [("t".into(), 1), ("u".into(), 3)]);
    assert_eq!(poll(&c, &alice, id.wrapping_add(1), 3), NOT_FOUND);
    assert_eq!(poll(&c, &alice, NO_SESSION, 3), NOT_FOUND);
    assert!(on(&poll(&c, &alice, id, 3)));
}

#[test]
fn another_users_session_is_unknown_to_them_and_theirs_to_close_only() {
    let c = FetchSessions::new(10);
    let (alice, bob) = (owner("alice"), owner("bob"));
    let now = Instant::now();
    let id = c.create(alice.clone(), &answered("t", 1), now);
    assert_eq!(poll(&c, &bob, id, 1), NOT_FOUND);
    let other_tenant = Owner {
        tenant: "acme".into(),
        principal: Some("alice".into()),
    };
    assert_eq!(poll(&c, &other_tenant, id, 1), NOT_FOUND);
    // Bob's "close" of it closes nothing.
    assert_eq!(
        c.begin(&bob, id, FINAL_EPOCH, &[], &[], now),
        Begin::Sessionless
    );
    assert_eq!(c.begin(&bob, id, INITIAL_EPOCH, &[], &[], now), Begin::Full);
    assert!(on(&poll(&c, &alice, id, 1)));
}

#[test]
fn full_fetches_close_the_session_they_name() {
    let c = FetchSessions::new(10);
    let alice = owner("alice");
    let now = Instant::now();
    let one = c.create(alice.clone(), &answered("t", 1), now);
    assert_eq!(
        c.begin(&alice, one, FINAL_EPOCH, &[], &[], now),
        Begin::Sessionless
    );
    assert!(c.is_empty());
    let two = c.create(alice.clone(), &answered("t", 1), now);
    assert_eq!(
        c.begin(&alice, two, INITIAL_EPOCH, &[], &[], now),
        Begin::Full
    );
    assert!(c.is_empty());
    assert_eq!(c.bytes(), 0);
    assert_eq!(poll(&c, &alice, two, 1), NOT_FOUND);
}

#[test]
fn no_slots_means_every_fetch_is_sessionless() {
    let c = FetchSessions::new(0);
    let alice = owner("alice");
    let now = Instant::now();
    assert_eq!(
        c.begin(&alice, 0, INITIAL_EPOCH, &[], &[], now),
        Begin::Sessionless
    );
    assert_eq!(c.create(alice, &answered("t", 1), now), NO_SESSION);
}

#[test]
fn at_the_cap_a_larger_session_evicts_the_smallest_old_one_and_a_smaller_gets_none() {
    let c = FetchSessions::new(1);
    let alice = owner("alice");
    let t0 = Instant::now();
    let two = c.create(alice.clone(), &answered("t", 2), t0);
    assert!(two > 0);
    // Kafka's rule: a session younger than EVICT_IDLE is not evicted for a larger one.
    let t1 = t0 + Duration::from_secs(1);
    assert!(on(&c.begin(&alice, two, 1, &[], &[], t1)));
    assert_eq!(c.create(alice.clone(), &answered("t", 3), t1), NO_SESSION);
    // Old enough, and still in use: the smaller one goes for a larger, not for its size.
    let t2 = t0 + EVICT_IDLE;
    assert!(on(&c.begin(&alice, two, 2, &[], &[], t2)));
    assert_eq!(c.create(alice.clone(), &answered("t", 1), t2), NO_SESSION);
    assert_eq!(c.create(alice.clone(), &answered("t", 2), t2), NO_SESSION);
    let three = c.create(alice.clone(), &answered("t", 3), t2);
    assert!(three > 0 && three != two);
    assert_eq!(c.len(), 1);
    assert_eq!(poll(&c, &alice, two, 3), NOT_FOUND);
    // Idle long enough, any session gives way.
    let later = t2 + EVICT_IDLE;
    let one = c.create(alice.clone(), &answered("t", 1), later);
    assert!(one > 0);
    assert_eq!(c.len(), 1);
    assert!(on(&c.begin(&alice, one, 1, &[], &[], later)));
}

#[test]
fn many_new_sessions_do_not_evict_a_young_one() {
    let c = FetchSessions::new(2);
    let (alice, bob) = (owner("alice"), owner("bob"));
    let t0 = Instant::now();
    let victim = c.create(alice.clone(), &answered("t", 3), t0);
    let t1 = t0 + Duration::from_secs(1);
    for _ in 0..1000 {
        let _ = c.create(bob.clone(), &answered("missing", 700), t1);
    }
    assert!(on(&poll(&c, &alice, victim, 1)));
}

#[test]
fn the_least_recently_used_idle_session_goes_first() {
    let c = FetchSessions::new(2);
    let alice = owner("alice");
    let t0 = Instant::now();
    let old = c.create(alice.clone(), &answered("t", 5), t0);
    // Young and smaller than nothing: neither is evictable by size.
    let used = c.create(alice.clone(), &answered("t", 5), t0);
    let t1 = t0 + EVICT_IDLE;
    assert!(on(&c.begin(&alice, used, 1, &[], &[], t1)));
    let new = c.create(alice.clone(), &answered("t", 1), t1);
    assert!(new > 0);
    assert_eq!(poll(&c, &alice, old, 1), NOT_FOUND);
    assert!(on(&poll(&c, &alice, used, 2)));
}

#[test]
fn an_emptied_or_oversized_session_is_closed_and_answered_sessionless() {
    let c = FetchSessions::new(10);
    let alice = owner("alice");
    let now = Instant::now();
    let id = c.create(alice.clone(), &answered("t", 1), now);
    let forget = [("t".to_string(), vec![0])];
    assert_eq!(
        c.begin(&alice, id, 1, &[], &forget, now),
        Begin::Sessionless
    );
    assert!(c.is_empty());

    let id = c.create(alice.clone(), &answered("t", 1), now);
    let many: Vec<i32> = (0..=MAX_PARTITIONS as i32).collect();
    assert_eq!(
        c.begin(&alice, id, 1, &asked("u", &many), &[], now),
        Begin::Sessionless
    );
    assert!(c.is_empty());
    assert_eq!(c.bytes(), 0);
    let too_many = answered("t", MAX_PARTITIONS as i32 + 1);
    assert_eq!(c.create(alice, &too_many, now), NO_SESSION);
    assert_eq!(
        c.create(owner("bob"), &[], now),
        NO_SESSION,
        "an empty session is not kept"
    );
}

#[test]
fn bytes_follow_the_sessions() {
    let c = FetchSessions::new(10);
    let alice = owner("alice");
    let now = Instant::now();
    let id = c.create(alice.clone(), &answered("t", 10), now);
    let ten = c.bytes();
    assert!(ten > 0);
    let _ = c.begin(
        &alice,
        id,
        1,
        &asked("u", &(0..100).collect::<Vec<_>>()),
        &[],
        now,
    );
    assert!(c.bytes() > ten);
    let _ = c.begin(&alice, id, FINAL_EPOCH, &[], &[], now);
    assert_eq!(c.bytes(), 0);
}

#[test]
fn ids_are_positive_and_distinct() {
    let c = FetchSessions::new(1000);
    let alice = owner("alice");
    let now = Instant::now();
    let mut ids: Vec<i32> = (0..1000)
        .map(|_| c.create(alice.clone(), &answered("t", 1), now))
        .collect();
    assert!(ids.iter().all(|&id| id > 0));
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 1000);
}

#[test]
fn the_byte_bound_evicts_several_or_none() {
    let c = FetchSessions::new(100_000);
    let alice = owner("alice");
    let now = Instant::now();
    // Fill the bytes with sessions of 1000 partitions.
    let mut ids = Vec::new();
    while c.bytes() + c.bytes() / (ids.len().max(1)) <= MAX_BYTES {
        let id = c.create(alice.clone(), &answered("t", 1000), now);
        assert!(id > 0);
        ids.push(id);
    }
    let full = c.len();
    // As large as those: no room, none evicted.
    assert_eq!(
        c.create(alice.clone(), &answered("t", 1000), now),
        NO_SESSION
    );
    assert_eq!(c.len(), full);
    // Larger, but the others are young: none.
    let bigger = answered("t", MAX_PARTITIONS as i32);
    assert_eq!(c.create(alice.clone(), &bigger, now), NO_SESSION);
    // Old enough: the smallest go, as many as needed.
    let later = now + EVICT_IDLE;
    for id in &ids {
        assert!(on(&c.begin(&alice, *id, 1, &[], &[], later)));
    }
    let big = c.create(alice.clone(), &bigger, later);
    assert!(big > 0);
    assert!(c.len() < full);
    assert!(c.bytes() <= MAX_BYTES);
}

#[test]
fn an_oversized_update_is_refused_before_it_changes_anything() {
    let c = FetchSessions::new(10);
    let alice = owner("alice");
    let now = Instant::now();
    let id = c.create(alice.clone(), &answered("t", 1), now);
    let before = c.peak_bytes();
    // 20 000 listed and 19 999 of them forgotten would end at 1 + 1 partitions: the
    // listing alone is past the cap, so the session closes without inserting any.
    let listed: Vec<i32> = (0..20_000).collect();
    let forgot = [("u".to_string(), (0..19_999).collect::<Vec<i32>>())];
    assert_eq!(
        c.begin(&alice, id, 1, &asked("u", &listed), &forgot, now),
        Begin::Sessionless
    );
    assert!(c.is_empty());
    assert_eq!(c.peak_bytes(), before, "nothing was inserted");
    // Within the cap, the size is known before the update: 9 000 listed, 9 000 forgotten.
    let id = c.create(alice.clone(), &answered("t", 1), now);
    let before = c.peak_bytes();
    let listed: Vec<i32> = (0..9_000).collect();
    let forgot = [("u".to_string(), listed.clone())];
    let b = c.begin(&alice, id, 1, &asked("u", &listed), &forgot, now);
    assert_eq!(parts(&b), [("t".into(), 0)]);
    assert!(
        c.peak_bytes() <= before + 9_000 * 128,
        "applied once, never beyond"
    );
}

#[test]
fn invalid_topic_names_are_never_cached() {
    let c = FetchSessions::new(10);
    let alice = owner("alice");
    let now = Instant::now();
    let long = "x".repeat(250);
    assert_eq!(
        c.create(alice.clone(), &answered(&long, 1), now),
        NO_SESSION
    );
    assert_eq!(c.create(alice.clone(), &answered("", 1), now), NO_SESSION);
    let id = c.create(alice.clone(), &answered("t", 1), now);
    assert_eq!(
        c.begin(&alice, id, 1, &asked("a/b", &[0]), &[], now),
        Begin::Sessionless
    );
    assert!(c.is_empty());
}

#[test]
fn one_sessions_work_does_not_hold_the_node_lock() {
    // A session's lock held (its fetch at work) leaves other sessions free to go on.
    let c = FetchSessions::new(10);
    let (alice, bob) = (owner("alice"), owner("bob"));
    let now = Instant::now();
    let a = c.create(alice.clone(), &answered("t", 1), now);
    let b = c.create(bob.clone(), &answered("t", 1), now);
    let held = c.inner().sessions.get(&a).map(|h| h.session.clone());
    let held = held.expect("alice's session");
    let c = Arc::new(c);
    let (tx, rx) = std::sync::mpsc::channel();
    let _busy = lock(&held);
    let other = c.clone();
    // On another thread, so that a regression shows as a failure, not a hung test.
    std::thread::spawn(move || {
        let went_on = on(&poll(&other, &bob, b, 1));
        let made = other.create(bob.clone(), &answered("u", 1), now) > 0;
        let _ = tx.send((went_on, made, other.len()));
    });
    let done = rx.recv_timeout(Duration::from_secs(30));
    assert_eq!(done, Ok((true, true, 3)));
}

#[test]
fn eviction_looks_at_a_bounded_number_of_sessions() {
    // Many young small sessions before an old one: the walk stops after EVICT_CANDIDATES.
    let c = FetchSessions::new(EVICT_CANDIDATES + 1);
    let alice = owner("alice");
    let t0 = Instant::now();
    let later = t0 + EVICT_IDLE;
    let old = c.create(alice.clone(), &answered("t", 2), t0);
    assert!(on(&c.begin(&alice, old, 1, &[], &[], later)));
    for _ in 0..EVICT_CANDIDATES {
        assert!(c.create(alice.clone(), &answered("t", 1), later) > 0);
    }
    assert_eq!(
        c.create(alice.clone(), &answered("t", 3), later),
        NO_SESSION
    );
    assert!(on(&poll(&c, &alice, old, 2)));
}
