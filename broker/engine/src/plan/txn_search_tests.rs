//! The dedup lookups' searches of the id files by time (review s33 H1, H2): a lookup searches
//! its own queue's window, and a cycle's searches past the filters' hour are bounded.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use queenmq_protocol::{
    AckStatus, DlqAdminOutcome, DlqAdminReq, ErrorCode, ReadAnswer, ReadReq, Setting, TraceOutcome,
    TraceReq,
};

use super::fixture::{ack_items, item, opts, Fixture, SECOND};
use crate::dedup_filter::FilterConfig;
use crate::state::{bucket_of, IdStore, TxnSpill, BY_TIME_SEARCHES_PER_CYCLE};

const HOUR: i64 = 3600 * SECOND;
const WEEK: i64 = 7 * 24 * HOUR;

/// One file of unrelated keys per bucket; counts the bucket searches.
struct Buckets {
    files: BTreeMap<u64, Vec<u64>>,
    finds: Arc<AtomicUsize>,
}

impl IdStore for Buckets {
    fn write(&self, _: u64, _: &mut [(u64, u64)]) -> Result<(), String> {
        Ok(())
    }
    fn buckets(&self) -> Vec<u64> {
        self.files.keys().copied().collect()
    }
    fn keys(&self, bucket: u64, each: &mut dyn FnMut(u64)) -> Result<(), String> {
        self.files
            .get(&bucket)
            .into_iter()
            .flatten()
            .for_each(|k| each(*k));
        Ok(())
    }
    fn find(&self, _: u64, _: u64, _: &mut dyn FnMut(u64) -> bool) -> Result<Option<u64>, String> {
        self.finds.fetch_add(1, Ordering::Relaxed);
        Ok(None)
    }
    fn merge(&self, _: u64) {}
    fn remove_before(&self, _: u64) {}
}

/// A fixture with a 7-day queue `week` and a 1 h queue `hour` (one partition each), whose
/// group spilled one file a minute over the `minutes` before the filters' hour.
fn spilled(minutes: u64) -> (Fixture, Arc<AtomicUsize>, u64, u64) {
    let mut fx = Fixture::new();
    fx.configure(
        "week",
        opts(|o| o.dedup_window_seconds = Some(Setting::Value(WEEK / SECOND))),
    );
    fx.configure(
        "hour",
        opts(|o| o.dedup_window_seconds = Some(Setting::Value(3600))),
    );
    let week = fx.push("week", "p", 1)[0].partition_id;
    let hour = fx.push("hour", "p", 1)[0].partition_id;
    fx.commit();
    let now = fx.cycle.now_us;
    let edge = bucket_of(now - HOUR);
    let files = (0..minutes)
        .map(|m| (edge - 1 - m, vec![0xdead_0000 + m]))
        .collect();
    let finds = Arc::new(AtomicUsize::new(0));
    let store = Buckets {
        files,
        finds: finds.clone(),
    };
    let filter = FilterConfig {
        bytes: 64 << 10,
        ..FilterConfig::default()
    };
    let keep = fx.st.txn_keep_us();
    assert_eq!(keep, WEEK);
    fx.st.txn_spill = Some(Box::new(TxnSpill::open(
        Box::new(store),
        16,
        filter,
        keep,
        now,
    )));
    (fx, finds, week, hour)
}

#[test]
fn an_unknown_id_on_an_hour_queue_does_not_search_a_week_queues_buckets() {
    // Review s33 H2: `resolve_txn` searched with the group's longest window, so an ack (or a
    // trace, a DLQ action) naming an unknown id on the 1 h queue searched every bucket of
    // the 7-day queue past the filters' hour.
    let (mut fx, finds, _, hour) = spilled(120);
    assert_eq!(
        fx.planner().resolve_txn(hour, "nobody-sent-this", None),
        Ok(None)
    );
    assert_eq!(
        finds.load(Ordering::Relaxed),
        0,
        "bucket searches for a 1 h queue"
    );
}

