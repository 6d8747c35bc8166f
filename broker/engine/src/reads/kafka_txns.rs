//! DescribeTransactions, ListTransactions and DescribeProducers from applied state
//! (protocol/src/kafka_txn_reads.rs): no entry. Every answer is bounded by the caps there,
//! and DescribeTransactions and DescribeProducers by one total each
//! (`MAX_ENTRIES_PER_ANSWER`, `MAX_PRODUCER_ENTRIES_PER_ANSWER`), counted before anything is
//! copied (review s16 kafka H1: the per-item caps multiplied), and lowered to what the
//! cycle has left (`granted`: review s17 lead H1; plan/kafka_txn_reads.rs), in entries and
//! in bytes, each entry charged its names (review s18 kafka M1).

use std::collections::{BTreeSet, HashMap, HashSet};

use queenmq_protocol::kafka_txn_reads::*;
use queenmq_protocol::QueenError;

use crate::state::kafka_txns::{TxnResult, TxnRow, TxnState};
use crate::state::State;

/// What a read may list, or what it listed: entries (described transactions and
/// partitions, producers, rows, pending pairs) and the bytes they hold, each entry
/// [`READ_ENTRY_BYTES`] plus the names it copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Grant {
    pub entries: usize,
    pub bytes: usize,
}

impl Grant {
    pub const UNLIMITED: Grant = Grant {
        entries: usize::MAX,
        bytes: usize::MAX,
    };

    /// Whether `cost` fits what is left.
    pub(crate) fn fits(&self, cost: Grant) -> bool {
        cost.entries <= self.entries && cost.bytes <= self.bytes
    }

    pub(crate) fn spend(&mut self, cost: Grant) {
        self.entries = self.entries.saturating_sub(cost.entries);
        self.bytes = self.bytes.saturating_sub(cost.bytes);
    }

    pub(crate) fn add(&mut self, cost: Grant) {
        self.entries = self.entries.saturating_add(cost.entries);
        self.bytes = self.bytes.saturating_add(cost.bytes);
    }
}

/// One entry carrying a name of `name_len` bytes.
fn entry(name_len: usize) -> Grant {
    Grant {
        entries: 1,
        bytes: READ_ENTRY_BYTES.saturating_add(name_len),
    }
}

/// The answer to `req`, listing at most `granted` beside its own caps, and what it lists.
/// ListTransactions has no per-item error: past the grant the whole list is refused
/// ([`KafkaTxnReadAnswer::ListOverBudget`], review s18 kafka H1), and so is a group's
/// pending set, which is never cut ([`KafkaTxnReadAnswer::GroupPendingOverBudget`]).
pub fn answer(
    st: &State,
    req: &KafkaTxnRead,
    granted: Grant,
) -> Result<(KafkaTxnReadAnswer, Grant), QueenError> {
    Ok(match req {
        KafkaTxnRead::Describe { txn_ids } => {
            if txn_ids.len() > MAX_TXNS_PER_ANSWER {
                return Err(QueenError::bad_request(
                    "DescribeTransactions names more than 10000 transactional ids",
                ));
            }
            let budget = Grant {
                entries: MAX_ENTRIES_PER_ANSWER.min(granted.entries),
                ..granted
            };
            let (v, spent) = describe(st, txn_ids, budget);
            (KafkaTxnReadAnswer::Described(v), spent)
        }
        KafkaTxnRead::List {
            states,
            producer_ids,
        } => {
            if states.len() > MAX_LIST_FILTERS || producer_ids.len() > MAX_LIST_PRODUCER_FILTERS {
                return Err(QueenError::bad_request(format!(
                    "ListTransactions carries more than {MAX_LIST_FILTERS} state filters or \
                     {MAX_LIST_PRODUCER_FILTERS} producer id filters"
                )));
            }
            list(st, states, producer_ids, granted)
        }
        KafkaTxnRead::Producers { partitions } => {
            if partitions.len() > MAX_PRODUCER_PARTITIONS {
                return Err(QueenError::bad_request(
                    "DescribeProducers names more than 10000 partitions",
                ));
            }
            let budget = Grant {
                entries: MAX_PRODUCER_ENTRIES_PER_ANSWER.min(granted.entries),
                ..granted
            };
            let (v, spent) = producers(st, partitions, budget);
            (KafkaTxnReadAnswer::Producers(v), spent)
        }
        KafkaTxnRead::PendingOffsets { group, partitions } => {
            if partitions.len() > MAX_PRODUCER_PARTITIONS {
                return Err(QueenError::bad_request(
                    "a pending-offsets read names more than 10000 partitions",
                ));
            }
            // One flag per asked partition: bounded by the request, nothing listed.
            let v = st.kafka_txns.pending_of(group, partitions);
            (KafkaTxnReadAnswer::Pending(v), Grant::default())
        }
        KafkaTxnRead::GroupPending { group } => group_pending(st, group, granted),
    })
}

