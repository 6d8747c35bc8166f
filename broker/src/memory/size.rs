//! What the structures behind each pool hold, from their capacities. Hash tables are sized
//! the way hashbrown sizes them (buckets a power of two, 7/8 usable, one control byte each);
//! every heap allocation pays the allocator's header.

use std::mem::size_of;

use queenmq_protocol::{Command, TxnOp};

use crate::state::model::{DlqRow, Group, Queue, TraceRow};
use crate::state::State;

/// The allocator's header and rounding per allocation (glibc: 16 bytes, rounded to 16).
pub const ALLOC_OVERHEAD: usize = 16;
/// What a parked long poll holds besides its `Job`: the reply channel's shared allocation,
/// the waiter's deadline, names copied out of the request, the connection's future.
pub const WAITER_EXTRA: usize = 256;
/// What an open HTTP connection holds: hyper's read and write buffers, the connection's task
/// and its deadlines. Measured: 59 KB of RSS per idle keep-alive connection
/// (bench/memory_sizing.py, docs/memory.md "Sizing figures"), rounded up.
pub const CONNECTION_BYTES: usize = 60 << 10;
/// What a request in flight adds to its connection (the handler's future, hyper's request
/// state, a parked pop's reply channel). Measured: a parked long poll on its own connection
/// costs 85 KB of RSS, 26 KB over an idle one.
pub const IN_FLIGHT_BYTES: usize = 26 << 10;
/// A queued request's fixed part (command, context, reply channel).
pub const REQUEST_BASE: usize = 256;
/// One pushed item's fixed part (names and ids, beside its payload).
pub const PUSH_ITEM_BASE: usize = 128;

/// Bytes of a hash table with `capacity` usable slots of `slot` bytes.
pub fn table_bytes(capacity: usize, slot: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    let buckets = capacity
        .saturating_mul(8)
        .checked_div(7)
        .unwrap_or(usize::MAX)
        .checked_next_power_of_two()
        .unwrap_or(usize::MAX);
    buckets
        .saturating_mul(slot.saturating_add(1))
        .saturating_add(ALLOC_OVERHEAD)
}

/// Bytes behind a buffer (`Vec`, `String`, `VecDeque`) of `capacity` items of `item` bytes.
pub fn buf_bytes(capacity: usize, item: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    capacity.saturating_mul(item).saturating_add(ALLOC_OVERHEAD)
}

/// A `String` of `capacity` bytes.
fn text(capacity: usize) -> usize {
    buf_bytes(capacity, 1)
}

/// Everything of the state but the transaction ids: queues, partitions (with their run
/// index), groups and cursors, DLQ rows, leases, traces. A walk: the accountant runs it at
/// most as often as it can afford (docs/memory.md "How pools are counted").
pub fn state_bytes(st: &State) -> usize {
    state_and_partition_bytes(st).0
}

