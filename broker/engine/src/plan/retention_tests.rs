//! Retention decisions, each rule on its own, and their replay.

use queenmq_protocol::{AckStatus, Setting};

use super::fixture::{opts, Fixture, SECOND};
use super::retention::{RetentionSweep, RETENTION_TRIMS_PER_CYCLE, RETENTION_WORK_PER_CYCLE};
use crate::state::model::Partition;

/// Runs one whole sweep, a cycle at a time; messages removed.
pub(super) fn sweep(f: &mut Fixture) -> u64 {
    let mut s = RetentionSweep::default();
    s.start();
    let mut removed = 0;
    while s.running() {
        removed += f
            .planner()
            .plan_retention(&mut s, usize::MAX)
            .iter()
            .map(|(_, n)| n)
            .sum::<u64>();
        f.commit();
    }
    removed
}

fn partition<'a>(f: &'a Fixture, queue: &str, name: &str) -> &'a Partition {
    let q = f.st.queue_named(queue).expect("queue");
    let pid = q.partitions.get(name, &f.st.partitions).expect("partition");
    f.st.partitions.get(&pid).expect("row")
}

fn low(f: &Fixture, queue: &str) -> (u64, u64) {
    let p = partition(f, queue, "p");
    (p.low_offset(), p.next_offset)
}

#[test]
fn age_retention_removes_what_is_older_consumed_or_not_and_only_that() {
    let mut f = Fixture::new();
    f.configure(
        "q",
        opts(|o| {
            o.retention_enabled = Some(Setting::Value(true));
            o.retention_seconds = Some(Setting::Value(10));
        }),
    );
    f.push("q", "p", 3);
    f.advance(5 * SECOND);
    f.push("q", "p", 2);
    f.advance(5 * SECOND + 1);
    assert_eq!(sweep(&mut f), 3, "the first three are older than 10 s");
    assert_eq!(low(&f, "q"), (3, 5));
    assert_eq!(sweep(&mut f), 0, "nothing more is due");
    let got = f.pop("q", None, 10, None);
    let offsets: Vec<u64> = got.messages.iter().map(|m| m.offset).collect();
    assert_eq!(offsets, vec![3, 4], "unconsumed messages went too");
    f.advance(5 * SECOND);
    assert_eq!(sweep(&mut f), 2);
    assert_eq!(low(&f, "q"), (5, 5));
    f.assert_replays();
}

#[test]
fn the_switch_off_keeps_everything() {
    let mut f = Fixture::new();
    f.configure(
        "q",
        opts(|o| {
            o.retention_seconds = Some(Setting::Value(1));
            o.completed_retention_seconds = Some(Setting::Value(1));
        }),
    );
    f.push("q", "p", 4);
    let got = f.pop("q", None, 10, None);
    f.ack(&got, AckStatus::Completed);
    f.advance(3600 * SECOND);
    assert_eq!(sweep(&mut f), 0);
    assert_eq!(low(&f, "q"), (0, 4));
}

#[test]
fn completion_retention_never_passes_the_slowest_group_and_removes_whole_runs_only() {
    let mut f = Fixture::new();
    f.configure(
        "q",
        opts(|o| {
            o.retention_enabled = Some(Setting::Value(true));
            o.completed_retention_seconds = Some(Setting::Value(1));
        }),
    );
    f.push("q", "p", 2);
    f.commit();
    f.push("q", "p", 3);
    f.advance(SECOND);
    assert_eq!(sweep(&mut f), 0, "no group has completed anything");
    let fast = f.pop("q", Some("fast"), 5, None);
    assert_eq!(f.ack(&fast, AckStatus::Completed).len(), 5);
    let mut slow = f.pop("q", Some("slow"), 3, None);
    f.ack(&slow, AckStatus::Completed);
    f.advance(2 * SECOND);
    assert_eq!(
        sweep(&mut f),
        2,
        "what the slow group completed, down to a run's start"
    );
    assert_eq!(low(&f, "q"), (2, 5));
    let run = partition(&f, "q", "p").runs.first().unwrap();
    assert_eq!(
        (run.base_offset, run.count),
        (2, 3),
        "the cut run is kept whole"
    );
    slow = f.pop("q", Some("slow"), 5, None);
    let seen: Vec<(u64, String)> = slow
        .messages
        .iter()
        .map(|m| (m.offset, m.transaction_id.clone()))
        .collect();
    assert_eq!(
        seen,
        vec![(3, "m4".into()), (4, "m5".into())],
        "the slow group goes on where it was"
    );
    f.advance(SECOND);
    f.assert_replays();
    f.ack(&slow, AckStatus::Completed);
    f.advance(2 * SECOND);
    assert_eq!(sweep(&mut f), 3);
    assert_eq!(low(&f, "q"), (5, 5));
    f.assert_replays();
}

#[test]
fn a_slice_stops_when_its_work_is_spent_counting_the_groups() {
    let mut f = Fixture::new();
    f.configure(
        "q",
        opts(|o| o.max_wait_time_seconds = Some(Setting::Value(3600))),
    );
    let groups = 15;
    let parts = RETENTION_WORK_PER_CYCLE / (groups + 1) + 10;
    for i in 0..parts {
        f.push("q", &format!("p{i}"), 1);
        if i % 500 == 499 {
            f.commit();
        }
    }
    for g in 0..groups {
        f.pop("q", Some(&format!("g{g}")), 1, None);
    }
    f.commit();
    let mut s = RetentionSweep::default();
    s.start();
    f.planner().plan_retention(&mut s, usize::MAX);
    assert!(s.running(), "the groups' work ended the slice early");
    f.commit();
    f.planner().plan_retention(&mut s, usize::MAX);
    assert!(!s.running());
}

