//! A seek's instant and the partitions created after it (review A2, A11).

use queenmq_protocol::{AckStatus, GroupAdminReq, Setting};

use super::fixture::{opts, Fixture, SECOND};
use super::retention_tests::sweep;

const YEAR: i64 = 365 * 24 * 3600 * SECOND;

fn seek(fx: &mut Fixture, to_end: bool, timestamp_us: Option<i64>) {
    let req = GroupAdminReq::Seek {
        group: "g".into(),
        queue: "q".into(),
        to_end,
        timestamp_us,
    };
    assert!(fx.planner().plan_group_admin(&req).is_ok());
    fx.commit();
}

/// Group `g` has read and completed partition p1; returns the fixture.
fn group_done_with_p1(configure: bool) -> Fixture {
    let mut fx = Fixture::new();
    if configure {
        fx.configure(
            "q",
            opts(|o| {
                o.retention_enabled = Some(Setting::Value(true));
                o.completed_retention_seconds = Some(Setting::Value(1));
            }),
        );
    }
    fx.push("q", "p1", 1);
    fx.commit();
    let got = fx.pop("q", Some("g"), 10, None);
    assert_eq!(got.messages.len(), 1);
    assert!(fx.ack(&got, AckStatus::Completed)[0].success);
    fx.commit();
    fx
}

#[test]
fn a_seek_to_the_future_leaves_later_partitions_readable() {
    let mut fx = group_done_with_p1(false);
    let future = fx.planner().now() + YEAR;
    seek(&mut fx, false, Some(future));
    fx.advance(SECOND);
    fx.push("q", "p2", 3);
    fx.commit();
    let got = fx.pop("q", Some("g"), 10, None);
    assert_eq!(
        got.messages.len(),
        3,
        "as on main: the new partition is read"
    );
    assert!(fx.group("q", Some("g")).start_from_us < future);
    fx.assert_replays();
}

#[test]
fn completed_retention_keeps_what_a_future_seek_did_not_deliver() {
    let mut fx = group_done_with_p1(true);
    let future = fx.planner().now() + YEAR;
    seek(&mut fx, false, Some(future));
    fx.advance(SECOND);
    fx.push("q", "p2", 3);
    fx.commit();
    fx.advance(10 * SECOND);
    sweep(&mut fx);
    let got = fx.pop("q", Some("g"), 10, None);
    assert_eq!(got.messages.len(), 3, "not removed as completed");
}

#[test]
fn a_seek_to_the_end_replaces_an_earlier_seek_instant() {
    let mut fx = group_done_with_p1(false);
    let past = fx.planner().now() - 60 * SECOND;
    seek(&mut fx, false, Some(past));
    assert_eq!(fx.group("q", Some("g")).start_from_us, past);
    fx.advance(SECOND);
    let at = fx.planner().now();
    seek(&mut fx, true, None);
    assert_eq!(fx.group("q", Some("g")).start_from_us, at);
    fx.assert_replays();
}
