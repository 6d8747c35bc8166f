//! The checkpoint's encoding as it was when the whole head was encoded under the state lock
//! (before the partitions were taken as shared chunks): the oracle the off-lock encoding must
//! equal byte for byte, also when the state changes between `begin_checkpoint` and `encode`.

use std::collections::HashMap;

use super::*;
use crate::entry::Effect;
use crate::state::cow_clock;
use crate::state::Loc;
use crate::state::PartitionTable;

/// The whole checkpoint, encoded in one pass over the state (the old way).
pub(crate) fn reference_encode(s: &State) -> Vec<u8> {
    let mut w = old_head(s, CHECKPOINT_VERSION);
    let pending = PendingCheckpoint {
        head: HeadParts {
            buf: Vec::new(),
            holes: Vec::new(),
            v1_rows: None,
            sections: None,
        },
        partitions: PartitionTable::default().snapshot(),
        txn: s.txn_ids.snapshot(),
    };
    pending.encode().emit(|b| w.buf.extend_from_slice(b));
    w.buf
}

fn old_head(s: &State, version: u8) -> Writer {
    let v1_rows = (version == 1).then(|| {
        let mut rows: HashMap<u64, Vec<(i64, u64)>> = HashMap::new();
        for (t, r) in s.txn_ids.iter() {
            rows.entry(r.pid).or_default().push((t, r.hash));
        }
        rows
    });
    let mut w = Writer::default();
    w.u8(version);
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
            let Some(p) = s.partitions.get(&pid) else {
                w.u64(u64::MAX);
                continue;
            };
            w.u64(p.id());
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
            if let Some(rows) = &v1_rows {
                let rows = rows.get(&pid).map_or(&[][..], Vec::as_slice);
                w.u32(rows.len() as u32);
                for (t, h) in rows {
                    w.i64(*t);
                    w.u64(*h);
                }
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
            for (pid, row) in g.cursors.iter() {
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
    if version >= 3 {
        old_sections(s, &mut w);
    }
    w
}

/// Version 3's sections: `count: u32`, then per section `tag: u8 | len: u32 | bytes`. Each
/// body is written in place and its length patched after, so no section is built twice.
fn old_sections(s: &State, w: &mut Writer) {
    // The Kafka groups section is written only when there are groups, so a tenant without
    // Kafka consumers checkpoints exactly as before.
    let kafka = !s.kafka_groups.is_empty();
    // Likewise the producers section, once a producer id was ever handed out or a
    // DeleteRecords set a floor (carried at the section's end, see `encode_floors`).
    let floors: Vec<(u64, u64)> = s
        .partitions
        .values()
        .filter(|p| p.floor() > 0)
        .map(|p| (p.id(), p.floor()))
        .collect();
    let producers = !s.kafka_producers.is_empty() || !floors.is_empty();
    // And the conflation section, once a group conflates.
    let mut conflating: Vec<u64> = s
        .groups
        .values()
        .filter(|g| g.conflation)
        .map(|g| g.id)
        .collect();
    conflating.sort_unstable();
    let conflation = !conflating.is_empty();
    // And the ephemeral section, once a queue is declared.
    let ephemeral = !s.ephemeral.is_empty();
    // And the transactions section, once a transactional id exists.
    let txns = !s.kafka_txns.is_empty();
    w.u32(
        2 + u32::from(kafka)
            + u32::from(producers)
            + u32::from(conflation)
            + u32::from(ephemeral)
            + u32::from(txns),
    );
    section(w, SECTION_KV, |w| s.kv.encode(w));
    section(w, SECTION_TIMERS, |w| s.timers.encode(w));
    if kafka {
        section(w, SECTION_KAFKA_GROUPS, |w| s.kafka_groups.encode(w));
    }
    if producers {
        section(w, SECTION_KAFKA_PRODUCERS, |w| {
            s.kafka_producers.encode(w);
            encode_floors(w, &floors);
        });
    }
    if conflation {
        section(w, SECTION_CONFLATION, |w| {
            w.u32(conflating.len() as u32);
            for gid in conflating {
                w.u64(gid);
            }
        });
    }
    if ephemeral {
        section(w, SECTION_EPHEMERAL, |w| encode_ephemeral(w, s));
    }
    if txns {
        section(w, SECTION_KAFKA_TXNS, |w| s.kafka_txns.encode(w));
    }
}

fn loc(index: u64) -> Loc {
    Loc { index, pos: 0 }
}

/// Two queues, partitions in three chunks (ids 1-2, 4097, 4500), runs, a group's cursors, a
/// DeleteRecords floor, a KV row, transaction ids.
fn state() -> State {
    let mut s = State::default();
    for (qid, name) in [(1, "q"), (2, "r")] {
        s.apply(
            &Effect::QueueUpsert {
                qid,
                name,
                namespace: "",
                task: "",
                configured: true,
                config: QueueConfig::default(),
            },
            10,
            loc(1),
        );
    }
    s.next_partition_id = 5000;
    for (qid, pid, name) in [(1, 1, "a"), (1, 4097, "b"), (2, 2, "c"), (2, 4500, "d")] {
        s.apply(&Effect::PartitionCreate { qid, pid, name }, 11, loc(2));
        for i in 0..3u64 {
            s.apply(
                &Effect::Append {
                    pid,
                    base_offset: i * 2,
                    hashes: vec![pid * 100 + i * 2, pid * 100 + i * 2 + 1],
                    frames: &[0; 20],
                },
                20 + i as i64,
                loc(3 + i),
            );
        }
    }
    s.apply(
        &Effect::GroupRegister {
            qid: 1,
            gid: 1,
            name: "g",
            start_from_us: i64::MIN,
        },
        30,
        loc(9),
    );
    // Cursors in two shards (4 ids each under test), one leased; 4099 shares a shard with
    // two cursors `mutate` writes and is not written itself.
    for (pid, committed, lease) in [
        (1, 2, None),
        (4097, 1, Some(77)),
        (4098, 3, None),
        (4099, 5, None),
    ] {
        put_cursor(&mut s, pid, committed, lease);
    }
    if let Some(p) = s.partitions.get_mut(&4500) {
        p.set_floor(1);
    }
    s
}

fn put_cursor(s: &mut State, pid: u64, committed: u64, lease: Option<u128>) {
    let row = CursorRow {
        committed,
        lease: lease.map(|id| LeaseRow {
            id,
            end: committed + 1,
            expires_us: 1_000,
            seconds: 5,
        }),
        delivered_end: committed,
        ..CursorRow::default()
    };
    s.apply(&Effect::CursorPut { gid: 1, pid, row }, 31, loc(10));
}

/// What the engine might do while a checkpoint is encoded: append, retire, create, delete,
/// move a floor, in both chunks; commit, lease and release cursors in both shards and start
/// one in a new shard; create a partition (its queue's id list grows).
fn mutate(s: &mut State) {
    put_cursor(s, 1, 4, Some(78));
    put_cursor(s, 4097, 2, None);
    put_cursor(s, 2100, 0, Some(79));
    if let Some(g) = s.groups.get_mut(&1) {
        if let Some(row) = g.cursors.get_mut(&4098) {
            row.failures += 1;
        }
    }
    let pid = s.next_partition_id;
    s.apply(
        &Effect::PartitionCreate {
            qid: 1,
            pid,
            name: &format!("late{pid}"),
        },
        32,
        loc(11),
    );
    // Runs change through the run floor, as `apply` does, so that deleting the queue later
    // uncounts what was counted (a debug assertion otherwise).
    if let Some(p) = s.partitions.get_mut(&1) {
        let run = Run {
            base_offset: 6,
            count: 1,
            created_us: 40,
            index: 12,
            pos: 0,
        };
        s.run_floor.push(p, run);
        p.next_offset = 7;
    }
    if let Some(p) = s.partitions.get_mut(&4097) {
        s.run_floor.drop_front(p, 1);
        p.set_floor(2);
    }
    s.partitions.remove(&2);
    s.partitions.insert(3, test_partition(3, "new"));
    if let Some(p) = s.partitions.get_mut(&4500) {
        p.set_floor(0);
        p.name = format!("{}x", p.name).into();
    }
}

#[test]
fn the_off_lock_encoding_is_the_old_encoding() {
    let s = state();
    let blob = encode_state(&s);
    assert_eq!(blob, reference_encode(&s));
    assert!(
        decode_state(&blob).is_ok(),
        "the sample is a valid checkpoint"
    );
    let empty = State::default();
    assert_eq!(encode_state(&empty), reference_encode(&empty));
}

#[test]
fn what_the_engine_writes_after_the_checkpoint_was_taken_is_not_in_it() {
    let mut s = state();
    let want = reference_encode(&s);
    let pending = begin_checkpoint(&s);
    mutate(&mut s);
    let taken = pending.taken_len();
    // Any bound of the partitions' encoding (the broker passes the table's size in memory).
    let estimate = pending.held_estimate(want.len(), 1 << 23, 1 << 23);
    let ready = pending.encode();
    mutate(&mut s);
    let len = ready.encoded_len();
    assert!(estimate >= ready.held_while_written(1 << 23, 1 << 23));
    let blob = ready.finish();
    assert_eq!(blob, want);
    assert_eq!(len, blob.len());
    assert!(taken < blob.len());
    assert_ne!(
        reference_encode(&s),
        want,
        "the mutation changed what a new checkpoint holds"
    );
}

#[test]
fn a_group_or_queue_deleted_after_the_checkpoint_was_taken_is_still_in_it() {
    for delete in [
        Effect::GroupDelete { gid: 1 },
        Effect::QueueDelete { qid: 1 },
    ] {
        let mut s = state();
        let want = reference_encode(&s);
        let pending = begin_checkpoint(&s);
        mutate(&mut s);
        s.apply(&delete, 40, loc(12));
        assert!(s.groups.is_empty(), "the group went");
        let blob = pending.finish();
        assert_eq!(blob, want);
        let back = decode_state(&blob).expect("decodes");
        assert_eq!(back.groups[&1].cursors.len(), 4);
        assert_eq!(back.groups[&1].cursors[&4097].committed, 1);
    }
}

#[test]
fn a_checkpoint_takes_the_transaction_ids_by_shelf_not_by_row_or_block() {
    let mut s = state();
    // Under test a FIFO block holds 4 rows and a shelf 3 blocks: 40 000 rows are 10 000
    // frozen blocks on 3 333 shelves, each group of 100 rows its own time.
    for i in 0..400u64 {
        let hashes: Vec<u64> = (0..100).map(|k| i * 100 + k).collect();
        s.txn_ids.record(1_000 + i as i64, 1, i * 100, &hashes);
    }
    let pending = begin_checkpoint(&s);
    let rows = s.txn_ids.len();
    assert!(rows >= 40_000);
    let handles = pending.txn.handles();
    assert!(
        handles * 2 <= rows / 4,
        "{handles} handles cloned for {rows} rows in {} blocks",
        rows / 4
    );
    let want = reference_encode(&s);
    s.txn_ids.record(9_000, 1, 40_000, &[1, 2, 3]);
    s.txn_ids.expire(1_200);
    assert_eq!(
        pending.finish(),
        want,
        "the rows of its moment, nothing after"
    );
}

/// Scattered writers (sessions 29, 30): a cursor written after the checkpoint was taken copies
/// itself into its shard's overlay, none of the shard's handles, and the checkpoint still holds
/// the moment it was taken.
#[test]
fn a_cursor_written_after_the_checkpoint_copies_itself_only() {
    let mut s = state();
    let want = reference_encode(&s);
    let pending = begin_checkpoint(&s);
    let _ = cow_clock::take();
    let by = |c: cow_clock::Copies| {
        (
            c.by_block[cow_clock::Block::Cursors as usize].0,
            c.by_block[cow_clock::Block::CursorRows as usize].0,
        )
    };
    put_cursor(&mut s, 4097, 2, None);
    assert_eq!(
        by(cow_clock::take()),
        (0, 1),
        "no shard handles, one new row"
    );
    put_cursor(&mut s, 4098, 4, None);
    assert_eq!(by(cow_clock::take()), (0, 1), "again only the row");
    mutate(&mut s);
    assert_eq!(s.groups[&1].cursors[&4099].committed, 5, "not written");
    assert_eq!(pending.finish(), want);
}

/// Retention and forgetting that move no cursor copy none (review s29 ckpt M1): both cursors
/// of queue 1 already stand at the new first held offset (2), so a shared row or shard copied
/// here would be paid for nothing.
#[test]
fn a_retention_or_forget_pass_that_moves_no_cursor_copies_none_during_a_checkpoint() {
    for forget in [false, true] {
        let mut s = state();
        put_cursor(&mut s, 4097, 2, None);
        let want = reference_encode(&s);
        let pending = begin_checkpoint(&s);
        let _ = cow_clock::take();
        if forget {
            // Runs were appended at log indexes 3, 4, 5: the first of each partition goes.
            let gone = s.forget_runs_below(4);
            assert!(gone.iter().all(|f| f.to == 2 && f.groups.is_empty()));
        } else {
            for pid in [1, 4097] {
                s.apply(&Effect::RetentionTrim { pid, low: 2 }, 40, loc(12));
            }
        }
        let c = cow_clock::take();
        let by = c.by_block[cow_clock::Block::Cursors as usize].0
            + c.by_block[cow_clock::Block::CursorRows as usize].0;
        assert_eq!(by, 0, "forget {forget}: a cursor copied and not written");
        assert_eq!(s.partitions.get(&1).map(|p| p.low_offset()), Some(2));
        assert_eq!(s.groups[&1].cursors[&4097].committed, 2);
        assert_eq!(pending.finish(), want);
    }
}

/// Deleting a group or its queue hands the removed group (its cursors) to the dropper rather
/// than freeing a million cursors under the state lock (review s29 ckpt M4).
#[test]
fn a_deleted_group_is_handed_to_the_dropper_not_freed_in_apply() {
    for delete in [
        Effect::GroupDelete { gid: 1 },
        Effect::QueueDelete { qid: 1 },
    ] {
        let mut s = state();
        crate::state::drop_later::catch();
        s.apply(&delete, 40, loc(12));
        let caught = crate::state::drop_later::caught();
        assert!(s.groups.is_empty() && s.leases.is_empty());
        assert_eq!(caught.len(), 1, "{delete:?}");
        let group = caught
            .into_iter()
            .next()
            .and_then(|g| g.downcast::<crate::state::model::Group>().ok())
            .expect("the group");
        assert_eq!(group.cursors.len(), 4, "its cursors not yet freed");
    }
}

/// Review s30 M1: what the engine runs a cycle after a checkpoint is saved folds the cursor
/// overlays it left, bounded, changes no cursor, and folds nothing while a checkpoint still
/// shares the shards.
#[test]
fn the_overlays_a_checkpoint_left_are_folded_after_it_within_the_bound() {
    // Sorted: a shard's rows are in hash order, which the fold may change (not a contract).
    let cursors = |s: &State| {
        let mut all: Vec<(u64, u64, CursorRow)> = s
            .groups
            .iter()
            .flat_map(|(gid, g)| g.cursors.iter().map(move |(pid, r)| (*gid, *pid, *r)))
            .collect();
        all.sort_unstable_by_key(|(g, p, _)| (*g, *p));
        all
    };
    let overlaid = |s: &State| s.groups.values().any(|g| g.cursors.has_overlays());
    let mut s = state();
    let at = cursors(&s);
    let pending = begin_checkpoint(&s);
    mutate(&mut s);
    assert!(overlaid(&s), "the writes went to overlays");
    let after = cursors(&s);
    assert_ne!(after, at);
    assert!(!s.fold_cursor_overlays(64), "all looked at");
    assert!(overlaid(&s), "still shared: nothing folded");
    let blob = pending.encode().finish();
    assert!(s.fold_cursor_overlays(0), "a bound of none stops at once");
    assert!(s.fold_cursor_overlays(1), "stopped for the bound");
    assert!(!s.fold_cursor_overlays(64));
    assert!(!overlaid(&s), "all folded");
    assert_eq!(cursors(&s), after, "the fold changes no cursor");
    let back = decode_state(&blob).expect("decodes");
    assert_eq!(cursors(&back), at, "the checkpoint kept its moment");
}

/// Session 31: what the engine does to partitions while a checkpoint shares their chunks (an
/// append, a queue deleted, a partition created), through the chunks' overlays.
fn scatter(s: &mut State) {
    s.apply(
        &Effect::Append {
            pid: 1,
            base_offset: 6,
            hashes: vec![106],
            frames: &[0; 10],
        },
        41,
        loc(13),
    );
    // Partition 2 shares chunk 0 with partition 1: a tombstone in the chunk's overlay.
    s.apply(&Effect::QueueDelete { qid: 2 }, 42, loc(14));
    let pid = s.next_partition_id;
    s.apply(
        &Effect::PartitionCreate {
            qid: 1,
            pid,
            name: "late",
        },
        43,
        loc(15),
    );
}

/// The state of `state()` with a floor on partition 2, which a checkpoint writes from the
/// partitions' rows (its producers section), not from its queue's ids; without the group,
/// whose cursors two states built apart hold in different hash orders.
fn state_with_floor() -> State {
    let mut s = state();
    s.apply(&Effect::GroupDelete { gid: 1 }, 40, loc(12));
    if let Some(p) = s.partitions.get_mut(&2) {
        p.set_floor(1);
    }
    s
}

/// Session 31: a partition written after the checkpoint copies itself into its chunk's
/// overlay, none of the chunk's handles; a checkpoint taken while overlays (a write, a
/// tombstone) are alive is byte for byte the one a twin state that never checkpointed gives,
/// so it reads the overlay first and does not carry a removed partition's stale row; and the
/// fold changes nothing a checkpoint holds.
#[test]
fn a_checkpoint_over_partition_overlays_is_the_one_without_them() {
    let mut twin = state_with_floor();
    scatter(&mut twin);
    assert!(!twin.partitions.has_overlays());
    let mut s = state_with_floor();
    let want = reference_encode(&s);
    let first = begin_checkpoint(&s);
    let _ = cow_clock::take();
    scatter(&mut s);
    let c = cow_clock::take();
    assert_eq!(
        (
            c.by_block[cow_clock::Block::Partitions as usize].0,
            c.by_block[cow_clock::Block::PartitionRows as usize].0
        ),
        (0, 1),
        "no chunk's handles: partition 1 copied into the overlay, the rest new or removed"
    );
    assert!(s.partitions.has_overlays());
    assert!(s.partitions.get(&2).is_none(), "removed");
    let second = begin_checkpoint(&s);
    let later = encode_state(&twin);
    assert_ne!(later, want);
    assert_eq!(second.finish(), later, "taken over the overlays");
    assert!(
        !s.fold_partition_overlays(64),
        "shared by the first: looked at"
    );
    assert!(s.partitions.has_overlays(), "still shared: nothing folded");
    assert_eq!(first.finish(), want, "the first kept its moment");
    assert!(!s.fold_partition_overlays(64));
    assert!(!s.partitions.has_overlays(), "folded");
    assert_eq!(encode_state(&s), later, "the fold changes nothing");
    let back = decode_state(&later).expect("decodes");
    assert!(back.partitions.get(&2).is_none());
    assert_eq!(back.partitions.get(&1).map(|p| p.next_offset), Some(7));
}
