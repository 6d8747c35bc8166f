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
//! Chunks are shared (`Arc`): a checkpoint takes the table by cloning one handle per chunk
//! under the state lock and encodes the partitions after releasing it. While it holds a chunk,
//! the engine's writes to it go to the chunk's overlay (session 31, `partition_group.rs`), and
//! the chunk is copied only once that is full.
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
//! delete paid that for every chunk. Then the copy was 256 handles (2 KB, a count each), and
//! a write copied only the partition it writes (`Arc::make_mut`); since session 31 the
//! overlay spares the handles too, but at its overflow. A partition costs its 8 B handle and
//! the `Arc`'s 16 B header more, and its chunk's slots shrink from 112 B to 8 B
//! (docs/memory.md reckons it).

use std::sync::Arc;

use super::fold_ring::FoldRing;
use super::model::Partition;
use super::partition_group::{
    overlay_insert, overlay_remove, overlay_row, writable_partition, Chunk, Group, Target, CHUNK,
    GROUP,
};

/// Chunks whose overlay the engine folds a cycle after a checkpoint
/// (`State::fold_partition_overlays`): a fold moves at most `OVER_MAX` (64) handles and frees
/// as many stale partitions (a name and a run list each), so 128 stay under a millisecond by
/// reckoning (timed as `queen_checkpoint_fold_seconds`, not yet measured); a million
/// partitions (3 907 chunks) fold in 31 cycles, which the engine waits for before the next
/// checkpoint (up to an interval more), and the round robin reaches every chunk even when it
/// does not.
pub const PARTITION_FOLDS_PER_CYCLE: usize = 128;

#[derive(Default)]
pub struct PartitionTable {
    groups: Vec<Option<Box<Group>>>,
    len: usize,
    /// The chunks (by index over the table) that got an overlay, for `fold_owned`: a chunk no
    /// one writes again would otherwise keep its overlay and the stale partitions it shadows
    /// for good (as the cursor shards': review s30 M1). At most one a chunk.
    overlaid: FoldRing<usize>,
}

/// The partitions at one moment, detached from the table (shared chunks and overlays).
pub struct PartitionsSnapshot {
    groups: Vec<Option<Box<Group>>>,
}

impl PartitionsSnapshot {
    pub fn get(&self, pid: &u64) -> Option<&Partition> {
        get(&self.groups, *pid)
    }

    pub fn values(&self) -> impl Iterator<Item = &Partition> {
        values(&self.groups)
    }
}

/// The id's group, chunk in the group and slot in the chunk.
fn split(pid: u64) -> Option<(usize, usize, usize)> {
    let i = usize::try_from(pid).ok()?;
    let c = i / CHUNK;
    Some((c / GROUP, c % GROUP, i % CHUNK))
}

fn get(groups: &[Option<Box<Group>>], pid: u64) -> Option<&Partition> {
    let (g, c, i) = split(pid)?;
    groups.get(g)?.as_ref()?.get(c, i).map(|p| &**p)
}

