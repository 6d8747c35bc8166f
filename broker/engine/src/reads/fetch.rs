//! Reads by offset: records of partitions from an offset, partitions written since a time, and
//! the offsets ListOffsets asks for. Read-only: no lease is taken and no cursor moves.

use queenmq_protocol::fetch::*;
use queenmq_protocol::{ErrorCode, QueenError};

use crate::reader::MessageReader;
use crate::state::State;

fn internal(e: impl std::fmt::Display) -> QueenError {
    QueenError::new(ErrorCode::Internal, e.to_string())
}

/// `visible` (the native API's fetch): Kafka transactions' hidden records are left out and
/// the read stops at the last stable offset, which the entry's high watermark then is
/// (docs/kafka-transactions.md, "HTTP never delivers"). Without it (the Kafka door) every
/// record up to the next offset is read.
pub fn fetch(
    st: &State,
    rd: &mut MessageReader<'_>,
    req: &FetchReq,
    visible: bool,
) -> Result<FetchAnswer, QueenError> {
    let mut left = req.max_bytes.min(MAX_FETCH_BYTES);
    let mut delivered = false;
    let mut entries = Vec::with_capacity(req.entries.len().min(MAX_FETCH_ENTRIES));
    for e in &req.entries {
        let Some(q) = st.queue_named(&e.queue) else {
            entries.push(FetchedEntry {
                error: Some(FetchError::UnknownQueue),
                ..FetchedEntry::default()
            });
            continue;
        };
        let found = q.partitions.get(&e.partition, &st.partitions);
        let Some(p) = found.and_then(|pid| st.partitions.get(&pid)) else {
            entries.push(FetchedEntry {
                error: Some(FetchError::UnknownPartition),
                ..FetchedEntry::default()
            });
            continue;
        };
        let (low, next) = (p.low_offset(), p.next_offset);
        let high = if visible {
            st.kafka_txns.lso(p.id, low, next)
        } else {
            next
        };
        let mut out = FetchedEntry {
            high_watermark: high,
            log_start: low,
            records: Vec::new(),
            error: None,
        };
        if e.offset < low || e.offset > next {
            out.error = Some(FetchError::OffsetOutOfRange);
            entries.push(out);
            continue;
        }
        let budget = e.max_bytes.min(MAX_FETCH_BYTES).min(left);
        if budget == 0 && delivered {
            entries.push(out);
            continue;
        }
        // Each record costs its payload and a fixed overhead, so the row count is bounded by
        // the budget before anything is read.
        let rows = (budget / FETCH_RECORD_OVERHEAD).max(1) as u64;
        let to = high.min(e.offset.saturating_add(rows));
        // A payload that does not open fails this entry only: the request may cover other
        // queues (read_upto already returned the records before it, if any).
        let read = if visible {
            let (hidden, upto) = st.kafka_txns.hidden_ranges_upto(p.id, e.offset, high, 1024);
            let most = usize::try_from(rows).unwrap_or(usize::MAX);
            rd.read_visible(p, e.offset, upto, budget, &hidden, most)
                .map(|(m, _)| m)
        } else {
            rd.read_upto(p, e.offset, to, budget)
        };
        let msgs = match read {
            Ok(m) => m,
            Err(e) if e.is_unopened() => {
                out.error = Some(FetchError::Corrupt);
                entries.push(out);
                continue;
            }
            Err(e) => return Err(internal(e)),
        };
        let mut spent = 0usize;
        for m in msgs {
            let cost = m.payload.len().saturating_add(FETCH_RECORD_OVERHEAD);
            // The first record of the call is served whatever its size (else a record bigger
            // than the budget could never be read); later ones only within what is left.
            if delivered && spent.saturating_add(cost) > budget {
                break;
            }
            spent = spent.saturating_add(cost);
            delivered = true;
            out.records.push(FetchedRecord {
                offset: m.offset,
                transaction_id: m.txn,
                payload: m.payload,
                created_us: m.created_us,
            });
        }
        left = left.saturating_sub(spent);
        entries.push(out);
    }
    Ok(FetchAnswer { entries })
}

pub fn changed(st: &State, req: &ChangedReq) -> ChangedAnswer {
    // Every write applied so far was stamped at or before `last_now_us`, and every later cycle
    // stamps a later time (Cycle::next), so this is the time up to which the answer is whole.
    let safe_us = st.last_now_us.saturating_add(1);
    let Some(q) = st.queue_named(&req.queue) else {
        return ChangedAnswer {
            safe_us,
            unknown: true,
            ..ChangedAnswer::default()
        };
    };
    let limit = req.limit.clamp(1, MAX_CHANGED_PAGE);
    // Partition ids grow with creation, and `partition_order` is creation order.
    let start = req
        .after
        .map_or(0, |a| q.partition_order.partition_point(|pid| *pid <= a));
    let mut partitions = Vec::new();
    let mut next = None;
    for (scanned, pid) in q.partition_order.iter().skip(start).enumerate() {
        if partitions.len() >= limit || scanned >= CHANGED_SCAN {
            // More may follow: resume after the last one looked at.
            next = Some(q.partition_order[start + scanned - 1]);
            break;
        }
        let Some(p) = st.partitions.get(pid) else {
            continue;
        };
        if req.since_us.is_some_and(|s| p.last_write_us < s) {
            continue;
        }
        partitions.push(ChangedPartition {
            name: p.name.clone(),
            id: p.id,
            last_offset: i64::try_from(p.next_offset).unwrap_or(i64::MAX) - 1,
            log_start: p.low_offset(),
            last_write_us: p.last_write_us,
        });
    }
    ChangedAnswer {
        safe_us,
        partitions,
        next,
        unknown: false,
    }
}

pub fn offsets(st: &State, queries: &[OffsetQuery]) -> Vec<OffsetFound> {
    let as_i64 = |o: u64| i64::try_from(o).unwrap_or(i64::MAX);
    queries
        .iter()
        .map(|q| {
            let Some(queue) = st.queue_named(&q.queue) else {
                return OffsetFound {
                    offset: -1,
                    time_us: -1,
                    unknown: true,
                };
            };
            let found = queue.partitions.get(&q.partition, &st.partitions);
            let Some(p) = found.and_then(|pid| st.partitions.get(&pid)) else {
                // Nothing pushed yet: an empty partition, whose start and end are 0.
                let offset = match q.at {
                    OffsetAt::Earliest | OffsetAt::Latest => 0,
                    OffsetAt::Time(_) | OffsetAt::MaxTime => -1,
                };
                return OffsetFound {
                    offset,
                    time_us: -1,
                    unknown: false,
                };
            };
            let (offset, time_us) = match q.at {
                OffsetAt::Earliest => (as_i64(p.low_offset()), -1),
                OffsetAt::Latest => (as_i64(p.next_offset), -1),
                OffsetAt::Time(us) => {
                    let o = p.first_offset_at_or_after(us);
                    match p.created_of(o) {
                        Some(t) => (as_i64(o), t),
                        None => (-1, -1),
                    }
                }
                OffsetAt::MaxTime => match p.runs.last() {
                    Some(r) if p.next_offset > p.low_offset() => {
                        (as_i64(p.next_offset) - 1, r.created_us)
                    }
                    _ => (-1, -1),
                },
            };
            OffsetFound {
                offset,
                time_us,
                unknown: false,
            }
        })
        .collect()
}
