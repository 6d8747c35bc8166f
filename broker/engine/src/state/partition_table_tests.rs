use super::*;
use crate::state::cow_clock;
use crate::state::model::test_partition;
use crate::state::partition_group::OVER_MAX;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn part(id: u64) -> Partition {
    test_partition(id, &format!("p{id}"))
}

/// The handle of chunk `c` (counted over the whole table), if allocated.
fn handle(groups: &[Option<Box<Group>>], c: usize) -> Option<&Arc<Chunk>> {
    groups.get(c / GROUP)?.as_ref()?.handle(c % GROUP)
}

/// Slots in the overlay of chunk `c`, if it has one.
fn overlay_len(t: &PartitionTable, c: usize) -> Option<usize> {
    let group = t.groups.get(c / GROUP)?.as_ref()?;
    group.overlay(c % GROUP).map(|o| o.len())
}

/// Copies since the last call: (chunks' handles, partitions); an overlay's copy is not one.
fn copies() -> (u64, u64) {
    let (chunks, rows, _) = copies_with_overlays();
    (chunks, rows)
}

/// Copies since the last call: (chunks' handles, partitions, overlays).
fn copies_with_overlays() -> (u64, u64, u64) {
    let c = cow_clock::take();
    (
        c.by_block[cow_clock::Block::Partitions as usize].0,
        c.by_block[cow_clock::Block::PartitionRows as usize].0,
        c.by_block[cow_clock::Block::PartitionOverlays as usize].0,
    )
}

#[test]
fn insert_get_remove_and_free_empty_chunks_and_groups() {
    let mut t = PartitionTable::default();
    assert!(t.get(&1).is_none());
    let mid = CHUNK as u64 + 1;
    // In the next group, past a run of absent chunks.
    let far = (CHUNK * GROUP + 2 * CHUNK + 1) as u64;
    for id in [1, 2, mid, far] {
        assert!(t.insert(id, part(id)).is_none());
    }
    assert_eq!(t.len(), 4);
    assert_eq!(t.get(&mid).map(|p| &*p.name), Some(&*format!("p{mid}")));
    assert!(t.insert(2, part(2)).is_some(), "replacing keeps the count");
    assert_eq!(t.len(), 4);
    assert!(
        handle(&t.groups, 2).is_none(),
        "no chunk where no partition lives"
    );
    let before = t.chunks_bytes();
    assert!(t.remove(&mid).is_some());
    assert!(t.remove(&mid).is_none());
    assert!(
        handle(&t.groups, 1).is_none(),
        "a chunk with no partitions is freed"
    );
    let slots =
        CHUNK * std::mem::size_of::<Option<Arc<Partition>>>() + std::mem::size_of::<Partition>();
    assert!(
        before - t.chunks_bytes() >= slots,
        "a freed chunk's slots are no longer counted"
    );
    assert!(!t.contains_key(&mid));
    t.get_mut(&far).unwrap().next_offset = 7;
    let ids: Vec<u64> = t.values().map(|p| p.id()).collect();
    assert_eq!(ids, vec![1, 2, far], "in id order");
    assert!(t.remove(&far).is_some());
    assert!(t.groups[1].is_none(), "a group with no chunks is freed");
    assert!(t.get(&u64::MAX).is_none());
    assert!(t.get_mut(&u64::MAX).is_none() && t.remove(&u64::MAX).is_none());
    assert!(!t.has_overlays(), "no checkpoint, no overlay");
}

/// Pins an idle partition's share of the table (review s28 ckpt M2): its 8 B slot and
/// its `Arc`, a 96 B row with the count's 16 B, which is exactly mimalloc's 112 B bin
/// (session 35: the name a thin pointer, the ids 32 bits; 112 B and the 128 B bin in sessions
/// 33-34, after the partition's one run, a 32 B block beside it, moved into the row).
/// Any growth of `Partition` or of the slot lands in the next bin and must fail here,
/// not only in an RSS run. The overlays (session 31) add nothing a partition or a chunk:
/// a group holds one pointer and a count more, and its overlays' array only while it has one.
#[test]
fn a_full_chunk_costs_120_bytes_a_partition_and_its_header() {
    assert_eq!(std::mem::size_of::<Partition>(), 96, "the row");
    assert!(
        std::mem::size_of::<Partition>() + 16 <= 112,
        "the Arc fits mimalloc's 112 B bin"
    );
    assert_eq!(
        std::mem::size_of::<Group>(),
        GROUP * 8 + 16,
        "a group: its handles, the overlays' pointer and their count"
    );
    let mut t = PartitionTable::default();
    for id in 0..CHUNK as u64 {
        t.insert(id, part(id));
    }
    let one = t.chunks_bytes();
    // The second chunk shares the first's group, so the difference is one chunk alone.
    for id in CHUNK as u64..2 * CHUNK as u64 {
        t.insert(id, part(id));
    }
    let chunk = t.chunks_bytes() - one;
    let header = std::mem::size_of::<Chunk>() + 16;
    assert_eq!(header, 40);
    assert_eq!(
        (chunk - header) / CHUNK,
        120,
        "bytes a partition in a full chunk, its one run included, names excluded"
    );
    assert_eq!((chunk - header) % CHUNK, 0);
}

