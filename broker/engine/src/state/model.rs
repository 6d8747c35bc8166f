//! The rows of the in-memory state. Every field here is either replicated (changed only by
//! `apply`) or derived from replicated rows (marked "derived"), rebuilt on load.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};

use super::config::QueueConfig;
use super::cursor_map::CursorMap;
use super::name_index::NameIndex;
pub use super::partition_name::PartitionName;
use super::partition_order::PartitionOrder;
pub use super::run_list::RunList;

/// Log index of runs appended by the cycle being planned, not yet committed.
pub const PENDING_INDEX: u64 = u64::MAX;

pub struct Queue {
    pub id: u64,
    pub name: String,
    pub namespace: String,
    pub task: String,
    pub config: QueueConfig,
    /// False while the queue exists only because a push created it.
    pub configured: bool,
    pub created_us: i64,
    /// Partition name → partition id, and creation order.
    pub partitions: NameIndex,
    pub partition_order: PartitionOrder,
    /// Group name → group id.
    pub groups: HashMap<String, u64>,
    /// Oldest first; at most [`super::MAX_DLQ_ROWS_PER_QUEUE`], the oldest evicted past it.
    pub dlq: VecDeque<DlqRow>,
    pub counters: QueueCounters,
}

#[derive(Default, Clone, Copy)]
pub struct QueueCounters {
    pub pushed: u64,
    pub acked: u64,
    pub failed: u64,
    pub dead_lettered: u64,
}

/// A stretch of consecutive offsets written by one Append effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub base_offset: u64,
    pub count: u32,
    pub created_us: i64,
    /// Raft log index of the entry holding the frames ([`PENDING_INDEX`] while planning).
    pub index: u64,
    /// Byte position of the first frame inside the entry's application payload.
    pub pos: u32,
}

/// 96 B (pinned by `partition_table_tests::a_full_chunk_costs_120_bytes_a_partition_and_its_header`),
/// so its `Arc` (16 B of counts more) takes mimalloc's 112 B bin: every field below counts
/// (session 35; 112 B and the 128 B bin in sessions 33-34, 96 B and 112 B in sessions 28-32
/// before the one run moved inside the row).
#[derive(Clone)]
pub struct Partition {
    /// Ids held in 32 bits, 8 B of the row: partition ids are below `MAX_NEXT_PARTITION_ID`
    /// and queue ids below `MAX_NEXT_QUEUE_ID` (both 2^32; apply and checkpoint load convert
    /// with a checked `u32::try_from`). Read through `id()` and `queue()`.
    id: u32,
    queue: u32,
    /// One word (`partition_name.rs`): up to 7 bytes inline, a longer name a thin pointer to
    /// its length and bytes; 8 B of the row where a `Box<str>` took 16.
    pub name: PartitionName,
    pub created_us: i64,
    pub next_offset: u64,
    pub last_write_us: i64,
    pub bytes: u64,
    /// Its one run inside the row, more in a vector (`run_list.rs`).
    pub runs: RunList,
    /// What few partitions have (a records floor, copied runs), boxed for the same 96 B;
    /// None while both are unset. Read and set through the methods below.
    pub extra: Option<Box<PartitionExtra>>,
}

/// A partition's rarely set fields.
#[derive(Clone, Default)]
pub struct PartitionExtra {
    /// Kafka DeleteRecords' log start offset: messages below it are gone even where their
    /// run is kept (a run is only dropped whole). 0 when never set.
    pub(super) floor: u64,
    /// Derived: the runs the compactor moved out of log order (None: all in order); changed
    /// only through [`super::run_floor::RunFloor`].
    pub(super) copied: Option<super::run_floor::CopiedRuns>,
}

/// An empty partition of queue 1, for tests.
#[cfg(any(test, feature = "test-support"))]
pub fn test_partition(id: u64, name: &str) -> Partition {
    let id = u32::try_from(id).unwrap_or_else(|_| panic!("test partition id {id} past 32 bits"));
    Partition::new(id, 1, name, 0)
}