/// The group's pending set, never cut by the cycle's grant (review s18 kafka M4): a set cut
/// below what the group holds is checked by the door only after the offsets are read, and a
/// transaction committing in between would show an old offset as stable (review s16 kafka
/// L1). Its own per-answer bound still holds. Past the grant it is refused whole, its cost
/// summed over the borrowed keys before a name is copied (review s19 kafka H1: it was
/// charged but always served, so every such read of a cycle held the whole set).
fn group_pending(st: &State, group: &str, granted: Grant) -> (KafkaTxnReadAnswer, Grant) {
    let mut cost = Grant::default();
    for (topic, _) in st
        .kafka_txns
        .pending_keys(group)
        .take(MAX_ENTRIES_PER_ANSWER)
    {
        cost.add(entry(topic.len()));
    }
    if !granted.fits(cost) {
        return (KafkaTxnReadAnswer::GroupPendingOverBudget, Grant::default());
    }
    let (pairs, complete) = st.kafka_txns.pending_in(group, MAX_ENTRIES_PER_ANSWER);
    (KafkaTxnReadAnswer::GroupPending { pairs, complete }, cost)
}

fn state_of(row: &TxnRow) -> TxnStateName {
    match (row.state, row.last_result) {
        (TxnState::Ongoing, _) => TxnStateName::Ongoing,
        (TxnState::Empty, TxnResult::Committed) => TxnStateName::CompleteCommit,
        (TxnState::Empty, TxnResult::Aborted) => TxnStateName::CompleteAbort,
        (TxnState::Empty, TxnResult::None) => TxnStateName::Empty,
    }
}

/// The (topic, partition index) of an engine partition, when it has a Kafka index.
fn kafka_partition(st: &State, pid: u64) -> Option<(String, i32)> {
    let p = st.partitions.get(&pid)?;
    let q = st.queues.get(&p.queue())?;
    let index = p.name.parse::<i32>().ok()?;
    Some((q.name.clone(), index))
}

/// The bytes of the topic name an engine partition is shown under, when it has a Kafka index.
fn kafka_topic_len(st: &State, pid: u64) -> Option<usize> {
    let p = st.partitions.get(&pid)?;
    let q = st.queues.get(&p.queue())?;
    p.name.parse::<i32>().ok()?;
    Some(q.name.len())
}

/// What describing `row` lists: the view and its id, and an open transaction's partitions
/// with their topic names (review s18 kafka M1: an idle id cost nothing before).
fn described_cost(st: &State, id: &str, row: &TxnRow) -> Grant {
    let mut cost = entry(id.len());
    if row.state == TxnState::Ongoing {
        for pid in row.partitions.keys() {
            if let Some(n) = kafka_topic_len(st, *pid) {
                cost.add(entry(n));
            }
        }
    }
    cost
}

/// Each id in order, and what it lists. An id's cost is counted against `budget` before
/// anything is copied; from the first id that would pass it, every id is `OverBudget`.
fn describe(st: &State, ids: &[String], budget: Grant) -> (Vec<TxnDescribed>, Grant) {
    let mut spent = Grant::default();
    let mut left = budget;
    let mut over = false;
    let v = ids
        .iter()
        .map(|id| {
            if over {
                return TxnDescribed::OverBudget;
            }
            let Some(row) = st.kafka_txns.get(id) else {
                return TxnDescribed::Unknown;
            };
            let cost = described_cost(st, id, row);
            if !left.fits(cost) {
                over = true;
                return TxnDescribed::OverBudget;
            }
            left.spend(cost);
            spent.add(cost);
            TxnDescribed::Known(view(st, id, row))
        })
        .collect();
    (v, spent)
}