fn values(groups: &[Option<Box<Group>>]) -> impl Iterator<Item = &Partition> {
    groups.iter().flatten().flat_map(|g| g.rows())
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

    /// Copies the partition first if a checkpoint still holds it, into its chunk's overlay if
    /// a checkpoint shares the chunk, so only an id that exists pays a copy.
    pub fn get_mut(&mut self, pid: &u64) -> Option<&mut Partition> {
        self.get(pid)?;
        let (g, c, i) = split(*pid)?;
        let group = self.groups.get_mut(g)?.as_mut()?;
        match group.target(c, i)? {
            Target::Chunk(chunk) => Some(writable_partition(chunk.slots.get_mut(i)?.as_mut()?)),
            Target::Overlay(over, chunk) => {
                self.overlaid.insert(g * GROUP + c);
                overlay_row(over, chunk, i)
            }
        }
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
        let group = self.groups.get_mut(g)?.get_or_insert_with(Group::new);
        group.chunk_or_new(c)?;
        let old = match group.target(c, i)? {
            Target::Chunk(chunk) => {
                let old = chunk.slots.get_mut(i)?.replace(Arc::new(p));
                if old.is_none() {
                    chunk.used += 1;
                }
                old
            }
            Target::Overlay(over, chunk) => {
                self.overlaid.insert(g * GROUP + c);
                overlay_insert(over, chunk, i, p)
            }
        };
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Removes the partition; a checkpoint holding it keeps it (nothing is copied but, at
    /// the overlay's overflow, the chunk's handles).
    pub fn remove(&mut self, pid: &u64) -> Option<Arc<Partition>> {
        self.get(pid)?;
        let (g, c, i) = split(*pid)?;
        let group = self.groups.get_mut(g)?.as_mut()?;
        if group.used(c) > 1 {
            let old = match group.target(c, i)? {
                Target::Chunk(chunk) => {
                    let old = chunk.slots.get_mut(i)?.take()?;
                    chunk.used -= 1;
                    old
                }
                Target::Overlay(over, chunk) => {
                    self.overlaid.insert(g * GROUP + c);
                    overlay_remove(over, chunk, i)?
                }
            };
            self.len -= 1;
            return Some(old);
        }
        // The chunk's last partition: the chunk and its overlay go, so a checkpoint sharing
        // them keeps them and nothing is copied (review s27 ckpt L4).
        let (chunk, over) = group.take(c);
        let old = match over.as_ref().and_then(|o| o.find(i)) {
            Some(row) => row.clone(),
            None => chunk.as_ref()?.slots.get(i)?.clone(),
        };
        self.len -= 1;
        if group.is_empty() {
            self.groups[g] = None;
        }
        old
    }

    pub fn values(&self) -> impl Iterator<Item = &Partition> {
        values(&self.groups)
    }

    /// The stale partitions the overlays shadow, each once: held by their chunks until the
    /// fold (and, while it runs, by the checkpoint that took them), so their names and runs
    /// are counted in the state's memory as the live ones (review s31 ckpt M2). At most
    /// `OVER_MAX` an overlay.
    pub fn shadowed(&self) -> impl Iterator<Item = &Partition> {
        self.groups.iter().flatten().flat_map(|g| g.shadowed())
    }

    /// Whether some chunk may still hold an overlay to fold.
    pub fn has_overlays(&self) -> bool {
        !self.overlaid.is_empty()
    }

    /// Folds the overlays of up to `max` chunks into their chunks where the engine owns the
    /// chunk again (no checkpoint holds it), in place; a chunk still shared stays listed for a
    /// later call. Returns the chunks looked at, so a caller can bound its work per cycle.
    /// Each call starts where the last stopped and wraps (review s31 ckpt M1): from the
    /// lowest key each time, a save as long as the checkpoint interval left one call between
    /// two checkpoints, and the chunks past the first `max` never folded.
    pub fn fold_owned(&mut self, max: usize) -> usize {
        let groups = &mut self.groups;
        self.overlaid.fold(max, |key| {
            let (g, c) = (key / GROUP, key % GROUP);
            match groups.get_mut(g).and_then(Option::as_mut) {
                Some(group) => group.fold_if_owned(c),
                None => true,
            }
        })
    }

    /// What the table holds besides its partitions' names and runs, by capacity: the list of
    /// groups, each group's handles (and overlays' array, while it has one), each chunk's
    /// slots (a chunk is allocated whole) and header, each overlay, each partition's `Arc`
    /// (its row and the count's 16 B; a partition the overlay shadows still counts, as it is
    /// held until the fold: its name and runs are `shadowed`) and the list of overlaid chunks.
    pub fn chunks_bytes(&self) -> usize {
        const SLOT: usize = std::mem::size_of::<Option<Arc<Partition>>>();
        const ROW: usize = std::mem::size_of::<Partition>() + 16;
        const HEADER: usize = std::mem::size_of::<Chunk>() + 16;
        const HANDLES: usize = std::mem::size_of::<Group>();
        let list = self
            .groups
            .capacity()
            .saturating_mul(std::mem::size_of::<Option<Box<Group>>>());
        let overlaid = self.overlaid.bytes();
        self.groups
            .iter()
            .flatten()
            .map(|g| {
                let chunks = g
                    .chunks()
                    .map(|(_, c)| {
                        c.slots
                            .len()
                            .saturating_mul(SLOT)
                            .saturating_add(HEADER)
                            .saturating_add(c.used.saturating_mul(ROW))
                    })
                    .fold(HANDLES, usize::saturating_add);
                g.overlays().map(|o| o.bytes()).fold(
                    chunks.saturating_add(g.overs_bytes()),
                    usize::saturating_add,
                )
            })
            .fold(list.saturating_add(overlaid), usize::saturating_add)
    }

    /// The table as it is now, in O(chunks): later writes go to overlays (their partitions
    /// copied), or copy a chunk's handles once its overlay is full.
    pub fn snapshot(&self) -> PartitionsSnapshot {
        PartitionsSnapshot {
            groups: self.groups.clone(),
        }
    }
}

#[cfg(test)]
#[path = "partition_table_tests.rs"]
mod tests;
