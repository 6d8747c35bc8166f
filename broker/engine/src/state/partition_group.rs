//! A group of the partition table's chunks, and the overlays of the chunks a checkpoint shares.
//!
//! Why the overlay (session 31, as the cursor shards' in session 30): a write to a chunk a
//! checkpoint shared copied the chunk's 256 handles, an atomic increment on each partition's
//! own cache line; a cycle of scattered pushes, pops and acks first-writes a hundred chunks or
//! more, so the partitions block alone kept stretches over 5 ms (docs/benchmarks.md, session
//! 30). Now such a write goes to a small overlay beside the chunk, which the engine owns, and
//! copies only the partition it writes. The overlay is folded into the chunk in place once no
//! checkpoint shares the chunk (by the chunk's next write, or `PartitionTable::fold_owned` a
//! bounded number a cycle after the checkpoint), or, at `OVER_MAX` slots, into a copy of the
//! chunk as before (a queue delete or a run over every partition copies each chunk once).
//!
//! Unlike a cursor, a partition can be removed (its queue deleted): the overlay then holds a
//! tombstone (`None`) for a slot its chunk holds, so neither a read nor a checkpoint taken
//! later sees the chunk's row; a slot the chunk does not hold is simply taken out.
//!
//! Why the overlays sit in an array of their own, allocated at a group's first overlay and
//! freed with its last, and not beside each chunk's handle: an idle partition costs what it
//! did (docs/memory.md), one pointer and a count more a group of 65 536 ids.

use std::sync::Arc;

use super::cow_clock;
use super::model::Partition;

#[cfg(not(test))]
pub(super) const CHUNK: usize = 256;
/// Small under test, so the property tests' few partitions cross chunks.
#[cfg(test)]
pub(super) const CHUNK: usize = 4;
/// Chunk handles in a group. Under test, with chunks of 4, a group of 1024 keeps the list of
/// groups for ids up to 2^32 (tests at the limit) at 8 MB.
#[cfg(not(test))]
pub(super) const GROUP: usize = 256;
#[cfg(test)]
pub(super) const GROUP: usize = 1024;

/// Slots an overlay takes before its chunk is copied after all: a quarter of a chunk, so the
/// overlay (64 slots of 16 B) stays half the size of the chunk's copy (256 handles of 8 B) it
/// stands in for, and the checkpoint's charge for the copies (`held_estimate`) covers it.
#[cfg(not(test))]
pub(super) const OVER_MAX: usize = CHUNK / 4;
/// Two under test, so the property tests reach both an overlay and its overflow.
#[cfg(test)]
pub(super) const OVER_MAX: usize = 2;

/// A chunk's slots, shared with the checkpoints that took it.
#[derive(Clone)]
pub(super) struct Chunk {
    pub(super) slots: Box<[Option<Arc<Partition>>]>,
    pub(super) used: usize,
}

impl Chunk {
    pub(super) fn new() -> Chunk {
        Chunk {
            slots: std::iter::repeat_with(|| None).take(CHUNK).collect(),
            used: 0,
        }
    }
}

/// A slot of an overlay: the slot's index in its chunk, and its partition, or `None` where
/// the partition the chunk holds there was removed.
type OverRow = (usize, Option<Arc<Partition>>);

/// The slots written while a checkpoint shared the chunk, in slot order.
#[derive(Clone)]
pub(super) struct Overlay {
    rows: Vec<OverRow>,
    /// The chunk's partitions, its own and the overlay's together.
    used: usize,
}

impl Overlay {
    /// The slot's row if the overlay holds the slot (`Some(None)`: removed).
    pub(super) fn find(&self, i: usize) -> Option<&Option<Arc<Partition>>> {
        let at = self.rows.binary_search_by_key(&i, |r| r.0).ok()?;
        self.rows.get(at).map(|r| &r.1)
    }

    fn find_mut(&mut self, i: usize) -> Option<&mut Option<Arc<Partition>>> {
        let at = self.rows.binary_search_by_key(&i, |r| r.0).ok()?;
        self.rows.get_mut(at).map(|r| &mut r.1)
    }

