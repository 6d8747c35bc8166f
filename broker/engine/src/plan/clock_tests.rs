//! What the planners decide as the injected clock moves: lease expiry, delayed processing,
//! window holds and retries up to the dead-letter queue. No test sleeps.

use queenmq_protocol::{AckStatus, Setting};

use super::fixture::{opts, Fixture, SECOND};

#[test]
fn an_expired_lease_redelivers_the_same_messages_to_the_same_group() {
    let mut fx = Fixture::new();
    fx.push("q", "p", 3);
    fx.commit();
    let popped_at = fx.cycle.now_us;
    let first = fx.pop("q", Some("g"), 2, Some(10));
    assert_eq!(first.messages.len(), 2);
    fx.advance_to(popped_at + 10 * SECOND - 1);
    assert!(
        fx.pop("q", Some("g"), 2, None).messages.is_empty(),
        "live one microsecond before expiry"
    );
    fx.advance_to(popped_at + 10 * SECOND);
    let again = fx.pop("q", Some("g"), 5, Some(10));
    let seen: Vec<(u64, u32)> = again
        .messages
        .iter()
        .map(|m| (m.offset, m.delivery_attempt))
        .collect();
    assert_eq!(seen, vec![(0, 2), (1, 2), (2, 1)]);
    assert_ne!(again.lease_id, first.lease_id);
    // The old lease can no longer ack.
    fx.commit();
    let late = fx.ack(&first, AckStatus::Completed);
    assert!(late.iter().all(|a| !a.success));
    fx.assert_replays();
}

#[test]
fn delayed_messages_stay_invisible_until_the_clock_passes_their_delay() {
    let mut fx = Fixture::new();
    fx.configure(
        "q",
        opts(|o| o.delayed_processing = Some(Setting::Value(5))),
    );
    fx.push("q", "p", 1);
    fx.advance(2 * SECOND);
    fx.push("q", "p", 1);
    fx.commit();
    assert!(fx.pop("q", None, 10, None).messages.is_empty());
    fx.advance(3 * SECOND);
    let first = fx.pop("q", None, 10, None);
    let offsets: Vec<u64> = first.messages.iter().map(|m| m.offset).collect();
    assert_eq!(offsets, vec![0], "only the first message is 5 s old");
    fx.commit();
    fx.ack(&first, AckStatus::Completed);
    fx.advance(SECOND);
    assert!(fx.pop("q", None, 10, None).messages.is_empty());
    fx.advance(SECOND);
    let second = fx.pop("q", None, 10, None);
    assert_eq!(
        second.messages.iter().map(|m| m.offset).collect::<Vec<_>>(),
        vec![1]
    );
    fx.assert_replays();
}

#[test]
fn a_window_holds_a_partition_until_it_is_quiet_for_the_whole_window() {
    let mut fx = Fixture::new();
    fx.configure("q", opts(|o| o.window_buffer = Some(Setting::Value(3))));
    fx.push("q", "p", 1);
    fx.advance(2 * SECOND);
    fx.push("q", "p", 1);
    fx.advance(2 * SECOND);
    assert!(
        fx.pop("q", None, 10, None).messages.is_empty(),
        "the second write restarted the window"
    );
    let wake = fx.group("q", None).wake.peek().copied();
    assert_eq!(
        wake.map(|w| w.0 .0),
        Some(fx.clock - 2 * SECOND + 3 * SECOND),
        "a timer wakes the partition when the window closes"
    );
    fx.advance(SECOND);
    let got = fx.pop("q", None, 10, None);
    assert_eq!(
        got.messages.len(),
        2,
        "the window's messages go out together"
    );
    fx.assert_replays();
}

#[test]
fn failures_past_the_retry_limit_go_to_the_dead_letter_queue() {
    let mut fx = Fixture::new();
    fx.configure("q", opts(|o| o.retry_limit = Some(Setting::Value(1))));
    fx.push("q", "p", 2);
    fx.commit();
    for attempt in 1..=2 {
        let got = fx.pop("q", None, 1, None);
        assert_eq!(got.messages.len(), 1);
        assert_eq!(got.messages[0].offset, 0);
        assert_eq!(got.messages[0].delivery_attempt, attempt);
        fx.commit();
        let r = fx.ack(&got, AckStatus::Failed);
        assert!(r[0].success, "{r:?}");
        fx.advance(SECOND);
    }
    let q = fx.st.queue_named("q").unwrap();
    assert_eq!(q.dlq.len(), 1);
    let row = &q.dlq[0];
    assert_eq!((row.offset, row.retries), (0, 1), "retried once, then dead");
    assert_eq!(q.counters.dead_lettered, 1);
    let next = fx.pop("q", None, 1, None);
    assert_eq!(
        next.messages[0].offset, 1,
        "the dead message is passed over"
    );
    fx.assert_replays();
}

#[test]
fn either_dead_letter_switch_alone_keeps_the_dead_letter_queue_on() {
    // Spec §2.19: only both switches off drop an exhausted message.
    for (dlq, after, kept) in [(true, false, 1), (false, true, 1), (false, false, 0)] {
        let mut fx = Fixture::new();
        fx.configure(
            "q",
            opts(|o| {
                o.retry_limit = Some(Setting::Value(0));
                o.dead_letter_queue = Some(Setting::Value(dlq));
                o.dlq_after_max_retries = Some(Setting::Value(after));
            }),
        );
        fx.push("q", "p", 2);
        fx.commit();
        let got = fx.pop("q", None, 1, None);
        fx.commit();
        let r = fx.ack(&got, AckStatus::Failed);
        assert_eq!(r[0].dlq, kept == 1, "{dlq}/{after}: {r:?}");
        fx.commit();
        assert_eq!(
            fx.st.queue_named("q").unwrap().dlq.len(),
            kept,
            "{dlq}/{after}"
        );
        let next = fx.pop("q", None, 1, None);
        assert_eq!(
            next.messages[0].offset, 1,
            "the exhausted message is passed over"
        );
        fx.assert_replays();
    }
}

#[test]
fn a_retry_ack_redelivers_without_charging_a_failure() {
    let mut fx = Fixture::new();
    fx.configure("q", opts(|o| o.retry_limit = Some(Setting::Value(0))));
    fx.push("q", "p", 1);
    fx.commit();
    for _ in 0..3 {
        let got = fx.pop("q", None, 1, None);
        assert_eq!(got.messages.len(), 1);
        fx.commit();
        fx.ack(&got, AckStatus::Retry);
        fx.commit();
    }
    assert!(fx.st.queue_named("q").unwrap().dlq.is_empty());
    fx.assert_replays();
}