fn view(st: &State, id: &str, row: &TxnRow) -> TxnView {
    let open = row.state == TxnState::Ongoing;
    let mut partitions: Vec<(String, i32)> = if open {
        row.partitions
            .keys()
            .filter_map(|pid| kafka_partition(st, *pid))
            .collect()
    } else {
        Vec::new()
    };
    partitions.sort();
    TxnView {
        txn_id: id.to_string(),
        producer_id: row.producer_id,
        epoch: row.epoch,
        timeout_ms: row.timeout_ms,
        state: state_of(row),
        start_ms: if open { row.started_us / 1000 } else { -1 },
        partitions,
    }
}

/// The bit of a state in a ListTransactions state mask.
fn bit(state: TxnStateName) -> u8 {
    1 << (state as u8)
}

/// The states the filters name, as a mask (a Kafka state this coordinator never shows sets
/// no bit); `None` when there is no state filter.
fn state_mask(states: &[String]) -> Option<u8> {
    const SHOWN: [TxnStateName; 4] = [
        TxnStateName::Empty,
        TxnStateName::Ongoing,
        TxnStateName::CompleteCommit,
        TxnStateName::CompleteAbort,
    ];
    (!states.is_empty()).then(|| {
        SHOWN
            .iter()
            .filter(|s| states.iter().any(|f| f == s.kafka_name()))
            .fold(0, |m, s| m | bit(*s))
    })
}

/// The filters are parsed once (states to a mask, producer ids to a set); with producer id
/// filters the rows are found through the producer index, never by a scan of every row
/// (review s16 kafka M3). Past [`MAX_TXNS_PER_ANSWER`] rows the list is cut: Kafka's answer
/// has no flag to say so, so each cut counts in `queen_kafka_txn_list_truncated_total`.
/// Each row is charged its id as it is found, before it is copied; past `granted` the whole
/// list is refused (review s18 kafka H1).
fn list(
    st: &State,
    states: &[String],
    producer_ids: &[i64],
    granted: Grant,
) -> (KafkaTxnReadAnswer, Grant) {
    let unknown_states: Vec<String> = states
        .iter()
        .filter(|s| !KAFKA_STATE_NAMES.contains(&s.as_str()))
        .cloned()
        .collect();
    let mask = state_mask(states);
    let state_ok = |row: &TxnRow| mask.is_none_or(|m| m & bit(state_of(row)) != 0);
    let mut spent = Grant::default();
    let mut over = false;
    let mut listed = |(id, row): (&String, &TxnRow)| {
        let cost = entry(id.len());
        let mut left = granted;
        left.spend(spent);
        if over || !left.fits(cost) {
            over = true;
            return None;
        }
        spent.add(cost);
        Some(TxnListed {
            txn_id: id.clone(),
            producer_id: row.producer_id,
            state: state_of(row),
        })
    };
    let mut rows: Vec<TxnListed> = if producer_ids.is_empty() {
        st.kafka_txns
            .rows()
            .filter(|(_, row)| state_ok(row))
            .take(MAX_TXNS_PER_ANSWER + 1)
            .map_while(&mut listed)
            .collect()
    } else {
        // In transactional id order, as the scan: each producer id names at most one row.
        let ids: BTreeSet<&str> = producer_ids
            .iter()
            .filter_map(|p| st.kafka_txns.by_producer(*p))
            .collect();
        let wanted: HashSet<i64> = producer_ids.iter().copied().collect();
        ids.into_iter()
            .filter_map(|id| st.kafka_txns.row_entry(id))
            .filter(|(_, row)| wanted.contains(&row.producer_id) && state_ok(row))
            .take(MAX_TXNS_PER_ANSWER + 1)
            .map_while(&mut listed)
            .collect()
    };
    if over {
        // Nothing of a refused list is kept: the rows go with this read.
        return (KafkaTxnReadAnswer::ListOverBudget, Grant::default());
    }
    if rows.len() > MAX_TXNS_PER_ANSWER {
        if let Some(cut) = rows.pop() {
            spent.entries = spent.entries.saturating_sub(1);
            spent.bytes = spent.bytes.saturating_sub(entry(cut.txn_id.len()).bytes);
        }
        metrics::counter!("queen_kafka_txn_list_truncated_total").increment(1);
    }
    let answer = KafkaTxnReadAnswer::Listed {
        rows,
        unknown_states,
    };
    (answer, spent)
}

