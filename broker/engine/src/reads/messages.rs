//! Message, DLQ and trace answers.

use queenmq_protocol::{
    DlqPage, DlqQuery, DlqRow, MessageDoc, MessageGroupState, MessagePage, MessageRow,
    MessageStatus, PageInfo, QueenError, TraceNameCount, TraceNames, TraceView, TracesPage,
};

use super::committed_of;
use crate::reader::MessageReader;
use crate::state::model::secs_us;
use crate::state::{FindError, State, BY_TIME_SEARCHES_PER_CYCLE, FILTER_WINDOW_MAX_US};

/// The offsets the queue's groups hold in flight on the partition (from the lowest
/// committed to the highest lease or delivery end), when any does.
fn in_flight(st: &State, pid: u64) -> Option<(u64, u64)> {
    let p = st.partitions.get(&pid)?;
    let q = st.queues.get(&p.queue())?;
    q.groups
        .values()
        .filter_map(|gid| st.groups.get(gid)?.cursors.get(&pid)?.in_flight())
        .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
}

pub fn one(
    st: &State,
    rd: &mut MessageReader<'_>,
    partition_id: &str,
    txn: &str,
) -> Result<MessageDoc, QueenError> {
    let not_found = || QueenError::not_found("Message not found");
    let pid: u64 = partition_id.trim().parse().map_err(|_| not_found())?;
    let p = st.partitions.get(&pid).ok_or_else(not_found)?;
    let q = st.queues.get(&p.queue()).ok_or_else(not_found)?;
    let hash = xxhash_rust::xxh3::xxh3_64(txn.as_bytes());
    let internal = |e: String| QueenError::new(queenmq_protocol::ErrorCode::Internal, e);
    let mut msg = match st.txn_ids.get(pid, hash) {
        Some(off) => rd.read_one(p, off).map_err(|e| internal(e.to_string()))?,
        None => None,
    };
    // Older than the hot table: the id files (state/txn_spill.rs), over the queue's window
    // (as `resolve_txn`, review s33 H2), with a cycle's budget of searches by time.
    if let Some(spill) = st.txn_spill.as_deref().filter(|_| msg.is_none()) {
        let mut failed = None;
        let window = Some(secs_us(q.config.dedup_window_seconds))
            .filter(|w| *w > 0)
            .unwrap_or_else(|| st.txn_keep_us().min(FILTER_WINDOW_MAX_US));
        let mut left = BY_TIME_SEARCHES_PER_CYCLE;
        let refused =
            match spill.find(
                pid,
                hash,
                st.last_now_us,
                window,
                &mut left,
                &mut |off| match rd.read_one(p, off) {
                    Ok(Some(m)) if m.txn == txn => {
                        msg = Some(m);
                        true
                    }
                    Ok(_) => false,
                    Err(e) => {
                        failed = Some(e.to_string());
                        true
                    }
                },
            ) {
                Ok(_) => None,
                Err(FindError::Unreadable(e)) => return Err(internal(e)),
                Err(e @ FindError::OverBudget { .. }) => Some(e),
            };
        if let Some(e) = failed {
            return Err(internal(e));
        }
        if let Some(e) = refused.filter(|_| msg.is_none()) {
            // A message in flight is read where the queue's groups hold it before the
            // search by time refuses (review s34 d H2); only a miss there too refuses.
            msg = in_flight(st, pid)
                .and_then(|(from, to)| rd.find_txn(p, from, to.min(from + 10_000), txn))
                .map(|off| rd.read_one(p, off).map_err(|e| internal(e.to_string())))
                .transpose()?
                .flatten();
            if msg.is_none() {
                return Err(QueenError::unavailable(format!(
                    "could not look transactionId {txn} up in the id files ({e}); retry"
                )));
            }
        }
    }
    // What a Kafka transaction hides is not a message over HTTP (docs/kafka-transactions.md).
    let m = msg
        .filter(|m| m.txn == txn && !m.is_control_marker())
        .filter(|m| {
            !st.kafka_txns
                .withheld(pid, p.low_offset(), p.next_offset, m.offset)
        })
        .ok_or_else(not_found)?;
    let now = st.last_now_us;
    let mut groups = Vec::new();
    let mut retry_count = 0u32;
    let mut names: Vec<(&String, &u64)> = q.groups.iter().collect();
    names.sort();
    for (name, gid) in names {
        let Some(g) = st.groups.get(gid) else {
            continue;
        };
        let committed = committed_of(g, p);
        let cursor = g.cursors.get(&pid);
        if let Some(c) = cursor.filter(|c| c.committed == m.offset) {
            retry_count = retry_count.max(c.failures);
        }
        let lease = cursor
            .and_then(|c| c.live_lease(now))
            .filter(|l| m.offset >= committed && m.offset < l.end);
        groups.push(MessageGroupState {
            name: name.clone(),
            consumed: m.offset < committed,
            lease_expires_us: lease.map(|l| l.expires_us),
        });
    }
    let mut dead = false;
    for d in q
        .dlq
        .iter()
        .filter(|d| d.partition == pid && d.offset == m.offset)
    {
        dead = true;
        retry_count = retry_count.max(d.retries);
    }
    let status = if dead {
        MessageStatus::DeadLetter
    } else if groups.iter().any(|g| g.lease_expires_us.is_some()) {
        MessageStatus::Processing
    } else if !groups.is_empty() && groups.iter().all(|g| g.consumed) {
        MessageStatus::Completed
    } else {
        MessageStatus::Pending
    };
    Ok(MessageDoc {
        id: m.id_text(),
        trace_id: m.trace.map(|t| uuid::Uuid::from_bytes(t).to_string()),
        transaction_id: m.txn,
        partition_id: pid,
        queue: q.name.clone(),
        namespace: q.namespace.clone(),
        task: q.task.clone(),
        queue_config: q.config.settings(),
        status,
        retry_count,
        partition: p.name.to_string(),
        offset: m.offset,
        data: m.payload,
        producer_sub: m.producer,
        created_us: m.created_us,
        consumer_groups: groups,
    })
}

