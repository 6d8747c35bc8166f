//! Checkpoint encoding of the state (docs/storage-format.md "Checkpoint blob").
//! Only replicated rows are written; derived indexes are rebuilt on decode.

use std::cmp::Reverse;
use std::collections::{HashMap, VecDeque};

use super::config::QueueConfig;
use super::model::*;
use super::State;
use crate::codec::{DecodeError, Reader, Writer};
use crate::entry::{decode_cursor, encode_cursor};

const CHECKPOINT_VERSION: u8 = 1;

pub fn encode_state(s: &State) -> Vec<u8> {
    let mut w = Writer::with_capacity(1 << 20);
    w.u8(CHECKPOINT_VERSION);
    w.u64(s.last_cycle);
    w.i64(s.last_now_us);
    let (ai, at) = s.applied.unwrap_or((0, 0));
    w.bool(s.applied.is_some());
    w.u64(ai);
    w.u64(at);
    w.u64(s.next_queue_id);
    w.u64(s.next_partition_id);
    w.u64(s.next_group_id);
    w.u32(s.queues.len() as u32);
    for q in s.queues.values() {
        w.u64(q.id);
        w.str(&q.name);
        w.str(&q.namespace);
        w.str(&q.task);
        q.config.encode(&mut w);
        w.bool(q.configured);
        w.i64(q.created_us);
        for c in [
            q.counters.pushed,
            q.counters.acked,
            q.counters.failed,
            q.counters.dead_lettered,
        ] {
            w.u64(c);
        }
        w.u32(q.dlq.len() as u32);
        for d in &q.dlq {
            w.str(&d.group);
            w.u64(d.partition);
            w.u64(d.offset);
            w.str(&d.error);
            w.i64(d.failed_us);
            w.u32(d.retries);
        }
        w.u32(q.partition_order.len() as u32);
        for pid in &q.partition_order {
            let Some(p) = s.partitions.get(pid) else {
                w.u64(u64::MAX);
                continue;
            };
            w.u64(p.id);
            w.str(&p.name);
            w.i64(p.created_us);
            w.u64(p.next_offset);
            w.i64(p.last_write_us);
            w.u64(p.bytes);
            w.u32(p.runs.len() as u32);
            for r in &p.runs {
                w.u64(r.base_offset);
                w.u32(r.count);
                w.i64(r.created_us);
                w.u64(r.index);
                w.u32(r.pos);
            }
            w.u32(p.txn_fifo.len() as u32);
            for (t, h) in &p.txn_fifo {
                w.i64(*t);
                w.u64(*h);
            }
        }
        w.u32(q.groups.len() as u32);
        for gid in q.groups.values() {
            let Some(g) = s.groups.get(gid) else {
                w.u64(u64::MAX);
                continue;
            };
            w.u64(g.id);
            w.str(&g.name);
            w.i64(g.start_from_us);
            w.i64(g.created_us);
            w.u32(g.cursors.len() as u32);
            for (pid, row) in &g.cursors {
                w.u64(*pid);
                encode_cursor(&mut w, row);
            }
        }
    }
    w.u32(s.traces.len() as u32);
    for t in &s.traces {
        w.u64(t.partition);
        w.str(&t.transaction_id);
        w.str(&t.group);
        w.u32(t.names.len() as u32);
        for n in &t.names {
            w.str(n);
        }
        w.str(&t.event_type);
        w.str(&t.data);
        w.i64(t.at_us);
    }
    w.buf
}