#[test]
fn an_id_at_the_limit_costs_a_group_not_a_handle_per_chunk_below_it() {
    let mut t = PartitionTable::default();
    let last = crate::state::MAX_NEXT_PARTITION_ID - 1;
    t.insert(last, part(last));
    assert_eq!(t.get(&last).map(|p| p.id()), Some(last));
    let chunks = usize::try_from(last).unwrap() / CHUNK;
    assert!(
        t.chunks_bytes() < chunks,
        "{} bytes for one partition at the limit",
        t.chunks_bytes()
    );
}

/// Session 31: a write to a chunk a checkpoint shares goes to the chunk's overlay and copies
/// no handles, only its partition, until the overlay holds `OVER_MAX` slots; then one copy of
/// the chunk takes the overlay in. Untouched chunks and partitions stay shared.
#[test]
fn a_snapshot_keeps_its_moment_and_writes_go_to_the_overlay_until_it_is_full() {
    let mut t = PartitionTable::default();
    let mid = CHUNK as u64 + 1;
    for id in [0, 1, 2, mid] {
        t.insert(id, part(id));
    }
    let snap = t.snapshot();
    let shared = |t: &PartitionTable, snap: &PartitionsSnapshot, c| match (
        handle(&t.groups, c),
        handle(&snap.groups, c),
    ) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    };
    assert!(shared(&t, &snap, 0));
    let _ = copies();
    t.get_mut(&1).unwrap().next_offset = 9;
    assert_eq!(
        copies(),
        (0, 1),
        "no handles: the partition into the overlay"
    );
    t.get_mut(&1).unwrap().next_offset = 10;
    assert_eq!(copies(), (0, 0), "the overlay's partition is the engine's");
    assert!(t.insert(3, part(3)).is_none());
    assert_eq!(copies(), (0, 0), "a new partition copies nothing");
    assert!(shared(&t, &snap, 0), "the chunk is still the checkpoint's");
    assert_eq!(overlay_len(&t, 0), Some(OVER_MAX));
    assert_eq!(t.get(&1).map(|p| p.next_offset), Some(10), "read first");
    assert!(t.get_mut(&4).is_none() && t.remove(&4).is_none());
    assert_eq!(t.remove(&2).map(|p| p.id()), Some(2));
    assert_eq!(
        copies(),
        (1, 0),
        "the overlay was full: one copy of the chunk's handles, and the removal"
    );
    assert!(!shared(&t, &snap, 0), "the written chunk was copied");
    assert_eq!(overlay_len(&t, 0), None, "folded into the copy");
    assert!(shared(&t, &snap, 1), "the untouched chunk is still shared");
    let row = |groups: &[Option<Box<Group>>], id: u64| {
        let (g, c, i) = split(id).unwrap();
        groups[g].as_ref().unwrap().handle(c).unwrap().slots[i]
            .clone()
            .unwrap()
    };
    assert!(
        Arc::ptr_eq(&row(&t.groups, 0), &row(&snap.groups, 0)),
        "the chunk's other partitions are shared, not copied"
    );
    assert_eq!(snap.get(&1).map(|p| p.next_offset), Some(0));
    assert!(snap.get(&2).is_some() && snap.get(&3).is_none());
    let ids: Vec<u64> = snap.values().map(|p| p.id()).collect();
    assert_eq!(ids, vec![0, 1, 2, mid]);
    let ids: Vec<u64> = t.values().map(|p| p.id()).collect();
    assert_eq!(ids, vec![0, 1, 3, mid]);
    assert_eq!(t.remove(&mid).map(|p| p.id()), Some(mid));
    assert_eq!(
        copies(),
        (0, 0),
        "removing a shared chunk's last partition drops the handle, no copy"
    );
    assert!(handle(&t.groups, 1).is_none() && !t.contains_key(&mid));
    assert_eq!(t.len(), 3);
    assert!(
        snap.get(&mid).is_some(),
        "a chunk freed after the snapshot stays in it"
    );
    drop(snap);
    t.insert(mid, part(mid));
    t.get_mut(&mid).unwrap().next_offset = 1;
    assert_eq!(
        copies(),
        (0, 0),
        "no copy once no checkpoint holds the chunk"
    );
}

