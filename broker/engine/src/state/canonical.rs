//! A state written out in a fixed order, for tests that compare states reached by different
//! paths (the leader planning, a follower applying, a checkpoint read back).
//!
//! Why not compare `encode_state` bytes: the encoding walks hash maps, so two equal states
//! encode in different orders, and it leaves out the derived indexes that `apply` and decode
//! must rebuild alike (leases, labels, names, dedup memory). Why not `PartialEq`: the ready
//! lists and wake heaps are hints ("may have work"), consumed by pops while planning and
//! rebuilt whole on decode; they differ between equal states and are left out here.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::State;

pub fn canonical(st: &State) -> String {
    let mut out = String::new();
    let o = &mut out;
    let _ = writeln!(
        o,
        "cycle {} now {} applied {:?} next q{} p{} g{} keep {} trace_bytes {}",
        st.last_cycle,
        st.last_now_us,
        st.applied,
        st.next_queue_id,
        st.next_partition_id,
        st.next_group_id,
        st.txn_keep_us(),
        st.trace_bytes
    );
    let by_name: BTreeMap<_, _> = st.queue_by_name.iter().collect();
    let _ = writeln!(o, "queue names {by_name:?}");
    let queues: BTreeMap<_, _> = st.queues.iter().collect();
    for (id, q) in queues {
        let c = &q.counters;
        let groups: BTreeMap<_, _> = q.groups.iter().collect();
        let _ = writeln!(
            o,
            "queue {id} {:?} ns {:?} task {:?} configured {} created {} {:?}",
            q.name, q.namespace, q.task, q.configured, q.created_us, q.config
        );
        let _ = writeln!(
            o,
            "  counters {} {} {} {} partitions {:?} groups {groups:?}",
            c.pushed, c.acked, c.failed, c.dead_lettered, q.partition_order
        );
        for d in &q.dlq {
            let _ = writeln!(o, "  dlq {d:?}");
        }
        let matched = st.labels.matching(Some(&q.namespace), Some(&q.task));
        let _ = writeln!(o, "  same labels {matched:?}");
        for pid in &q.partition_order {
            let name = st
                .partitions
                .get(&pid)
                .and_then(|p| q.partitions.get(&p.name, &st.partitions));
            let _ = writeln!(o, "  partition {pid} found by name as {name:?}");
        }
    }
    // The incremental floor must agree with a walk, whatever path reached the state.
    let walked = super::run_floor::RunFloor::walked(st.partitions.values());
    assert_eq!(st.run_floor.lowest(), walked, "incremental run floor");
    let _ = writeln!(o, "run floor {walked:?}");
    let mut parts: Vec<_> = st.partitions.values().collect();
    parts.sort_by_key(|p| p.id());
    for p in parts {
        let _ = writeln!(
            o,
            "partition {} q{} {:?} created {} next {} last_write {} bytes {} floor {} runs {:?}",
            p.id(),
            p.queue(),
            p.name,
            p.created_us,
            p.next_offset,
            p.last_write_us,
            p.bytes,
            p.floor(),
            p.runs
        );
    }
    let groups: BTreeMap<_, _> = st.groups.iter().collect();
    for (id, g) in groups {
        let cursors: BTreeMap<_, _> = g.cursors.iter().collect();
        let _ = writeln!(
            o,
            "group {id} q{} {:?} from {} created {} conflation {} cursors {cursors:?}",
            g.queue, g.name, g.start_from_us, g.created_us, g.conflation
        );
    }
    let leases: BTreeMap<_, _> = st
        .leases
        .iter()
        .map(|(id, rows)| {
            let mut rows = rows.clone();
            rows.sort_unstable();
            (id, rows)
        })
        .collect();
    let _ = writeln!(o, "leases {leases:?}");
    for t in &st.traces {
        let _ = writeln!(o, "trace {t:?}");
    }
    for (at, row) in st.txn_ids.iter() {
        let _ = writeln!(o, "txn {at} {row:?}");
    }
    let _ = writeln!(o, "timer bytes {}", st.timers.held_bytes());
    for (q, k, row) in st.timers.iter() {
        let _ = writeln!(o, "timer {q:?} {k:?} {row:?}");
    }
    let _ = writeln!(
        o,
        "kv last version {} bytes {} rows {}",
        st.kv.last_version,
        st.kv.bytes(),
        st.kv.len()
    );
    for (ns, key, row) in st.kv.iter() {
        let _ = writeln!(o, "kv {ns:?} {key:?} {row:?}");
    }
    for (name, t) in &st.tenants {
        let _ = writeln!(o, "tenant {name:?} {t:?}");
    }
    for (name, options) in &st.ephemeral {
        let _ = writeln!(o, "ephemeral {name:?} {options:?}");
    }
    let _ = writeln!(o, "kv sweep {:?}", st.kv.expired(i64::MAX, usize::MAX));
    let _ = writeln!(o, "kafka groups bytes {}", st.kafka_groups.bytes());
    for (name, g) in st.kafka_groups.iter() {
        let _ = writeln!(o, "kafka group {name:?} {g:?}");
    }
    let _ = writeln!(
        o,
        "kafka producers next {} bytes {} idle {:?}",
        st.kafka_producers.next_id(),
        st.kafka_producers.bytes(),
        st.kafka_producers.idle_before(i64::MAX, usize::MAX)
    );
    for (id, row) in st.kafka_producers.iter() {
        let _ = writeln!(o, "kafka producer {id} {row:?}");
    }
    let t = &st.kafka_txns;
    let _ = writeln!(
        o,
        "kafka txns bytes {} due {:?}",
        t.bytes(),
        t.due(i64::MAX, usize::MAX)
    );
    for (id, row) in t.rows() {
        let by = t.by_producer(row.producer_id);
        let _ = writeln!(o, "kafka txn {id:?} {row:?} by producer {by:?}");
    }
    for (pid, part) in t.parts() {
        let _ = writeln!(o, "kafka txn partition {pid} {part:?}");
    }
    out
}