/// `state_bytes`, and the part of it the partition table holds (a checkpoint's snapshot
/// shares it: docs/memory.md `checkpoint`).
pub fn state_and_partition_bytes(st: &State) -> (usize, usize) {
    let mut b = 0usize;
    b = b.saturating_add(table_bytes(st.queues.capacity(), size_of::<(u64, Queue)>()));
    b = b.saturating_add(table_bytes(
        st.queue_by_name.capacity(),
        size_of::<(String, u64)>(),
    ));
    for q in st.queues.values() {
        // The name is held twice: in the queue and as the by-name key.
        b = b
            .saturating_add(text(q.name.capacity()).saturating_mul(2))
            .saturating_add(text(q.namespace.capacity()))
            .saturating_add(text(q.task.capacity()))
            .saturating_add(q.partition_order.held_bytes())
            // The by-name partition index: one 8 B (name hash, id) row per partition, and
            // the overflow rows of names sharing a hash.
            .saturating_add(q.partitions.held_bytes())
            .saturating_add(table_bytes(q.groups.capacity(), size_of::<(String, u64)>()))
            .saturating_add(buf_bytes(q.dlq.capacity(), size_of::<DlqRow>()));
        for name in q.groups.keys() {
            b = b.saturating_add(text(name.capacity()));
        }
        for d in &q.dlq {
            b = b
                .saturating_add(text(d.group.capacity()))
                .saturating_add(text(d.error.capacity()));
        }
    }
    let partitions = partitions_bytes(st);
    b = b.saturating_add(partitions);
    // The run floor: a tree of the partitions' lowest indexes, and a box with two trees per
    // partition holding copied runs, each node counted as allocated (state/run_floor.rs).
    b = b.saturating_add(st.run_floor.bytes());
    b = b.saturating_add(table_bytes(st.groups.capacity(), size_of::<(u64, Group)>()));
    for g in st.groups.values() {
        b = b
            .saturating_add(text(g.name.capacity()))
            // In shards of 1024 ids, each a table (state/cursor_map.rs).
            .saturating_add(g.cursors.held_bytes())
            .saturating_add(buf_bytes(g.ready.capacity(), size_of::<u64>()))
            .saturating_add(table_bytes(g.in_ready.capacity(), size_of::<u64>()))
            .saturating_add(buf_bytes(g.wake.capacity(), 16));
    }
    b = b.saturating_add(table_bytes(
        st.leases.capacity(),
        size_of::<(u128, Vec<(u64, u64)>)>(),
    ));
    for rows in st.leases.values() {
        b = b.saturating_add(buf_bytes(rows.capacity(), size_of::<(u64, u64)>()));
    }
    b = b.saturating_add(st.wakes.bytes());
    // KV rows keep their own running count (capped by the planner, state/kv.rs).
    b = b.saturating_add(st.kv.bytes());
    // Kafka group rows too (capped by the planner, state/kafka_groups.rs).
    b = b.saturating_add(st.kafka_groups.bytes());
    // And Kafka producer states (capped by `kafka_max_producer_ids`, state/kafka_producers.rs).
    b = b.saturating_add(st.kafka_producers.bytes());
    // And Kafka transactions: rows, pending offsets, each partition's open and aborted
    // stretches and aborted rows (capped per partition, state/kafka_txns.rs).
    b = b.saturating_add(st.kafka_txns.bytes());
    b = b.saturating_add(buf_bytes(st.traces.capacity(), size_of::<TraceRow>()));
    for t in &st.traces {
        b = b
            .saturating_add(text(t.transaction_id.capacity()))
            .saturating_add(text(t.group.capacity()))
            .saturating_add(text(t.event_type.capacity()))
            .saturating_add(text(t.data.capacity()))
            .saturating_add(buf_bytes(t.names.capacity(), size_of::<String>()));
        for n in &t.names {
            b = b.saturating_add(text(n.capacity()));
        }
    }
    // Pending timers: each row's strings, payload and its two B-tree entries.
    b = b.saturating_add(st.timers.held_bytes());
    (b, partitions)
}

/// Partitions live in chunks of slots (a chunk is allocated whole: `PartitionTable`); each
/// partition adds its name and its run index, and so does each stale partition an overlay
/// shadows until the fold frees it (review s31 ckpt M2: the state pool decides write refusal,
/// and up to a quarter of a chunk's run lists can sit there twice).
fn partitions_bytes(st: &State) -> usize {
    let mut b = st.partitions.chunks_bytes();
    for p in st.partitions.values().chain(st.partitions.shadowed()) {
        b = b
            .saturating_add(text(p.name.heap_bytes()))
            .saturating_add(p.floor_box_bytes())
            .saturating_add(buf_bytes(p.runs.heap_bytes(), 1));
    }
    b
}

/// The transaction ids: the index tables (by capacity, from `index_capacity`) and the FIFO
/// rows, kept in blocks of 4096 (one partly filled block at each end).
pub fn dedup_bytes(index_capacity: usize, rows: usize) -> usize {
    const BLOCK: usize = 4096;
    let index_slot = size_of::<((u64, u64), u64)>();
    let row = size_of::<crate::state::TxnRow>();
    let blocks = rows.div_ceil(BLOCK).saturating_add(1);
    // Index shards are sized separately, so `index_capacity` is the sum of 256 tables: count
    // buckets at the 7/8 load without rounding the sum up to one power of two.
    index_capacity
        .saturating_mul(8)
        .checked_div(7)
        .unwrap_or(0)
        .saturating_mul(index_slot.saturating_add(1))
        .saturating_add(blocks.saturating_mul(BLOCK).saturating_mul(row))
        // The time groups: at most one (i64, u32) row per group commit, in blocks too.
        .saturating_add(BLOCK.saturating_mul(16))
}

/// Parked long polls.
pub fn waiters_bytes(count: usize, job_size: usize) -> usize {
    count.saturating_mul(job_size.saturating_add(WAITER_EXTRA))
}