/// A partition removed (its queue deleted) while a checkpoint shares its chunk leaves a
/// tombstone in the overlay: neither a read nor a later checkpoint sees the chunk's row, the
/// earlier checkpoint still does; one created in the overlay is simply taken out again.
#[test]
fn a_removed_partition_is_not_read_through_its_chunk_nor_in_a_later_snapshot() {
    let mut t = PartitionTable::default();
    for id in 0..3 {
        t.insert(id, part(id));
    }
    let first = t.snapshot();
    let _ = copies();
    assert_eq!(t.remove(&1).map(|p| p.id()), Some(1));
    assert_eq!(copies(), (0, 0), "a removal copies nothing");
    assert_eq!(overlay_len(&t, 0), Some(1), "a tombstone");
    assert!(t.get(&1).is_none() && t.get_mut(&1).is_none() && t.remove(&1).is_none());
    assert_eq!(t.len(), 2);
    let second = t.snapshot();
    let ids = |it: &mut dyn Iterator<Item = &Partition>| it.map(|p| p.id()).collect::<Vec<_>>();
    assert_eq!(ids(&mut t.values()), vec![0, 2]);
    assert_eq!(ids(&mut second.values()), vec![0, 2], "not in a later one");
    assert!(second.get(&1).is_none());
    assert_eq!(
        ids(&mut first.values()),
        vec![0, 1, 2],
        "the earlier one keeps it"
    );
    assert!(t.insert(3, part(3)).is_none());
    assert_eq!(
        copies_with_overlays(),
        (0, 0, 1),
        "the overlay, shared with the later one, copied: labelled apart from a chunk's copy"
    );
    assert_eq!(overlay_len(&t, 0), Some(2));
    assert_eq!(t.remove(&3).map(|p| p.id()), Some(3));
    assert_eq!(
        overlay_len(&t, 0),
        Some(1),
        "a partition the chunk never held leaves no tombstone"
    );
    assert!(
        t.insert(1, test_partition(1, "again")).is_none(),
        "over the tombstone"
    );
    assert_eq!(t.get(&1).map(|p| &*p.name), Some("again"));
    assert_eq!(t.len(), 3);
    assert!(second.get(&1).is_none() && second.get(&3).is_none());
    assert_eq!(first.get(&1).map(|p| &*p.name), Some("p1"));
    drop((first, second));
    assert_eq!(t.fold_owned(8), 1);
    assert_eq!(overlay_len(&t, 0), None);
    assert_eq!(ids(&mut t.values()), vec![0, 1, 2]);
    assert_eq!(t.get(&1).map(|p| &*p.name), Some("again"));
}

/// As the cursor shards' (review s30 M1): once the checkpoint lets go, `fold_owned` folds an
/// overlay nothing writes again, bounded, and the stale partitions it shadowed are freed: the
/// table holds what it held before the snapshot. A chunk a snapshot still holds stays listed.
#[test]
fn a_fold_after_the_checkpoint_gives_back_the_overlay_and_its_stale_partitions() {
    let mut t = PartitionTable::default();
    for id in 0..2 * CHUNK as u64 {
        t.insert(id, part(id));
    }
    let before = t.chunks_bytes();
    let snap = t.snapshot();
    let _ = copies();
    t.get_mut(&1).unwrap().bytes = 3;
    t.get_mut(&(CHUNK as u64 + 1)).unwrap().bytes = 4;
    assert!(
        t.chunks_bytes() > before,
        "two overlays and two partitions more"
    );
    assert_eq!(t.fold_owned(8), 2, "both chunks looked at");
    assert!(
        t.has_overlays(),
        "the snapshot still holds both: nothing folded"
    );
    drop(snap);
    assert_eq!(t.fold_owned(1), 1, "bounded: one chunk a call");
    assert!(t.has_overlays());
    assert_eq!(t.fold_owned(8), 1);
    assert!(!t.has_overlays());
    assert!(
        t.groups.iter().flatten().all(|g| !g.has_overlays_array()),
        "the overlays' array goes with the last overlay"
    );
    assert_eq!(t.chunks_bytes(), before, "back to what it held before");
    assert_eq!(t.get(&1).map(|p| p.bytes), Some(3));
    assert_eq!(t.get(&(CHUNK as u64 + 1)).map(|p| p.bytes), Some(4));
    assert_eq!(copies(), (0, 2), "two partitions copied, no chunk");
}