    /// Sets the slot, returning what the overlay held there.
    fn set(&mut self, i: usize, row: Option<Arc<Partition>>) -> Option<Option<Arc<Partition>>> {
        match self.rows.binary_search_by_key(&i, |r| r.0) {
            Ok(at) => self
                .rows
                .get_mut(at)
                .map(|r| std::mem::replace(&mut r.1, row)),
            Err(at) => {
                self.rows.insert(at, (i, row));
                None
            }
        }
    }

    fn unset(&mut self, i: usize) -> Option<Option<Arc<Partition>>> {
        let at = self.rows.binary_search_by_key(&i, |r| r.0).ok()?;
        Some(self.rows.remove(at).1)
    }

    /// Moves the overlay's slots into `chunk` (its rows shadowed are dropped).
    fn fold_into(over: Arc<Overlay>, chunk: &mut Chunk) {
        let (rows, used) = match Arc::try_unwrap(over) {
            Ok(o) => (o.rows, o.used),
            Err(shared) => (shared.rows.clone(), shared.used),
        };
        for (i, row) in rows {
            if let Some(slot) = chunk.slots.get_mut(i) {
                *slot = row;
            }
        }
        chunk.used = used;
    }

    /// What it holds by capacity: its `Arc` and header, its slots, and its partitions' `Arc`s.
    pub(super) fn bytes(&self) -> usize {
        const HEADER: usize = std::mem::size_of::<Overlay>() + 16;
        const ROW: usize = std::mem::size_of::<Partition>() + 16;
        let rows = self.rows.iter().filter(|r| r.1.is_some()).count();
        self.rows
            .capacity()
            .saturating_mul(std::mem::size_of::<OverRow>())
            .saturating_add(HEADER)
            .saturating_add(rows.saturating_mul(ROW))
    }
}

type Overlays = [Option<Arc<Overlay>>; GROUP];

/// A group's chunk handles (`None` where no partition lives), and their overlays.
#[derive(Clone)]
pub(super) struct Group {
    chunks: [Option<Arc<Chunk>>; GROUP],
    overs: Option<Box<Overlays>>,
    /// The overlays in `overs`, so that the array goes with the last.
    overlays: usize,
}

/// Where a write of one slot goes.
pub(super) enum Target<'a> {
    /// The chunk, which the engine owns (its overlay folded in first; copied first if a
    /// checkpoint shared it and its overlay was full).
    Chunk(&'a mut Chunk),
    /// The chunk's overlay, as a checkpoint shares the chunk; the chunk, to read.
    Overlay(&'a mut Overlay, &'a Chunk),
}

impl Group {
    pub(super) fn new() -> Box<Group> {
        Box::new(Group {
            chunks: std::array::from_fn(|_| None),
            overs: None,
            overlays: 0,
        })
    }

    pub(super) fn chunk(&self, c: usize) -> Option<&Chunk> {
        self.chunks.get(c)?.as_deref()
    }

    pub(super) fn chunks(&self) -> impl Iterator<Item = (usize, &Chunk)> {
        self.chunks
            .iter()
            .enumerate()
            .filter_map(|(c, ch)| Some((c, ch.as_deref()?)))
    }

    pub(super) fn overlay(&self, c: usize) -> Option<&Overlay> {
        self.overs.as_ref()?.get(c)?.as_deref()
    }

    pub(super) fn overlays(&self) -> impl Iterator<Item = &Overlay> {
        self.overs
            .iter()
            .flat_map(|o| o.iter().flatten().map(|o| &**o))
    }

    /// Bytes of the overlays' array, if allocated.
    pub(super) fn overs_bytes(&self) -> usize {
        self.overs
            .as_ref()
            .map_or(0, |_| std::mem::size_of::<Overlays>())
    }

    pub(super) fn is_empty(&self) -> bool {
        self.chunks.iter().all(Option::is_none)
    }

