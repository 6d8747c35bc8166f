//! Message, DLQ and trace documents.

use queenmq_protocol::{DlqQuery, QueenError};
use serde_json::{json, Value};

use super::committed_of;
use crate::engine::ReaderHandle;
use crate::state::State;
use crate::time::iso_ms;

fn payload_json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or(Value::Null)
}

pub fn one(
    st: &State,
    rd: &mut ReaderHandle<'_>,
    partition_id: &str,
    txn: &str,
) -> Result<Value, QueenError> {
    let not_found = || QueenError::not_found("Message not found");
    let pid: u64 = partition_id.trim().parse().map_err(|_| not_found())?;
    let p = st.partitions.get(&pid).ok_or_else(not_found)?;
    let q = st.queues.get(&p.queue).ok_or_else(not_found)?;
    let hash = xxhash_rust::xxh3::xxh3_64(txn.as_bytes());
    let candidate = st.txn_ids.get(pid, hash);
    let msg = match candidate {
        Some(off) => rd
            .read_one(p, off)
            .map_err(|e| QueenError::new(queenmq_protocol::ErrorCode::Internal, e))?,
        None => None,
    };
    let m = msg.filter(|m| m.txn == txn).ok_or_else(not_found)?;
    let now = st.last_now_us;
    let mut groups = Vec::new();
    let mut names: Vec<(&String, &u64)> = q.groups.iter().collect();
    names.sort();
    for (name, gid) in names {
        let Some(g) = st.groups.get(gid) else {
            continue;
        };
        let committed = committed_of(g, p);
        let lease = g
            .cursors
            .get(&pid)
            .and_then(|c| c.live_lease(now))
            .filter(|l| m.offset >= committed && m.offset < l.end);
        groups.push(json!({
            "name": name,
            "consumed": m.offset < committed,
            "leaseExpiresAt": lease.map(|l| iso_ms(l.expires_us)),
        }));
    }
    Ok(json!({
        "id": m.id_text(), "transactionId": m.txn, "partitionId": pid.to_string(),
        "queue": q.name, "partition": p.name, "offset": m.offset,
        "data": payload_json(&m.payload), "producerSub": m.producer,
        "traceId": m.trace.map(|t| uuid::Uuid::from_bytes(t).to_string()),
        "createdAt": iso_ms(m.created_us), "consumerGroups": groups,
    }))
}

pub fn list(
    st: &State,
    rd: &mut ReaderHandle<'_>,
    queue: Option<&str>,
    limit: usize,
    offset: usize,
) -> Result<Value, QueenError> {
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
            let Some(p) = st.partitions.get(pid) else {
                continue;
            };
            let skip_here = (offset.saturating_sub(skipped) as u64).min(p.next_offset);
            skipped = skipped.saturating_add(skip_here as usize);
            let end = p.next_offset - skip_here;
            if end == 0 {
                continue;
            }
            let start = end.saturating_sub(limit.saturating_sub(out.len()) as u64);
            let msgs = rd
                .read(p, start, end)
                .map_err(|e| QueenError::new(queenmq_protocol::ErrorCode::Internal, e))?;
            for m in msgs {
                if out.len() >= limit {
                    break 'outer;
                }
                out.push(json!({
                    "id": m.id_text(), "transactionId": m.txn, "queue": q.name,
                    "partition": p.name, "partitionId": p.id.to_string(), "offset": m.offset,
                    "data": payload_json(&m.payload), "createdAt": iso_ms(m.created_us),
                }));
            }
        }
    }
    let total = out.len();
    Ok(json!({ "messages": out, "total": total, "limit": limit, "offset": offset }))
}

pub fn dlq(st: &State, rd: &mut ReaderHandle<'_>, query: &DlqQuery) -> Result<Value, QueenError> {
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
            if query.partition.as_deref().is_some_and(|n| n != p.name) {
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
        let m = rd
            .read_one(p, d.offset)
            .map_err(|e| QueenError::new(queenmq_protocol::ErrorCode::Internal, e))?;
        let Some(m) = m else { continue };
        messages.push(json!({
            "id": m.id_text(), "transactionId": m.txn, "partitionId": p.id.to_string(),
            "queue": q.name, "partition": p.name, "consumerGroup": d.group,
            "errorMessage": d.error, "retryCount": d.retries, "data": payload_json(&m.payload),
            "producerSub": m.producer, "createdAt": iso_ms(m.created_us),
            "failedAt": iso_ms(d.failed_us),
        }));
    }
    Ok(
        json!({ "messages": messages, "total": total, "limit": query.limit, "offset": query.offset }),
    )
}

pub fn trace_names(st: &State, limit: usize, offset: usize) -> Value {
    let mut names: std::collections::BTreeMap<&str, u64> = Default::default();
    for t in &st.traces {
        for n in &t.names {
            *names.entry(n.as_str()).or_default() += 1;
        }
    }
    let total = names.len();
    let rows: Vec<Value> = names
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|(n, c)| json!({"traceName": n, "count": c}))
        .collect();
    json!({ "names": rows, "total": total, "limit": limit, "offset": offset })
}

fn trace_json(st: &State, t: &crate::state::model::TraceRow) -> Value {
    let data: Value = serde_json::from_str(&t.data).unwrap_or(Value::Null);
    let queue = st
        .partitions
        .get(&t.partition)
        .and_then(|p| st.queues.get(&p.queue))
        .map(|q| q.name.clone());
    json!({
        "transactionId": t.transaction_id, "partitionId": t.partition.to_string(),
        "queue": queue, "consumerGroup": t.group, "traceNames": t.names,
        "eventType": t.event_type, "data": data, "createdAt": iso_ms(t.at_us),
    })
}

pub fn traces_by_name(st: &State, name: &str, limit: usize, offset: usize) -> Value {
    let rows: Vec<Value> = st
        .traces
        .iter()
        .filter(|t| t.names.iter().any(|n| n == name))
        .skip(offset)
        .take(limit)
        .map(|t| trace_json(st, t))
        .collect();
    json!({ "traces": rows, "limit": limit, "offset": offset })
}

pub fn traces_for(st: &State, partition_id: &str, txn: &str) -> Value {
    let pid: u64 = partition_id.trim().parse().unwrap_or(0);
    let rows: Vec<Value> = st
        .traces
        .iter()
        .filter(|t| t.partition == pid && t.transaction_id == txn)
        .map(|t| trace_json(st, t))
        .collect();
    json!({ "traces": rows })
}
