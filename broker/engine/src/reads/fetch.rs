//! Reads by offset: records of partitions from an offset, partitions written since a time, and
//! the offsets ListOffsets asks for. Read-only: no lease is taken and no cursor moves.

use queenmq_protocol::fetch::*;
use queenmq_protocol::{ErrorCode, QueenError};

use crate::reader::MessageReader;
use crate::state::kafka_txns::StretchKind;
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
        let Some((pid, p)) = found.and_then(|pid| st.partitions.get(&pid).map(|p| (pid, p))) else {
            entries.push(FetchedEntry {
                error: Some(FetchError::UnknownPartition),
                ..FetchedEntry::default()
            });
            continue;
        };
        let (low, next) = (p.low_offset(), p.next_offset);
        let lso = st.kafka_txns.lso(pid, low, next);
        let high = if visible { lso } else { next };
        let mut out = FetchedEntry {
            high_watermark: high,
            log_start: low,
            next_offset: e.offset,
            last_stable: lso,
            ..FetchedEntry::default()
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
        let mut to = high.min(e.offset.saturating_add(rows));
        if req.read_committed {
            to = to.min(lso).max(e.offset);
        }
        // A payload that does not open fails this entry only: the request may cover other
        // queues (read_upto already returned the records before it, if any).
        let read = if visible {
            let (hidden, upto) = st
                .kafka_txns
                .hidden_ranges_upto(p.id(), e.offset, high, 1024);
            let most = usize::try_from(rows).unwrap_or(usize::MAX);
            rd.read_visible(p, e.offset, upto, budget, &hidden, most)
        } else {
            rd.read_upto(p, e.offset, to, budget).map(|m| {
                let passed = m.last().map_or(e.offset, |l| l.offset.saturating_add(1));
                (m, passed)
            })
        };
        let (msgs, passed) = match read {
            Ok(m) => m,
            Err(e) if e.is_unopened() => {
                out.error = Some(FetchError::Corrupt);
                entries.push(out);
                continue;
            }
            Err(e) => return Err(internal(e)),
        };
        let mut spent = 0usize;
        let mut markers = Vec::new();
        let mut cut = None;
        for m in msgs {
            let cost = m.payload.len().saturating_add(FETCH_RECORD_OVERHEAD);
            // The first record of the call is served whatever its size (else a record bigger
            // than the budget could never be read); later ones only within what is left.
            if delivered && spent.saturating_add(cost) > budget {
                cut = Some(m.offset);
                break;
            }
            spent = spent.saturating_add(cost);
            delivered = true;
            if m.is_control_marker() {
                markers.push((m.offset, m.id[15] == 1));
            }
            out.records.push(FetchedRecord {
                offset: m.offset,
                transaction_id: m.txn,
                payload: m.payload,
                created_us: m.created_us,
            });
        }
        // A record left out for the budget is where the next read starts; otherwise past
        // everything the read passed, hidden records included.
        out.next_offset = cut.unwrap_or(passed).max(e.offset);
        left = left.saturating_sub(spent);
        if !visible {
            txn_marks(st, pid, req.read_committed, &markers, &mut out);
        }
        entries.push(out);
    }
    Ok(FetchAnswer { entries })
}

