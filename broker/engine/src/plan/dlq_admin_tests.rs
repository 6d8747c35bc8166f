//! Conflation (last-value delivery) and dead-letter administration, planned and replayed.

use queenmq_protocol::{
    AckStatus, ConflationEcho, DlqAdminOutcome, DlqAdminReq, DlqQuery, ErrorCode, PopResult,
};

use super::fixture::{pop_req, Fixture, SECOND};
use super::PopPlan;

/// A pop of up to ten partitions of `queue` for `group`, asking conflation or not.
fn pop(fx: &mut Fixture, queue: &str, group: &str, ask: bool) -> (PopResult, ConflationEcho) {
    let mut req = pop_req(queue, 10);
    req.group = Some(group.into());
    req.conflation = ask;
    req.partitions = 10;
    match fx.planner().plan_pop(&req) {
        Ok(PopPlan::Delivered(r)) => {
            let echo = r.echo;
            (r, echo)
        }
        Ok(PopPlan::Empty(e)) => (PopResult::default(), e),
        Err(e) => panic!("pop: {}", e.message),
    }
}

fn txns(r: &PopResult) -> Vec<&str> {
    r.messages
        .iter()
        .map(|m| m.transaction_id.as_str())
        .collect()
}

#[test]
fn a_conflating_group_gets_the_newest_message_per_partition_and_retires_the_rest() {
    let mut fx = Fixture::new();
    fx.push("q", "a", 3); // m1..m3
    fx.push("q", "b", 2); // m4, m5
    fx.advance(SECOND);
    let (r, echo) = pop(&mut fx, "q", "last", true);
    assert_eq!(
        echo,
        ConflationEcho {
            conflation: true,
            conflict: false
        }
    );
    let mut got = txns(&r);
    got.sort();
    assert_eq!(got, vec!["m3", "m5"]);
    fx.ack(&r, AckStatus::Completed);
    fx.advance(SECOND);
    let (again, echo) = pop(&mut fx, "q", "last", true);
    assert!(
        again.messages.is_empty(),
        "everything behind the newest was retired"
    );
    assert!(
        echo.conflation && !echo.conflict,
        "an empty answer echoes too"
    );
    // Another group of the same queue is untouched and delivers every message.
    let (every, echo) = pop(&mut fx, "q", "every", false);
    assert_eq!(echo, ConflationEcho::default());
    assert_eq!(every.messages.len(), 5, "{:?}", txns(&every));
    fx.assert_replays();
}

#[test]
fn the_stored_policy_wins_and_a_mismatch_is_echoed() {
    let mut fx = Fixture::new();
    fx.push("q", "a", 2);
    fx.advance(SECOND);
    let (r, _) = pop(&mut fx, "q", "plain", false);
    assert_eq!(txns(&r), vec!["m1", "m2"]);
    fx.ack(&r, AckStatus::Completed);
    fx.push("q", "a", 2);
    fx.advance(SECOND);
    // Asking conflation of a group registered without it: every message, and a conflict.
    let (r, echo) = pop(&mut fx, "q", "plain", true);
    assert_eq!(
        echo,
        ConflationEcho {
            conflation: false,
            conflict: true
        }
    );
    assert_eq!(txns(&r), vec!["m3", "m4"]);
    // The other way: a conflating group popped without the flag still conflates.
    fx.push("q", "b", 3); // m5..m7
    fx.advance(SECOND);
    let (r, _) = pop(&mut fx, "q", "lv", true);
    let mut got = txns(&r);
    got.sort();
    assert_eq!(got, vec!["m4", "m7"]);
    fx.ack(&r, AckStatus::Completed);
    fx.push("q", "b", 2); // m8, m9
    fx.advance(SECOND);
    let (r, echo) = pop(&mut fx, "q", "lv", false);
    assert_eq!(
        echo,
        ConflationEcho {
            conflation: true,
            conflict: true
        }
    );
    assert_eq!(txns(&r), vec!["m9"]);
    fx.assert_replays();
}

#[test]
fn conflation_is_refused_without_a_group_and_with_auto_ack() {
    let mut fx = Fixture::new();
    fx.push("q", "a", 1);
    fx.advance(SECOND);
    let mut req = pop_req("q", 1);
    req.conflation = true;
    let e = fx.planner().plan_pop(&req).err().expect("refused");
    assert_eq!(e.code, ErrorCode::BadRequest);
    req.group = Some("g".into());
    req.auto_ack = true;
    let e = fx.planner().plan_pop(&req).err().expect("refused");
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert!(fx.cycle.entry.is_empty(), "a refusal registers nothing");
}