pub fn list(
    st: &State,
    rd: &mut MessageReader<'_>,
    queue: Option<&str>,
    limit: usize,
    offset: usize,
) -> Result<MessagePage, QueenError> {
    let mut out = Vec::new();
    // Rows rank newest-first per partition; a page skips `offset` of them and reads only the
    // rows it answers, so a deep page never reads the whole queue.
    let mut skipped = 0usize;
    let mut qs: Vec<_> = st
        .queues
        .values()
        .filter(|q| queue.is_none_or(|n| n == q.name))
        .collect();
    qs.sort_by(|a, b| a.name.cmp(&b.name));
    'outer: for q in qs {
        for pid in &q.partition_order {
            if out.len() >= limit {
                break 'outer;
            }
            let Some(p) = st.partitions.get(&pid) else {
                continue;
            };
            // Only held messages count: retention removed those below the first held offset.
            let held = p.next_offset - p.low_offset();
            let skip_here = (offset.saturating_sub(skipped) as u64).min(held);
            skipped = skipped.saturating_add(skip_here as usize);
            let end = p.next_offset - skip_here;
            if end <= p.low_offset() {
                continue;
            }
            let start = end
                .saturating_sub(limit.saturating_sub(out.len()) as u64)
                .max(p.low_offset());
            // A payload that does not open ends this partition's rows (read stops before it);
            // the listing of the other partitions and queues goes on.
            let msgs = match rd.read(p, start, end) {
                Ok(m) => m,
                Err(e) if e.is_unopened() => Vec::new(),
                Err(e) => {
                    return Err(QueenError::new(
                        queenmq_protocol::ErrorCode::Internal,
                        e.to_string(),
                    ))
                }
            };
            for m in msgs {
                if out.len() >= limit {
                    break 'outer;
                }
                // Hidden records and control markers are offsets, not messages: the page
                // counts them but lists none (docs/kafka-transactions.md).
                if m.is_control_marker()
                    || st
                        .kafka_txns
                        .withheld(p.id(), p.low_offset(), p.next_offset, m.offset)
                {
                    continue;
                }
                out.push(MessageRow {
                    id: m.id_text(),
                    transaction_id: m.txn,
                    queue: q.name.clone(),
                    partition: p.name.to_string(),
                    partition_id: p.id(),
                    offset: m.offset,
                    data: m.payload,
                    created_us: m.created_us,
                });
            }
        }
    }
    Ok(MessagePage {
        messages: out,
        limit,
        offset,
    })
}

