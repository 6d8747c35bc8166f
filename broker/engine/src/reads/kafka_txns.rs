//! DescribeTransactions, ListTransactions and DescribeProducers from applied state
//! (protocol/src/kafka_txn_reads.rs): no entry, every answer bounded by the caps there.

use std::collections::HashMap;

use queenmq_protocol::kafka_txn_reads::*;
use queenmq_protocol::QueenError;

use crate::state::kafka_txns::{TxnResult, TxnRow, TxnState};
use crate::state::State;

pub fn answer(st: &State, req: &KafkaTxnRead) -> Result<KafkaTxnReadAnswer, QueenError> {
    Ok(match req {
        KafkaTxnRead::Describe { txn_ids } => {
            if txn_ids.len() > MAX_TXNS_PER_ANSWER {
                return Err(QueenError::bad_request(
                    "DescribeTransactions names more than 10000 transactional ids",
                ));
            }
            KafkaTxnReadAnswer::Described(
                txn_ids
                    .iter()
                    .map(|id| st.kafka_txns.get(id).map(|row| view(st, id, row)))
                    .collect(),
            )
        }
        KafkaTxnRead::List {
            states,
            producer_ids,
        } => {
            if states.len() > MAX_LIST_FILTERS || producer_ids.len() > MAX_LIST_FILTERS {
                return Err(QueenError::bad_request(
                    "ListTransactions carries more than 1000 filter values",
                ));
            }
            list(st, states, producer_ids)
        }
        KafkaTxnRead::Producers { partitions } => {
            if partitions.len() > MAX_PRODUCER_PARTITIONS {
                return Err(QueenError::bad_request(
                    "DescribeProducers names more than 10000 partitions",
                ));
            }
            KafkaTxnReadAnswer::Producers(producers(st, partitions))
        }
        KafkaTxnRead::PendingOffsets { group, partitions } => {
            if partitions.len() > MAX_PRODUCER_PARTITIONS {
                return Err(QueenError::bad_request(
                    "a pending-offsets read names more than 10000 partitions",
                ));
            }
            KafkaTxnReadAnswer::Pending(st.kafka_txns.pending_of(group, partitions))
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

fn list(st: &State, states: &[String], producer_ids: &[i64]) -> KafkaTxnReadAnswer {
    let unknown_states: Vec<String> = states
        .iter()
        .filter(|s| !KAFKA_STATE_NAMES.contains(&s.as_str()))
        .cloned()
        .collect();
    let rows = st
        .kafka_txns
        .rows()
        .filter(|(_, row)| {
            let state = state_of(row).kafka_name();
            (states.is_empty() || states.iter().any(|s| s == state))
                && (producer_ids.is_empty() || producer_ids.contains(&row.producer_id))
        })
        .take(MAX_TXNS_PER_ANSWER)
        .map(|(id, row)| TxnListed {
            txn_id: id.clone(),
            producer_id: row.producer_id,
            state: state_of(row),
        })
        .collect();
    KafkaTxnReadAnswer::Listed {
        rows,
        unknown_states,
    }
}

/// One pass over the producers' partition rows, however many partitions are asked.
fn producers(st: &State, asked: &[(String, i32)]) -> Vec<PartitionProducers> {
    let mut out: Vec<PartitionProducers> = Vec::with_capacity(asked.len());
    // Engine partition id → the answers (by position) that asked for it.
    let mut wanted: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, (topic, index)) in asked.iter().enumerate() {
        match st.queue_named(topic) {
            None => out.push(None),
            Some(q) => {
                out.push(Some(Vec::new()));
                if let Some(pid) = q.partitions.get(&index.to_string(), &st.partitions) {
                    wanted.entry(pid).or_default().push(i);
                }
            }
        }
    }
    if wanted.is_empty() {
        return out;
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
                if let Some(Some(list)) = out.get_mut(*slot) {
                    if list.len() < MAX_PRODUCERS_PER_PARTITION {
                        list.push(v);
                    }
                }
            }
        }
    }
    out
}