#[test]
fn completion_retention_waits_for_the_age() {
    let mut f = Fixture::new();
    f.configure(
        "q",
        opts(|o| {
            o.retention_enabled = Some(Setting::Value(true));
            o.completed_retention_seconds = Some(Setting::Value(60));
        }),
    );
    f.push("q", "p", 2);
    let got = f.pop("q", None, 2, None);
    f.ack(&got, AckStatus::Completed);
    f.advance(30 * SECOND);
    assert_eq!(sweep(&mut f), 0, "completed but younger than 60 s");
    f.advance(31 * SECOND);
    assert_eq!(sweep(&mut f), 2);
}

#[test]
fn max_wait_time_removes_a_leased_message_and_ignores_the_switch() {
    let mut f = Fixture::new();
    f.configure(
        "q",
        opts(|o| o.max_wait_time_seconds = Some(Setting::Value(5))),
    );
    f.push("q", "p", 3);
    let held = f.pop("q", None, 3, Some(600));
    assert_eq!(held.messages.len(), 3);
    f.advance(6 * SECOND);
    assert_eq!(sweep(&mut f), 3);
    assert_eq!(low(&f, "q"), (3, 3));
    let row = f.group("q", None).cursors.values().next().copied();
    assert_eq!(row.map(|r| (r.committed, r.lease)), Some((3, None)));
    assert!(f.st.leases.is_empty(), "the lease ended");
    let acks = f.ack(&held, AckStatus::Completed);
    assert!(acks.iter().all(|a| !a.success));
    let why = acks[0].error.as_ref().map(|e| e.message.clone());
    assert_eq!(why.as_deref(), Some("invalid or expired lease"));
    f.assert_replays();
}

#[test]
fn a_sweep_is_bounded_per_cycle_and_resumes_where_it_stopped() {
    let mut f = Fixture::new();
    f.configure(
        "q",
        opts(|o| o.max_wait_time_seconds = Some(Setting::Value(1))),
    );
    let n = RETENTION_TRIMS_PER_CYCLE + 5;
    for i in 0..n {
        f.push("q", &format!("p{i}"), 1);
        if i % 500 == 499 {
            f.commit();
        }
    }
    f.advance(2 * SECOND);
    let mut s = RetentionSweep::default();
    s.start();
    let first = f.planner().plan_retention(&mut s, usize::MAX);
    assert_eq!(
        first.iter().map(|(_, n)| n).sum::<u64>(),
        RETENTION_TRIMS_PER_CYCLE as u64
    );
    assert!(s.running(), "the rest waits for the next cycle");
    f.commit();
    let second = f.planner().plan_retention(&mut s, usize::MAX);
    assert_eq!(second.iter().map(|(_, n)| n).sum::<u64>(), 5);
    assert!(!s.running());
    f.assert_replays();
}

#[test]
fn a_full_entry_stops_the_sweep_before_it_passes_the_limit() {
    let mut f = Fixture::new();
    f.configure(
        "q",
        opts(|o| o.max_wait_time_seconds = Some(Setting::Value(1))),
    );
    f.push("q", "a", 1);
    f.push("q", "b", 1);
    f.advance(2 * SECOND);
    let mut s = RetentionSweep::default();
    s.start();
    let room = f.cycle.entry.len() + 17;
    let got = f.planner().plan_retention(&mut s, room);
    assert_eq!(got.iter().map(|(_, n)| n).sum::<u64>(), 1);
    assert!(f.cycle.entry.len() <= room);
    assert!(s.running());
    f.commit();
    assert_eq!(f.planner().plan_retention(&mut s, usize::MAX).len(), 1);
}

#[test]
fn a_forward_step_of_the_wall_clock_does_not_age_messages_faster_than_time_passes() {
    let mut f = Fixture::new();
    f.configure(
        "q",
        opts(|o| o.max_wait_time_seconds = Some(Setting::Value(60))),
    );
    f.push("q", "p", 2);
    f.commit();
    let mut s = RetentionSweep::default();
    let run = |f: &mut Fixture, s: &mut RetentionSweep, since_us: i64| {
        let now = f.planner().now();
        s.start_at(now, since_us);
        let mut removed = 0;
        while s.running() {
            removed += f
                .planner()
                .plan_retention(s, usize::MAX)
                .iter()
                .map(|(_, n)| n)
                .sum::<u64>();
            f.commit();
        }
        removed
    };
    assert_eq!(run(&mut f, &mut s, 0), 0);
    f.advance(3600 * SECOND);
    assert_eq!(
        run(&mut f, &mut s, SECOND),
        0,
        "one second passed, not an hour"
    );
    assert_eq!(low(&f, "q"), (0, 2));
    assert_eq!(
        run(&mut f, &mut s, 30 * SECOND),
        2,
        "61 s of real time passed"
    );
    f.assert_replays();
}