pub fn dlq(
    st: &State,
    rd: &mut MessageReader<'_>,
    query: &DlqQuery,
) -> Result<DlqPage, QueenError> {
    let mut rows = Vec::new();
    let mut qs: Vec<_> = st
        .queues
        .values()
        .filter(|q| query.queue.as_deref().is_none_or(|n| n == q.name))
        .collect();
    qs.sort_by(|a, b| a.name.cmp(&b.name));
    for q in qs {
        for d in &q.dlq {
            if query.group.as_deref().is_some_and(|g| g != d.group) {
                continue;
            }
            let Some(p) = st.partitions.get(&d.partition) else {
                continue;
            };
            if query.partition.as_deref().is_some_and(|n| n != &*p.name)
                || !super::queues::dead_letter_held(st, d)
            {
                continue;
            }
            if query.from_us.is_some_and(|f| d.failed_us < f)
                || query.to_us.is_some_and(|t| d.failed_us > t)
            {
                continue;
            }
            rows.push((q, p, d));
        }
    }
    let total = rows.len();
    let mut messages = Vec::new();
    for (q, p, d) in rows.into_iter().skip(query.offset).take(query.limit.max(1)) {
        // A dead-lettered payload that does not open is left out of the page, not the page.
        let m = match rd.read_one(p, d.offset) {
            Ok(m) => m,
            Err(e) if e.is_unopened() => None,
            Err(e) => {
                return Err(QueenError::new(
                    queenmq_protocol::ErrorCode::Internal,
                    e.to_string(),
                ))
            }
        };
        let Some(m) = m else { continue };
        messages.push(DlqRow {
            id: m.id_text(),
            transaction_id: m.txn,
            partition_id: p.id(),
            queue: q.name.clone(),
            partition: p.name.to_string(),
            consumer_group: d.group.clone(),
            error: d.error.clone(),
            retry_count: d.retries,
            data: m.payload,
            producer_sub: m.producer,
            created_us: m.created_us,
            failed_us: d.failed_us,
        });
    }
    Ok(DlqPage {
        messages,
        page: PageInfo {
            limit: query.limit,
            offset: query.offset,
            total,
        },
    })
}

pub fn trace_names(st: &State, limit: usize, offset: usize) -> TraceNames {
    let mut names: std::collections::BTreeMap<&str, u64> = Default::default();
    for t in &st.traces {
        for n in &t.names {
            *names.entry(n.as_str()).or_default() += 1;
        }
    }
    let total = names.len();
    let names = names
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|(n, count)| TraceNameCount {
            name: n.to_string(),
            count,
        })
        .collect();
    TraceNames {
        names,
        page: PageInfo {
            limit,
            offset,
            total,
        },
    }
}

fn trace_view(st: &State, t: &crate::state::model::TraceRow) -> TraceView {
    let queue = st
        .partitions
        .get(&t.partition)
        .and_then(|p| st.queues.get(&p.queue()))
        .map(|q| q.name.clone());
    TraceView {
        transaction_id: t.transaction_id.clone(),
        partition_id: t.partition,
        queue,
        consumer_group: t.group.clone(),
        names: t.names.clone(),
        event_type: t.event_type.clone(),
        data: t.data.clone(),
        at_us: t.at_us,
    }
}

pub fn traces_by_name(st: &State, name: &str, limit: usize, offset: usize) -> TracesPage {
    let traces = st
        .traces
        .iter()
        .filter(|t| t.names.iter().any(|n| n == name))
        .skip(offset)
        .take(limit)
        .map(|t| trace_view(st, t))
        .collect();
    TracesPage {
        traces,
        limit,
        offset,
    }
}

pub fn traces_for(st: &State, partition_id: &str, txn: &str) -> Vec<TraceView> {
    let pid: u64 = partition_id.trim().parse().unwrap_or(0);
    st.traces
        .iter()
        .filter(|t| t.partition == pid && t.transaction_id == txn)
        .map(|t| trace_view(st, t))
        .collect()
}
