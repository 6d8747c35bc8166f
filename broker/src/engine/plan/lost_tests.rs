//! Pops and reads of a partition whose oldest messages were forgotten with their lost log
//! records (accept_data_loss, state/forget.rs): the survivors are delivered, while an entry
//! missing above the log's start is still an error (corruption, not an accepted loss).

use std::collections::HashMap;

use queenmq_protocol::{ErrorCode, PopReq, PopSource, Subscription};

use super::{Planner, PopPlan};
use crate::engine::cache::EntryCache;
use crate::engine::cycle::Cycle;
use crate::engine::log::{LogStatus, ProposeFuture, ReplicatedLog};
use crate::engine::reader::MessageReader;
use crate::entry::Effect;
use crate::state::config::QueueConfig;
use crate::state::frame::write_frame;
use crate::state::{Loc, State};

const NOW: i64 = 1_764_700_000_000_000;

/// A log holding only the given entries (application payloads); any other index is missing.
struct PartialLog(HashMap<u64, Vec<u8>>);

impl ReplicatedLog for PartialLog {
    fn propose(&self, _payload: Vec<u8>) -> ProposeFuture {
        Box::pin(async { Err("no proposals in this test".to_string()) })
    }
    fn read(&self, index: u64) -> Result<Option<Vec<u8>>, String> {
        Ok(self.0.get(&index).cloned())
    }
    fn status(&self) -> LogStatus {
        LogStatus::default()
    }
}

fn frames(txns: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, txn) in txns.iter().enumerate() {
        write_frame(&mut out, &[i as u8; 16], None, txn, None, txn.as_bytes());
    }
    out
}

/// Queue "q", partition "p" (pid 1): offsets 0..3 in entry 3, 3..5 in entry 7.
fn state() -> (State, Vec<u8>, Vec<u8>) {
    let mut st = State::default();
    let loc = |index| Loc { index, pos: 0 };
    st.apply(
        &Effect::QueueUpsert {
            qid: 1,
            name: "q",
            namespace: "",
            task: "",
            configured: true,
            config: QueueConfig::default(),
        },
        NOW,
        loc(1),
    );
    st.apply(
        &Effect::PartitionCreate {
            qid: 1,
            pid: 1,
            name: "p",
        },
        NOW,
        loc(1),
    );
    let old = frames(&["m0", "m1", "m2"]);
    let new = frames(&["m3", "m4"]);
    for (index, base, bytes, n) in [(3, 0, &old, 3u64), (7, 3, &new, 2)] {
        st.apply(
            &Effect::Append {
                pid: 1,
                base_offset: base,
                hashes: (0..n).collect(),
                frames: bytes,
            },
            NOW,
            loc(index),
        );
    }
    st.last_cycle = 1;
    (st, old, new)
}

fn pop() -> PopReq {
    PopReq {
        source: PopSource::Queue("q".into()),
        group: None,
        batch: 10,
        partitions: 1,
        wait: false,
        timeout_ms: 0,
        auto_ack: false,
        subscription: Subscription::All,
        lease_seconds: None,
        autopilot: false,
    }
}

fn plan_pop(st: &mut State, log: &PartialLog) -> Result<Vec<(u64, String)>, String> {
    let mut cycle = Cycle::new(2, NOW + 1);
    let mut cache = EntryCache::new(1 << 20);
    let mut p = Planner {
        st,
        cycle: &mut cycle,
        cache: &mut cache,
        log,
        memory: None,
    };
    match p.plan_pop(&pop()) {
        Ok(PopPlan::Delivered(r)) => Ok(r
            .messages
            .into_iter()
            .map(|m| (m.offset, m.transaction_id))
            .collect()),
        Ok(PopPlan::Empty) => Ok(Vec::new()),
        Err(e) => {
            assert_eq!(e.code, ErrorCode::Internal);
            Err(e.message)
        }
    }
}

#[test]
fn the_survivors_of_a_forgotten_log_start_are_popped() {
    let (mut st, _, new) = state();
    let log = PartialLog(HashMap::from([(7, new)]));
    // Before forgetting: the partition head points into the lost entry, for ever.
    let e = plan_pop(&mut st, &log).expect_err("entry 3 is gone");
    assert!(e.contains("log entry 3 is missing"), "{e}");

    let gone = st.forget_runs_below(6);
    assert_eq!((gone[0].from, gone[0].to), (0, 3));
    let got = plan_pop(&mut st, &log).expect("the survivors are readable");
    assert_eq!(got, vec![(3, "m3".to_string()), (4, "m4".to_string())]);

    // A read from below the first held offset (a message listing) starts at it.
    let mut cache = EntryCache::new(1 << 20);
    let mut reader = MessageReader {
        pending: &[],
        cache: &mut cache,
        log: &log,
    };
    let p = st.partitions.get(&1).unwrap();
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
    let (mut st, old, _) = state();
    // Entry 3 is held, entry 7 (above the start) is not: corruption, not a forgotten loss.
    let log = PartialLog(HashMap::from([(3, old)]));
    assert!(st.forget_runs_below(3).is_empty());
    let e = plan_pop(&mut st, &log).expect_err("entry 7 is missing");
    assert!(e.contains("log entry 7 is missing"), "{e}");
}