/// Each asked partition in order, and the producers listed. The producers' per-partition
/// count (a derived index: no walk) says what each asked partition would list; the budget is
/// then spent in the asked order (from the first partition that would pass it, every one
/// with producers is `OverBudget`), and one pass over the rows copies only what was granted.
/// A partition with no producer costs nothing and is always answered, empty, even past the
/// grant (review s19 kafka M3: refused, it failed pinned clients such as
/// `kafka-transactions.sh find-hanging --broker-id`). Given nothing, no row is walked
/// (review s18 kafka L2).
fn producers(
    st: &State,
    asked: &[(String, i32)],
    budget: Grant,
) -> (Vec<PartitionProducers>, Grant) {
    let mut out: Vec<PartitionProducers> = Vec::with_capacity(asked.len());
    // Per slot: the engine partition it asks for, when its topic and partition exist.
    let mut slot_pid: Vec<Option<u64>> = Vec::with_capacity(asked.len());
    for (topic, index) in asked {
        match st.queue_named(topic) {
            None => {
                out.push(PartitionProducers::NoTopic);
                slot_pid.push(None);
            }
            Some(q) => {
                out.push(PartitionProducers::Listed(Vec::new()));
                slot_pid.push(q.partitions.get(&index.to_string(), &st.partitions));
            }
        }
    }
    let count = |pid: u64| {
        st.kafka_producers
            .count_on(pid)
            .min(MAX_PRODUCERS_PER_PARTITION)
    };
    // Engine partition id → the answers (by position) granted a list of it.
    let mut wanted: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut left = budget;
    let mut spent = Grant::default();
    let mut over = false;
    for (slot, pid) in slot_pid.iter().enumerate() {
        let n = pid.map_or(0, count);
        if n == 0 {
            continue;
        }
        let cost = Grant {
            entries: n,
            bytes: n.saturating_mul(READ_ENTRY_BYTES),
        };
        if over || !left.fits(cost) {
            over = true;
            if let Some(o) = out.get_mut(slot) {
                *o = PartitionProducers::OverBudget;
            }
            continue;
        }
        left.spend(cost);
        spent.add(cost);
        if let Some(p) = *pid {
            wanted.entry(p).or_default().push(slot);
        }
    }
    if wanted.is_empty() {
        return (out, spent);
    }
    for (producer_id, row) in st.kafka_producers.iter() {
        for (pid, seqs) in &row.partitions {
            let Some(slots) = wanted.get(pid) else {
                continue;
            };
            let txn_start = st
                .kafka_txns
                .by_producer(*producer_id)
                .and_then(|t| st.kafka_txns.get(t))
                .filter(|t| t.state == TxnState::Ongoing && t.producer_id == *producer_id)
                .and_then(|t| t.partitions.get(pid).copied().flatten())
                .map_or(-1, |o| i64::try_from(o).unwrap_or(i64::MAX));
            let v = ProducerView {
                producer_id: *producer_id,
                epoch: seqs.epoch,
                last_sequence: seqs.batches.back().map_or(-1, |b| b.last_seq),
                last_ms: row.last_us / 1000,
                txn_start_offset: txn_start,
            };
            for slot in slots {
                if let Some(PartitionProducers::Listed(list)) = out.get_mut(*slot) {
                    if list.len() < MAX_PRODUCERS_PER_PARTITION {
                        list.push(v);
                    }
                }
            }
        }
    }
    (out, spent)
}