/// Pushes one message to q/a, pops it for group g and dead-letters it.
fn dead_lettered(fx: &mut Fixture) -> (u64, String) {
    let before = fx.st.queue_named("q").map_or(0, |q| q.dlq.len());
    fx.push("q", "a", 1);
    fx.advance(SECOND);
    let (r, _) = pop(fx, "q", "g", false);
    let m = &r.messages[0];
    let (pid, txn) = (m.partition_id, m.transaction_id.clone());
    fx.ack(&r, AckStatus::Dlq);
    fx.advance(SECOND);
    assert_eq!(
        fx.st.queue_named("q").map(|q| q.dlq.len()),
        Some(before + 1)
    );
    (pid, txn)
}

#[test]
fn delete_removes_a_dead_letter_row_and_a_live_message_is_not_found() {
    let mut fx = Fixture::new();
    let (pid, txn) = dead_lettered(&mut fx);
    fx.push("q", "a", 1); // m2, live
    fx.advance(SECOND);
    let live = DlqAdminReq::Delete {
        partition_id: pid.to_string(),
        transaction_id: "m2".into(),
    };
    let e = fx.planner().plan_dlq_admin(&live).expect_err("live");
    assert_eq!(e.code, ErrorCode::NotFound);
    let req = DlqAdminReq::Delete {
        partition_id: pid.to_string(),
        transaction_id: txn.clone(),
    };
    let out = fx.planner().plan_dlq_admin(&req).expect("deleted");
    assert!(
        matches!(out, DlqAdminOutcome::Deleted { rows: 1, .. }),
        "{out:?}"
    );
    fx.assert_replays();
    assert_eq!(fx.st.queue_named("q").map(|q| q.dlq.len()), Some(0));
    let e = fx.planner().plan_dlq_admin(&req).expect_err("gone");
    assert_eq!(e.code, ErrorCode::NotFound);
}

#[test]
fn retry_appends_the_message_again_for_its_group_once() {
    let mut fx = Fixture::new();
    let (pid, txn) = dead_lettered(&mut fx);
    let req = DlqAdminReq::Retry {
        partition_id: pid.to_string(),
        transaction_id: txn.clone(),
    };
    let out = fx.planner().plan_dlq_admin(&req).expect("retried");
    let DlqAdminOutcome::Retried {
        new_transaction_id,
        queued,
        ..
    } = out
    else {
        panic!("{out:?}");
    };
    assert!(queued);
    fx.assert_replays();
    assert_eq!(fx.st.queue_named("q").map(|q| q.dlq.len()), Some(0));
    let (r, _) = pop(&mut fx, "q", "g", false);
    assert_eq!(txns(&r), vec![new_transaction_id.as_str()]);
    assert_eq!(&r.messages[0].payload[..], b"\"m1\"");
    let e = fx.planner().plan_dlq_admin(&req).expect_err("no row left");
    assert_eq!(e.code, ErrorCode::NotFound);
}

#[test]
fn purge_removes_only_the_rows_its_filter_matches() {
    let mut fx = Fixture::new();
    dead_lettered(&mut fx);
    dead_lettered(&mut fx);
    let purge = |group: Option<&str>| {
        DlqAdminReq::Purge(DlqQuery {
            queue: Some("q".into()),
            group: group.map(str::to_string),
            ..Default::default()
        })
    };
    let out = fx
        .planner()
        .plan_dlq_admin(&purge(Some("other")))
        .expect("purged");
    assert!(
        matches!(out, DlqAdminOutcome::Purged { rows: 0, .. }),
        "{out:?}"
    );
    let out = fx
        .planner()
        .plan_dlq_admin(&purge(Some("g")))
        .expect("purged");
    assert!(
        matches!(out, DlqAdminOutcome::Purged { rows: 2, .. }),
        "{out:?}"
    );
    fx.assert_replays();
    assert_eq!(fx.st.queue_named("q").map(|q| q.dlq.len()), Some(0));
    let missing = DlqAdminReq::Purge(DlqQuery::default());
    let e = fx.planner().plan_dlq_admin(&missing).expect_err("no queue");
    assert_eq!(e.code, ErrorCode::BadRequest);
}
