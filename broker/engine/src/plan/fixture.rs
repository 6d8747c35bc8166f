//! One set-up for planner, apply and property tests: a leader's state, the cycle being
//! planned, the entry cache and an in-memory log, on a clock the test moves (no sleeps).
//!
//! `commit` does what `Engine::cycle` does after planning (stamp the cycle, append the entry,
//! let the apply path move the log position, point the pending runs at the entry), so what a
//! test reads back went through the same steps as a served request.

use std::collections::BTreeMap;

use bytes::Bytes;
use queenmq_protocol::{
    AckItem, AckResult, AckStatus, ConfigureReq, PopReq, PopResult, PopSource, PushItem,
    PushResult, QueueOptions, Subscription, QUEUE_MODE_GROUP,
};

use super::{Planner, PopPlan};
use crate::apply::apply_entry;
use crate::cache::EntryCache;
use crate::cycle::Cycle;
use crate::log::{LogError, LogStatus, ProposeFuture, ReplicatedLog};
use crate::seal::{PayloadSeal, TestSeal};
use crate::state::canonical::canonical;
use crate::state::model::Group;
use crate::state::{decode_state, encode_state, State};

/// Where the clock starts (2025-12-02).
pub const NOW: i64 = 1_764_700_000_000_000;
pub const SECOND: i64 = 1_000_000;
const TERM: u64 = 1;

/// Committed entries by index. An index not held reads as missing; `failing` makes every read
/// fail, as a broken disk would.
#[derive(Default)]
pub struct MemLog {
    pub entries: BTreeMap<u64, Vec<u8>>,
    pub failing: bool,
    /// Sealed segments as (first index, last index, file bytes), for the compactor; none by
    /// default (a log that keeps nothing on disk).
    pub sealed: Vec<(u64, u64, u64)>,
    /// How many times `sealed_segment_of` was asked (the Raft log reads redb each time).
    pub sealed_asked: std::sync::atomic::AtomicUsize,
    /// How many entries `read` was asked for (each a read of the disk on the Raft log).
    pub reads: std::sync::atomic::AtomicUsize,
}

impl ReplicatedLog for MemLog {
    fn propose(&self, _payload: Vec<u8>) -> ProposeFuture {
        // The fixture commits by itself (`Fixture::commit`).
        Box::pin(async { Err(LogError::propose("the fixture log takes no proposals")) })
    }
    fn read(&self, index: u64) -> Result<Option<Vec<u8>>, LogError> {
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.failing {
            return Err(LogError::read(format!(
                "reading entry {index}: input/output error"
            )));
        }
        Ok(self.entries.get(&index).cloned())
    }
    fn status(&self) -> LogStatus {
        LogStatus::default()
    }
    fn sealed_segment_of(&self, index: u64) -> Option<(u64, u64, u64)> {
        self.sealed_asked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.sealed
            .iter()
            .copied()
            .find(|&(first, last, _)| (first..=last).contains(&index))
    }
}

pub struct Fixture {
    pub st: State,
    pub cycle: Cycle,
    pub cache: EntryCache,
    pub log: MemLog,
    /// The clock's reading: the next cycle starts at it (or just after the last cycle).
    pub clock: i64,
    /// Numbers the transaction ids of `push`, so every pushed message is new.
    pushed: u64,
    /// The planner holds the broker key (the [`TestSeal`] stand-in).
    pub sealed: bool,
    /// The planner's `max_tenants` (`u64::MAX` unless a test caps it).
    pub max_tenants: u64,
}

impl Default for Fixture {
    fn default() -> Self {
        Fixture::new()
    }
}

impl Fixture {
    pub fn new() -> Self {
        let st = State::default();
        let cycle = Cycle::next(&st, NOW);
        Fixture {
            st,
            cycle,
            cache: EntryCache::new(1 << 20),
            log: MemLog::default(),
            clock: NOW,
            pushed: 0,
            sealed: false,
            max_tenants: u64::MAX,
        }
    }

