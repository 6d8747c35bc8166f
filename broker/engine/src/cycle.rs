//! One group-commit cycle: the entry being built and what it touched.

use std::collections::HashSet;

use crate::entry::{Effect, EntryBuilder};
use crate::state::model::PENDING_INDEX;
use crate::state::{Loc, State};

pub struct Cycle {
    pub number: u64,
    pub now_us: i64,
    pub entry: EntryBuilder,
    /// Partitions that got an Append in this cycle (their runs point at PENDING_INDEX), in
    /// first-append order; `appended_set` makes the membership test O(1) per append (a linear
    /// scan here held the engine 38 s for one push to 300 000 partitions).
    pub appended: Vec<u64>,
    appended_set: HashSet<u64>,
    /// Runs the compactor copied in this cycle, (partition, first offset): they point at
    /// PENDING_INDEX too, wherever they stand among their partition's runs.
    pub copied: Vec<(u64, u64)>,
    /// Queues whose deliverable set may have grown: wake their parked pops after commit.
    pub woken_queues: HashSet<String>,
    /// Bytes the cycle's pops were granted so far (the payloads they read). Every answer is
    /// held until the entry commits.
    pub answer_bytes: usize,
    /// Entries the cycle's Kafka transaction reads list so far (at most
    /// `MAX_READ_ENTRIES_PER_CYCLE` past the first that lists any).
    pub txn_read_entries: usize,
    /// Bytes those entries hold (`READ_ENTRY_BYTES` each plus their names), counted apart
    /// from the pops' (review s18 kafka M2: plan/kafka_txn_reads.rs).
    pub txn_read_bytes: usize,
    /// Whether the cycle's batch holds a Kafka transaction read: only then do its pops leave
    /// the reads their share of the answer room (review s19 kafka M2).
    pub has_admin_reads: bool,
    /// Whether a consumer's named-partition OffsetFetch listed rows in this cycle: the next
    /// ones are held to the pops' room (plan/kafka_groups.rs; review s20 kafka M3).
    pub named_fetch_served: bool,
    /// The tenants this cycle declared, with their voters: the state takes them only at
    /// commit (`apply::Committed::apply`), and the cap and the first-wins rule count them
    /// now. At most `max_tenants` names.
    pub declared: Vec<(String, Vec<u64>)>,
    /// Id-file searches by time (past the filters' hour) the cycle's dedup lookups may still
    /// make (`BY_TIME_SEARCHES_PER_CYCLE`, review s33 H1): they run under the group's lock.
    pub dedup_by_time_left: usize,
}

impl Cycle {
    pub fn new(number: u64, now_us: i64) -> Self {
        Cycle {
            number,
            now_us,
            entry: EntryBuilder::new(number, now_us),
            appended: Vec::new(),
            appended_set: HashSet::new(),
            copied: Vec::new(),
            woken_queues: HashSet::new(),
            answer_bytes: 0,
            txn_read_entries: 0,
            txn_read_bytes: 0,
            has_admin_reads: false,
            named_fetch_served: false,
            declared: Vec::new(),
            dedup_by_time_left: crate::state::BY_TIME_SEARCHES_PER_CYCLE,
        }
    }

    /// The cycle after the state's last one, at the clock's reading. Cycle times only grow,
    /// even when the wall clock steps back: a lease or delay planned earlier must not see time
    /// run backwards.
    pub fn next(st: &State, clock_us: i64) -> Self {
        Cycle::new(st.last_cycle + 1, clock_us.max(st.last_now_us + 1))
    }

    /// Records an effect in the entry and applies it to the state at once, so later commands
    /// of the same cycle plan against it. Answers wait for the entry to commit.
    pub fn emit(&mut self, st: &mut State, e: Effect<'_>) {
        let pos = self.entry.push(&e);
        match &e {
            Effect::Append { pid, .. } => {
                if self.appended_set.insert(*pid) {
                    self.appended.push(*pid);
                }
                self.wake_partition(st, *pid);
            }
            Effect::CursorPut { pid, row, .. }
                if row.lease.is_none()
                    && st
                        .partitions
                        .get(pid)
                        .is_some_and(|p| row.committed < p.next_offset) =>
            {
                self.wake_partition(st, *pid);
            }
            Effect::RunCopy {
                pid, base_offset, ..
            } => self.copied.push((*pid, *base_offset)),
            // A trim may end a lease or make a partition ready for a group.
            Effect::RetentionTrim { pid, .. } | Effect::KafkaDeleteRecords { pid, .. } => {
                self.wake_partition(st, *pid)
            }
            _ => {}
        }
        st.apply(
            &e,
            self.now_us,
            Loc {
                index: PENDING_INDEX,
                pos,
            },
        );
    }

    fn wake_partition(&mut self, st: &State, pid: u64) {
        if let Some(q) = st
            .partitions
            .get(&pid)
            .and_then(|p| st.queues.get(&p.queue()))
        {
            if !self.woken_queues.contains(&q.name) {
                self.woken_queues.insert(q.name.clone());
            }
        }
    }
}
