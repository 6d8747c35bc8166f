//! Kafka transactions' state (docs/kafka-transactions.md): the coordinator's rows, one per
//! transactional id, and per partition what readers must hide (open and aborted
//! transactional stretches, control markers) and what Fetch lists (aborted transactions).
//!
//! Changed only by effects 55–59; every operation here is what apply does with one of them.
//! An operation the planner would never ask for (a stale epoch, a partition not in the
//! transaction) is refused with `false` and changes nothing, alike on every replica, so a
//! buggy entry can never make a checkpoint that [`KafkaTxns::decode`] refuses.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// The longest transactional id kept (Kafka has no bound; 1 KiB is far past any client's).
pub use queenmq_protocol::kafka_txns::MAX_TRANSACTIONAL_ID_BYTES;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnState {
    Empty = 0,
    Ongoing = 1,
}

/// The outcome of the last EndTxn of the row's epoch (answers a retried EndTxn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnResult {
    None = 0,
    Committed = 1,
    Aborted = 2,
}

/// What an EndTxn effect does (its outcome byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnEnd {
    Abort = 0,
    Commit = 1,
    /// Forget an `Empty` row idle past the transactional id expiration.
    Expire = 2,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
}

/// (group, topic, partition) of a pending transactional offset.
pub type OffsetKey = (String, String, i32);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnRow {
    pub producer_id: i64,
    pub epoch: i16,
    pub timeout_ms: u32,
    pub state: TxnState,
    pub started_us: i64,
    pub last_us: i64,
    pub last_result: TxnResult,
    /// Engine partition id → the first offset the open transaction wrote there.
    pub partitions: BTreeMap<u64, Option<u64>>,
    pub groups: BTreeSet<String>,
    pub pending: BTreeMap<OffsetKey, PendingOffset>,
    /// The (producer id, epoch) a KIP-360 InitProducerId named when it made the row's
    /// current pair (effect 66): a retry naming it again, its answer lost, gets the current
    /// pair instead of being fenced, as Kafka's `lastProducerEpoch`. Any other init clears it.
    pub bumped_from: Option<(i64, i16)>,
}

/// The last epoch a producer id is used at: the bump past it moves to a new id at epoch 0.
pub const LAST_EPOCH: i16 = i16::MAX - 1;

impl TxnRow {
    /// Whether a bump from `from` makes the row's pair: the same id one epoch on, or a new id
    /// at epoch 0 after the last epoch. Only such a pair is recorded (apply and decode), so a
    /// recorded pair never stands for any other.
    pub fn is_bumped_from(&self, from: (i64, i16)) -> bool {
        let (id, epoch) = from;
        let next = id == self.producer_id && epoch.checked_add(1) == Some(self.epoch);
        let rotated = id != self.producer_id && epoch == LAST_EPOCH && self.epoch == 0;
        next || rotated
    }