/// A request queued for the engine: its payloads and names. Summed per request by the
/// bus when it queues one and by the engine when it takes it, so both see the same number.
fn timer_ops(ops: &[queenmq_protocol::TimerOp]) -> usize {
    ops.iter().fold(0usize, |a, op| match op {
        queenmq_protocol::TimerOp::Schedule(s) => a
            .saturating_add(s.payload.len())
            .saturating_add(s.queue.len() + s.key.len() + s.txn.len() + s.partition.len())
            .saturating_add(PUSH_ITEM_BASE),
        // A cancel holds its names too (a key may be 1 KiB, a txn 64 KiB).
        queenmq_protocol::TimerOp::Cancel { queue, key, txn } => a
            .saturating_add(queue.len() + key.len() + txn.as_ref().map_or(0, String::len))
            .saturating_add(PUSH_ITEM_BASE),
    })
}

/// A KV call's ops: their strings and a fixed part each.
fn kv_ops(ops: &[queenmq_protocol::KvOp]) -> usize {
    ops.iter().fold(0usize, |a, op| {
        let (ns, key) = op.ns_key();
        let extra = match op {
            queenmq_protocol::KvOp::Put { value, .. } => value.len(),
            queenmq_protocol::KvOp::GetMany { keys, .. } => {
                keys.iter().map(|k| k.len() + size_of::<String>()).sum()
            }
            _ => 0,
        };
        a.saturating_add(PUSH_ITEM_BASE + ns.len() + key.len() + extra)
    })
}