    /// The partition at slot `i` of chunk `c`: the overlay's if it holds the slot.
    pub(super) fn get(&self, c: usize, i: usize) -> Option<&Arc<Partition>> {
        if let Some(row) = self.overlay(c).and_then(|o| o.find(i)) {
            return row.as_ref();
        }
        self.chunk(c)?.slots.get(i)?.as_ref()
    }

    /// The group's partitions in id order, each once.
    pub(super) fn rows(&self) -> impl Iterator<Item = &Partition> {
        self.chunks().flat_map(move |(c, chunk)| {
            let over = self.overlay(c);
            chunk.slots.iter().enumerate().filter_map(move |(i, slot)| {
                match over.and_then(|o| o.find(i)) {
                    Some(row) => row.as_deref(),
                    None => slot.as_deref(),
                }
            })
        })
    }

    /// The chunks' partitions their overlays shadow (replaced or removed), held by the
    /// chunks until the fold, in no order.
    pub(super) fn shadowed(&self) -> impl Iterator<Item = &Partition> {
        self.overs
            .iter()
            .flat_map(|o| o.iter().enumerate())
            .filter_map(|(c, o)| Some((self.chunk(c)?, o.as_deref()?)))
            .flat_map(|(chunk, o)| {
                o.rows
                    .iter()
                    .filter_map(move |(i, _)| chunk.slots.get(*i)?.as_deref())
            })
    }

    /// Partitions in chunk `c`, its own and its overlay's together.
    pub(super) fn used(&self, c: usize) -> usize {
        match self.overlay(c) {
            Some(o) => o.used,
            None => self.chunk(c).map_or(0, |ch| ch.used),
        }
    }

    /// Chunk `c`, a new one if no partition lives there; the engine owns a new chunk.
    pub(super) fn chunk_or_new(&mut self, c: usize) -> Option<()> {
        let slot = self.chunks.get_mut(c)?;
        if slot.is_none() {
            *slot = Some(Arc::new(Chunk::new()));
        }
        Some(())
    }

    fn take_overlay(&mut self, c: usize) -> Option<Arc<Overlay>> {
        let over = self.overs.as_mut()?.get_mut(c)?.take()?;
        self.overlays = self.overlays.saturating_sub(1);
        if self.overlays == 0 {
            self.overs = None;
        }
        Some(over)
    }

    /// Takes chunk `c` and its overlay out of the group (its last partition removed).
    pub(super) fn take(&mut self, c: usize) -> (Option<Arc<Chunk>>, Option<Arc<Overlay>>) {
        let over = self.take_overlay(c);
        (self.chunks.get_mut(c).and_then(Option::take), over)
    }

    /// Where a write of slot `i` of chunk `c` goes: the chunk if the engine owns it, else the
    /// overlay, unless that is full and does not hold the slot (then a copy of the chunk).
    pub(super) fn target(&mut self, c: usize, i: usize) -> Option<Target<'_>> {
        let Group {
            chunks,
            overs,
            overlays,
        } = self;
        let chunk = chunks.get_mut(c)?.as_mut()?;
        let over = overs.as_ref().and_then(|o| o.get(c)?.as_deref());
        let full = over.is_some_and(|o| o.rows.len() >= OVER_MAX && o.find(i).is_none());
        if Arc::get_mut(chunk).is_some() || full {
            let over = overs.as_mut().and_then(|o| o.get_mut(c)?.take());
            if over.is_some() {
                *overlays = overlays.saturating_sub(1);
                if *overlays == 0 {
                    *overs = None;
                }
            }
            let chunk = writable(chunk);
            if let Some(over) = over {
                Overlay::fold_into(over, chunk);
            }
            return Some(Target::Chunk(chunk));
        }
        let used = chunk.used;
        let slot = overs
            .get_or_insert_with(|| Box::new(std::array::from_fn(|_| None)))
            .get_mut(c)?;
        if slot.is_none() {
            *overlays += 1;
        }
        let over = slot.get_or_insert_with(|| {
            Arc::new(Overlay {
                rows: Vec::new(),
                used,
            })
        });
        Some(Target::Overlay(writable_overlay(over), chunk))
    }

    /// Folds chunk `c`'s overlay into it in place if the engine owns the chunk again; false if
    /// a checkpoint still shares it.
    pub(super) fn fold_if_owned(&mut self, c: usize) -> bool {
        let owned = self
            .chunks
            .get_mut(c)
            .and_then(Option::as_mut)
            .is_none_or(|ch| Arc::get_mut(ch).is_some());
        if !owned {
            return self.overlay(c).is_none();
        }
        if let Some(over) = self.take_overlay(c) {
            if let Some(chunk) = self.chunks.get_mut(c).and_then(Option::as_mut) {
                Overlay::fold_into(over, writable(chunk));
            }
        }
        true
    }
}

