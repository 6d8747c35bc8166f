//! The per-state counts of one partition in the queue detail (spec native-api §2.2, §2.19
//! bullet 5: `partitions[].stats{total,pending,processing,completed,failed,deadLetter}`).
//!
//! They read like the queue's own `messages` block, narrowed to the partition: the slowest
//! group on this partition (queue mode included) decides pending, processing and completed;
//! with no group every held message is pending.

use std::collections::HashSet;

use queenmq_protocol::MessageTotals;

use super::committed_of;
use crate::state::model::{Partition, Queue};
use crate::state::State;

pub(super) fn partition_stats(st: &State, q: &Queue, p: &Partition) -> MessageTotals {
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
    let dead_letter = q
        .dlq
        .iter()
        .filter(|d| d.partition == p.id && d.offset >= p.low_offset())
        .count() as u64;
    MessageTotals {
        total,
        pending: pending.saturating_sub(processing),
        processing,
        completed: total.saturating_sub(pending),
        failed: retrying.len() as u64,
        dead_letter,
    }
}
