//! The per-state counts of one partition in the queue detail (spec native-api §2.2, §2.19
//! bullet 5: `partitions[].stats{total,pending,processing,completed,failed,deadLetter}`).
//!
//! They read like the queue's own `messages` block, narrowed to the partition: the slowest
//! group on this partition (queue mode included) decides pending, processing and completed;
//! with no group every held message is pending. Both use [`group_on_partition`]; the queue
//! block picks its slowest group over the whole queue, so the partitions' pending may add up
//! to more than the queue's when different groups lag on different partitions. `failed` is,
//! at both levels, the messages waiting for a retry after a failed delivery.

use std::collections::{HashMap, HashSet};

use queenmq_protocol::MessageTotals;

use super::committed_of;
use crate::state::model::{DlqRow, Group, Partition, Queue};
use crate::state::State;

/// Held dead-letter rows per partition, in one pass over `rows`: a queue holds up to
/// `MAX_DLQ_ROWS_PER_QUEUE` rows and a page up to `MAX_PAGE` partitions, so a scan per
/// listed partition would cost their product inside the engine cycle. Only partitions
/// `wanted` keeps are counted, so the map is no bigger than the page.
pub(super) fn held_dead_letters_by_partition<'a>(
    st: &State,
    rows: impl IntoIterator<Item = &'a DlqRow>,
    wanted: impl Fn(u64) -> bool,
) -> HashMap<u64, u64> {
    let mut held = HashMap::new();
    for d in rows {
        if wanted(d.partition) && super::queues::dead_letter_held(st, d) {
            *held.entry(d.partition).or_insert(0) += 1;
        }
    }
    held
}

/// What group `g` has on partition `p`: (pending, processing, the committed offset when it
/// waits for a retry of a failed delivery). Shared by the partition stats and the queue's
/// `messages` block so the two read alike; the cursor is clamped to the partition's floor
/// (retention removed what lies below it: it is neither pending nor completed).
pub(super) fn group_on_partition(st: &State, g: &Group, p: &Partition) -> (u64, u64, Option<u64>) {
    let committed = committed_of(g, p).max(p.low_offset());
    let pending = p.next_offset.saturating_sub(committed);
    let cursor = g.cursors.get(&p.id());
    let processing = cursor
        .and_then(|c| c.live_lease(st.last_now_us))
        .map_or(0, |l| l.end.saturating_sub(committed));
    let retrying = cursor
        .is_some_and(|c| c.failures > 0 && c.committed < p.next_offset)
        .then_some(committed);
    (pending, processing, retrying)
}

/// Messages of `p` whose delivery failed and that wait for a retry, counted once whichever
/// groups failed them: the `failed` of the partition stats and, summed, of the queue.
pub(super) fn retrying_on_partition(st: &State, q: &Queue, p: &Partition) -> u64 {
    let offsets: HashSet<u64> = q
        .groups
        .values()
        .filter_map(|gid| st.groups.get(gid))
        .filter_map(|g| group_on_partition(st, g, p).2)
        .collect();
    offsets.len() as u64
}

/// The slowest group's committed cursor on `p`, not clamped to the partition's floor: what
/// retention removed below it stays counted, so the figure never shrinks under retention.
pub(super) fn consumed_on_partition(st: &State, q: &Queue, p: &Partition) -> u64 {
    q.groups
        .values()
        .filter_map(|gid| st.groups.get(gid))
        .map(|g| committed_of(g, p))
        .min()
        .unwrap_or(0)
}