impl Partition {
    /// An empty partition created at `now_us`.
    pub fn new(id: u32, queue: u32, name: &str, now_us: i64) -> Self {
        Self {
            id,
            queue,
            name: name.into(),
            created_us: now_us,
            next_offset: 0,
            last_write_us: now_us,
            bytes: 0,
            runs: RunList::default(),
            extra: None,
        }
    }

    pub fn id(&self) -> u64 {
        u64::from(self.id)
    }

    /// The queue's id.
    pub fn queue(&self) -> u64 {
        u64::from(self.queue)
    }

    /// Kafka DeleteRecords' log start offset (0: never set).
    pub fn floor(&self) -> u64 {
        self.extra.as_deref().map_or(0, |e| e.floor)
    }

    pub fn set_floor(&mut self, floor: u64) {
        if floor == 0 && self.extra.is_none() {
            return;
        }
        self.extra.get_or_insert_with(Box::default).floor = floor;
        self.settle_extra();
    }

    /// The runs moved out of log order (None: all in order).
    pub fn copied_runs(&self) -> Option<&super::run_floor::CopiedRuns> {
        self.extra.as_deref().and_then(|e| e.copied.as_ref())
    }

    /// The copied runs, an empty set made first if there is none.
    pub(super) fn copied_runs_or_default(&mut self) -> &mut super::run_floor::CopiedRuns {
        self.extra
            .get_or_insert_with(Box::default)
            .copied
            .get_or_insert_with(Default::default)
    }

    pub(super) fn set_copied_runs(&mut self, copied: Option<super::run_floor::CopiedRuns>) {
        if copied.is_none() && self.extra.is_none() {
            return;
        }
        self.extra.get_or_insert_with(Box::default).copied = copied;
        self.settle_extra();
    }

    /// The box's bytes (with the allocator's 16) when only a records floor holds it; with
    /// copied runs in it, the run floor counts it (`RunFloor::bytes`).
    pub fn floor_box_bytes(&self) -> usize {
        match self.extra.as_deref() {
            Some(e) if e.copied.is_none() => std::mem::size_of::<PartitionExtra>() + 16,
            _ => 0,
        }
    }

    /// Frees the box once nothing is set in it.
    fn settle_extra(&mut self) {
        if self
            .extra
            .as_deref()
            .is_some_and(|e| e.floor == 0 && e.copied.is_none())
        {
            self.extra = None;
        }
    }

    /// The first offset whose message is still held: 0, unless retention trimmed, messages
    /// whose log records were lost were forgotten (accept_data_loss; state/forget.rs), or
    /// Kafka DeleteRecords moved the floor. Nothing below it exists.
    pub fn low_offset(&self) -> u64 {
        self.runs
            .first()
            .map_or(self.next_offset, |r| r.base_offset)
            .max(self.floor())
    }

    /// The run holding `offset`, if any.
    pub fn run_of(&self, offset: u64) -> Option<Run> {
        let run = self.runs.last_passing(|r| r.base_offset <= offset)?;
        (offset < run.base_offset + u64::from(run.count)).then_some(run)
    }

    /// First offset whose message was created at or after `us`.
    pub fn first_offset_at_or_after(&self, us: i64) -> u64 {
        let i = self.runs.partition_point(|r| r.created_us < us);
        self.runs
            .get(i)
            .map_or(self.next_offset, |r| r.base_offset.max(self.floor()))
    }