#[test]
fn a_cycle_stops_searching_by_time_at_its_budget_and_refuses_retryably() {
    // Review s33 H1: a new id pushed to a 7-day queue searched every bucket past the hour,
    // per item, under the group's lock (2 000 here). Now a cycle searches at most
    // BY_TIME_SEARCHES_PER_CYCLE of them; past it the push is refused (503), nothing written.
    let (mut fx, finds, week, _) = spilled(2_000);
    let before = next(&fx, week);
    let items = [item("week", "p", "new-1"), item("week", "p", "new-2")];
    let e = fx.planner().plan_push(&items, None).unwrap_err();
    assert_eq!(e.code, ErrorCode::Unavailable);
    assert!(e.message.contains("dedup_search_budget"), "{}", e.message);
    assert_eq!(finds.load(Ordering::Relaxed), BY_TIME_SEARCHES_PER_CYCLE);
    // The same cycle has nothing left: the next lookup by time is refused without a search,
    // an ack's too; a 1 h queue's push still goes through.
    let e = fx.planner().plan_push(&items[1..], None).unwrap_err();
    assert!(e.message.contains("dedup_search_budget"), "{}", e.message);
    let e = fx.planner().resolve_txn(week, "new-3", None).unwrap_err();
    assert_eq!(e.code, ErrorCode::Unavailable);
    assert_eq!(finds.load(Ordering::Relaxed), BY_TIME_SEARCHES_PER_CYCLE);
    assert!(fx
        .planner()
        .plan_push(&[item("hour", "p", "new-4")], None)
        .is_ok());
    fx.commit();
    assert_eq!(next(&fx, week), before, "nothing written");
    // A later cycle has its budget again.
    fx.advance(SECOND);
    assert!(fx.planner().plan_push(&items, None).is_err());
    assert_eq!(
        finds.load(Ordering::Relaxed),
        2 * BY_TIME_SEARCHES_PER_CYCLE
    );
    // A window whose spilled buckets fit the budget is searched whole and pushed.
    let (mut fx, finds, week, _) = spilled(200);
    let before = next(&fx, week);
    assert!(fx.planner().plan_push(&items[..1], None).is_ok());
    assert_eq!(finds.load(Ordering::Relaxed), 200);
    fx.commit();
    assert_eq!(next(&fx, week), before + 1);
}

#[test]
fn a_refused_search_by_time_resumes_where_it_stopped() {
    // Review s34 d H1 (c): a lookup refused at the cycle's budget started again from the
    // newest bucket at every retry, so an id needing more than BY_TIME_SEARCHES_PER_CYCLE
    // searches was refused at every try, for good. Now each try starts where the last stopped.
    let (mut fx, finds, week, _) = spilled(2_000);
    let before = next(&fx, week);
    let items = [item("week", "p", "new-1")];
    let mut tries = 0;
    loop {
        tries += 1;
        let pushed = fx.planner().plan_push(&items, None);
        fx.advance(SECOND);
        match pushed {
            Ok(_) => break,
            Err(e) => assert!(e.message.contains("dedup_search_budget"), "{}", e.message),
        }
        assert!(tries < 20, "still refused after {tries} tries");
    }
    assert_eq!(tries, 2_000usize.div_ceil(BY_TIME_SEARCHES_PER_CYCLE));
    assert_eq!(
        finds.load(Ordering::Relaxed),
        2_000,
        "each bucket searched once"
    );
    assert_eq!(next(&fx, week), before + 1);
    // A batch whose items need more than a cycle's searches together (5 x 61 buckets):
    // the items searched whole are not searched again at the retry.
    let (mut fx, finds, week, _) = spilled(61);
    let before = next(&fx, week);
    let items: Vec<_> = (0..5)
        .map(|i| item("week", "p", &format!("b-{i}")))
        .collect();
    assert!(fx.planner().plan_push(&items, None).is_err());
    fx.advance(SECOND);
    assert!(fx.planner().plan_push(&items, None).is_ok());
    assert_eq!(finds.load(Ordering::Relaxed), 5 * 61);
    fx.commit();
    assert_eq!(next(&fx, week), before + 5);
}

#[test]
fn a_push_without_a_transaction_id_searches_nothing_by_time() {
    // Review s34 d H1 (a): an item without a transactionId gets a freshly minted id, which
    // no earlier message can hold; its lookup searched the whole window by time and spent
    // the cycle's budget, so a batch of plain pushes to a long-window queue was refused at
    // every retry.
    let (mut fx, finds, week, _) = spilled(2_000);
    let before = next(&fx, week);
    let plain = |n: &str| {
        let mut i = item("week", "p", n);
        i.transaction_id = None;
        i
    };
    let items = [plain("a"), plain("b"), plain("c")];
    assert!(fx.planner().plan_push(&items, None).is_ok());
    assert_eq!(
        finds.load(Ordering::Relaxed),
        0,
        "no search for a minted id"
    );
    fx.commit();
    assert_eq!(next(&fx, week), before + 3);
}

fn next(fx: &Fixture, pid: u64) -> u64 {
    fx.st.partitions.get(&pid).map_or(0, |p| p.next_offset)
}

#[test]
fn searches_by_time_are_counted_apart_from_the_filters_maybes() {
    // Review s33 L2: every lookup of a queue past the hour counted as a filters' "maybe", so
    // the maybe share read ~100 % beside a long-window queue and hid a real saturation.
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let (mut fx, _, week, _) = spilled(200);
    metrics::with_local_recorder(&recorder, || {
        assert_eq!(fx.planner().resolve_txn(week, "new-1", None), Ok(None));
        assert!(fx.planner().resolve_txn(week, "new-2", None).is_err());
    });
    let text = handle.render();
    let count = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert_eq!(count("queen_dedup_filter_lookups_total"), 2, "{text}");
    assert_eq!(count("queen_dedup_filter_maybes_total"), 0, "{text}");
    assert_eq!(
        count("queen_dedup_by_time_bucket_searches_total"),
        BY_TIME_SEARCHES_PER_CYCLE as u64,
        "{text}"
    );
    assert_eq!(count("queen_dedup_by_time_refusals_total"), 1, "{text}");
}

