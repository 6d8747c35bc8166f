//! Retention (spec/reference-broker.md §1.2): which partitions' first held offset moves up.
//!
//! Per queue: `maxWaitTimeSeconds` removes messages older than it, leased or not, whatever the
//! switch; with `retentionEnabled`, `retentionSeconds` removes messages older than it, consumed
//! or not, and `completedRetentionSeconds` removes messages older than it that every consumer
//! group of the queue has completed (never past the slowest group; a queue no group reads has
//! completed nothing). Ages are from the message's creation. The leader sweeps the partitions
//! in id order, a bounded slice per cycle, resuming where it stopped; each move is a
//! replicated `RetentionTrim` so followers and replays remove exactly the same messages.

use super::Planner;
use crate::entry::Effect;
use crate::state::config::QueueConfig;
use crate::state::model::{cursor_start, secs_us, Partition, Queue};
use crate::state::State;

/// Partition ids looked up per cycle at most (most belong to queues without retention).
pub const RETENTION_LOOKUPS_PER_CYCLE: usize = 16_384;
/// Trims written per cycle at most: a trim that cuts a run reads that run's entry.
pub const RETENTION_TRIMS_PER_CYCLE: usize = 1_024;
/// A `RetentionTrim` effect's encoded size: kind, pid, low, pos.
const TRIM_BYTES: usize = 1 + 8 + 8 + 4;

/// The leader's place in the current sweep. Not replicated: a new leader starts over.
#[derive(Debug, Default)]
pub struct RetentionSweep {
    /// The next partition id to look at, while a sweep runs.
    next: Option<u64>,
}

impl RetentionSweep {
    pub fn running(&self) -> bool {
        self.next.is_some()
    }

    /// Begins a sweep from the first partition (a running one goes on where it is).
    pub fn start(&mut self) {
        self.next.get_or_insert(0);
    }
}

/// Whether any retention rule of the queue can remove messages.
pub fn has_retention(c: &QueueConfig) -> bool {
    c.max_wait_time_seconds > 0
        || (c.retention_enabled && (c.retention_seconds > 0 || c.completed_retention_seconds > 0))
}

/// The first offset of `p` (of queue `q`) that retention keeps at `now_us`: at least its
/// current first held offset, at most its `next_offset`.
pub fn retention_low(st: &State, q: &Queue, p: &Partition, now_us: i64) -> u64 {
    let c = &q.config;
    let older_than = |secs: i64| p.first_offset_at_or_after(now_us.saturating_sub(secs_us(secs)));
    let mut low = p.low_offset();
    if c.max_wait_time_seconds > 0 {
        low = low.max(older_than(c.max_wait_time_seconds));
    }
    if c.retention_enabled {
        if c.retention_seconds > 0 {
            low = low.max(older_than(c.retention_seconds));
        }
        if c.completed_retention_seconds > 0 {
            let slowest = q
                .groups
                .values()
                .filter_map(|gid| st.groups.get(gid))
                .map(|g| {
                    g.cursors
                        .get(&p.id)
                        .map_or_else(|| cursor_start(p, g.start_from_us), |c| c.committed)
                })
                .min();
            if let Some(done) = slowest {
                low = low.max(done.min(older_than(c.completed_retention_seconds)));
            }
        }
    }
    low.min(p.next_offset)
}

impl Planner<'_> {
    /// Goes on with a running sweep: looks at up to [`RETENTION_LOOKUPS_PER_CYCLE`] partition
    /// ids and writes up to [`RETENTION_TRIMS_PER_CYCLE`] trims, stopping early when the entry
    /// would pass `max_entry_bytes`. Ends the sweep past the last partition id. Messages
    /// removed, by queue name.
    pub fn plan_retention(
        &mut self,
        sweep: &mut RetentionSweep,
        max_entry_bytes: usize,
    ) -> Vec<(String, u64)> {
        let mut removed: Vec<(String, u64)> = Vec::new();
        let Some(mut pid) = sweep.next else {
            return removed;
        };
        let now = self.now();
        let end = self.st.next_partition_id;
        let (mut looked, mut trims) = (0usize, 0usize);
        while pid < end && looked < RETENTION_LOOKUPS_PER_CYCLE {
            if trims == RETENTION_TRIMS_PER_CYCLE
                || self.cycle.entry.len().saturating_add(TRIM_BYTES) > max_entry_bytes
            {
                break;
            }
            looked += 1;
            let Some((low, from, queue, cuts_run)) = self.decide(pid, now) else {
                pid += 1;
                continue;
            };
            let pos = if cuts_run {
                let (st, mut reader) = self.reader_parts();
                let Some(p) = st.partitions.get(&pid) else {
                    pid += 1;
                    continue;
                };
                match reader.frame_pos(p, low) {
                    Ok(pos) => pos,
                    Err(e) => {
                        // Retention waits for the next sweep; reads of the message would fail
                        // the same way and say so.
                        tracing::warn!(pid, low, error = %e, "retention could not locate a frame");
                        pid += 1;
                        continue;
                    }
                }
            } else {
                0
            };
            self.emit(Effect::RetentionTrim { pid, low, pos });
            trims += 1;
            match removed.last_mut() {
                Some((q, n)) if *q == queue => *n += low - from,
                _ => removed.push((queue, low - from)),
            }
            pid += 1;
        }
        sweep.next = (pid < end).then_some(pid);
        removed
    }

    /// For partition `pid`, if retention moves its first offset: (new low, old low, queue
    /// name, whether the new low falls inside a run).
    fn decide(&self, pid: u64, now: i64) -> Option<(u64, u64, String, bool)> {
        let p = self.st.partitions.get(&pid)?;
        let q = self.st.queues.get(&p.queue)?;
        if !has_retention(&q.config) {
            return None;
        }
        let (from, low) = (p.low_offset(), retention_low(self.st, q, p, now));
        if low <= from {
            return None;
        }
        let cuts_run = p.run_of(low).is_some_and(|r| r.base_offset < low);
        Some((low, from, q.name.clone(), cuts_run))
    }
}
