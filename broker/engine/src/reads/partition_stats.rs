//! The per-state counts of one partition in the queue detail (spec native-api §2.2, §2.19
//! bullet 5: `partitions[].stats{total,pending,processing,completed,failed,deadLetter}`).
//!
//! They read like the queue's own `messages` block, narrowed to the partition: the slowest
//! group on this partition (queue mode included) decides pending, processing and completed;
//! with no group every held message is pending.

use std::collections::{HashMap, HashSet};

use queenmq_protocol::MessageTotals;

use super::committed_of;
use crate::state::model::{DlqRow, Partition, Queue};
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

/// `dead_letter` is the partition's entry of [`held_dead_letters_by_partition`].
pub(super) fn partition_stats(
    st: &State,
    q: &Queue,
    p: &Partition,
    dead_letter: u64,
) -> MessageTotals {
    let now = st.last_now_us;
    // What is held: retention removed what lies below the first held offset.
    let total = p.next_offset - p.low_offset();
    let mut worst: Option<(u64, u64)> = None;
    // A message whose delivery failed and that waits for its retry, counted once whichever
    // groups failed it.
    let mut retrying = HashSet::new();
    for g in q.groups.values().filter_map(|gid| st.groups.get(gid)) {
        let committed = committed_of(g, p).max(p.low_offset());
        let pending = p.next_offset.saturating_sub(committed);
        let cursor = g.cursors.get(&p.id);
        let processing = cursor
            .and_then(|c| c.live_lease(now))
            .map_or(0, |l| l.end.saturating_sub(committed));
        if cursor.is_some_and(|c| c.failures > 0 && c.committed < p.next_offset) {
            retrying.insert(committed);
        }
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
        failed: retrying.len() as u64,
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
                partition: pids[((r * r) % PARTITIONS) as usize],
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
}