/// The transactions' stretches among the served records, and for `read_committed` the
/// aborted transactions they overlap: read from the index, never a scan of the partition.
///
/// `markers` are the served control markers (offset, commit), known by their frame: a
/// commit leaves no stretch, and an abort marker is merged into its producer's aborted
/// stretch, so the index alone would serve either as a plain record with a null value. A
/// marker splits the stretch holding it (a batch never crosses a marker) and takes that
/// stretch's producer; a commit marker outside every stretch has none (-1), which clients
/// accept, since only an abort marker's producer ends anything on their side.
fn txn_marks(
    st: &State,
    pid: u64,
    read_committed: bool,
    markers: &[(u64, bool)],
    out: &mut FetchedEntry,
) {
    let (Some(first), Some(last)) = (out.records.first(), out.records.last()) else {
        return;
    };
    let (from, to) = (first.offset, last.offset.saturating_add(1));
    let marker = |base_offset, commit, producer_id, epoch| TxnMark {
        base_offset,
        count: 1,
        producer_id,
        epoch,
        kind: if commit {
            TxnMarkKind::CommitMarker
        } else {
            TxnMarkKind::AbortMarker
        },
    };
    let mut marks = Vec::new();
    let mut pending = markers.iter().copied().peekable();
    for (base, s) in st.kafka_txns.stretches_in(pid, from, to) {
        let end = base.saturating_add(u64::from(s.count));
        while let Some((m, commit)) = pending.next_if(|(m, _)| *m < base) {
            marks.push(marker(m, commit, -1, -1));
        }
        let kind = match s.kind {
            StretchKind::Open | StretchKind::Aborted => TxnMarkKind::Data,
            // A marker stretch of an older checkpoint: as it says.
            StretchKind::CommitMarker => TxnMarkKind::CommitMarker,
            StretchKind::AbortMarker => TxnMarkKind::AbortMarker,
        };
        let data = |base_offset: u64, upto: u64| TxnMark {
            base_offset,
            count: u32::try_from(upto.saturating_sub(base_offset)).unwrap_or(u32::MAX),
            producer_id: s.producer_id,
            epoch: s.epoch,
            kind,
        };
        // Clipped to what is served: a marker below `from` is not known here.
        let mut at = base.max(from);
        if kind == TxnMarkKind::Data {
            while let Some((m, commit)) = pending.next_if(|(m, _)| *m < end) {
                if m > at {
                    marks.push(data(at, m));
                }
                marks.push(marker(m, commit, s.producer_id, s.epoch));
                at = m.saturating_add(1);
            }
        } else {
            while pending.next_if(|(m, _)| *m < end).is_some() {}
        }
        if end > at {
            marks.push(data(at, end));
        }
    }
    marks.extend(pending.map(|(m, commit)| marker(m, commit, -1, -1)));
    if read_committed {
        out.aborted = aborted_listed(st, pid, from, to, &marks);
    }
    out.txn_marks = marks;
}

/// What Fetch lists as aborted for `from..to`: each aborted row's (producer, first offset),
/// and where a row merges several aborted transactions of its producer, the start of each
/// later one, after each of that producer's abort markers served inside the row below its
/// last offset. Kafka's clients (Java's `abortedProducerIds`, librdkafka's
/// `rd_kafka_aborted_txns_pop_offset`) forget an aborted producer at its abort marker and
/// would deliver the next aborted transaction's records without that start. A marker below
/// `from` needs no entry: the client never sees it, so the row's first offset still stands
/// for the records after it.
fn aborted_listed(st: &State, pid: u64, from: u64, to: u64, marks: &[TxnMark]) -> Vec<AbortedTxn> {
    let mut aborts: Vec<(i64, u64)> = marks
        .iter()
        .filter(|m| m.kind == TxnMarkKind::AbortMarker)
        .map(|m| (m.producer_id, m.base_offset))
        .collect();
    aborts.sort_unstable();
    let mut listed = Vec::new();
    for a in st.kafka_txns.aborted_in(pid, from, to) {
        listed.push(AbortedTxn {
            producer_id: a.producer_id,
            first_offset: a.first_offset,
        });
        let start = aborts.partition_point(|x| *x < (a.producer_id, a.first_offset));
        for (_, m) in aborts[start..]
            .iter()
            .take_while(|(p, m)| *p == a.producer_id && *m < a.last_offset)
        {
            listed.push(AbortedTxn {
                producer_id: a.producer_id,
                first_offset: m.saturating_add(1),
            });
        }
    }
    listed.sort_by_key(|a| (a.first_offset, a.producer_id));
    listed
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
            next = q.partition_order.get(start + scanned - 1);
            break;
        }
        let Some(p) = st.partitions.get(&pid) else {
            continue;
        };
        if req.since_us.is_some_and(|s| p.last_write_us < s) {
            continue;
        }
        partitions.push(ChangedPartition {
            name: p.name.to_string(),
            id: p.id(),
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
            let Some((pid, p)) = found.and_then(|pid| st.partitions.get(&pid).map(|p| (pid, p)))
            else {
                // Nothing pushed yet: an empty partition, whose start and end are 0.
                let offset = match q.at {
                    OffsetAt::Earliest | OffsetAt::Latest | OffsetAt::Stable => 0,
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
                OffsetAt::Stable => (
                    as_i64(st.kafka_txns.lso(pid, p.low_offset(), p.next_offset)),
                    -1,
                ),
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
