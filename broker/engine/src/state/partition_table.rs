//! Partitions by id, in fixed-size chunks of a dense array.
//!
//! Why not a `HashMap<u64, Partition>`: partition ids are handed out densely (`next_partition_id`),
//! and at a million partitions the hash table held twice as many buckets as rows (~220 bytes
//! per partition for a 96-byte row). Chunks grow the array without doubling it, and a chunk
//! whose partitions were all deleted is freed.
//!
//! Two levels (session 27): a chunk's handle sits in a group of 256 handles, and the table is
//! a list of groups. Ids only grow (a queue's partitions go with it, new ones get new ids),
//! so after churn the live ids sit high: a flat list of one handle per 256 ids would hold
//! 16 M handles below id 2^32 (`MAX_NEXT_PARTITION_ID`); groups hold a 2 KB group per 65 536
//! ids that has a live chunk, and the list at most 65 536 group slots (512 KB).
//!
//! Chunks are shared (`Arc`) and copied on write: a checkpoint takes the table by cloning one
//! handle per chunk under the state lock and encodes the partitions after releasing it, and
//! the engine copies a chunk only at its first write while that checkpoint still holds it.
//!
//! Why 256 slots: that copy is made inside a cycle under the lock. At 4096 slots it was
//! about 0.5 MB and 8 192 allocations, a cycle stall of milliseconds per chunk a cycle first
//! touched (session 26's 20-50 ms p99 at a million partitions, issue 12). At 256 a chunk's
//! handle and header (about 64 B) is 0.3 B a partition, and `begin_checkpoint` clones 3 907
//! handles (in 16 groups) at a million partitions instead of 245.
//!
//! Why one `Arc` per partition (session 28, review s25 ckpt M2): with partitions in the slots,
//! a chunk's copy copied all 256 partitions, each name and run list an allocation (about
//! 30 KB and 512 allocations, 40 µs), whichever of them the write was for; a seek or a queue
//! delete paid that for every chunk. Now the copy is 256 handles (2 KB, a count each), and a
//! write copies only the partition it writes (`Arc::make_mut`), so a stretch pays for what it
//! writes. A partition costs its 8 B handle and the `Arc`'s 16 B header more, and its chunk's
//! slots shrink from 112 B to 8 B (docs/memory.md reckons it).

use std::sync::Arc;

use super::cow_clock;
use super::model::Partition;

#[cfg(not(test))]
const CHUNK: usize = 256;
/// Small under test, so the property tests' few partitions cross chunks.
#[cfg(test)]
const CHUNK: usize = 4;
/// Chunk handles in a group. Under test, with chunks of 4, a group of 1024 keeps the list of
/// groups for ids up to 2^32 (tests at the limit) at 8 MB.
#[cfg(not(test))]
const GROUP: usize = 256;
#[cfg(test)]
const GROUP: usize = 1024;

/// One group's chunk handles; `None` where no partition lives.
type Group = Box<[Option<Arc<Chunk>>; GROUP]>;

#[derive(Default)]
pub struct PartitionTable {
    groups: Vec<Option<Group>>,
    len: usize,
}

#[derive(Clone)]
struct Chunk {
    slots: Box<[Option<Arc<Partition>>]>,
    used: usize,
}

/// The partitions at one moment, detached from the table (shared chunks).
pub struct PartitionsSnapshot {
    groups: Vec<Option<Group>>,
}

impl PartitionsSnapshot {
    pub fn get(&self, pid: &u64) -> Option<&Partition> {
        get(&self.groups, *pid)
    }

    pub fn values(&self) -> impl Iterator<Item = &Partition> {
        values(&self.groups)
    }
}

/// The chunk, copied first (and the copy timed: `cow_clock`) if a checkpoint shares it.
fn writable(chunk: &mut Arc<Chunk>) -> &mut Chunk {
    if Arc::get_mut(chunk).is_none() {
        let started = cow_clock::start();
        let copy = Arc::make_mut(chunk);
        cow_clock::record(cow_clock::Block::Partitions, started);
        return copy;
    }
    Arc::make_mut(chunk)
}

/// The partition, copied first (and timed, as a chunk's copy) if a checkpoint's chunk still
/// holds it.
fn writable_partition(p: &mut Arc<Partition>) -> &mut Partition {
    if Arc::get_mut(p).is_none() {
        let started = cow_clock::start();
        let copy = Arc::make_mut(p);
        cow_clock::record(cow_clock::Block::Partitions, started);
        return copy;
    }
    Arc::make_mut(p)
}