    pub fn created_of(&self, offset: u64) -> Option<i64> {
        self.run_of(offset).map(|r| r.created_us)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseRow {
    pub id: u128,
    /// Exclusive end offset of the claimed range.
    pub end: u64,
    pub expires_us: i64,
    pub seconds: u32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CursorRow {
    /// Next offset to deliver; everything below is committed.
    pub committed: u64,
    pub lease: Option<LeaseRow>,
    /// Charged failures of the message at `committed`.
    pub failures: u32,
    /// Delivery attempt of the messages below `delivered_end` when redelivered.
    pub attempt: u32,
    /// Everything below this offset has been delivered at least once.
    pub delivered_end: u64,
}

impl CursorRow {
    pub fn live_lease(&self, now_us: i64) -> Option<&LeaseRow> {
        self.lease.as_ref().filter(|l| l.expires_us > now_us)
    }

    /// Offsets `committed..end` the group holds in flight here (leased, or delivered and not
    /// acked): where a message being worked on is found without the id index (review s34 d
    /// H2).
    pub fn in_flight(&self) -> Option<(u64, u64)> {
        let end = self
            .lease
            .map_or(self.delivered_end, |l| l.end.max(self.delivered_end));
        (end > self.committed).then_some((self.committed, end))
    }
}

pub struct Group {
    pub id: u64,
    pub queue: u64,
    pub name: String,
    /// Where a partition's cursor starts the first time this group touches it.
    pub start_from_us: i64,
    pub created_us: i64,
    /// Last-value delivery (spec native-api §2.5.4), fixed when the group registered.
    pub conflation: bool,
    pub cursors: CursorMap,
    /// Derived: partitions that may have deliverable messages, oldest hint first.
    pub ready: VecDeque<u64>,
    pub in_ready: HashSet<u64>,
    /// Derived: (time, partition) at which a leased/delayed/held partition should be looked at.
    pub wake: BinaryHeap<Reverse<(i64, u64)>>,
}

impl Group {
    pub fn mark_ready(&mut self, pid: u64) {
        if self.in_ready.insert(pid) {
            self.ready.push_back(pid);
        }
    }
}

#[derive(Clone, Debug)]
pub struct DlqRow {
    pub group: String,
    pub partition: u64,
    pub offset: u64,
    pub error: String,
    pub failed_us: i64,
    pub retries: u32,
}

impl DlqRow {
    /// Whether a purge of `group` ("" = any), partition `pid` ([`crate::entry::ANY_PARTITION`]
    /// = any), failed within `from_us..=to_us`, removes this row.
    pub fn purged_by(&self, group: &str, pid: u64, from_us: i64, to_us: i64) -> bool {
        (group.is_empty() || self.group == group)
            && (pid == crate::entry::ANY_PARTITION || self.partition == pid)
            && (from_us..=to_us).contains(&self.failed_us)
    }
}

#[derive(Clone, Debug)]
pub struct TraceRow {
    pub partition: u64,
    pub transaction_id: String,
    pub group: String,
    pub names: Vec<String>,
    pub event_type: String,
    pub data: String,
    pub at_us: i64,
}

impl TraceRow {
    /// What the row holds in memory, roughly: its strings and a fixed overhead.
    pub fn stored_bytes(&self) -> usize {
        128 + self.transaction_id.len()
            + self.group.len()
            + self.names.iter().map(|n| n.len() + 24).sum::<usize>()
            + self.event_type.len()
            + self.data.len()
    }
}

/// Seconds (a client or queue option) to microseconds, saturating: a huge value means "for
/// ever", never a wrapped negative time.
pub fn secs_us(secs: i64) -> i64 {
    secs.saturating_mul(1_000_000)
}

pub fn cursor_start(p: &Partition, start_from_us: i64) -> u64 {
    if start_from_us == i64::MIN {
        p.low_offset()
    } else {
        p.first_offset_at_or_after(start_from_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extra_box_is_held_only_while_a_floor_or_copied_runs_are_set() {
        let mut p = test_partition(1, "p");
        p.set_floor(0);
        assert!(
            p.extra.is_none(),
            "clearing an unset floor allocates nothing"
        );
        p.set_floor(5);
        assert_eq!(p.floor(), 5);
        assert_eq!(
            std::mem::size_of::<PartitionExtra>(),
            72,
            "docs/memory.md says so"
        );
        assert_eq!(
            p.floor_box_bytes(),
            std::mem::size_of::<PartitionExtra>() + 16
        );
        p.copied_runs_or_default();
        assert_eq!(p.floor_box_bytes(), 0, "the run floor counts it now");
        p.set_floor(0);
        assert!(p.extra.is_some(), "the copied runs still hold it");
        p.set_copied_runs(None);
        assert!(p.extra.is_none() && p.floor() == 0);
    }
}