/// Review s31 ckpt M1: as the engine runs when a save takes the checkpoint interval, one
/// bounded fold between two snapshots, and the lowest chunks written again each round: the
/// chunks past the bound, written once, are still folded within a round of calls.
#[test]
fn bounded_folds_between_back_to_back_snapshots_reach_every_chunk() {
    const CHUNKS: usize = 12;
    const BOUND: usize = 3;
    let mut t = PartitionTable::default();
    for id in 0..(CHUNKS * CHUNK) as u64 {
        t.insert(id, part(id));
    }
    let mut snap = t.snapshot();
    for c in 0..CHUNKS {
        t.get_mut(&((c * CHUNK) as u64)).unwrap().bytes = 1;
    }
    for round in 0..CHUNKS.div_ceil(BOUND) + 1 {
        drop(snap);
        t.fold_owned(BOUND);
        snap = t.snapshot();
        for c in 0..BOUND {
            t.get_mut(&((c * CHUNK) as u64)).unwrap().bytes = round as u64 + 2;
        }
    }
    let cold: Vec<usize> = (BOUND..CHUNKS)
        .filter(|c| overlay_len(&t, *c).is_some())
        .collect();
    assert_eq!(
        cold,
        Vec::<usize>::new(),
        "cold chunks left with an overlay"
    );
    drop(snap);
    assert_eq!(
        t.get(&((CHUNKS * CHUNK - CHUNK) as u64)).map(|p| p.bytes),
        Some(1)
    );
}

/// What the engine's writes hold while a checkpoint shares the whole table, overlays and
/// copies, stays under what the checkpoint's estimate charges for them (`held_estimate`: the
/// table's bytes again), whichever partitions are written and in what order.
#[test]
fn the_overlays_and_copies_stay_within_the_checkpoints_charge() {
    for stride in [1, 2, 3] {
        let mut t = PartitionTable::default();
        let n = 8 * CHUNK as u64;
        for id in 0..n {
            t.insert(id, part(id));
        }
        let before = t.chunks_bytes();
        let snap = t.snapshot();
        for k in 0..n {
            let id = (k * stride) % n;
            if let Some(p) = t.get_mut(&id) {
                p.bytes += 1;
            }
            if k % 5 == 4 {
                t.remove(&((id + 1) % n));
            }
            let now = t.chunks_bytes();
            assert!(
                now <= 2 * before,
                "stride {stride}, write {k}: {now} bytes held for {before}"
            );
        }
        drop(snap);
    }
}

/// One step of [`the_table_and_its_snapshots_match_a_map`].
#[derive(Clone, Debug)]
enum Op {
    /// A partition (new, or over the one there) named after the value.
    Insert(u64, u64),
    Remove(u64),
    /// One field of a partition changed; the rest must come along.
    Write(u64, u64),
    Snapshot,
    /// Drops the live snapshot at this index (modulo their number), so several overlap.
    DropSnapshot(usize),
    /// The engine's fold after a checkpoint, bounded to a few chunks.
    Fold(usize),
}

/// Ids on both sides of the first two group boundaries (4 096 and 8 192 ids under test),
/// in chunks at a group's last and first slots, and a few low ones.
fn id() -> impl Strategy<Value = u64> {
    let edge = (CHUNK * GROUP) as u64;
    prop_oneof![
        0..10u64,
        (edge - 2 * CHUNK as u64)..(edge + 2 * CHUNK as u64),
        (2 * edge - 3)..(2 * edge + 3),
    ]
}

/// Every id `id()` may give, to look each up.
fn all_ids() -> Vec<u64> {
    let edge = (CHUNK * GROUP) as u64;
    (0..10u64)
        .chain((edge - 2 * CHUNK as u64)..(edge + 2 * CHUNK as u64))
        .chain((2 * edge - 3)..(2 * edge + 3))
        .collect()
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (id(), 0..1000u64).prop_map(|(id, v)| Op::Insert(id, v)),
        3 => id().prop_map(Op::Remove),
        4 => (id(), 1..1000u64).prop_map(|(id, v)| Op::Write(id, v)),
        1 => Just(Op::Snapshot),
        1 => (0..8usize).prop_map(Op::DropSnapshot),
        1 => (0..4usize).prop_map(Op::Fold),
    ]
}

/// A partition as the model holds it: its name and two fields.
type Row = (String, u64, u64);

