//! Pops and reads of a partition whose oldest messages were forgotten with their lost log
//! records (accept_data_loss, state/forget.rs): the survivors are delivered, while an entry
//! missing above the log's start is still an error (corruption, not an accepted loss).

use queenmq_protocol::ErrorCode;

use super::fixture::{pop_req, Fixture, MemLog, NOW};
use super::PopPlan;
use crate::entry::Effect;
use crate::reader::MessageReader;
use crate::state::config::QueueConfig;
use crate::state::frame::write_frame;
use crate::state::{Loc, State};

fn frames(txns: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, txn) in txns.iter().enumerate() {
        write_frame(&mut out, &[i as u8; 16], None, txn, None, txn.as_bytes());
    }
    out
}

/// Queue "q", partition "p" (pid 1): offsets 0..3 in entry 3, 3..5 in entry 7. The log holds
/// only the entries in `held`; any other index is missing.
fn fixture(held: &[u64]) -> Fixture {
    let mut st = State::default();
    st.seed_queue(
        1,
        "q",
        QueueConfig::default(),
        &[(1, "p")],
        Loc { index: 1, pos: 0 },
    );
    let mut log = MemLog::default();
    for (index, base, txns) in [(3, 0, &["m0", "m1", "m2"][..]), (7, 3, &["m3", "m4"][..])] {
        let bytes = frames(txns);
        st.apply(
            &Effect::Append {
                pid: 1,
                base_offset: base,
                hashes: (0..txns.len() as u64).collect(),
                frames: &bytes,
            },
            NOW,
            Loc { index, pos: 0 },
        );
        if held.contains(&index) {
            log.entries.insert(index, bytes);
        }
    }
    st.last_cycle = 1;
    Fixture::over(st, log)
}

fn plan_pop(fx: &mut Fixture) -> Result<Vec<(u64, String)>, String> {
    match fx.planner().plan_pop(&pop_req("q", 10)) {
        Ok(PopPlan::Delivered(r)) => Ok(r
            .messages
            .into_iter()
            .map(|m| (m.offset, m.transaction_id))
            .collect()),
        Ok(PopPlan::Empty(_)) => Ok(Vec::new()),
        Err(e) => {
            assert_eq!(e.code, ErrorCode::Internal);
            Err(e.message)
        }
    }
}

#[test]
fn the_survivors_of_a_forgotten_log_start_are_popped() {
    let mut fx = fixture(&[7]);
    // Before forgetting: the partition head points into the lost entry, for ever.
    let e = plan_pop(&mut fx).expect_err("entry 3 is gone");
    assert!(e.contains("log entry 3 is missing"), "{e}");

    let gone = fx.st.forget_runs_below(6);
    assert_eq!((gone[0].from, gone[0].to), (0, 3));
    let got = plan_pop(&mut fx).expect("the survivors are readable");
    assert_eq!(got, vec![(3, "m3".to_string()), (4, "m4".to_string())]);

    // A read from below the first held offset (a message listing) starts at it.
    let mut reader = MessageReader {
        pending: &[],
        cache: &mut fx.cache,
        log: &fx.log,
        seal: None,
    };
    let p = fx.st.partitions.get(&1).unwrap();
    let listed: Vec<u64> = reader
        .read(p, 0, 5)
        .unwrap()
        .iter()
        .map(|m| m.offset)
        .collect();
    assert_eq!(listed, vec![3, 4]);
    assert!(reader.read_one(p, 1).unwrap().is_none());
    assert!(!reader.txn_is(p, 1, "m1"));
}

#[test]
fn an_entry_missing_above_the_log_start_still_fails_the_pop() {
    // Entry 3 is held, entry 7 (above the start) is not: corruption, not a forgotten loss.
    let mut fx = fixture(&[3]);
    assert!(fx.st.forget_runs_below(3).is_empty());
    let e = plan_pop(&mut fx).expect_err("entry 7 is missing");
    assert!(e.contains("log entry 7 is missing"), "{e}");
}