    /// When the open transaction times out (µs); `None` when none is open.
    pub fn deadline_us(&self) -> Option<i64> {
        (self.state == TxnState::Ongoing).then(|| {
            self.started_us
                .saturating_add(i64::from(self.timeout_ms).saturating_mul(1000))
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StretchKind {
    /// Records of an open transaction.
    Open = 0,
    /// Records of an aborted transaction: never delivered over HTTP nor to read_committed.
    Aborted = 1,
    CommitMarker = 2,
    AbortMarker = 3,
}

impl StretchKind {
    pub fn from_u8(b: u8) -> Option<StretchKind> {
        Some(match b {
            0 => StretchKind::Open,
            1 => StretchKind::Aborted,
            2 => StretchKind::CommitMarker,
            3 => StretchKind::AbortMarker,
            _ => return None,
        })
    }

    pub fn is_marker(self) -> bool {
        matches!(self, StretchKind::CommitMarker | StretchKind::AbortMarker)
    }
}

/// Consecutive offsets of one partition written by one transactional producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stretch {
    pub count: u32,
    pub producer_id: i64,
    pub epoch: i16,
    pub kind: StretchKind,
}

/// An aborted transaction of a partition, as Fetch lists it (producer id, first offset) and
/// as far as it reaches (its abort marker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedRow {
    pub producer_id: i64,
    pub first_offset: u64,
    pub last_offset: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartTxns {
    /// Derived: first offset → producer id of every open transaction that wrote here.
    pub open: BTreeMap<u64, i64>,
    pub stretches: BTreeMap<u64, Stretch>,
    /// Oldest first.
    pub aborted: VecDeque<AbortedRow>,
}

impl PartTxns {
    fn is_empty(&self) -> bool {
        self.open.is_empty() && self.stretches.is_empty() && self.aborted.is_empty()
    }
}

/// The most stretches plus open transactions a partition's index holds: a transactional
/// batch that would pass it is refused (POLICY_VIOLATION, abortable). 65536 × ~64 B is
/// ~4 MiB a partition. Alternating producers that abort leave one stretch a batch that only
/// retention or DeleteRecords frees (docs/kafka-transactions.md).
pub const MAX_STRETCHES_PER_PARTITION: usize = 65_536;

/// What a row costs beside its strings and maps' entries (B-tree slack included).
const ROW_BYTES: usize = 2 * std::mem::size_of::<(String, TxnRow)>();
const ENTRY_BYTES: usize = 64;
const STRETCH_BYTES: usize = 2 * std::mem::size_of::<(u64, Stretch)>();
const ABORTED_BYTES: usize = std::mem::size_of::<AbortedRow>();

/// What one key of the pending-offset index holds, roughly.
fn held_bytes(key: &OffsetKey) -> usize {
    ENTRY_BYTES + key.0.len() + key.1.len()
}

#[derive(Debug, Default)]
pub struct KafkaTxns {
    rows: BTreeMap<String, TxnRow>,
    parts: BTreeMap<u64, PartTxns>,
    /// Derived: (deadline, transactional id) of every open transaction.
    deadlines: BTreeSet<(i64, String)>,
    /// Derived: producer id → transactional id.
    by_producer: HashMap<i64, String>,
    /// Derived: (group, topic, partition) → how many open transactions hold a pending
    /// offset there, so that a `require_stable` check probes what it asks for instead of
    /// collecting every pending offset of the group (review s16 kafka M2).
    pending_held: BTreeMap<OffsetKey, u32>,
    /// Derived: what the rows and partitions hold, roughly (docs/memory.md).
    bytes: usize,
}

impl KafkaTxns {
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.parts.is_empty()
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn open_count(&self) -> usize {
        self.deadlines.len()
    }

    pub fn get(&self, txn_id: &str) -> Option<&TxnRow> {
        self.rows.get(txn_id)
    }

    /// The row of `txn_id` with its key, as [`KafkaTxns::rows`] yields it.
    pub fn row_entry(&self, txn_id: &str) -> Option<(&String, &TxnRow)> {
        self.rows.get_key_value(txn_id)
    }

    pub fn rows(&self) -> impl Iterator<Item = (&String, &TxnRow)> {
        self.rows.iter()
    }

    pub fn parts(&self) -> impl Iterator<Item = (&u64, &PartTxns)> {
        self.parts.iter()
    }

    pub fn part(&self, pid: u64) -> Option<&PartTxns> {
        self.parts.get(&pid)
    }

    /// For each asked (topic, partition), whether an open transaction holds a pending
    /// offset of `group` there (OffsetFetch `require_stable`). Walks the open transactions
    /// (at most `kafka_max_open_transactions`) and the group's pending rows of each.
    pub fn pending_of(&self, group: &str, asked: &[(String, i32)]) -> Vec<bool> {
        let mut key: OffsetKey = (group.to_owned(), String::new(), 0);
        asked
            .iter()
            .map(|(t, p)| {
                t.clone_into(&mut key.1);
                key.2 = *p;
                self.pending_held.contains_key(&key)
            })
            .collect()
    }

    /// The (topic, partition) where an open transaction holds a pending offset of `group`,
    /// in order, borrowed: what a read lists is costed before any name is copied (review
    /// s19 kafka H1).
    pub fn pending_keys<'a>(&'a self, group: &'a str) -> impl Iterator<Item = (&'a str, i32)> {
        let from = (group.to_owned(), String::new(), i32::MIN);
        self.pending_held
            .range(from..)
            .map(|(k, _)| k)
            .take_while(move |(g, _, _)| g == group)
            .map(|(_, t, p)| (t.as_str(), *p))
    }

    /// Up to `limit` (topic, partition) where an open transaction holds a pending offset of
    /// `group`, in order, and whether that is all of them.
    pub fn pending_in(&self, group: &str, limit: usize) -> (Vec<(String, i32)>, bool) {
        let mut out = Vec::new();
        for (t, p) in self.pending_keys(group) {
            if out.len() == limit {
                return (out, false);
            }
            out.push((t.to_owned(), p));
        }
        (out, true)
    }

    /// Counts one more open transaction holding `key`.
    fn hold(&mut self, key: &OffsetKey) {
        match self.pending_held.get_mut(key) {
            Some(n) => *n = n.saturating_add(1),
            None => {
                self.bytes = self.bytes.saturating_add(held_bytes(key));
                self.pending_held.insert(key.clone(), 1);
            }
        }
    }

    /// Counts one open transaction fewer holding `key`.
    fn release(&mut self, key: &OffsetKey) {
        if let Some(n) = self.pending_held.get_mut(key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.pending_held.remove(key);
                self.bytes = self.bytes.saturating_sub(held_bytes(key));
            }
        }
    }

    /// The transactional id whose current producer id is `producer_id`.
    pub fn by_producer(&self, producer_id: i64) -> Option<&str> {
        self.by_producer.get(&producer_id).map(String::as_str)
    }

    /// The partition's last stable offset: the first offset of its oldest open transaction,
    /// else `next_offset`, never below the log start `low` (retention and DeleteRecords may
    /// pass an open transaction's first offset; Kafka's `updateFirstUnstableOffset` clamps
    /// alike, or ListOffsets(read_committed) would answer an offset that no longer exists).
    pub fn lso(&self, pid: u64, low: u64, next_offset: u64) -> u64 {
        self.parts
            .get(&pid)
            .and_then(|p| p.open.keys().next().copied())
            .map_or(next_offset, |o| o.min(next_offset))
            .max(low.min(next_offset))
    }

    /// The stretches overlapping `from..to`, in offset order: (base offset, stretch).
    pub fn stretches_in(&self, pid: u64, from: u64, to: u64) -> Vec<(u64, Stretch)> {
        let Some(p) = self.parts.get(&pid) else {
            return Vec::new();
        };
        let before = p
            .stretches
            .range(..from)
            .next_back()
            .filter(|(b, s)| **b + u64::from(s.count) > from);
        before
            .into_iter()
            .chain(p.stretches.range(from..to))
            .map(|(b, s)| (*b, *s))
            .collect()
    }

    /// Whether HTTP readers must skip `offset`: a record of an aborted (or, below the LSO,
    /// impossibly, open) transaction, or an abort marker. Commit markers have no stretch:
    /// readers know them from their frame ([`super::frame::control_marker`]).
    pub fn hidden(&self, pid: u64, offset: u64) -> bool {
        self.parts.get(&pid).is_some_and(|p| {
            p.stretches
                .range(..=offset)
                .next_back()
                .is_some_and(|(b, s)| b + u64::from(s.count) > offset)
        })
    }

    /// The offsets of `from..to` readers skip, as ascending disjoint ranges `[start, end)`
    /// clipped to `from..to`: one walk of the index per read instead of a look-up per offset.
    pub fn hidden_ranges(&self, pid: u64, from: u64, to: u64) -> Vec<(u64, u64)> {
        self.hidden_ranges_upto(pid, from, to, usize::MAX).0
    }

    /// [`Self::hidden_ranges`] of at most `max` stretches, and how far they describe the
    /// range: `to`, or the base of the first stretch left out (always past `from`), so a
    /// reader reads only below it. A claim of a few messages then never walks a long index.
    pub fn hidden_ranges_upto(
        &self,
        pid: u64,
        from: u64,
        to: u64,
        max: usize,
    ) -> (Vec<(u64, u64)>, u64) {
        let mut out: Vec<(u64, u64)> = Vec::new();
        let Some(p) = self.parts.get(&pid) else {
            return (out, to);
        };
        let before = p
            .stretches
            .range(..from)
            .next_back()
            .filter(|(b, s)| **b + u64::from(s.count) > from);
        for (n, (b, s)) in before
            .into_iter()
            .chain(p.stretches.range(from..to))
            .enumerate()
        {
            if n >= max.max(1) {
                return (out, (*b).max(from));
            }
            let (start, end) = ((*b).max(from), (b + u64::from(s.count)).min(to));
            match out.last_mut() {
                Some(last) if last.1 >= start => last.1 = last.1.max(end),
                _ => out.push((start, end)),
            }
        }
        (out, to)
    }

    /// The first offset of the hidden run (adjacent stretches together) holding `offset`,
    /// if it is hidden: a reader walking back jumps over the run at once.
    pub fn hidden_run_start(&self, pid: u64, offset: u64) -> Option<u64> {
        let p = self.parts.get(&pid)?;
        let mut at = offset;
        let mut start = None;
        while let Some((b, s)) = p.stretches.range(..=at).next_back() {
            if b + u64::from(s.count) <= at {
                break;
            }
            start = Some(*b);
            match b.checked_sub(1) {
                Some(prev) => at = prev,
                None => break,
            }
        }
        start
    }

    /// The partition's aborted transactions whose offsets overlap `from..to`, in marker
    /// order. Rows are kept in marker order, so a binary search on `last_offset` finds the
    /// first; first offsets are not monotone (a transaction that began earlier may end
    /// later), so the rest is filtered, not cut at the first row past `to` (review F1): at
    /// most `kafka_max_aborted_per_partition` rows.
    ///
    /// A row may stand for several aborted transactions of its producer that follow one
    /// another without a gap (merged, so that a loop of aborts costs one row): each abort
    /// marker `m` of that producer inside the row, below its `last_offset`, begins another
    /// aborted transaction at `m + 1`. A Fetch must list that start too, since Kafka's
    /// clients forget an aborted producer at each abort marker.
    pub fn aborted_in(&self, pid: u64, from: u64, to: u64) -> Vec<AbortedRow> {
        let Some(p) = self.parts.get(&pid) else {
            return Vec::new();
        };
        let start = p.aborted.partition_point(|a| a.last_offset < from);
        p.aborted
            .range(start..)
            .filter(|a| a.first_offset < to)
            .copied()
            .collect()
    }

    /// Whether an HTTP reader must not deliver `offset` of `pid` (its index alone; control
    /// markers are known by their frame): at or past the last stable offset, or hidden.
    pub fn withheld(&self, pid: u64, low: u64, next_offset: u64, offset: u64) -> bool {
        offset >= self.lso(pid, low, next_offset) || self.hidden(pid, offset)
    }

    /// How many aborted rows the partition holds (capped by `kafka_max_aborted_per_partition`).
    pub fn aborted_count(&self, pid: u64) -> usize {
        self.parts.get(&pid).map_or(0, |p| p.aborted.len())
    }

    /// Whether a transactional batch of `producer_id` at `epoch` appended at `next_offset` of
    /// `pid` fits the partition's stretch cap (review H1). It fits at once when it extends
    /// the transaction's own open stretch; else it takes a stretch, and `written` false
    /// means a first write here, whose end may add one marker stretch more. The count kept
    /// under `max` is stretches plus transactions open here, since an abort adds at most one
    /// stretch (its marker) per transaction and a commit none: no end is ever refused and
    /// the index never passes `max`.
    pub fn stretch_room(
        &self,
        pid: u64,
        producer_id: i64,
        epoch: i16,
        next_offset: u64,
        written: bool,
        max: usize,
    ) -> bool {
        let Some(p) = self.parts.get(&pid) else {
            return max >= 2;
        };
        let extends = p
            .stretches
            .range(..next_offset)
            .next_back()
            .is_some_and(|(b, s)| {
                s.kind == StretchKind::Open
                    && s.producer_id == producer_id
                    && s.epoch == epoch
                    && b + u64::from(s.count) == next_offset
            });
        let need = 1 + usize::from(!written);
        extends || p.stretches.len() + p.open.len() + need <= max
    }

    /// How many stretches the partition holds (capped by [`MAX_STRETCHES_PER_PARTITION`]).
    pub fn stretch_count(&self, pid: u64) -> usize {
        self.parts.get(&pid).map_or(0, |p| p.stretches.len())
    }

    /// Whether aborting `producer_id`'s transaction that began at `first` on `pid` adds an
    /// aborted row (it does not when it follows the producer's last aborted one at once).
    pub fn abort_adds_row(&self, pid: u64, producer_id: i64, first: u64) -> bool {
        !self
            .parts
            .get(&pid)
            .and_then(|p| p.aborted.back())
            .is_some_and(|a| joins(a, producer_id, first))
    }

    /// Up to `limit` open transactions whose deadline is before `now_us`, oldest first.
    pub fn due(&self, now_us: i64, limit: usize) -> Vec<String> {
        self.deadlines
            .iter()
            .take_while(|(at, _)| *at < now_us)
            .take(limit)
            .map(|(_, id)| id.clone())
            .collect()
    }

    /// Up to `limit` `Empty` rows idle since before `cutoff_us` (a full scan, bounded by the
    /// cap on rows; the sweep that calls it runs seldom).
    pub fn idle_before(&self, cutoff_us: i64, limit: usize) -> Vec<String> {
        self.rows
            .iter()
            .filter(|(_, r)| r.state == TxnState::Empty && r.last_us < cutoff_us)
            .take(limit)
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn set_deadline(&mut self, txn_id: &str, old: Option<i64>, new: Option<i64>) {
        if let Some(at) = old {
            self.deadlines.remove(&(at, txn_id.to_owned()));
        }
        if let Some(at) = new {
            self.deadlines.insert((at, txn_id.to_owned()));
        }
    }

    /// Effect 55: (producer id, epoch, timeout) granted to `txn_id`. Refused while the row
    /// has an open transaction (the planner aborts it first).
    pub fn init(
        &mut self,
        txn_id: &str,
        producer_id: i64,
        epoch: i16,
        timeout_ms: u32,
        now_us: i64,
    ) -> bool {
        if let Some(row) = self.rows.get_mut(txn_id) {
            if row.state != TxnState::Empty {
                return false;
            }
            if row.producer_id != producer_id {
                self.by_producer.remove(&row.producer_id);
            }
            row.producer_id = producer_id;
            row.epoch = epoch;
            row.timeout_ms = timeout_ms;
            row.last_us = now_us;
            row.last_result = TxnResult::None;
            row.bumped_from = None;
        } else {
            self.bytes = self
                .bytes
                .saturating_add(ROW_BYTES + 2 * txn_id.len() + ENTRY_BYTES);
            self.rows.insert(
                txn_id.to_owned(),
                TxnRow {
                    producer_id,
                    epoch,
                    timeout_ms,
                    state: TxnState::Empty,
                    started_us: now_us,
                    last_us: now_us,
                    last_result: TxnResult::None,
                    partitions: BTreeMap::new(),
                    groups: BTreeSet::new(),
                    pending: BTreeMap::new(),
                    bumped_from: None,
                },
            );
        }
        self.by_producer.insert(producer_id, txn_id.to_owned());
        true
    }

    /// Effect 66: the pair the KIP-360 init of the same entry named, just after its effect
    /// 55. Refused unless the row exists with no open transaction and `from` is the pair
    /// its current one was bumped from.
    pub fn bumped_from(&mut self, txn_id: &str, from: (i64, i16)) -> bool {
        match self.rows.get_mut(txn_id) {
            Some(row) if row.state == TxnState::Empty && row.is_bumped_from(from) => {
                row.bumped_from = Some(from);
                true
            }
            _ => false,
        }
    }

    /// The row of `txn_id` if its current (producer id, epoch) is this one.
    fn current_mut(&mut self, txn_id: &str, producer_id: i64, epoch: i16) -> Option<&mut TxnRow> {
        self.rows
            .get_mut(txn_id)
            .filter(|r| r.producer_id == producer_id && r.epoch == epoch)
    }

    /// Effect 56: partitions and groups added, the transaction opened if it was not.
    pub fn add(
        &mut self,
        txn_id: &str,
        producer_id: i64,
        epoch: i16,
        pids: &[u64],
        groups: &[&str],
        now_us: i64,
    ) -> bool {
        let Some(row) = self.current_mut(txn_id, producer_id, epoch) else {
            return false;
        };
        let old = row.deadline_us();
        if row.state == TxnState::Empty {
            row.state = TxnState::Ongoing;
            row.started_us = now_us;
            row.last_result = TxnResult::None;
        }
        row.last_us = now_us;
        let mut added = 0usize;
        for pid in pids {
            if !row.partitions.contains_key(pid) {
                row.partitions.insert(*pid, None);
                added = added.saturating_add(ENTRY_BYTES);
            }
        }
        for g in groups {
            if row.groups.insert((*g).to_owned()) {
                added = added.saturating_add(ENTRY_BYTES + g.len());
            }
        }
        let new = row.deadline_us();
        self.bytes = self.bytes.saturating_add(added);
        if old != new {
            self.set_deadline(txn_id, old, new);
        }
        true
    }

    /// Effect 57: a pending offset of the open transaction, for a group it added.
    pub fn offset(
        &mut self,
        txn_id: &str,
        key: OffsetKey,
        value: PendingOffset,
        now_us: i64,
    ) -> bool {
        let Some(row) = self.rows.get_mut(txn_id) else {
            return false;
        };
        if row.state != TxnState::Ongoing || !row.groups.contains(&key.0) {
            return false;
        }
        row.last_us = now_us;
        let keyed = ENTRY_BYTES + key.0.len() + key.1.len();
        self.bytes = self.bytes.saturating_add(keyed + value.metadata.len());
        let fresh = !row.pending.contains_key(&key);
        let held = fresh.then(|| key.clone());
        if let Some(old) = row.pending.insert(key, value) {
            // A replaced offset frees what it held, so the count stays what rebuild computes.
            self.bytes = self.bytes.saturating_sub(keyed + old.metadata.len());
        }
        if let Some(k) = held {
            self.hold(&k);
        }
        true
    }

    /// Effect 59: `count` records of the open transaction appended at `base` of `pid`
    /// (whose next offset, after that append, is `next_offset`).
    pub fn records(
        &mut self,
        txn_id: &str,
        pid: u64,
        base: u64,
        count: u32,
        next_offset: u64,
    ) -> bool {
        let end = base.saturating_add(u64::from(count));
        if count == 0 || end > next_offset {
            return false;
        }
        let Some(row) = self.rows.get_mut(txn_id) else {
            return false;
        };
        let Some(first) = row.partitions.get_mut(&pid) else {
            return false;
        };
        if row.state != TxnState::Ongoing {
            return false;
        }
        let part = self.parts.entry(pid).or_default();
        let overlaps = part
            .stretches
            .range(..end)
            .next_back()
            .is_some_and(|(b, s)| b + u64::from(s.count) > base);
        if overlaps {
            return false;
        }
        if first.is_none() {
            *first = Some(base);
            part.open.insert(base, row.producer_id);
        }
        // A batch right after the transaction's own open stretch extends it (review H1): a
        // transaction of many batches on a partition is one stretch, not one per batch.
        if let Some((b, s)) = part.stretches.range_mut(..base).next_back() {
            let own = s.kind == StretchKind::Open
                && s.producer_id == row.producer_id
                && s.epoch == row.epoch
                && b + u64::from(s.count) == base;
            if let Some(grown) = s.count.checked_add(count).filter(|_| own) {
                s.count = grown;
                return true;
            }
        }
        part.stretches.insert(
            base,
            Stretch {
                count,
                producer_id: row.producer_id,
                epoch: row.epoch,
                kind: StretchKind::Open,
            },
        );
        self.bytes = self.bytes.saturating_add(STRETCH_BYTES);
        true
    }

    /// Effect 58: the transaction ends (or an idle `Empty` row is forgotten). `markers` are
    /// the (partition, offset) of the control records the same entry appended, one per
    /// partition the transaction wrote.
    pub fn end(&mut self, txn_id: &str, how: TxnEnd, markers: &[(u64, u64)], now_us: i64) -> bool {
        let Some(row) = self.rows.get(txn_id) else {
            return false;
        };
        if how == TxnEnd::Expire {
            if row.state != TxnState::Empty || !markers.is_empty() {
                return false;
            }
            if let Some(row) = self.rows.remove(txn_id) {
                if self.by_producer.get(&row.producer_id).map(String::as_str) == Some(txn_id) {
                    self.by_producer.remove(&row.producer_id);
                }
                self.bytes = self
                    .bytes
                    .saturating_sub(ROW_BYTES + 2 * txn_id.len() + ENTRY_BYTES);
            }
            return true;
        }
        if row.state != TxnState::Ongoing {
            return false;
        }
        // One marker per written partition, each past that partition's first offset.
        let written: Vec<(u64, u64)> = row
            .partitions
            .iter()
            .filter_map(|(pid, first)| first.map(|f| (*pid, f)))
            .collect();
        let marks: BTreeMap<u64, u64> = markers.iter().copied().collect();
        if marks.len() != markers.len()
            || written.len() != marks.len()
            || written
                .iter()
                .any(|(pid, f)| marks.get(pid).is_none_or(|m| m < f))
        {
            return false;
        }
        let Some(row) = self.rows.get_mut(txn_id) else {
            return false;
        };
        let old = row.deadline_us();
        let (producer_id, epoch) = (row.producer_id, row.epoch);
        let freed = ENTRY_BYTES
            .saturating_mul(row.partitions.len() + row.groups.len() + row.pending.len())
            .saturating_add(row.groups.iter().map(String::len).sum())
            .saturating_add(
                row.pending
                    .iter()
                    .map(|(k, v)| k.0.len() + k.1.len() + v.metadata.len())
                    .sum(),
            );
        row.state = TxnState::Empty;
        row.last_us = now_us;
        row.last_result = if how == TxnEnd::Commit {
            TxnResult::Committed
        } else {
            TxnResult::Aborted
        };
        row.partitions.clear();
        row.groups.clear();
        let released = std::mem::take(&mut row.pending);
        self.bytes = self.bytes.saturating_sub(freed);
        for key in released.keys() {
            self.release(key);
        }
        self.set_deadline(txn_id, old, None);
        for (pid, first) in written {
            let marker = marks.get(&pid).copied().unwrap_or(first);
            self.end_partition(pid, producer_id, epoch, first, marker, how);
        }
        true
    }

    /// One partition's part of an end. Commit: its open stretches of the producer from
    /// `first` on are dropped (the records are ordinary from now on, and the marker is
    /// known by its frame), so a commit leaves nothing here. Abort: they and the marker
    /// turn aborted, each merged into the producer's aborted stretch right before it, and
    /// the transaction joins the producer's last aborted row when it follows it at once; a
    /// loop of aborts on one partition is then one stretch and one row.
    fn end_partition(
        &mut self,
        pid: u64,
        producer_id: i64,
        epoch: i16,
        first: u64,
        marker: u64,
        how: TxnEnd,
    ) {
        let part = self.parts.entry(pid).or_default();
        part.open.remove(&first);
        let mine: Vec<u64> = part
            .stretches
            .range(first..marker)
            .filter(|(_, s)| s.producer_id == producer_id && s.kind == StretchKind::Open)
            .map(|(b, _)| *b)
            .collect();
        let mut freed = 0usize;
        let mut added = 0usize;
        for b in mine {
            let Some(mut s) = part.stretches.remove(&b) else {
                continue;
            };
            freed += STRETCH_BYTES;
            if how == TxnEnd::Commit {
                continue;
            }
            s.kind = StretchKind::Aborted;
            if !merge_aborted(&mut part.stretches, b, s) {
                added += STRETCH_BYTES;
            }
        }
        if how != TxnEnd::Commit {
            let mark = Stretch {
                count: 1,
                producer_id,
                epoch,
                kind: StretchKind::Aborted,
            };
            if !merge_aborted(&mut part.stretches, marker, mark) {
                added += STRETCH_BYTES;
            }
            match part.aborted.back_mut() {
                Some(last) if joins(last, producer_id, first) => last.last_offset = marker,
                _ => {
                    part.aborted.push_back(AbortedRow {
                        producer_id,
                        first_offset: first,
                        last_offset: marker,
                    });
                    added += ABORTED_BYTES;
                }
            }
        }
        if part.is_empty() {
            self.parts.remove(&pid);
        }
        self.bytes = self.bytes.saturating_add(added).saturating_sub(freed);
    }

    /// Retention or DeleteRecords moved `pid`'s first held offset up to `low`: what lies
    /// wholly below it is forgotten. Open transactions stay open (their end still comes).
    pub fn trim(&mut self, pid: u64, low: u64) {
        let Some(part) = self.parts.get_mut(&pid) else {
            return;
        };
        let gone: Vec<u64> = part
            .stretches
            .range(..low)
            .filter(|(b, s)| **b + u64::from(s.count) <= low && s.kind != StretchKind::Open)
            .map(|(b, _)| *b)
            .collect();
        for b in &gone {
            part.stretches.remove(b);
        }
        let before = part.aborted.len();
        part.aborted.retain(|a| a.last_offset >= low);
        let freed = gone
            .len()
            .saturating_mul(STRETCH_BYTES)
            .saturating_add((before - part.aborted.len()).saturating_mul(ABORTED_BYTES));
        self.bytes = self.bytes.saturating_sub(freed);
        if part.is_empty() {
            self.parts.remove(&pid);
        }
    }

    /// The partition is gone (its queue deleted): its index goes, and open transactions
    /// forget it (they end without a marker there).
    pub fn forget_partition(&mut self, pid: u64) {
        if let Some(part) = self.parts.remove(&pid) {
            let freed = part
                .stretches
                .len()
                .saturating_mul(STRETCH_BYTES)
                .saturating_add(part.aborted.len().saturating_mul(ABORTED_BYTES));
            self.bytes = self.bytes.saturating_sub(freed);
        }
        for row in self.rows.values_mut() {
            if row.partitions.remove(&pid).is_some() {
                self.bytes = self.bytes.saturating_sub(ENTRY_BYTES);
            }
        }
    }

    /// The topic (a queue) is deleted: pending offsets of it go, so that a later commit does
    /// not bring back offsets of a topic that no longer exists (a topic created again under
    /// the name starts without them, as its plain group offsets do).
    pub fn forget_topic(&mut self, topic: &str) {
        let mut freed = 0usize;
        let mut released: Vec<OffsetKey> = Vec::new();
        for row in self.rows.values_mut() {
            row.pending.retain(|k, v| {
                let keep = k.1 != topic;
                if !keep {
                    freed = freed
                        .saturating_add(ENTRY_BYTES + k.0.len() + k.1.len() + v.metadata.len());
                    released.push(k.clone());
                }
                keep
            });
        }
        self.bytes = self.bytes.saturating_sub(freed);
        for key in &released {
            self.release(key);
        }
    }

    /// Rebuilds the derived indexes and the byte count from the rows and partitions (after
    /// a decode).
    pub(crate) fn rebuild(&mut self) {
        self.deadlines.clear();
        self.by_producer.clear();
        self.pending_held.clear();
        let mut bytes = 0usize;
        for part in self.parts.values_mut() {
            part.open.clear();
            bytes = bytes
                .saturating_add(part.stretches.len().saturating_mul(STRETCH_BYTES))
                .saturating_add(part.aborted.len().saturating_mul(ABORTED_BYTES));
        }
        for (id, row) in &self.rows {
            bytes = bytes
                .saturating_add(ROW_BYTES + 2 * id.len() + ENTRY_BYTES)
                .saturating_add(ENTRY_BYTES.saturating_mul(row.partitions.len()))
                .saturating_add(row.groups.iter().map(|g| ENTRY_BYTES + g.len()).sum())
                .saturating_add(
                    row.pending
                        .iter()
                        .map(|(k, v)| ENTRY_BYTES + k.0.len() + k.1.len() + v.metadata.len())
                        .sum(),
                );
            self.by_producer.insert(row.producer_id, id.clone());
            for key in row.pending.keys() {
                *self.pending_held.entry(key.clone()).or_insert(0) += 1;
            }
            if let Some(at) = row.deadline_us() {
                self.deadlines.insert((at, id.clone()));
            }
            for (pid, first) in &row.partitions {
                if let Some(f) = first {
                    self.parts
                        .entry(*pid)
                        .or_default()
                        .open
                        .insert(*f, row.producer_id);
                }
            }
        }
        bytes = bytes.saturating_add(self.pending_held.keys().map(held_bytes).sum());
        self.bytes = bytes;
    }

    /// For the section decoder: a row and a partition as decoded, before [`Self::rebuild`].
    pub(crate) fn insert_decoded(&mut self, txn_id: String, row: TxnRow) -> bool {
        self.rows.insert(txn_id, row).is_none()
    }

    pub(crate) fn insert_decoded_part(&mut self, pid: u64, part: PartTxns) -> bool {
        self.parts.insert(pid, part).is_none()
    }

    /// For the section decoder: a decoded row, to set what follows the partitions.
    pub(crate) fn row_mut(&mut self, txn_id: &str) -> Option<&mut TxnRow> {
        self.rows.get_mut(txn_id)
    }
}

/// Whether an aborted transaction of `producer_id` beginning at `first` continues `row`
/// without a gap (so one row stands for both; see [`KafkaTxns::aborted_in`]).
fn joins(row: &AbortedRow, producer_id: i64, first: u64) -> bool {
    row.producer_id == producer_id && row.last_offset.checked_add(1) == Some(first)
}

/// Inserts the aborted stretch `s` at `base`, or extends the stretch ending right before it
/// when that one is the same producer's and epoch's aborted stretch. True when it merged.
fn merge_aborted(stretches: &mut BTreeMap<u64, Stretch>, base: u64, s: Stretch) -> bool {
    if let Some((b, prev)) = stretches.range_mut(..base).next_back() {
        let touches = b.checked_add(u64::from(prev.count)) == Some(base);
        if touches
            && prev.kind == StretchKind::Aborted
            && prev.producer_id == s.producer_id
            && prev.epoch == s.epoch
        {
            if let Some(count) = prev.count.checked_add(s.count) {
                prev.count = count;
                return true;
            }
        }
    }
    stretches.insert(base, s);
    false
}

#[cfg(test)]
#[path = "kafka_txns_tests.rs"]
mod tests;