fn partition(id: u64, v: u64) -> Partition {
    let mut p = test_partition(id, &format!("p{id}-{v}"));
    p.next_offset = v;
    p
}

fn row_of(p: &Partition) -> Row {
    (p.name.to_string(), p.next_offset, p.bytes)
}

fn rows<'a>(it: impl Iterator<Item = &'a Partition>) -> Vec<(u64, Row)> {
    it.map(|p| (p.id(), row_of(p))).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Inserts, removals and one-field writes across chunks and group boundaries, with
    /// several snapshots alive at once, taken and dropped between them, and bounded folds,
    /// against a `BTreeMap` of whole rows: each snapshot keeps its moment (in id order, and
    /// by id: a removed partition is in none taken after), and the live table every field.
    /// Under test chunks hold 4 slots and an overlay 2, so both overlays and their overflow
    /// are reached (review s27 ckpt L5 for the group boundaries).
    #[test]
    fn the_table_and_its_snapshots_match_a_map(ops in prop::collection::vec(op(), 1..120)) {
        let mut t = PartitionTable::default();
        let mut model: BTreeMap<u64, Row> = BTreeMap::new();
        let mut held: Vec<(PartitionsSnapshot, BTreeMap<u64, Row>)> = Vec::new();
        let ids = all_ids();
        for op in ops {
            match op {
                Op::Insert(id, v) => {
                    let had = model.insert(id, row_of(&partition(id, v)));
                    let old = t.insert(id, partition(id, v));
                    prop_assert_eq!(old.map(|p| row_of(&p)), had);
                }
                Op::Remove(id) => {
                    let had = model.remove(&id);
                    prop_assert_eq!(t.remove(&id).map(|p| row_of(&p)), had);
                }
                Op::Write(id, v) => {
                    if let Some(m) = model.get_mut(&id) {
                        m.2 = v;
                    }
                    let p = t.get_mut(&id);
                    prop_assert_eq!(p.is_some(), model.contains_key(&id));
                    if let Some(p) = p {
                        p.bytes = v;
                    }
                }
                Op::Snapshot => held.push((t.snapshot(), model.clone())),
                Op::DropSnapshot(i) => {
                    if !held.is_empty() {
                        let n = held.len();
                        held.remove(i % n);
                    }
                }
                Op::Fold(n) => {
                    let looked = t.fold_owned(n);
                    prop_assert!(looked <= n);
                }
            }
            let want: Vec<(u64, Row)> = model.iter().map(|(k, v)| (*k, v.clone())).collect();
            prop_assert_eq!(rows(t.values()), want);
            prop_assert_eq!(t.len(), model.len());
            for id in &ids {
                prop_assert_eq!(t.get(id).map(row_of), model.get(id).cloned(), "id {}", id);
            }
            // Per chunk (review s31 ckpt L2): a chunk exists exactly while a live id is in
            // it, its `used` (or its overlay's) is the ids in it, and a group's count of
            // overlays is the overlays it holds.
            let mut per_chunk: BTreeMap<(usize, usize), usize> = BTreeMap::new();
            for id in model.keys() {
                if let Some((g, c, _)) = split(*id) {
                    *per_chunk.entry((g, c)).or_default() += 1;
                }
            }
            let mut chunks: BTreeMap<(usize, usize), usize> = BTreeMap::new();
            for (g, group) in t.groups.iter().enumerate() {
                if let Some(group) = group {
                    prop_assert!(group.overlays_counted(), "group {}", g);
                    for (c, _) in group.chunks() {
                        chunks.insert((g, c), group.used(c));
                    }
                }
            }
            prop_assert_eq!(chunks, per_chunk);
            for (snap, at) in &held {
                let want: Vec<(u64, Row)> = at.iter().map(|(k, v)| (*k, v.clone())).collect();
                prop_assert_eq!(rows(snap.values()), want);
                for id in &ids {
                    prop_assert_eq!(snap.get(id).map(row_of), at.get(id).cloned(), "id {}", id);
                }
            }
        }
        for g in 0..t.groups.len() {
            let live = model.keys().any(|id| split(*id).is_some_and(|(at, _, _)| at == g));
            prop_assert_eq!(t.groups[g].is_some(), live, "group {}", g);
        }
        held.clear();
        while t.has_overlays() {
            t.fold_owned(3);
        }
        prop_assert!(t.groups.iter().flatten().all(|g| !g.has_overlays_array()));
        let want: Vec<(u64, Row)> = model.iter().map(|(k, v)| (*k, v.clone())).collect();
        prop_assert_eq!(rows(t.values()), want, "after the last fold");
    }
}