/// `dead_letter` is the partition's entry of [`held_dead_letters_by_partition`].
pub(super) fn partition_stats(
    st: &State,
    q: &Queue,
    p: &Partition,
    dead_letter: u64,
) -> MessageTotals {
    // What is held: retention removed what lies below the first held offset.
    let total = p.next_offset - p.low_offset();
    let mut worst: Option<(u64, u64)> = None;
    for g in q.groups.values().filter_map(|gid| st.groups.get(gid)) {
        let (pending, processing, _) = group_on_partition(st, g, p);
        if worst.is_none_or(|w| pending > w.0) {
            worst = Some((pending, processing));
        }
    }
    let (pending, processing) = worst.unwrap_or((total, 0));
    MessageTotals {
        total,
        pending: pending.saturating_sub(processing),
        processing,
        completed: total.saturating_sub(pending),
        failed: retrying_on_partition(st, q, p),
        dead_letter,
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use queenmq_protocol::Page;

    use crate::plan::fixture::Fixture;
    use crate::state::model::DlqRow;

    const PARTITIONS: u64 = 200;
    const ROWS: u64 = 20_000;

    /// A queue of `PARTITIONS` partitions holding 2 messages each and `ROWS` dead letters
    /// spread unevenly over them.
    fn queue_with_dead_letters() -> Fixture {
        let mut fx = Fixture::new();
        for i in 0..PARTITIONS {
            fx.push("q", &i.to_string(), 2);
        }
        fx.commit();
        let q = fx.st.queues.values_mut().next().expect("queue");
        let pids = q.partition_order.clone();
        for r in 0..ROWS {
            q.dlq.push_back(DlqRow {
                group: "g".into(),
                partition: pids.get(((r * r) % PARTITIONS) as usize).unwrap(),
                offset: r % 2,
                error: String::new(),
                failed_us: 0,
                retries: 0,
            });
        }
        fx
    }

    #[test]
    fn partition_dead_letter_counts_match_a_count_per_partition() {
        let fx = queue_with_dead_letters();
        let q = fx.st.queue_named("q").expect("queue");
        let page = Page {
            limit: 150,
            offset: 30,
        };
        let doc = super::super::queues::one(&fx.st, "q", page).expect("doc");
        assert_eq!(doc.partitions.len(), 150);
        let mut seen = 0;
        for p in &doc.partitions {
            let brute = q.dlq.iter().filter(|d| d.partition == p.id).count() as u64;
            assert_eq!(p.stats.dead_letter, brute, "partition {}", p.name);
            seen += brute;
        }
        assert!(seen > 0 && seen < ROWS, "the page holds some rows, not all");
    }

    #[test]
    fn partition_dead_letters_are_counted_in_one_pass_over_the_rows() {
        let fx = queue_with_dead_letters();
        let q = fx.st.queue_named("q").expect("queue");
        let pulled = Cell::new(0u64);
        let rows = q.dlq.iter().inspect(|_| pulled.set(pulled.get() + 1));
        let held = super::held_dead_letters_by_partition(&fx.st, rows, |_| true);
        assert_eq!(pulled.get(), ROWS, "each row read once");
        assert_eq!(held.values().sum::<u64>(), ROWS);
    }

    #[test]
    fn the_queue_block_and_its_partitions_count_alike() {
        use queenmq_protocol::kafka_records::{DeleteRecordsReq, DeleteRecordsTarget};
        use queenmq_protocol::{AckStatus, Setting};

        use crate::plan::fixture::opts;

        let mut fx = Fixture::new();
        fx.configure("q", opts(|o| o.retry_limit = Some(Setting::Value(5))));
        fx.push("q", "a", 2);
        fx.push("q", "b", 4);
        fx.commit();
        let got = fx.pop("q", None, 1, None);
        fx.commit();
        assert!(fx.ack(&got, AckStatus::Failed)[0].success);
        fx.commit();
        // Retention removes three unread messages of "b": below the group's cursor there.
        let req = DeleteRecordsReq {
            targets: vec![DeleteRecordsTarget {
                queue: "q".into(),
                partition: "b".into(),
                offset: 3,
            }],
        };
        assert!(fx.planner().plan_kafka_delete_records(&req).is_ok());
        fx.commit();
        let page = Page {
            limit: 10,
            offset: 0,
        };
        let doc = super::super::queues::one(&fx.st, "q", page).expect("doc");
        let m = &doc.queue.messages;
        let sum = |f: fn(&queenmq_protocol::MessageTotals) -> u64| -> u64 {
            doc.partitions.iter().map(|p| f(&p.stats)).sum()
        };
        assert_eq!(m.failed, 1, "the failed delivery waits for its retry");
        assert_eq!(m.failed, sum(|s| s.failed));
        assert_eq!(m.total, sum(|s| s.total));
        assert_eq!(m.pending, sum(|s| s.pending));
        assert_eq!(m.processing, sum(|s| s.processing));
        assert_eq!(m.completed, sum(|s| s.completed));
        assert!(m.pending + m.processing <= m.total, "{m:?}");
        for p in &doc.partitions {
            assert!(
                p.stats.pending + p.stats.processing <= p.stats.total,
                "{:?}",
                p.stats
            );
        }
    }

    #[test]
    fn total_consumed_does_not_shrink_as_retention_removes_consumed_messages() {
        use queenmq_protocol::kafka_records::{DeleteRecordsReq, DeleteRecordsTarget};
        use queenmq_protocol::AckStatus;

        let mut fx = Fixture::new();
        fx.push("q", "a", 5);
        fx.commit();
        let got = fx.pop("q", None, 3, None);
        fx.commit();
        assert!(fx.ack(&got, AckStatus::Completed).iter().all(|r| r.success));
        fx.commit();
        let page = Page {
            limit: 10,
            offset: 0,
        };
        let read = |fx: &Fixture| {
            let doc = super::super::queues::one(&fx.st, "q", page).expect("doc");
            let p = &doc.partitions[0];
            (p.consumed, p.stats.completed, p.stats.total)
        };
        assert_eq!(read(&fx), (3, 3, 5));
        // Retention removes the three consumed messages: `completed` counts what is held,
        // the consumed count stays.
        let req = DeleteRecordsReq {
            targets: vec![DeleteRecordsTarget {
                queue: "q".into(),
                partition: "a".into(),
                offset: 3,
            }],
        };
        assert!(fx.planner().plan_kafka_delete_records(&req).is_ok());
        fx.commit();
        assert_eq!(read(&fx), (3, 0, 2));
    }
}