pub fn decode_state(buf: &[u8]) -> Result<State, DecodeError> {
    let mut r = Reader::new(buf);
    let v = r.u8()?;
    if v != CHECKPOINT_VERSION {
        return Err(r.malformed(format!("checkpoint version {v}")));
    }
    let mut s = State {
        last_cycle: r.u64()?,
        last_now_us: r.i64()?,
        ..Default::default()
    };
    let has_applied = r.bool()?;
    let (ai, at) = (r.u64()?, r.u64()?);
    s.applied = has_applied.then_some((ai, at));
    s.next_queue_id = r.u64()?;
    s.next_partition_id = r.u64()?;
    s.next_group_id = r.u64()?;
    let nq = r.count(8)?;
    for _ in 0..nq {
        let id = r.u64()?;
        let name = r.string()?;
        let namespace = r.string()?;
        let task = r.string()?;
        let config = QueueConfig::decode(&mut r)?;
        let configured = r.bool()?;
        let created_us = r.i64()?;
        let counters = QueueCounters {
            pushed: r.u64()?,
            acked: r.u64()?,
            failed: r.u64()?,
            dead_lettered: r.u64()?,
        };
        let nd = r.count(8)?;
        let mut dlq = Vec::with_capacity(nd);
        for _ in 0..nd {
            dlq.push(DlqRow {
                group: r.string()?,
                partition: r.u64()?,
                offset: r.u64()?,
                error: r.string()?,
                failed_us: r.i64()?,
                retries: r.u32()?,
            });
        }
        let mut q = Queue {
            id,
            name,
            namespace,
            task,
            config,
            configured,
            created_us,
            partitions: HashMap::new(),
            partition_order: Vec::new(),
            groups: HashMap::new(),
            dlq,
            counters,
        };
        let np = r.count(8)?;
        for _ in 0..np {
            let pid = r.u64()?;
            if pid == u64::MAX {
                continue;
            }
            let pname = r.string()?;
            let created_us = r.i64()?;
            let next_offset = r.u64()?;
            let last_write_us = r.i64()?;
            let bytes = r.u64()?;
            let nr = r.count(32)?;
            let mut runs = Vec::with_capacity(nr);
            for _ in 0..nr {
                runs.push(Run {
                    base_offset: r.u64()?,
                    count: r.u32()?,
                    created_us: r.i64()?,
                    index: r.u64()?,
                    pos: r.u32()?,
                });
            }
            let nt = r.count(16)?;
            let mut txn_fifo = VecDeque::with_capacity(nt);
            let mut p = Partition {
                id: pid,
                queue: id,
                name: pname.clone(),
                created_us,
                next_offset,
                last_write_us,
                bytes,
                runs,
                txns: HashMap::with_capacity(nt),
                txn_fifo: VecDeque::new(),
            };
            for _ in 0..nt {
                let t = r.i64()?;
                let h = r.u64()?;
                txn_fifo.push_back((t, h));
            }
            rebuild_txns(&mut p, &txn_fifo);
            p.txn_fifo = txn_fifo;
            q.partitions.insert(pname, pid);
            q.partition_order.push(pid);
            s.partitions.insert(pid, p);
        }
        let ng = r.count(8)?;
        for _ in 0..ng {
            let gid = r.u64()?;
            if gid == u64::MAX {
                continue;
            }
            let mut g = Group {
                id: gid,
                queue: id,
                name: r.string()?,
                start_from_us: r.i64()?,
                created_us: r.i64()?,
                cursors: HashMap::new(),
                ready: VecDeque::new(),
                in_ready: Default::default(),
                wake: Default::default(),
            };
            let nc = r.count(8)?;
            for _ in 0..nc {
                let pid = r.u64()?;
                let row = decode_cursor(&mut r)?;
                if let Some(l) = row.lease {
                    s.leases.entry(l.id).or_default().push((gid, pid));
                    g.wake.push(Reverse((l.expires_us, pid)));
                }
                g.cursors.insert(pid, row);
            }
            for pid in &q.partition_order {
                g.mark_ready(*pid);
            }
            q.groups.insert(g.name.clone(), gid);
            s.groups.insert(gid, g);
        }
        s.queue_by_name.insert(q.name.clone(), id);
        s.queues.insert(id, q);
    }
    let nt = r.count(8)?;
    for _ in 0..nt {
        let partition = r.u64()?;
        let transaction_id = r.string()?;
        let group = r.string()?;
        let nn = r.count(4)?;
        let mut names = Vec::with_capacity(nn);
        for _ in 0..nn {
            names.push(r.string()?);
        }
        s.traces.push_back(TraceRow {
            partition,
            transaction_id,
            group,
            names,
            event_type: r.string()?,
            data: r.string()?,
            at_us: r.i64()?,
        });
    }
    if !r.is_done() {
        return Err(r.malformed("trailing bytes after the checkpoint".into()));
    }
    Ok(s)
}

/// The txn map is derived from the FIFO: offsets are recomputed from the runs, in append order.
fn rebuild_txns(p: &mut Partition, fifo: &VecDeque<(i64, u64)>) {
    // The FIFO holds the last `fifo.len()` messages in offset order.
    let first = p.next_offset.saturating_sub(fifo.len() as u64);
    for (i, (_, h)) in fifo.iter().enumerate() {
        p.txns.insert(*h, first + i as u64);
    }
}