/// The partition in slot `i` to write in place: the overlay's, or a copy of the chunk's made
/// there (timed: the first write of a partition a checkpoint holds).
pub(super) fn overlay_row<'a>(
    over: &'a mut Overlay,
    chunk: &Chunk,
    i: usize,
) -> Option<&'a mut Partition> {
    if over.find(i).is_none() {
        let held = chunk.slots.get(i)?.as_deref()?;
        let started = cow_clock::start();
        over.set(i, Some(Arc::new(held.clone())));
        cow_clock::record(cow_clock::Block::PartitionRows, started);
    }
    Some(writable_partition(over.find_mut(i)?.as_mut()?))
}

/// Stores `p` in slot `i` through the overlay, returning the partition it replaced.
pub(super) fn overlay_insert(
    over: &mut Overlay,
    chunk: &Chunk,
    i: usize,
    p: Partition,
) -> Option<Arc<Partition>> {
    let old = match over.set(i, Some(Arc::new(p))) {
        Some(row) => row,
        None => chunk.slots.get(i)?.clone(),
    };
    if old.is_none() {
        over.used += 1;
    }
    old
}

/// Removes slot `i`'s partition through the overlay: a tombstone where the chunk holds one.
pub(super) fn overlay_remove(
    over: &mut Overlay,
    chunk: &Chunk,
    i: usize,
) -> Option<Arc<Partition>> {
    let below = chunk.slots.get(i)?.as_ref();
    let old = match below {
        Some(row) => over.set(i, None).unwrap_or_else(|| Some(row.clone())),
        None => over.unset(i).flatten(),
    };
    if old.is_some() {
        over.used = over.used.saturating_sub(1);
    }
    old
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

/// The overlay, copied first (and timed, apart from a chunk's copy) if a checkpoint taken while it
/// held slots shares it.
fn writable_overlay(over: &mut Arc<Overlay>) -> &mut Overlay {
    if Arc::get_mut(over).is_none() {
        let started = cow_clock::start();
        let copy = Arc::make_mut(over);
        cow_clock::record(cow_clock::Block::PartitionOverlays, started);
        return copy;
    }
    Arc::make_mut(over)
}

/// The partition, copied first (and timed) if a checkpoint's chunk still holds it.
pub(super) fn writable_partition(p: &mut Arc<Partition>) -> &mut Partition {
    if Arc::get_mut(p).is_none() {
        let started = cow_clock::start();
        let copy = Arc::make_mut(p);
        cow_clock::record(cow_clock::Block::PartitionRows, started);
        return copy;
    }
    Arc::make_mut(p)
}

#[cfg(test)]
impl Group {
    pub(super) fn handle(&self, c: usize) -> Option<&Arc<Chunk>> {
        self.chunks.get(c)?.as_ref()
    }

    pub(super) fn has_overlays_array(&self) -> bool {
        self.overs.is_some()
    }

    /// Whether the count of overlays is the overlays held, and the array is there exactly
    /// while one is (review s31 ckpt L2).
    pub(super) fn overlays_counted(&self) -> bool {
        self.overlays == self.overlays().count() && self.overs.is_some() == (self.overlays > 0)
    }
}

#[cfg(test)]
impl Overlay {
    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }
}
