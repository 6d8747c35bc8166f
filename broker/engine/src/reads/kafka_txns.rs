//! DescribeTransactions, ListTransactions and DescribeProducers from applied state
//! (protocol/src/kafka_txn_reads.rs): no entry. Every answer is bounded by the caps there,
//! and DescribeTransactions and DescribeProducers by one total each
//! (`MAX_ENTRIES_PER_ANSWER`, `MAX_PRODUCER_ENTRIES_PER_ANSWER`), counted before anything is
//! copied (review s16 kafka H1: the per-item caps multiplied), and lowered to what the
//! cycle has left (`granted`: review s17 lead H1; plan/kafka_txn_reads.rs).

use std::collections::{BTreeSet, HashMap, HashSet};

use queenmq_protocol::kafka_txn_reads::*;
use queenmq_protocol::QueenError;

use crate::state::kafka_txns::{TxnResult, TxnRow, TxnState};
use crate::state::State;

/// The answer to `req`, listing at most `granted` entries (partitions, producers, pending
/// pairs) beside its own caps, and how many it lists. ListTransactions has no per-item
/// error: its rows (at most [`MAX_TXNS_PER_ANSWER`]) are counted, never refused.
pub fn answer(
    st: &State,
    req: &KafkaTxnRead,
    granted: usize,
) -> Result<(KafkaTxnReadAnswer, usize), QueenError> {
    Ok(match req {
        KafkaTxnRead::Describe { txn_ids } => {
            if txn_ids.len() > MAX_TXNS_PER_ANSWER {
                return Err(QueenError::bad_request(
                    "DescribeTransactions names more than 10000 transactional ids",
                ));
            }
            let budget = MAX_ENTRIES_PER_ANSWER.min(granted);
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
            let a = list(st, states, producer_ids);
            let n = match &a {
                KafkaTxnReadAnswer::Listed { rows, .. } => rows.len(),
                _ => 0,
            };
            (a, n)
        }
        KafkaTxnRead::Producers { partitions } => {
            if partitions.len() > MAX_PRODUCER_PARTITIONS {
                return Err(QueenError::bad_request(
                    "DescribeProducers names more than 10000 partitions",
                ));
            }
            let budget = MAX_PRODUCER_ENTRIES_PER_ANSWER.min(granted);
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
            (KafkaTxnReadAnswer::Pending(v), 0)
        }
        KafkaTxnRead::GroupPending { group } => {
            // Never cut by the cycle's grant (review s18 kafka M4): a set cut below what the
            // group holds is checked by the door only after the offsets are read, and a
            // transaction committing in between would show an old offset as stable (review
            // s16 kafka L1). Its own per-answer bound still holds; what it lists is counted.
            let budget = MAX_ENTRIES_PER_ANSWER;
            let (pairs, complete) = st.kafka_txns.pending_in(group, budget);
            let n = pairs.len();
            (KafkaTxnReadAnswer::GroupPending { pairs, complete }, n)
        }
    })
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
    let q = st.queues.get(&p.queue)?;
    let index = p.name.parse::<i32>().ok()?;
    Some((q.name.clone(), index))
}

/// Each id in order, and the partitions listed. An open transaction's partitions are
/// counted against `budget` before they are copied; from the first id that would pass it,
/// every id is `OverBudget`.
fn describe(st: &State, ids: &[String], budget: usize) -> (Vec<TxnDescribed>, usize) {
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
            let cost = if row.state == TxnState::Ongoing {
                row.partitions.len()
            } else {
                0
            };
            if cost > left {
                over = true;
                return TxnDescribed::OverBudget;
            }
            left -= cost;
            TxnDescribed::Known(view(st, id, row))
        })
        .collect();
    (v, budget - left)
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
fn list(st: &State, states: &[String], producer_ids: &[i64]) -> KafkaTxnReadAnswer {
    let unknown_states: Vec<String> = states
        .iter()
        .filter(|s| !KAFKA_STATE_NAMES.contains(&s.as_str()))
        .cloned()
        .collect();
    let mask = state_mask(states);
    let state_ok = |row: &TxnRow| mask.is_none_or(|m| m & bit(state_of(row)) != 0);
    let listed = |(id, row): (&String, &TxnRow)| TxnListed {
        txn_id: id.clone(),
        producer_id: row.producer_id,
        state: state_of(row),
    };
    let mut rows: Vec<TxnListed> = if producer_ids.is_empty() {
        st.kafka_txns
            .rows()
            .filter(|(_, row)| state_ok(row))
            .take(MAX_TXNS_PER_ANSWER + 1)
            .map(listed)
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
            .map(listed)
            .collect()
    };
    if rows.len() > MAX_TXNS_PER_ANSWER {
        rows.truncate(MAX_TXNS_PER_ANSWER);
        metrics::counter!("queen_kafka_txn_list_truncated_total").increment(1);
    }
    KafkaTxnReadAnswer::Listed {
        rows,
        unknown_states,
    }
}

/// Each asked partition in order, and the producers listed. A first pass over the producers' partition rows counts
/// what each asked partition would list; the budget is then spent in the asked order (from
/// the first partition that would pass it, every one is `OverBudget`), and a second pass
/// copies only what was granted.
fn producers(
    st: &State,
    asked: &[(String, i32)],
    budget: usize,
) -> (Vec<PartitionProducers>, usize) {
    let mut out: Vec<PartitionProducers> = Vec::with_capacity(asked.len());
    // Per slot: the engine partition it asks for, when its topic and partition exist.
    let mut slot_pid: Vec<Option<u64>> = Vec::with_capacity(asked.len());
    let mut counts: HashMap<u64, usize> = HashMap::new();
    for (topic, index) in asked {
        match st.queue_named(topic) {
            None => {
                out.push(PartitionProducers::NoTopic);
                slot_pid.push(None);
            }
            Some(q) => {
                out.push(PartitionProducers::Listed(Vec::new()));
                let pid = q.partitions.get(&index.to_string(), &st.partitions);
                if let Some(pid) = pid {
                    counts.insert(pid, 0);
                }
                slot_pid.push(pid);
            }
        }
    }
    if counts.is_empty() {
        return (out, 0);
    }
    for (_, row) in st.kafka_producers.iter() {
        for pid in row.partitions.keys() {
            if let Some(n) = counts.get_mut(pid) {
                *n = (*n + 1).min(MAX_PRODUCERS_PER_PARTITION);
            }
        }
    }
    // Engine partition id → the answers (by position) granted a list of it.
    let mut wanted: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut left = budget;
    let mut over = false;
    for (slot, pid) in slot_pid.iter().enumerate() {
        let cost = pid.and_then(|p| counts.get(&p).copied()).unwrap_or(0);
        if over || cost > left {
            over = true;
            if let Some(o) = out.get_mut(slot) {
                *o = PartitionProducers::OverBudget;
            }
            continue;
        }
        left -= cost;
        if let Some(p) = pid.filter(|_| cost > 0) {
            wanted.entry(p).or_default().push(slot);
        }
    }
    let spent = budget - left;
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