/// The id's group, chunk in the group and slot in the chunk.
fn split(pid: u64) -> Option<(usize, usize, usize)> {
    let i = usize::try_from(pid).ok()?;
    let c = i / CHUNK;
    Some((c / GROUP, c % GROUP, i % CHUNK))
}

fn get(groups: &[Option<Group>], pid: u64) -> Option<&Partition> {
    let (g, c, i) = split(pid)?;
    let chunk = groups.get(g)?.as_ref()?[c].as_ref()?;
    chunk.slots.get(i)?.as_deref()
}

fn values(groups: &[Option<Group>]) -> impl Iterator<Item = &Partition> {
    groups
        .iter()
        .flatten()
        .flat_map(|g| g.iter().flatten())
        .flat_map(|c| c.slots.iter().flatten().map(|p| &**p))
}

impl PartitionTable {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, pid: &u64) -> Option<&Partition> {
        get(&self.groups, *pid)
    }

    fn chunk_mut(&mut self, pid: u64) -> Option<(&mut Arc<Chunk>, usize)> {
        let (g, c, i) = split(pid)?;
        let chunk = self.groups.get_mut(g)?.as_mut()?[c].as_mut()?;
        Some((chunk, i))
    }

    /// Copies the partition's chunk (its handles) and then the partition first if a
    /// checkpoint still holds them, so only an id that exists pays those copies.
    pub fn get_mut(&mut self, pid: &u64) -> Option<&mut Partition> {
        self.get(pid)?;
        let (chunk, i) = self.chunk_mut(*pid)?;
        Some(writable_partition(
            writable(chunk).slots.get_mut(i)?.as_mut()?,
        ))
    }

    pub fn contains_key(&self, pid: &u64) -> bool {
        self.get(pid).is_some()
    }

    /// Stores `p` under `pid`, replacing (and returning) what was there. Ids come from the
    /// replicated `next_partition_id`, below `MAX_NEXT_PARTITION_ID`; an id past `usize` is
    /// not stored.
    pub fn insert(&mut self, pid: u64, p: Partition) -> Option<Arc<Partition>> {
        let (g, c, i) = split(pid)?;
        if self.groups.len() <= g {
            self.groups.resize_with(g + 1, || None);
        }
        let group = self.groups[g].get_or_insert_with(|| Box::new(std::array::from_fn(|_| None)));
        let chunk = group[c].get_or_insert_with(|| {
            Arc::new(Chunk {
                slots: std::iter::repeat_with(|| None).take(CHUNK).collect(),
                used: 0,
            })
        });
        let chunk = writable(chunk);
        let old = chunk.slots.get_mut(i)?.replace(Arc::new(p));
        if old.is_none() {
            chunk.used += 1;
            self.len += 1;
        }
        old
    }

    /// Removes the partition; a checkpoint holding it keeps it (nothing is copied).
    pub fn remove(&mut self, pid: &u64) -> Option<Arc<Partition>> {
        self.get(pid)?;
        let (g, c, i) = split(*pid)?;
        let group = self.groups.get_mut(g)?.as_mut()?;
        let handle = &mut group[c];
        if handle.as_ref()?.used > 1 {
            let chunk = writable(handle.as_mut()?);
            let old = chunk.slots.get_mut(i)?.take()?;
            chunk.used -= 1;
            self.len -= 1;
            return Some(old);
        }
        // The chunk's last partition: the chunk goes, so a checkpoint sharing it keeps it and
        // nothing is copied (review s27 ckpt L4).
        let old = match Arc::try_unwrap(handle.take()?) {
            Ok(mut chunk) => chunk.slots.get_mut(i)?.take()?,
            Err(shared) => shared.slots.get(i)?.clone()?,
        };
        self.len -= 1;
        if group.iter().all(Option::is_none) {
            self.groups[g] = None;
        }
        Some(old)
    }

    pub fn values(&self) -> impl Iterator<Item = &Partition> {
        values(&self.groups)
    }

    /// What the table holds besides its partitions' names and runs, by capacity: the list of
    /// groups, each group's handles, each chunk's slots (a chunk is allocated whole) and
    /// header, and each partition's `Arc` (its row and the count's 16 B).
    pub fn chunks_bytes(&self) -> usize {
        const SLOT: usize = std::mem::size_of::<Option<Arc<Partition>>>();
        const ROW: usize = std::mem::size_of::<Partition>() + 16;
        const HEADER: usize = std::mem::size_of::<Chunk>() + 16;
        const HANDLES: usize = GROUP * std::mem::size_of::<Option<Arc<Chunk>>>();
        let list = self
            .groups
            .capacity()
            .saturating_mul(std::mem::size_of::<Option<Group>>());
        self.groups
            .iter()
            .flatten()
            .map(|g| {
                g.iter()
                    .flatten()
                    .map(|c| {
                        c.slots
                            .len()
                            .saturating_mul(SLOT)
                            .saturating_add(HEADER)
                            .saturating_add(c.used.saturating_mul(ROW))
                    })
                    .fold(HANDLES, usize::saturating_add)
            })
            .fold(list, usize::saturating_add)
    }

    /// The table as it is now, in O(chunks): later writes copy the chunks they touch.
    pub fn snapshot(&self) -> PartitionsSnapshot {
        PartitionsSnapshot {
            groups: self.groups.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::model::test_partition;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn part(id: u64) -> Partition {
        test_partition(id, &format!("p{id}"))
    }

    /// The handle of chunk `c` (counted over the whole table), if allocated.
    fn handle(groups: &[Option<Group>], c: usize) -> Option<&Arc<Chunk>> {
        groups.get(c / GROUP)?.as_ref()?[c % GROUP].as_ref()
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
        let slots = CHUNK * std::mem::size_of::<Option<Arc<Partition>>>()
            + std::mem::size_of::<Partition>();
        assert!(
            before - t.chunks_bytes() >= slots,
            "a freed chunk's slots are no longer counted"
        );
        assert!(!t.contains_key(&mid));
        t.get_mut(&far).unwrap().next_offset = 7;
        let ids: Vec<u64> = t.values().map(|p| p.id).collect();
        assert_eq!(ids, vec![1, 2, far], "in id order");
        assert!(t.remove(&far).is_some());
        assert!(t.groups[1].is_none(), "a group with no chunks is freed");
        assert!(t.get(&u64::MAX).is_none());
        assert!(t.get_mut(&u64::MAX).is_none() && t.remove(&u64::MAX).is_none());
    }

    /// Pins an idle partition's share of the table (review s28 ckpt M2): its 8 B slot and
    /// its `Arc`, a 96 B row with the count's 16 B, which is exactly mimalloc's 112 B bin.
    /// Any growth of `Partition` or of the slot lands in the next bin and must fail here,
    /// not only in an RSS run.
    #[test]
    fn a_full_chunk_costs_120_bytes_a_partition_and_its_header() {
        assert_eq!(std::mem::size_of::<Partition>(), 96, "the row");
        assert!(
            std::mem::size_of::<Partition>() + 16 <= 112,
            "the Arc fits mimalloc's 112 B bin"
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
            "bytes a partition in a full chunk, names and runs excluded"
        );
        assert_eq!((chunk - header) % CHUNK, 0);
    }

    #[test]
    fn an_id_at_the_limit_costs_a_group_not_a_handle_per_chunk_below_it() {
        let mut t = PartitionTable::default();
        let last = crate::state::MAX_NEXT_PARTITION_ID - 1;
        t.insert(last, part(last));
        assert_eq!(t.get(&last).map(|p| p.id), Some(last));
        let chunks = usize::try_from(last).unwrap() / CHUNK;
        assert!(
            t.chunks_bytes() < chunks,
            "{} bytes for one partition at the limit",
            t.chunks_bytes()
        );
    }

    #[test]
    fn a_snapshot_keeps_its_moment_and_writes_copy_only_the_chunk_they_touch() {
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
        let _ = cow_clock::take();
        t.get_mut(&1).unwrap().next_offset = 9;
        t.insert(3, part(3));
        t.remove(&2);
        assert!(t.get_mut(&4).is_none() && t.remove(&4).is_none());
        assert_eq!(
            cow_clock::take().copies,
            2,
            "at the first write, one copy of the chunk's handles and one of the partition"
        );
        assert!(!shared(&t, &snap, 0), "the written chunk was copied");
        assert!(shared(&t, &snap, 1), "the untouched chunk is still shared");
        let row = |groups: &[Option<Group>], id: u64| {
            let (g, c, i) = split(id).unwrap();
            groups[g].as_ref().unwrap()[c].as_ref().unwrap().slots[i]
                .clone()
                .unwrap()
        };
        assert!(
            !Arc::ptr_eq(&row(&t.groups, 1), &row(&snap.groups, 1)),
            "the written partition was copied"
        );
        assert!(
            Arc::ptr_eq(&row(&t.groups, 0), &row(&snap.groups, 0)),
            "the chunk's other partitions are shared, not copied"
        );
        assert_eq!(snap.get(&1).map(|p| p.next_offset), Some(0));
        assert!(snap.get(&2).is_some() && snap.get(&3).is_none());
        let ids: Vec<u64> = snap.values().map(|p| p.id).collect();
        assert_eq!(ids, vec![0, 1, 2, mid]);
        assert_eq!(t.get(&1).map(|p| p.next_offset), Some(9));
        let _ = cow_clock::take();
        assert_eq!(t.remove(&mid).map(|p| p.id), Some(mid));
        assert_eq!(
            cow_clock::take().copies,
            0,
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
            cow_clock::take().copies,
            0,
            "no copy once no checkpoint holds the chunk"
        );
    }

    /// One step of [`the_table_and_its_snapshots_match_a_map_across_a_group_boundary`].
    #[derive(Clone, Debug)]
    enum Op {
        Insert(u64),
        Remove(u64),
        Write(u64, u64),
        Snapshot,
        DropSnapshot,
    }

    /// Ids on both sides of the first two group boundaries (4 096 and 8 192 ids under test),
    /// in chunks at a group's last and first slots, and a few low ones.
    fn id() -> impl Strategy<Value = u64> {
        let edge = (CHUNK * GROUP) as u64;
        prop_oneof![
            0..6u64,
            (edge - 2 * CHUNK as u64)..(edge + 2 * CHUNK as u64),
            (2 * edge - 3)..(2 * edge + 3),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => id().prop_map(Op::Insert),
            3 => id().prop_map(Op::Remove),
            2 => (id(), 1..1000u64).prop_map(|(id, v)| Op::Write(id, v)),
            1 => Just(Op::Snapshot),
            1 => Just(Op::DropSnapshot),
        ]
    }

    /// (id, next_offset) of each partition, in id order.
    fn rows<'a>(it: impl Iterator<Item = &'a Partition>) -> Vec<(u64, u64)> {
        it.map(|p| (p.id, p.next_offset)).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Review s27 ckpt L5: inserts, removes and writes across group boundaries, with
        /// snapshots taken and dropped between them, against a `BTreeMap`.
        #[test]
        fn the_table_and_its_snapshots_match_a_map_across_a_group_boundary(
            ops in prop::collection::vec(op(), 1..80)
        ) {
            let mut t = PartitionTable::default();
            let mut model: BTreeMap<u64, u64> = BTreeMap::new();
            let mut held: Option<(PartitionsSnapshot, Vec<(u64, u64)>)> = None;
            for op in ops {
                match op {
                    Op::Insert(id) => {
                        let had = model.insert(id, 0).is_some();
                        prop_assert_eq!(t.insert(id, part(id)).is_some(), had);
                    }
                    Op::Remove(id) => {
                        let had = model.remove(&id).is_some();
                        prop_assert_eq!(t.remove(&id).map(|p| p.id), had.then_some(id));
                    }
                    Op::Write(id, v) => {
                        if let Some(m) = model.get_mut(&id) {
                            *m = v;
                        }
                        if let Some(p) = t.get_mut(&id) {
                            p.next_offset = v;
                        }
                    }
                    Op::Snapshot => {
                        let at: Vec<(u64, u64)> = model.iter().map(|(k, v)| (*k, *v)).collect();
                        held = Some((t.snapshot(), at));
                    }
                    Op::DropSnapshot => held = None,
                }
                let want: Vec<(u64, u64)> = model.iter().map(|(k, v)| (*k, *v)).collect();
                prop_assert_eq!(rows(t.values()), want);
                prop_assert_eq!(t.len(), model.len());
                if let Some((snap, at)) = &held {
                    prop_assert_eq!(&rows(snap.values()), at);
                    for (id, v) in at {
                        prop_assert_eq!(snap.get(id).map(|p| p.next_offset), Some(*v));
                    }
                }
            }
            for g in 0..t.groups.len() {
                let live = model.keys().any(|id| split(*id).is_some_and(|(at, _, _)| at == g));
                prop_assert_eq!(t.groups[g].is_some(), live, "group {}", g);
            }
        }
    }
}