/// The ids of the hot table leave it (as spilled long ago) and the cycle's searches by time
/// are spent: a lookup in the id files can only refuse now.
fn hot_table_gone_and_budget_spent(fx: &mut Fixture) {
    let n = fx.st.txn_ids.len();
    fx.st.txn_ids.forget_oldest(n);
    fx.cycle.dedup_by_time_left = 0;
}

#[test]
fn a_dlq_action_a_trace_an_ack_and_a_read_try_their_second_way_before_refusing() {
    // Review s34 d H2: these were refused "retry" by a spent search by time before the
    // dead letters' offsets or the range a group holds in flight were read, though the
    // message was there.
    let (mut fx, _, week, _) = spilled(2_000);
    fx.advance(SECOND);
    let popped = fx.pop("week", None, 1, Some(600));
    assert_eq!(popped.messages.len(), 1);
    fx.ack(&popped, AckStatus::Dlq);
    fx.advance(SECOND);
    hot_table_gone_and_budget_spent(&mut fx);
    let delete = DlqAdminReq::Delete {
        partition_id: week.to_string(),
        transaction_id: "m1".into(),
    };
    let out = fx.planner().plan_dlq_admin(&delete);
    assert!(
        matches!(out, Ok(DlqAdminOutcome::Deleted { rows: 1, .. })),
        "{out:?}"
    );

    let (mut fx, _, week, _) = spilled(2_000);
    // m3, m4, pushed with the id files out of the way (their 2 x 2 000 searches would be
    // refused).
    let spill = fx.st.txn_spill.take();
    fx.push("week", "p", 2);
    fx.st.txn_spill = spill;
    fx.advance(SECOND);
    let popped = fx.pop("week", None, 3, Some(600));
    assert_eq!(popped.messages.len(), 3);
    fx.advance(SECOND);
    hot_table_gone_and_budget_spent(&mut fx);
    let trace = TraceReq {
        transaction_id: "m3".into(),
        partition_id: week.to_string(),
        group: String::new(),
        names: Vec::new(),
        event_type: "info".into(),
        data: Default::default(),
    };
    let out = fx.planner().plan_trace(&trace);
    assert!(matches!(out, Ok(TraceOutcome::Recorded { .. })), "{out:?}");
    // A retry of the first message releases the lease (found in the leased range); the next
    // message, delivered and not acked, is acked without one.
    let mut retry = ack_items(&popped, AckStatus::Retry);
    retry.truncate(1);
    let r = fx.planner().plan_acks(&retry, &None);
    assert!(r[0].success, "{:?}", r[0]);
    fx.advance(SECOND);
    let cursor = fx.group("week", None).cursors.get(&week).copied();
    assert!(cursor.is_some_and(|c| c.lease.is_none()), "{cursor:?}");
    hot_table_gone_and_budget_spent(&mut fx);
    // A read by id of a message in flight: its own budget is spent on the 2 000 buckets,
    // the range in flight holds it.
    {
        let mut pl = fx.planner();
        let (st, mut rd) = pl.reader_parts();
        let read = ReadReq::Message {
            partition_id: week.to_string(),
            transaction_id: "m4".into(),
        };
        let got = crate::reads::answer(st, &mut rd, &read);
        assert!(matches!(got, Ok(ReadAnswer::Message(_))), "{got:?}");
    }
    let mut done = ack_items(&popped, AckStatus::Completed);
    done[2].lease_id = None;
    let r = fx.planner().plan_acks(&done[2..], &None);
    assert!(r[0].success, "{:?}", r[0]);
}

#[test]
fn an_ack_by_id_leaves_no_remembered_search_for_a_later_push() {
    // Review s35 d H1: an ack or trace by transactionId confirms a candidate with a check
    // that answers "no" for a frame it cannot read, so its by-time search could end empty
    // over a copy it never read; remembered, it let a later push of that id skip those
    // buckets and store a duplicate. Only the push's own searches are remembered.
    let (mut fx, finds, week, _) = spilled(100);
    assert_eq!(fx.planner().resolve_txn(week, "new-x", None), Ok(None));
    assert_eq!(
        finds.load(Ordering::Relaxed),
        100,
        "the ack searched by time"
    );
    fx.advance(SECOND);
    let items = [item("week", "p", "new-x")];
    assert!(fx.planner().plan_push(&items, None).is_ok());
    assert_eq!(
        finds.load(Ordering::Relaxed),
        200,
        "the push searched every bucket again, not skipping what the ack saw"
    );
}