    /// A fixture over a state built by hand (rows applied outside any entry) and `log`.
    pub fn over(st: State, log: MemLog) -> Self {
        let cycle = Cycle::next(&st, NOW);
        Fixture {
            st,
            cycle,
            log,
            ..Fixture::new()
        }
    }

    pub fn planner(&mut self) -> Planner<'_> {
        Planner {
            st: &mut self.st,
            cycle: &mut self.cycle,
            cache: &mut self.cache,
            log: &self.log,
            memory: None,
            tenant: queenmq_protocol::DEFAULT_TENANT,
            seal: self.sealed.then_some(&TestSeal as &dyn PayloadSeal),
            max_tenants: self.max_tenants,
        }
    }

    /// Commits the cycle being planned, if it emitted anything, and opens the next one at the
    /// clock. The entry's log index.
    pub fn commit(&mut self) -> Option<u64> {
        if self.cycle.entry.is_empty() {
            self.cycle = Cycle::next(&self.st, self.clock);
            return None;
        }
        let mut cycle = std::mem::replace(&mut self.cycle, Cycle::new(0, 0));
        self.st.last_cycle = cycle.number;
        self.st.last_now_us = cycle.now_us;
        let appended = std::mem::take(&mut cycle.appended);
        let copied = std::mem::take(&mut cycle.copied);
        let entry = cycle.entry.finish();
        // Above the last entry, and above what a state built by hand says it applied.
        let index = self
            .log
            .entries
            .last_key_value()
            .map_or(1, |(i, _)| i + 1)
            .max(self.st.applied.map_or(1, |(i, _)| i + 1));
        // The log applies what it commits before the proposal resolves; on the leader that
        // only moves the applied position.
        if let Err(e) = apply_entry(&mut self.st, index, TERM, &entry) {
            panic!("the planned entry does not decode: {e}");
        }
        self.st.commit_pending_runs(&appended, index);
        self.st.commit_copied_runs(&copied, index);
        self.log.entries.insert(index, entry);
        self.cycle = Cycle::next(&self.st, self.clock);
        Some(index)
    }

    /// Drops the cycle being planned (a proposal that failed) and opens the next one.
    pub fn discard(&mut self) {
        self.cycle = Cycle::next(&self.st, self.clock);
    }

    /// Replaces the leader's memory with the state rebuilt from its log, as the restart after
    /// a failed proposal does (the cache goes with the process).
    pub fn rebuild(&mut self) {
        self.st = self.replay();
        self.cache = EntryCache::new(1 << 20);
        self.cycle = Cycle::next(&self.st, self.clock);
    }

    /// Commits what was planned, then moves the clock on by `us`.
    pub fn advance(&mut self, us: i64) {
        self.commit();
        self.clock = self.clock.saturating_add(us);
        self.cycle = Cycle::next(&self.st, self.clock);
    }

    /// Commits, then checks that a follower applying the log and a checkpoint read back both
    /// reach the leader's state.
    pub fn assert_replays(&mut self) {
        self.commit();
        let leader = canonical(&self.st);
        assert_eq!(canonical(&self.replay()), leader, "a follower diverged");
        let back = match decode_state(&encode_state(&self.st)) {
            Ok(s) => s,
            Err(e) => panic!("the checkpoint does not decode: {e}"),
        };
        assert_eq!(canonical(&back), leader, "the checkpoint diverged");
    }

    /// Commits what was planned, then sets the clock to `at`.
    pub fn advance_to(&mut self, at: i64) {
        self.advance(at.saturating_sub(self.clock));
    }

    /// A fresh state that applied every committed entry, as a follower or a restart would.
    pub fn replay(&self) -> State {
        let mut st = State::default();
        for (index, entry) in &self.log.entries {
            if let Err(e) = apply_entry(&mut st, *index, TERM, entry) {
                panic!("committed entry {index} does not decode: {e}");
            }
        }
        st
    }

    /// Configures `queue` with these options (merged into its configuration).
    pub fn configure(&mut self, queue: &str, options: QueueOptions) {
        let req = ConfigureReq {
            queue: queue.into(),
            namespace: None,
            task: None,
            options,
            replace: false,
        };
        if let Err(e) = self.planner().plan_configure(&req) {
            panic!("configure {queue}: {}", e.message);
        }
    }

    /// Pushes `n` new messages (fresh transaction ids) to a partition of `queue`.
    pub fn push(&mut self, queue: &str, partition: &str, n: usize) -> Vec<PushResult> {
        let items: Vec<PushItem> = (0..n)
            .map(|_| {
                self.pushed += 1;
                item(queue, partition, &format!("m{}", self.pushed))
            })
            .collect();
        match self.planner().plan_push(&items, None) {
            Ok(r) => r,
            Err(e) => panic!("push to {queue}: {}", e.message),
        }
    }

    /// Pops up to `batch` messages of `queue` for `group` (the queue-mode group when None),
    /// under a lease of `lease_seconds` (the queue's when None). Empty when nothing is due.
    pub fn pop(
        &mut self,
        queue: &str,
        group: Option<&str>,
        batch: u32,
        lease_seconds: Option<u64>,
    ) -> PopResult {
        let mut req = pop_req(queue, batch);
        req.group = group.map(str::to_string);
        req.lease_seconds = lease_seconds;
        match self.planner().plan_pop(&req) {
            Ok(PopPlan::Delivered(r)) => r,
            Ok(PopPlan::Empty(_)) => PopResult::default(),
            Err(e) => panic!("pop of {queue}: {}", e.message),
        }
    }

    /// Acks every message of a pop with `status`, under the pop's lease.
    pub fn ack(&mut self, popped: &PopResult, status: AckStatus) -> Vec<AckResult> {
        let group = Some(popped.consumer_group.clone());
        self.planner().plan_acks(&ack_items(popped, status), &group)
    }

    /// Group `name` of `queue` (the queue-mode group when None).
    pub fn group(&self, queue: &str, name: Option<&str>) -> &Group {
        let name = name.unwrap_or(QUEUE_MODE_GROUP);
        let gid = self
            .st
            .queue_named(queue)
            .and_then(|q| q.groups.get(name))
            .unwrap_or_else(|| panic!("no group {name} on {queue}"));
        &self.st.groups[gid]
    }
}