pub fn request_bytes(cmd: &Command) -> usize {
    let items = |items: &[queenmq_protocol::PushItem]| {
        items.iter().fold(0usize, |a, i| {
            a.saturating_add(i.payload.len())
                .saturating_add(i.queue.len())
                .saturating_add(i.partition.len())
                .saturating_add(PUSH_ITEM_BASE)
        })
    };
    let body = match cmd {
        Command::Push(p) => items(&p.items),
        Command::KafkaProduce(p) => items(&p.items)
            .saturating_add(p.guards.len().saturating_mul(PUSH_ITEM_BASE))
            .saturating_add(p.batches.len().saturating_mul(std::mem::size_of::<
                queenmq_protocol::kafka_producers::BatchSpan,
            >())),
        Command::Transaction(t) => t
            .ops
            .iter()
            .fold(kv_ops(&t.kv), |a, op| match op {
                TxnOp::Push(v) => a.saturating_add(items(v)),
                TxnOp::Ack(_) => a.saturating_add(PUSH_ITEM_BASE),
            })
            .saturating_add(timer_ops(&t.timers)),
        Command::Kv(k) => kv_ops(&k.ops),
        Command::Locks(l) => l.ops.len().saturating_mul(PUSH_ITEM_BASE + 512),
        Command::Ack(a) => a.items.len().saturating_mul(PUSH_ITEM_BASE),
        Command::Timers(t) => timer_ops(&t.ops),
        _ => 0,
    };
    REQUEST_BASE.saturating_add(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Effect;
    use crate::state::model::{Partition, Run};
    use crate::state::Loc;

    fn loc() -> Loc {
        Loc { index: 1, pos: 0 }
    }

    fn with_queue(st: &mut State) {
        st.apply(
            &Effect::QueueUpsert {
                qid: 1,
                name: "q",
                namespace: "",
                task: "",
                configured: true,
                config: Default::default(),
            },
            1,
            loc(),
        );
    }

    #[test]
    fn a_timer_cancel_counts_the_names_it_holds() {
        let cancel = |key: &str, txn: Option<&str>| {
            request_bytes(&Command::Timers(queenmq_protocol::TimersReq {
                ops: vec![queenmq_protocol::TimerOp::Cancel {
                    queue: "q".into(),
                    key: key.into(),
                    txn: txn.map(str::to_string),
                }],
            }))
        };
        let small = cancel("k", None);
        assert!(cancel(&"k".repeat(1025), None) >= small + 1024);
        assert!(cancel("k", Some(&"t".repeat(4096))) >= small + 4096);
    }

    #[test]
    fn table_and_buffer_sizes_follow_capacity() {
        assert_eq!(table_bytes(0, 24), 0);
        // 14 usable slots need 16 buckets.
        assert_eq!(table_bytes(14, 24), 16 * 25 + ALLOC_OVERHEAD);
        assert_eq!(buf_bytes(100, 40), 4000 + ALLOC_OVERHEAD);
        assert_eq!(table_bytes(usize::MAX, usize::MAX), usize::MAX);
    }

    #[test]
    fn partitions_are_counted_by_chunk_name_and_runs() {
        let mut st = State::default();
        with_queue(&mut st);
        let empty = state_bytes(&st);
        for pid in 0..1000u64 {
            let name = format!("partition-{pid}");
            st.apply(
                &Effect::PartitionCreate {
                    qid: 1,
                    pid,
                    name: &name,
                },
                1,
                loc(),
            );
        }
        let with_parts = state_bytes(&st);
        let per = (with_parts - empty) / 1000;
        // A chunk slot per partition (256-slot chunks for 1000 ids), its name, its index row.
        assert!(
            per >= size_of::<Option<Partition>>(),
            "{per} bytes per partition"
        );
        assert!(per < 2048, "{per} bytes per partition");
        // Appends grow the run index, which is counted by capacity.
        for i in 0..100u64 {
            st.apply(
                &Effect::Append {
                    pid: 7,
                    base_offset: i,
                    hashes: vec![i],
                    frames: &[],
                },
                2 + i as i64,
                Loc {
                    index: 2 + i,
                    pos: 0,
                },
            );
        }
        // Past 128 runs the full blocks are delta-coded (session 35): a few bytes a run.
        let runs = st.partitions.get(&7).map_or(0, |p| p.runs.heap_bytes());
        assert!(runs >= 100 * 4, "{runs}");
        assert!(state_bytes(&st) >= with_parts + runs);
    }

    /// Issue 12 (session 33): a partition's one run sits inside its row, so its first append
    /// charges nothing beside the row, and the row with its one run is the `Arc`'s 128 B bin
    /// where main's `Vec<Run>` charged the 112 B `Arc` and a one-run block of 48 B (160 B).
    /// A second run puts both in a vector (room for four); trimmed to one, it goes back inline.
    #[test]
    fn an_idle_partitions_one_run_is_charged_inside_its_row() {
        let mut st = State::default();
        with_queue(&mut st);
        st.apply(
            &Effect::PartitionCreate {
                qid: 1,
                pid: 7,
                name: "p",
            },
            1,
            loc(),
        );
        let append = |st: &mut State, base: u64, index: u64| {
            st.apply(
                &Effect::Append {
                    pid: 7,
                    base_offset: base,
                    hashes: vec![base],
                    frames: &[],
                },
                index as i64,
                Loc { index, pos: 0 },
            );
        };
        let runs = |st: &State| {
            st.partitions
                .get(&7)
                .map(|p| (p.runs.len(), p.runs.heap_bytes()))
        };
        // The run floor's tree of lowest indexes is left out: its first node (256 B here)
        // is the tree's, shared by every partition, and the same on main.
        let charged = |st: &State| state_bytes(st) - st.run_floor.bytes();
        let created = charged(&st);
        append(&mut st, 0, 2);
        assert_eq!(runs(&st), Some((1, 0)));
        let first = charged(&st) - created;
        assert_eq!(first, 0, "the first run charged beside the row");
        let row = size_of::<Partition>() + 16;
        assert_eq!(row + first, 112, "an idle one-run partition's row and runs");
        append(&mut st, 1, 3);
        assert_eq!(runs(&st), Some((2, 4 * size_of::<Run>())));
        assert_eq!(charged(&st), created + buf_bytes(4, size_of::<Run>()));
        st.trim_partition(7, 1);
        assert_eq!(runs(&st), Some((1, 0)));
        assert_eq!(charged(&st), created);
    }

    /// Review s31 ckpt M2: a partition written while a checkpoint shares its chunk is copied
    /// into the overlay, and the chunk keeps the stale one (its run list too) until the fold,
    /// after the checkpoint has let go of it: the state pool charges both until then, and no
    /// more than the table it started from once folded.
    #[test]
    fn the_stale_partitions_an_overlay_shadows_are_counted_until_the_fold() {
        const RUNS: usize = 1000;
        let mut st = State::default();
        with_queue(&mut st);
        // Two chunks (256 ids each outside the engine's tests), eight partitions in each.
        let pids: Vec<u64> = (0..8).chain(256..264).collect();
        for &pid in &pids {
            let name = format!("partition-{pid}");
            st.apply(
                &Effect::PartitionCreate {
                    qid: 1,
                    pid,
                    name: &name,
                },
                1,
                loc(),
            );
            let run = Run {
                base_offset: 0,
                count: 1,
                created_us: 0,
                index: 1,
                pos: 0,
            };
            // Held as a clone holds it: the fold keeps the copy the overlay made, and a
            // clone's deque of sealed blocks has no spare room where one built by pushes
            // has (7 blocks in room for 8, 48 B a partition: not drift, session 35).
            let runs: crate::state::model::RunList = vec![run; RUNS].into();
            st.partitions.get_mut(&pid).unwrap().runs = runs.clone();
        }
        let before = state_and_partition_bytes(&st).1;
        let snap = st.partitions.snapshot();
        for &pid in &pids {
            st.partitions.get_mut(&pid).unwrap().next_offset = 1;
        }
        drop(snap);
        let during = state_and_partition_bytes(&st).1;
        assert!(!st.fold_partition_overlays(128), "both chunks folded");
        assert!(!st.partitions.has_overlays());
        let after = state_and_partition_bytes(&st).1;
        assert_eq!(after, before, "no drift: the fold gives back all it took");
        // A list's bytes as the pool charges them: since session 34 a list of RUNS runs sits
        // in blocks of 128, not in a vector of exactly RUNS; since session 35 the full ones
        // delta-coded, the last (the tail) as 128 runs' room.
        let one = Run {
            base_offset: 0,
            count: 1,
            created_us: 0,
            index: 1,
            pos: 0,
        };
        let held = crate::state::model::RunList::from(vec![one; RUNS]).heap_bytes();
        let stale_runs = pids.len() * buf_bytes(held, 1);
        assert!(
            during >= after + stale_runs,
            "the stale run lists are charged until the fold: {during} < {after} + {stale_runs}"
        );
        // Besides them only the overlays and the copies' rows: nothing counted twice.
        assert!(
            during - after - stale_runs < 8192,
            "charged {during} against {after} + {stale_runs}"
        );
    }

    #[test]
    fn deleting_a_queue_gives_its_bytes_back() {
        let mut st = State::default();
        with_queue(&mut st);
        let before = state_bytes(&st);
        for pid in 0..100u64 {
            st.apply(
                &Effect::PartitionCreate {
                    qid: 1,
                    pid,
                    name: "p",
                },
                1,
                loc(),
            );
        }
        assert!(state_bytes(&st) > before);
        st.apply(&Effect::QueueDelete { qid: 1 }, 2, loc());
        assert!(state_bytes(&st) < before + 1024, "{}", state_bytes(&st));
    }

    #[test]
    fn kafka_transactions_count_their_aborted_rows() {
        use crate::state::kafka_txns::TxnEnd;
        let mut st = State::default();
        let t = &mut st.kafka_txns;
        assert!(t.init("a", 1, 0, 1000, 0) && t.init("b", 2, 0, 1000, 0));
        let rows_only = state_bytes(&st);
        let mut next = 0u64;
        let mut abort_both = |st: &mut State, n: usize| {
            for _ in 0..n {
                for (id, pid) in [("a", 1i64), ("b", 2)] {
                    let t = &mut st.kafka_txns;
                    assert!(t.add(id, pid, 0, &[1], &[], 1));
                    assert!(t.records(id, 1, next, 1, next + 1));
                    assert!(t.end(id, TxnEnd::Abort, &[(1, next + 1)], 2));
                    next += 2;
                }
            }
        };
        abort_both(&mut st, 50);
        let hundred = state_bytes(&st);
        abort_both(&mut st, 50);
        let two_hundred = state_bytes(&st);
        assert_eq!(
            st.kafka_txns.aborted_count(1),
            200,
            "interleaved: no row merges"
        );
        let per_row = (two_hundred - hundred) / 100;
        assert!(
            hundred > rows_only && per_row >= 24,
            "{per_row} bytes per aborted row"
        );
    }

    #[test]
    fn dedup_grows_with_rows_and_index() {
        let none = dedup_bytes(0, 0);
        let million = dedup_bytes(1_150_000, 1_000_000);
        let per = (million - none) / 1_000_000;
        // 24-byte index slot + control byte at 7/8 load, 24-byte FIFO row.
        assert!((50..=80).contains(&per), "{per} bytes per id");
    }

    #[test]
    fn requests_count_payloads() {
        let cmd = Command::Push(queenmq_protocol::PushReq {
            items: vec![
                queenmq_protocol::PushItem {
                    queue: "q".into(),
                    partition: "p".into(),
                    payload: bytes::Bytes::from(vec![0u8; 1000]),
                    transaction_id: None,
                    trace_id: None,
                };
                3
            ],
        });
        assert_eq!(
            request_bytes(&cmd),
            REQUEST_BASE + 3 * (1002 + PUSH_ITEM_BASE)
        );
        assert_eq!(
            request_bytes(&Command::DeleteQueue { queue: "q".into() }),
            REQUEST_BASE
        );
    }

    #[test]
    fn waiters_scale_with_count() {
        assert_eq!(waiters_bytes(0, 500), 0);
        assert_eq!(waiters_bytes(10, 500), 10 * (500 + WAITER_EXTRA));
        assert_eq!(waiters_bytes(usize::MAX, 500), usize::MAX);
    }
}
