//! Review s20 ephemeral M3: a gate lives as long as its waiters and is admitted against the
//! caps, so short waits on rotating partition names neither pile up charged gates nor push
//! the node past its cap.

use queenmq_native_api::ephemeral_wait::pop_waiting;

use super::bounds_tests::store;
use super::tests::assert_consistent;
use super::*;

fn ask<'a>(partition: Option<&'a str>, group: &'a str) -> PopAsk<'a> {
    PopAsk {
        queue: "q",
        partition,
        group: Some(group),
        batch: 1,
        auto_ack: true,
        existing: false,
    }
}

/// (bytes, slots) of queue `q`'s gates.
fn gates(s: &Store) -> (u64, usize) {
    let g = lock(&s.inner);
    let q = &g.tenants["t"].queues["q"];
    (q.gates.bytes(), q.gates.capacity())
}

/// 10 000 waits that time out, each on a partition no other names: every gate goes with its
/// waiter, and the maps give their slots back. Before the fix each stayed, charged, until a
/// push to its partition or the sweep met it.
#[tokio::test(start_paused = true)]
async fn a_gate_goes_when_its_last_waiter_leaves() {
    let s = store();
    s.declare("t", "q", EphemeralOptions::default());
    let baseline = s.bytes();
    for i in 0..10_000 {
        let p = format!("x{i}");
        let got = pop_waiting(&s, "t", &ask(Some(&p), "g"), 0).await.unwrap();
        assert!(got.is_empty());
    }
    assert_eq!(s.bytes(), baseline);
    let (bytes, slots) = gates(&s);
    assert_eq!(bytes, 0);
    assert!(slots <= 64, "the gate maps kept {slots} slots");
    assert_consistent(&s);
}

/// A waiter whose request goes away mid-wait (its future dropped) lets go of its gate too.
#[tokio::test(start_paused = true)]
async fn a_gate_goes_when_its_waiter_is_dropped_mid_wait() {
    let s = Arc::new(store());
    s.declare("t", "q", EphemeralOptions::default());
    let baseline = s.bytes();
    let door = s.clone();
    let waiter =
        tokio::spawn(async move { pop_waiting(&*door, "t", &ask(Some("p"), "g"), 60_000).await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(gates(&s).0 > 0, "the waiter parks on its gate");
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    assert_eq!(s.bytes(), baseline);
    assert_eq!(gates(&s).0, 0);
}

/// A gate two waiters hold stays when one leaves, and the other is still woken by a push.
#[tokio::test(start_paused = true)]
async fn a_gate_stays_while_another_waiter_holds_it() {
    let s = Arc::new(store());
    s.declare("t", "q", EphemeralOptions::default());
    let wait = |timeout_ms| {
        let door = s.clone();
        tokio::spawn(async move { pop_waiting(&*door, "t", &ask(None, "g"), timeout_ms).await })
    };
    let (short, long) = (wait(1_000), wait(60_000));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(short.await.unwrap().unwrap().is_empty());
    assert!(gates(&s).0 > 0, "the long waiter still holds the gate");
    s.push("t", "q", None, vec!["1".into()]).unwrap();
    assert_eq!(long.await.unwrap().unwrap().len(), 1);
    assert_eq!(gates(&s).0, 0);
    assert_consistent(&s);
}

/// A new gate is admitted as a pop's growth is (the cap plus a quarter): one that would pass
/// it is refused with the node's retriable 503, and nothing is charged. A 512-byte partition
/// name makes a 641-byte gate: 257 (the queue) + 641 is past 750, the room of a 600-byte cap,
/// while the pop itself (257 + a cursor's 257) and a queue-wide gate (129) fit.
#[tokio::test(start_paused = true)]
async fn a_new_gate_past_the_cap_is_refused() {
    let s = Store::new(
        StoreLimits {
            enabled: true,
            max_bytes: 600,
            tenant_max_bytes: 1 << 30,
            implicit_idle: Duration::from_secs(300),
        },
        None,
        LongPollSlots::new(64),
    );
    s.declare("t", "q", EphemeralOptions::default());
    let baseline = s.bytes();
    assert_eq!(baseline, 257);
    let long = "p".repeat(512);
    let refused = pop_waiting(&s, "t", &ask(Some(&long), "g"), 1_000).await;
    assert!(
        matches!(refused, Err(EphemeralRefusal::Unavailable(_))),
        "{refused:?}"
    );
    assert_eq!(s.bytes(), baseline);
    let got = pop_waiting(&s, "t", &ask(None, "g"), 1_000).await.unwrap();
    assert!(got.is_empty(), "a gate within the room waits");
    assert_eq!(s.bytes(), baseline + group_cost("g"));
    assert_consistent(&s);
}