/// The ack items of every message of a pop, with `status`, under the pop's lease.
pub fn ack_items(popped: &PopResult, status: AckStatus) -> Vec<AckItem> {
    popped
        .messages
        .iter()
        .map(|m| AckItem {
            transaction_id: m.transaction_id.clone(),
            partition_id: m.partition_id.to_string(),
            status,
            error: Some("failed in a test".into()),
            lease_id: (!popped.lease_id.is_empty()).then(|| popped.lease_id.clone()),
            group: None,
        })
        .collect()
}

/// A message for `queue`/`partition` with transaction id `txn`.
pub fn item(queue: &str, partition: &str, txn: &str) -> PushItem {
    PushItem {
        queue: queue.into(),
        partition: partition.into(),
        payload: Bytes::from(format!("\"{txn}\"")),
        transaction_id: Some(txn.into()),
        trace_id: None,
    }
}

/// A pop of `queue` (any partition, queue-mode group, no wait).
pub fn pop_req(queue: &str, batch: u32) -> PopReq {
    PopReq {
        source: PopSource::Queue(queue.into()),
        group: None,
        batch,
        partitions: 1,
        wait: false,
        timeout_ms: 0,
        auto_ack: false,
        subscription: Subscription::All,
        lease_seconds: None,
        autopilot: false,
        conflation: false,
        parked_echo: Default::default(),
    }
}

/// Queue options with only what `set` gives.
pub fn opts(set: impl FnOnce(&mut QueueOptions)) -> QueueOptions {
    let mut o = QueueOptions::default();
    set(&mut o);
    o
}
