//! Review s19 ephemeral H1: a pop without a partition does not give the rings pushed since the
//! group last looked strict priority over those it must look at again (partly taken, nacked,
//! lease ended), so a steady push elsewhere does not starve them.

use super::bounds_tests::store;
use super::tests::msgs;
use super::*;

fn one(auto_ack: bool) -> PopAsk<'static> {
    PopAsk {
        queue: "q",
        partition: None,
        group: None,
        batch: 1,
        auto_ack,
        existing: false,
    }
}

/// 40 rounds of one push to a new partition and one pop of batch 1: what `b` holds comes out.
fn rounds_answer_b(s: &Store) -> Vec<EphemeralMessage> {
    let mut from_b = Vec::new();
    for i in 0..40 {
        s.push("t", "q", Some(&format!("a{i}")), msgs(1)).unwrap();
        from_b.extend(
            s.pop("t", &one(true))
                .unwrap()
                .into_iter()
                .filter(|m| m.partition == "b"),
        );
    }
    from_b
}

#[test]
fn a_partly_taken_ring_is_not_starved_by_pushes_elsewhere() {
    let s = store();
    s.declare("t", "q", EphemeralOptions::default());
    s.push("t", "q", Some("b"), msgs(5)).unwrap();
    let first = s.pop("t", &one(true)).unwrap();
    assert_eq!(first[0].payload.to_string(), "0");
    let got: Vec<String> = rounds_answer_b(&s)
        .iter()
        .map(|m| m.payload.to_string())
        .collect();
    assert_eq!(got, ["1", "2", "3", "4"]);
}

#[test]
fn a_nacked_message_is_not_starved_by_pushes_elsewhere() {
    let s = store();
    s.declare("t", "q", EphemeralOptions::default());
    s.push("t", "q", Some("b"), msgs(1)).unwrap();
    let got = s.pop("t", &one(false)).unwrap().remove(0);
    let nack = vec![(got.id, AckStatus::Retry)];
    assert_eq!(s.ack("t", "q", None, &nack), [AckOutcome::Redelivered]);
    let back = rounds_answer_b(&s);
    assert_eq!(back.len(), 1, "the nacked message never came back");
    assert_eq!(back[0].attempts, 2);
}

#[tokio::test(start_paused = true)]
async fn an_ended_lease_is_not_starved_by_pushes_elsewhere() {
    let s = store();
    let options = EphemeralOptions {
        lease_seconds: 1,
        ..EphemeralOptions::default()
    };
    s.declare("t", "q", options);
    s.push("t", "q", Some("b"), msgs(1)).unwrap();
    assert_eq!(s.pop("t", &one(false)).unwrap().len(), 1);
    tokio::time::advance(Duration::from_secs(2)).await;
    let back = rounds_answer_b(&s);
    assert_eq!(
        back.len(),
        1,
        "the message whose lease ended never came back"
    );
    assert_eq!(back[0].attempts, 2);
}
