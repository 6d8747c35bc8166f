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

/// Work a cycle's slice of the sweep does at most, under the state lock: a partition id looked
/// up costs 1, plus the consumer groups of its queue when the queue has retention (the
/// planner may read each group's cursor and apply walks them on a trim). A partition whose
/// queue has more groups than this is still looked at, alone in its cycle.
pub const RETENTION_WORK_PER_CYCLE: usize = 16_384;
/// Trims written per cycle at most.
pub const RETENTION_TRIMS_PER_CYCLE: usize = 1_024;
/// A `RetentionTrim` effect's encoded size: kind, pid, low.
const TRIM_BYTES: usize = 1 + 8 + 8;

/// The leader's place in the current sweep. Not replicated: a new leader starts over.
#[derive(Debug, Default)]
pub struct RetentionSweep {
    /// The next partition id to look at, while a sweep runs.
    next: Option<u64>,
    /// The time the sweep measures ages from (the cycle's when unset).
    at_us: Option<i64>,
}

impl RetentionSweep {
    pub fn running(&self) -> bool {
        self.next.is_some()
    }

    /// Begins a sweep from the first partition at the cycle's time (a running one goes on).
    pub fn start(&mut self) {
        if self.next.is_none() {
            self.at_us = None;
            self.next = Some(0);
        }
    }

    /// Begins a sweep measuring ages from `wall_us`, but never more than twice the
    /// `since_last_us` the engine's monotonic clock measured since the previous sweep ahead
    /// of that sweep's time: a forward step of the wall clock (NTP, a VM resumed) must not
    /// remove, replicated and for good, what is not yet due. After a real step the sweeps
    /// catch up at twice the clock's pace. The first sweep of a leader has no reference and
    /// takes `wall_us` (a running sweep goes on).
    pub fn start_at(&mut self, wall_us: i64, since_last_us: i64) {
        if self.next.is_some() {
            return;
        }
        let at = match self.at_us {
            None => wall_us,
            Some(prev) => wall_us
                .min(prev.saturating_add(since_last_us.max(0).saturating_mul(2)))
                .max(prev),
        };
        self.at_us = Some(at);
        self.next = Some(0);
    }
}

/// Whether any retention rule of the queue can remove messages.
pub fn has_retention(c: &QueueConfig) -> bool {
    c.max_wait_time_seconds > 0
        || (c.retention_enabled && (c.retention_seconds > 0 || c.completed_retention_seconds > 0))
}

/// The first offset of `p` (of queue `q`) that retention keeps at `now_us`: at least its
/// current first held offset, at most its `next_offset`, and always a run's first offset (or
/// `next_offset`): retention removes whole runs only, so neither planner nor apply reads the
/// log to find where a cut run's tail starts. Completion retention therefore keeps a run
/// until every group completed all of it.
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
                        .get(&p.id())
                        .map_or_else(|| cursor_start(p, g.start_from_us), |c| c.committed)
                })
                .min();
            if let Some(done) = slowest {
                low = low.max(done.min(older_than(c.completed_retention_seconds)));
            }
        }
    }
    let low = low.min(p.next_offset);
    match p.run_of(low) {
        Some(r) if r.base_offset < low => r.base_offset.max(p.low_offset()),
        _ => low,
    }
}

impl Planner<'_> {
    /// Goes on with a running sweep: does up to [`RETENTION_WORK_PER_CYCLE`] work and writes
    /// up to [`RETENTION_TRIMS_PER_CYCLE`] trims, stopping early when the entry would pass
    /// `max_entry_bytes`. Ends the sweep past the last partition id. Messages removed, by
    /// queue name.
    pub fn plan_retention(
        &mut self,
        sweep: &mut RetentionSweep,
        max_entry_bytes: usize,
    ) -> Vec<(String, u64)> {
        let mut removed: Vec<(String, u64)> = Vec::new();
        let Some(mut pid) = sweep.next else {
            return removed;
        };
        let now = sweep.at_us.unwrap_or_else(|| self.now());
        let end = self.st.next_partition_id;
        let (mut work, mut trims) = (0usize, 0usize);
        while pid < end && work < RETENTION_WORK_PER_CYCLE {
            if trims == RETENTION_TRIMS_PER_CYCLE
                || self.cycle.entry.len().saturating_add(TRIM_BYTES) > max_entry_bytes
            {
                break;
            }
            let (cost, decided) = self.decide(pid, now);
            work = work.saturating_add(cost);
            if let Some((low, from, queue)) = decided {
                self.emit(Effect::RetentionTrim { pid, low });
                trims += 1;
                match removed.last_mut() {
                    Some((q, n)) if *q == queue => *n += low - from,
                    _ => removed.push((queue, low - from)),
                }
            }
            pid += 1;
        }
        sweep.next = (pid < end).then_some(pid);
        removed
    }

    /// For partition `pid`: the work looking at it cost, and, if retention moves its first
    /// offset, (new low, old low, queue name).
    fn decide(&self, pid: u64, now: i64) -> (usize, Option<(u64, u64, String)>) {
        let Some((p, q)) = self
            .st
            .partitions
            .get(&pid)
            .and_then(|p| Some((p, self.st.queues.get(&p.queue())?)))
        else {
            return (1, None);
        };
        if !has_retention(&q.config) {
            return (1, None);
        }
        let cost = 1usize.saturating_add(q.groups.len());
        let (from, low) = (p.low_offset(), retention_low(self.st, q, p, now));
        if low <= from {
            return (cost, None);
        }
        (cost, Some((low, from, q.name.clone())))
    }
}
