//! A group's cursors by partition id, in shards of 224 consecutive ids, one `Arc` per cursor.
//!
//! Why shards: a checkpoint takes the cursors by cloning one handle per shard under the state
//! lock and encodes them after releasing it (a queue-mode group touching a million partitions
//! holds a million cursors; encoding them under the lock was most of the checkpoint's pause).
//! While a checkpoint still holds a shard, the engine's writes to it go to the shard's overlay
//! (`Shard`, session 30), and the shard is copied only once that is full; every copy is timed
//! by [`super::cow_clock`].
//!
//! Why one `Arc` per cursor (session 29, as the partition table's per partition in session
//! 28): with the rows in the table, that copy was all 224 rows (256 buckets of 113 B, about
//! 29 KB in a 32 KB allocation), whichever row the write was for; a pop or ack over 100
//! scattered partitions copied up to 100 shards in one stretch (session 28: stretch p99
//! 50-100 ms, the cursors the slow part). Now the copy is the shard's handles (256 buckets of
//! 17 B, about 4.3 KB, and a count each), and the write copies only its cursor: `insert`
//! puts a new `Arc` in place of a shared one (the old row is not copied), `get_mut` copies the
//! one row. A full shard costs about the same as before: 132 B a cursor (a 17 B bucket at load
//! 7/8, a 112 B `Arc` and the shard's share) against 130 B (docs/memory.md,
//! `a_full_shard_costs_132_bytes_a_cursor`). What was left of a first write, the handles'
//! clones (an atomic increment on each cursor's own line), the overlay removed (session 30).
//!
//! Why 224: hashbrown fills a table to 7/8 of its buckets (a power of two), so a full shard
//! of 224 rows sits in 256 buckets at load 7/8; a shard of 256 rows would sit in 512 buckets
//! at load 1/2. Each shard's `Arc`, map and shelf entry is charged 128 B (0.6 B a cursor),
//! 4 465 shards for a million cursors, in 70 shelves: what `begin_checkpoint` clones.
//!
//! The sparse case: partition ids are global (shared by all queues), so a group whose queue
//! created its partitions while k - 1 other queues created theirs holds about 224/k rows a
//! shard, and from k = 224 one row in a 4-bucket table with its `Arc`, map and B-tree share
//! (docs/memory.md has the table). `held_bytes` counts it (by capacity, per shard); keying
//! shards by the partition's index in its queue would remove it (not done).
//!
//! Shards are keyed by `pid / SHARD`, so the shards of a group touching a few partitions of a
//! wide id space cost what they hold, and iteration is in shard order (the rows inside a shard
//! in hash order, as the single map before them).
//!
//! Why shelves (session 34, issue 12): the shards sit in shared shelves of up to 64, keyed by
//! `shard / SHELF` in a B-tree, and a checkpoint takes one handle per shelf (70 at a million
//! cursors) instead of one per shard (4 465): each handle is an atomic on its own cold cache
//! line, and with the shards' byte counts walked twice more, taking a million cursors cost
//! about 1.6 ms of the pause under the lock (p50, in-process, docs/benchmarks.md). The first
//! write to a shelf a checkpoint holds copies its handles (64 shards, a count each, timed as
//! `cursor_shelves`), after which its shards are shared as before and go to their overlays.
//! What the shards hold is kept as a running sum, changed by each write by what the written
//! shard's charge changed, so neither the snapshot nor the memory account walks the shards.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::cow_clock;
use super::fold_ring::FoldRing;
use super::model::CursorRow;

/// Rows a full shard holds: 7/8 of 256 buckets (see `a_full_shard_fills_its_table`).
const FULL_SHARD: u64 = 224;
#[cfg(not(test))]
const SHARD: u64 = FULL_SHARD;
/// Small under test, so the property tests' few partitions cross shards (review s26 ckpt M5).
#[cfg(test)]
const SHARD: u64 = 4;

/// Rows a shard's overlay takes before its base is copied after all: a quarter of a shard, so
/// the overlay's table (64 buckets, about 1.1 KB) stays a quarter of the base's and a read's
/// second lookup is into a small table; a seek, which writes every cursor, copies each shard
/// once as before (session 30).
#[cfg(not(test))]
const OVER_MAX: usize = (FULL_SHARD / 4) as usize;
/// Two under test, so the property tests reach both an overlay and its overflow.
#[cfg(test)]
const OVER_MAX: usize = 2;

/// Shards whose overlay the engine folds a cycle after a checkpoint (`State::fold_cursor_overlays`):
/// a fold moves at most `OVER_MAX` handles and frees as many stale rows, a few µs, so 128 stay
/// well under a millisecond by reckoning (not measured); a million cursors (4 465 shards) are
/// folded in 35 cycles, 3.5 s of 100 ms ticks if idle.
pub const CURSOR_FOLDS_PER_CYCLE: usize = 128;

/// Shards a shelf holds: 64 shard handles (16 B and an 8 B key each, 1.5 KB) is what the first
/// write to a shelf a checkpoint holds copies, against one handle per 14 336 partitions taken.
#[cfg(not(test))]
const SHELF: u64 = 64;
/// Two under test, so the property tests' few shards cross shelves.
#[cfg(test)]
const SHELF: u64 = 2;

type Rows = HashMap<u64, Arc<CursorRow>>;

/// One shard: its rows, and the rows written while a checkpoint shared them.
///
/// Why the overlay (session 30): a write's copy of a shared shard was its 224 handles, an
/// atomic increment on each cursor's own cache line, about 5 µs each in isolation and more on
/// a loaded VM; a cycle of scattered pops and acks first-writes hundreds of shards, so the
/// stretch p99 stayed at 5-10 ms (docs/benchmarks.md, sessions 29 and 30). Now a write to a
/// shared base goes to a small overlay beside it, which the engine owns, and copies nothing but
/// the row; the overlay is folded into the base (in place, no copy) once no checkpoint shares
/// the base any more, by `CursorMap::fold_owned` after the checkpoint or by the next write,
/// or, at `OVER_MAX` rows, into a copy of the base.
/// There is no removal of a cursor, so the overlay only ever replaces or adds rows: a future
/// `remove` must not only take the row out of the overlay (the base's older row would show
/// again), and must copy a shared base (review s30 L5).
#[derive(Clone, Default)]
struct Shard {
    base: Arc<Rows>,
    over: Option<Arc<Rows>>,
}

impl Shard {
    fn get(&self, pid: &u64) -> Option<&Arc<CursorRow>> {
        if let Some(row) = self.over.as_ref().and_then(|o| o.get(pid)) {
            return Some(row);
        }
        self.base.get(pid)
    }

    /// The rows, each once: the base's not written since it was shared, then the overlay's.
    fn rows(&self) -> impl Iterator<Item = (&u64, &CursorRow)> {
        let over = self.over.as_deref();
        self.base
            .iter()
            .filter(move |(p, _)| over.is_none_or(|o| !o.contains_key(p)))
            .chain(over.into_iter().flat_map(|o| o.iter()))
            .map(|(p, r)| (p, &**r))
    }

    /// The table a write of `pid`'s row goes to: the base if the engine owns it (the overlay
    /// folded in first), else the overlay (copied first if a checkpoint shares it too), else,
    /// with the overlay full and `pid` not in it, a copy of the base with the overlay folded in
    /// (a row already in the overlay is written there: review s30 L1).
    fn writable(&mut self, pid: u64) -> &mut Rows {
        let owned = Arc::get_mut(&mut self.base).is_some();
        let full = self
            .over
            .as_ref()
            .is_some_and(|o| o.len() >= OVER_MAX && !o.contains_key(&pid));
        if owned || full {
            let over = self.over.take();
            let base = writable(&mut self.base);
            if let Some(over) = over {
                match Arc::try_unwrap(over) {
                    Ok(rows) => base.extend(rows),
                    Err(shared) => base.extend(shared.iter().map(|(p, r)| (*p, r.clone()))),
                }
            }
            return base;
        }
        writable(self.over.get_or_insert_with(Default::default))
    }

    /// Folds the overlay into the base in place if the engine owns the base again; false if a
    /// checkpoint still shares it. The stale rows the overlay shadowed are freed here.
    fn fold_if_owned(&mut self) -> bool {
        let Some(base) = Arc::get_mut(&mut self.base) else {
            return self.over.is_none();
        };
        if let Some(over) = self.over.take() {
            match Arc::try_unwrap(over) {
                Ok(rows) => base.extend(rows),
                Err(shared) => base.extend(shared.iter().map(|(p, r)| (*p, r.clone()))),
            }
        }
        true
    }

    fn held_bytes(&self) -> usize {
        shard_bytes(&self.base).saturating_add(self.over.as_deref().map_or(0, overlay_bytes))
    }

    /// What the shard adds to its map's running sums.
    fn charge(&self) -> Charge {
        Charge {
            held: self.held_bytes(),
            largest: largest_overlay_bytes(self.base.len(), OVER_MAX),
        }
    }
}

/// Up to `SHELF` shards by key, in key order; shared with the checkpoints that took it.
#[derive(Clone, Default)]
struct Shelf {
    shards: Vec<(u64, Shard)>,
}

impl Shelf {
    fn get(&self, key: u64) -> Option<&Shard> {
        let i = self.shards.binary_search_by_key(&key, |(k, _)| *k).ok()?;
        self.shards.get(i).map(|(_, s)| s)
    }

    fn get_mut(&mut self, key: u64) -> Option<&mut Shard> {
        let i = self.shards.binary_search_by_key(&key, |(k, _)| *k).ok()?;
        self.shards.get_mut(i).map(|(_, s)| s)
    }

    /// The shard `key`, made empty if new (and then true).
    fn entry(&mut self, key: u64) -> (&mut Shard, bool) {
        match self.shards.binary_search_by_key(&key, |(k, _)| *k) {
            Ok(i) => (&mut self.shards[i].1, false),
            Err(i) => {
                self.shards.insert(i, (key, Shard::default()));
                (&mut self.shards[i].1, true)
            }
        }
    }

    fn shards(&self) -> impl Iterator<Item = &Shard> {
        self.shards.iter().map(|(_, s)| s)
    }

    /// Its `Arc` and counts, `Vec` and B-tree entry (about 104 B) and its list by capacity.
    fn bytes(&self) -> usize {
        self.shards
            .capacity()
            .saturating_mul(std::mem::size_of::<(u64, Shard)>())
            .saturating_add(104)
    }
}

/// A shard's share of its map's running sums: what it holds, and the largest overlay a
/// checkpoint taking it may make the engine build (`largest_overlay_bytes`).
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
struct Charge {
    held: usize,
    largest: usize,
}

impl Charge {
    /// The sums with `was` taken out and `now` put in.
    fn swap(&mut self, was: Charge, now: Charge) {
        self.held = self.held.saturating_sub(was.held).saturating_add(now.held);
        self.largest = self
            .largest
            .saturating_sub(was.largest)
            .saturating_add(now.largest);
    }
}

#[derive(Default)]
pub struct CursorMap {
    shelves: BTreeMap<u64, Arc<Shelf>>,
    len: usize,
    /// The sums of every shard's `Charge` and of the shelves' bytes (in `held`), kept as each
    /// write changes them.
    charged: Charge,
    /// The keys of the shards that got an overlay, for `fold_owned`: a shard no one writes
    /// again would otherwise keep its overlay and the stale base rows it shadows (about 7 KB a
    /// full shard, 260 B a one-row shard) for good (review s30 M1). At most one a shard.
    overlaid: FoldRing<u64>,
}

/// A group's cursors at one moment, detached from the group (shared shards).
pub struct CursorsSnapshot {
    shelves: Vec<Arc<Shelf>>,
    len: usize,
    held_bytes: usize,
}

impl CursorsSnapshot {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = (&u64, &CursorRow)> {
        self.shelves
            .iter()
            .flat_map(|s| s.shards())
            .flat_map(Shard::rows)
    }

    /// What the shared shards held when taken, by capacity, and an overlay each at its
    /// largest for the shard's rows: the most the engine's copies of them can hold (a copy
    /// keeps the original's buckets, and each row written is copied once).
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }
}

impl CursorMap {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, pid: &u64) -> Option<&CursorRow> {
        self.shard(pid / SHARD)?.get(pid).map(|r| &**r)
    }

    fn shard(&self, key: u64) -> Option<&Shard> {
        self.shelves.get(&(key / SHELF))?.get(key)
    }

    pub fn contains_key(&self, pid: &u64) -> bool {
        self.get(pid).is_some()
    }

    /// The row to write in place; only a row that exists pays a copy (of itself, into the
    /// overlay or as the `Arc` a checkpoint still holds).
    pub fn get_mut(&mut self, pid: &u64) -> Option<&mut CursorRow> {
        let now = *self.get(pid)?;
        let key = pid / SHARD;
        let shard = writable_shelf(self.shelves.get_mut(&(key / SHELF))?, &mut self.charged)
            .get_mut(key)?;
        let was = shard.charge();
        if Arc::strong_count(&shard.base) > 1 {
            self.overlaid.insert(key);
        }
        shard.writable(*pid).entry(*pid).or_insert_with(|| {
            let started = cow_clock::start();
            let copy = Arc::new(now);
            cow_clock::record(cow_clock::Block::CursorRows, started);
            copy
        });
        self.charged.swap(was, shard.charge());
        // The same table again: the first call left it the engine's with the row in it.
        Some(writable_row(shard.writable(*pid).get_mut(pid)?))
    }

    /// Stores `row`, returning the row it replaced. A row a checkpoint still shares is
    /// replaced by a new `Arc`, not copied first (nothing of it is kept).
    pub fn insert(&mut self, pid: u64, row: CursorRow) -> Option<CursorRow> {
        let key = pid / SHARD;
        let fresh = !self.shelves.contains_key(&(key / SHELF));
        let shelf = writable_shelf(
            self.shelves.entry(key / SHELF).or_default(),
            &mut self.charged,
        );
        let shelf_was = if fresh { 0 } else { shelf.bytes() };
        let (shard, new) = shelf.entry(key);
        let was = if new {
            Charge {
                held: shelf_was,
                largest: 0,
            }
        } else {
            shard.charge()
        };
        if Arc::strong_count(&shard.base) > 1 {
            self.overlaid.insert(key);
        }
        let old = shard.get(&pid).map(|r| **r);
        let rows = shard.writable(pid);
        match rows.get_mut(&pid) {
            Some(held) => match Arc::get_mut(held) {
                Some(mine) => *mine = row,
                None => {
                    let started = cow_clock::start();
                    *held = Arc::new(row);
                    cow_clock::record(cow_clock::Block::CursorRows, started);
                }
            },
            None if old.is_some() => {
                // Written over a row the shared base holds: the first write of it.
                let started = cow_clock::start();
                rows.insert(pid, Arc::new(row));
                cow_clock::record(cow_clock::Block::CursorRows, started);
            }
            None => {
                rows.insert(pid, Arc::new(row));
            }
        }
        let mut now = shard.charge();
        if new {
            now.held = now.held.saturating_add(shelf.bytes());
        }
        self.charged.swap(was, now);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    pub fn iter(&self) -> impl Iterator<Item = (&u64, &CursorRow)> {
        self.shelves
            .values()
            .flat_map(|s| s.shards())
            .flat_map(Shard::rows)
    }

    pub fn values(&self) -> impl Iterator<Item = &CursorRow> {
        self.iter().map(|(_, r)| r)
    }

    /// What the cursors hold in memory: each shard's tables by capacity, its `Arc` and its
    /// entry, each shelf's, and each cursor's `Arc`; in O(1), from the running sum.
    pub fn held_bytes(&self) -> usize {
        self.charged.held.saturating_add(self.overlaid.bytes())
    }

    /// The running sums recomputed from every shard: what they must equal.
    #[cfg(test)]
    fn charged_by_walk(&self) -> Charge {
        let mut sum = Charge::default();
        for shelf in self.shelves.values() {
            sum.swap(
                Charge::default(),
                Charge {
                    held: shelf.bytes(),
                    largest: 0,
                },
            );
            for shard in shelf.shards() {
                sum.swap(Charge::default(), shard.charge());
            }
        }
        sum
    }

    /// Whether some shard may still hold an overlay to fold.
    pub fn has_overlays(&self) -> bool {
        !self.overlaid.is_empty()
    }

    /// Folds the overlays of up to `max` shards into their bases where the engine owns the
    /// base again (no checkpoint holds it), in place; a shard still shared stays listed for a
    /// later call. Returns the shards looked at, so a caller can bound its work per cycle.
    /// Each call starts where the last stopped and wraps, as `PartitionTable::fold_owned`
    /// (review s31 ckpt M1).
    pub fn fold_owned(&mut self, max: usize) -> usize {
        let (shelves, charged) = (&mut self.shelves, &mut self.charged);
        self.overlaid.fold(max, |key| {
            let Some(shelf) = shelves.get_mut(&(key / SHELF)) else {
                return true;
            };
            // A shelf a checkpoint holds holds its shards' bases too: not folded yet, and
            // not copied for it.
            let Some(shard) = Arc::get_mut(shelf).and_then(|s| s.get_mut(key)) else {
                return Arc::strong_count(shelf) == 1;
            };
            let was = shard.charge();
            let folded = shard.fold_if_owned();
            charged.swap(was, shard.charge());
            folded
        })
    }

    /// The cursors as they are now, in O(shelves): a later write copies its shelf's handles
    /// once, then goes to its shard's overlay (its row copied), or copies the shard's handles
    /// once that overlay is full.
    pub fn snapshot(&self) -> CursorsSnapshot {
        CursorsSnapshot {
            shelves: self.shelves.values().cloned().collect(),
            len: self.len,
            held_bytes: self.held_bytes().saturating_add(self.charged.largest),
        }
    }
}

/// The shelf, its handles copied first (and the copy timed) if a checkpoint shares it: its
/// shards are then shared by both, so a write to one goes to its overlay. The copy's list
/// is as long as the original's, not as roomy: `charged` follows it.
fn writable_shelf<'a>(shelf: &'a mut Arc<Shelf>, charged: &mut Charge) -> &'a mut Shelf {
    if Arc::get_mut(shelf).is_none() {
        let was = shelf.bytes();
        let started = cow_clock::start();
        let copy = Arc::make_mut(shelf);
        cow_clock::record(cow_clock::Block::CursorShelves, started);
        let held = |held| Charge { held, largest: 0 };
        charged.swap(held(was), held(copy.bytes()));
        return copy;
    }
    Arc::make_mut(shelf)
}

impl std::ops::Index<&u64> for CursorMap {
    type Output = CursorRow;

    /// Panics on a partition without a cursor, as a map's index does (tests).
    fn index(&self, pid: &u64) -> &CursorRow {
        match self.get(pid) {
            Some(row) => row,
            None => panic!("no cursor for partition {pid}"),
        }
    }
}

/// A cursor's own allocation: its row and the `Arc`'s two counts.
const ROW_ARC: usize = std::mem::size_of::<CursorRow>() + 16;
/// A bucket: a key and handle and a control byte.
const BUCKET: usize = std::mem::size_of::<(u64, Arc<CursorRow>)>() + 1;

/// A table of `cap` rows by capacity (hashbrown: `capacity + 1` buckets below 8, else 8/7 of
/// it, rounded up to a power of two; a bucket each plus a 16-byte group of control bytes).
fn table_bytes(cap: usize) -> usize {
    let buckets = match cap {
        0 => 0,
        1..=7 => cap + 1,
        _ => cap.saturating_mul(8).div_ceil(7).next_power_of_two(),
    };
    match buckets {
        0 => 0,
        b => b.saturating_mul(BUCKET).saturating_add(16),
    }
}

/// A shard's table by capacity, what holds it (the `Arc`'s counts and the `HashMap`, 64 B,
/// and about 64 B of B-tree node per entry) and each row's `Arc`.
fn shard_bytes(s: &Rows) -> usize {
    table_bytes(s.capacity())
        .saturating_add(128)
        .saturating_add(s.len().saturating_mul(ROW_ARC))
}

/// An overlay's table and `Arc` (64 B) and its rows' `Arc`s.
fn overlay_bytes(o: &Rows) -> usize {
    overlay_table_bytes(o.capacity()).saturating_add(o.len().saturating_mul(ROW_ARC))
}

/// The largest overlay a shard of `rows` rows gets while a checkpoint holds it: a row each
/// it holds, up to `over_max`, in the table hashbrown gives that many rows. Not every shard at
/// `over_max`: a million one-row shards were charged 1.2 GB for at most 150 MB (review s30
/// L3). A new partition's row in the overlay of a shard with fewer rows than `over_max` is
/// beyond it, as its own `Arc` is beyond the copy charge (new rows are the state's growth).
fn largest_overlay_bytes(rows: usize, over_max: usize) -> usize {
    let n = rows.clamp(1, over_max.max(1));
    let cap = match n {
        0..=3 => 3,
        4..=7 => 7,
        _ => n.saturating_mul(8).div_ceil(7).next_power_of_two() / 8 * 7,
    };
    overlay_table_bytes(cap)
}

fn overlay_table_bytes(cap: usize) -> usize {
    table_bytes(cap).saturating_add(64)
}

/// The table, copied first (and the copy timed) if a checkpoint shares it.
fn writable(rows: &mut Arc<Rows>) -> &mut Rows {
    if Arc::get_mut(rows).is_none() {
        let started = cow_clock::start();
        let copy = Arc::make_mut(rows);
        cow_clock::record(cow_clock::Block::Cursors, started);
        return copy;
    }
    Arc::make_mut(rows)
}

/// The row, copied first (and timed) if a checkpoint's shard still holds it.
fn writable_row(row: &mut Arc<CursorRow>) -> &mut CursorRow {
    if Arc::get_mut(row).is_none() {
        let started = cow_clock::start();
        let copy = Arc::make_mut(row);
        cow_clock::record(cow_clock::Block::CursorRows, started);
        return copy;
    }
    Arc::make_mut(row)
}

#[cfg(test)]
mod tests {
    use super::super::model::LeaseRow;
    use super::*;
    use proptest::prelude::*;

    fn row(committed: u64) -> CursorRow {
        CursorRow {
            committed,
            ..CursorRow::default()
        }
    }

    #[test]
    fn a_full_shard_fills_its_table() {
        let mut shard = Rows::default();
        for pid in 0..FULL_SHARD {
            shard.insert(pid, Arc::new(row(pid)));
        }
        assert_eq!(
            shard.capacity(),
            FULL_SHARD as usize,
            "no free capacity left"
        );
        shard.insert(FULL_SHARD, Arc::new(row(0)));
        assert!(
            shard.capacity() > FULL_SHARD as usize,
            "one more row grows the table"
        );
    }

    /// Pins a cursor's share of a full shard (docs/memory.md): a 17 B bucket at load 7/8 and
    /// its `Arc`, a 96 B row with the count's 16 B, which is exactly mimalloc's 112 B bin; the
    /// table (about 4.3 KB) and the shard's 128 B spread over 224 rows. Any growth of
    /// `CursorRow` lands in the next bin and must fail here, not only in an RSS run.
    #[test]
    fn a_full_shard_costs_132_bytes_a_cursor() {
        assert_eq!(std::mem::size_of::<CursorRow>(), 96, "the row");
        assert_eq!(ROW_ARC, 112, "the Arc fits mimalloc's 112 B bin");
        let mut shard = Rows::default();
        for pid in 0..FULL_SHARD {
            shard.insert(pid, Arc::new(row(pid)));
        }
        let bytes = shard_bytes(&shard);
        assert_eq!(
            bytes,
            256 * 17 + 16 + 128 + 224 * 112,
            "256 buckets of 17 B, the control group, the shard's share and 224 rows"
        );
        assert_eq!(bytes / FULL_SHARD as usize, 132, "bytes a cursor");
    }

    #[test]
    fn insert_get_and_count_across_shards() {
        let mut m = CursorMap::default();
        for pid in [1, 2, SHARD + 1, 1 << 30, u64::MAX] {
            assert!(m.insert(pid, row(pid)).is_none());
        }
        assert_eq!(
            m.insert(2, row(7)),
            Some(row(2)),
            "replacing keeps the count"
        );
        assert_eq!(m.len(), 5);
        assert_eq!(m[&(SHARD + 1)].committed, SHARD + 1);
        assert_eq!(m[&u64::MAX].committed, u64::MAX, "the last shard");
        assert!(m.get(&3).is_none() && m.get_mut(&3).is_none());
        m.get_mut(&1).unwrap().committed = 9;
        let mut all: Vec<(u64, u64)> = m.iter().map(|(p, r)| (*p, r.committed)).collect();
        all.sort_unstable();
        assert_eq!(
            all,
            vec![
                (1, 9),
                (2, 7),
                (SHARD + 1, SHARD + 1),
                (1 << 30, 1 << 30),
                (u64::MAX, u64::MAX)
            ]
        );
        assert!(m.held_bytes() >= 5 * ROW_ARC);
    }

    fn copies() -> (u64, u64) {
        let c = cow_clock::take();
        (
            c.by_block[cow_clock::Block::Cursors as usize].0,
            c.by_block[cow_clock::Block::CursorRows as usize].0,
        )
    }

    /// Session 30: a write to a shard a checkpoint shares goes to the shard's overlay and
    /// copies no handles, only its row, until the overlay holds `OVER_MAX` rows; then one copy
    /// of the base takes the overlay in. Once no checkpoint holds the base, the next write
    /// folds the overlay in without copying.
    #[test]
    fn a_write_to_a_shared_shard_goes_to_its_overlay_until_it_is_full() {
        let mut m = CursorMap::default();
        for pid in [0, 1, 2, 3, SHARD + 1] {
            m.insert(pid, row(0));
        }
        let snap = m.snapshot();
        let _ = cow_clock::take();
        m.get_mut(&1).unwrap().committed = 5;
        assert_eq!(
            copies(),
            (0, 1),
            "no handles copied: the row into the overlay"
        );
        m.get_mut(&1).unwrap().committed = 6;
        assert_eq!(copies(), (0, 0), "the overlay's row is the engine's");
        assert_eq!(m.insert(2, row(2)), Some(row(0)));
        assert_eq!(
            copies(),
            (0, 1),
            "a shared row written over: a new row in the overlay"
        );
        assert_eq!(m[&2].committed, 2, "the overlay's row is read first");
        let shard = |m: &CursorMap, s: u64| m.shard(s).unwrap().clone();
        assert!(
            Arc::ptr_eq(&shard(&m, 0).base, &snap.shelves[0].shards[0].1.base),
            "the base is still the checkpoint's"
        );
        assert_eq!(shard(&m, 0).over.as_ref().map(|o| o.len()), Some(OVER_MAX));
        assert_eq!(m.insert(3, row(3)), Some(row(0)));
        assert_eq!(
            copies(),
            (1, 1),
            "the overlay was full: one copy of the base's handles, then the shared row replaced"
        );
        assert!(shard(&m, 0).over.is_none(), "folded into the copy");
        assert!(
            Arc::ptr_eq(
                &shard(&m, 0).base[&0],
                &snap.shelves[0].shards[0].1.base[&0]
            ),
            "the copied base's unwritten row is shared, not copied"
        );
        m.insert(SHARD + 2, row(9));
        assert_eq!(copies(), (0, 0), "a new row in an overlay copies nothing");
        assert_eq!(m.len(), 6);
        let mut held: Vec<(u64, u64)> = snap.iter().map(|(p, r)| (*p, r.committed)).collect();
        held.sort_unstable();
        assert_eq!(held, vec![(0, 0), (1, 0), (2, 0), (3, 0), (SHARD + 1, 0)]);
        assert_eq!(snap.len(), 5);
        assert!(
            snap.held_bytes() >= 5 * ROW_ARC + 2 * 4 * 17,
            "five rows and two shards of at least 4 buckets each, by capacity: {}",
            snap.held_bytes()
        );
        drop(snap);
        assert!(shard(&m, 1).over.is_some());
        m.get_mut(&(SHARD + 1)).unwrap().committed = 2;
        assert_eq!(copies(), (0, 0), "no copy once no checkpoint holds it");
        assert!(
            m.shard(1).unwrap().over.is_none(),
            "the overlay folded in place"
        );
        assert_eq!(m[&(SHARD + 1)].committed, 2);
        assert_eq!(m[&(SHARD + 2)].committed, 9);
        let mut all: Vec<(u64, u64)> = m.iter().map(|(p, r)| (*p, r.committed)).collect();
        all.sort_unstable();
        assert_eq!(
            all,
            vec![
                (0, 0),
                (1, 6),
                (2, 2),
                (3, 3),
                (SHARD + 1, 2),
                (SHARD + 2, 9)
            ]
        );
    }

    /// Review s31 ckpt M1: as the engine runs when a save takes the checkpoint interval, one
    /// bounded fold between two snapshots, and the lowest shards written again each round:
    /// the shards past the bound, written once, are still folded within a round of calls.
    #[test]
    fn bounded_folds_between_back_to_back_snapshots_reach_every_shard() {
        const SHARDS: u64 = 12;
        const BOUND: usize = 3;
        let mut m = CursorMap::default();
        for pid in 0..SHARDS * SHARD {
            m.insert(pid, row(pid));
        }
        let mut snap = m.snapshot();
        for s in 0..SHARDS {
            m.get_mut(&(s * SHARD)).unwrap().failures = 1;
        }
        let rounds = (SHARDS as usize).div_ceil(BOUND) + 1;
        for round in 0..rounds {
            drop(snap);
            m.fold_owned(BOUND);
            snap = m.snapshot();
            for s in 0..BOUND as u64 {
                m.get_mut(&(s * SHARD)).unwrap().failures = round as u32 + 2;
            }
        }
        let cold: Vec<u64> = (BOUND as u64..SHARDS)
            .filter(|s| m.shard(*s).unwrap().over.is_some())
            .collect();
        assert_eq!(cold, Vec::<u64>::new(), "cold shards left with an overlay");
        drop(snap);
        assert_eq!(m[&(SHARDS * SHARD - SHARD)].failures, 1);
    }

    /// Review s30 M1: once the checkpoint lets go, `fold_owned` folds an overlay nothing writes
    /// again, and the stale rows it shadowed are freed: the map holds what it held before the
    /// snapshot. A shard a snapshot still holds stays listed, and is folded by a later call.
    #[test]
    fn a_fold_after_the_checkpoint_gives_back_the_overlay_and_its_stale_rows() {
        let mut m = CursorMap::default();
        for pid in 0..2 * SHARD {
            m.insert(pid, row(pid));
        }
        let before = m.held_bytes();
        let snap = m.snapshot();
        let _ = cow_clock::take();
        m.get_mut(&1).unwrap().failures = 3;
        m.insert(2, row(20));
        m.get_mut(&(SHARD + 1)).unwrap().failures = 4;
        assert!(m.held_bytes() > before, "two overlays and four rows more");
        assert_eq!(m.fold_owned(8), 2, "both shards looked at");
        assert!(
            m.has_overlays(),
            "the snapshot still holds both: nothing folded"
        );
        drop(snap);
        assert_eq!(m.fold_owned(1), 1, "bounded: one shard a call");
        assert!(m.has_overlays());
        assert_eq!(m.fold_owned(8), 1);
        assert!(!m.has_overlays());
        assert!(
            m.shelves
                .values()
                .flat_map(|s| s.shards())
                .all(|s| s.over.is_none()),
            "all folded"
        );
        // Back to what it held before the snapshot, but the copied shelf's list: as long as
        // the original, not as roomy.
        let slack = 4 * std::mem::size_of::<(u64, Shard)>();
        assert!(
            m.held_bytes() <= before && before - m.held_bytes() <= slack,
            "{} against {before}",
            m.held_bytes()
        );
        assert_eq!(m[&1].failures, 3);
        assert_eq!(m[&2], row(20));
        assert_eq!(m[&(SHARD + 1)].failures, 4);
        assert_eq!(m.len(), 2 * SHARD as usize);
        assert_eq!(copies(), (0, 3), "three rows copied, no shard");
    }

    /// Review s30 L1: a full overlay takes a write to a row it already holds (a pop, then its
    /// ack) without copying the base; only a row it does not hold copies it.
    #[test]
    fn a_full_overlay_takes_a_row_it_holds_without_a_copy() {
        let mut m = CursorMap::default();
        for pid in 0..SHARD {
            m.insert(pid, row(pid));
        }
        let snap = m.snapshot();
        let _ = cow_clock::take();
        for pid in 0..OVER_MAX as u64 {
            m.get_mut(&pid).unwrap().attempt = 1;
        }
        assert_eq!(copies(), (0, OVER_MAX as u64), "the overlay is full");
        m.get_mut(&0).unwrap().attempt = 2;
        m.insert(1, row(7));
        assert_eq!(copies(), (0, 0), "rows it holds: no copy of the base");
        assert!(Arc::ptr_eq(
            &m.shard(0).unwrap().base,
            &snap.shelves[0].shards[0].1.base
        ));
        m.get_mut(&(OVER_MAX as u64)).unwrap().attempt = 3;
        assert_eq!(copies(), (1, 1), "a row it does not hold: the base copied");
        assert_eq!(
            (m[&0].attempt, m[&1], m[&(OVER_MAX as u64)].attempt),
            (2, row(7), 3)
        );
        assert!(
            snap.iter().all(|(p, r)| *r == row(*p)),
            "the snapshot kept its moment"
        );
    }

    /// Review s30 L3: the snapshot charges each shard the overlay its rows can fill, as
    /// hashbrown would size it, not every shard a full one.
    #[test]
    fn the_snapshot_charges_an_overlay_by_the_shards_rows() {
        let prod = (FULL_SHARD / 4) as usize;
        assert_eq!(
            largest_overlay_bytes(1, prod),
            4 * 17 + 16 + 64,
            "4 buckets"
        );
        assert_eq!(
            largest_overlay_bytes(prod, prod),
            64 * 17 + 16 + 64,
            "64 buckets"
        );
        assert_eq!(
            largest_overlay_bytes(224, prod),
            64 * 17 + 16 + 64,
            "capped"
        );
        assert_eq!(
            largest_overlay_bytes(8, prod),
            16 * 17 + 16 + 64,
            "16 buckets"
        );
        let mut grown = Rows::default();
        for pid in 0..prod as u64 {
            grown.insert(pid, Arc::new(row(pid)));
            let bytes = overlay_table_bytes(grown.capacity());
            assert_eq!(largest_overlay_bytes(grown.len(), prod), bytes, "{pid}");
        }
        let mut m = CursorMap::default();
        for shard in 0..1000 {
            m.insert(shard * SHARD, row(shard));
        }
        let one = largest_overlay_bytes(1, OVER_MAX);
        assert_eq!(m.snapshot().held_bytes(), m.held_bytes() + 1000 * one);
    }

    /// Session 34: a snapshot takes one handle per shelf, and the first write to a shelf it
    /// holds copies the shelf's handles once (a `cursor_shelves` block), whichever of its
    /// shards the write is for; a shelf no snapshot holds is not copied.
    #[test]
    fn a_snapshot_takes_shelves_and_a_first_write_copies_its_shelf_once() {
        let mut m = CursorMap::default();
        for pid in 0..4 * SHELF * SHARD {
            m.insert(pid, row(pid));
        }
        let snap = m.snapshot();
        assert_eq!(snap.shelves.len(), 4, "one handle per shelf");
        let _ = cow_clock::take();
        let shelves = || cow_clock::take().by_block[cow_clock::Block::CursorShelves as usize].0;
        m.get_mut(&0).unwrap().attempt = 1;
        assert_eq!(shelves(), 1, "the first write copies its shelf");
        m.get_mut(&SHARD).unwrap().attempt = 1;
        m.insert(1, row(9));
        assert_eq!(shelves(), 0, "the shelf is the engine's now");
        assert!(
            Arc::ptr_eq(&m.shard(1).unwrap().base, &snap.shelves[0].shards[1].1.base),
            "the copied shelf shares its shards' bases: the write went to an overlay"
        );
        drop(snap);
        m.get_mut(&(SHELF * SHARD)).unwrap().attempt = 1;
        assert_eq!(shelves(), 0, "no snapshot holds the next shelf");
        assert_eq!((m[&0].attempt, m[&1], m[&SHARD].attempt), (1, row(9), 1));
        assert_eq!(m.charged, m.charged_by_walk());
    }

    /// One step of [`the_map_and_its_snapshots_match_a_b_tree`].
    #[derive(Clone, Debug)]
    enum Op {
        Insert(u64, u64),
        /// One field of an existing row changed, the rest must come along (review s30 M2).
        Write(u64),
        Snapshot,
        /// Drops the live snapshot at this index (modulo their number), so several overlap.
        DropSnapshot(usize),
        /// The engine's fold after a checkpoint, bounded to a few shards.
        Fold,
    }

    fn op() -> impl Strategy<Value = Op> {
        let pid = prop_oneof![0..20u64, (u64::MAX - 5)..=u64::MAX];
        prop_oneof![
            4 => (pid.clone(), 0..1000u64).prop_map(|(p, v)| Op::Insert(p, v)),
            3 => pid.prop_map(Op::Write),
            1 => Just(Op::Snapshot),
            1 => (0..8usize).prop_map(Op::DropSnapshot),
            1 => Just(Op::Fold),
        ]
    }

    /// A row with every field set from `(pid, v)`, so a row copied wrong (a default, or an
    /// older one) differs in some field whichever the write changed.
    fn full_row(pid: u64, v: u64) -> CursorRow {
        CursorRow {
            committed: v,
            lease: (!v.is_multiple_of(3)).then_some(LeaseRow {
                id: u128::from(pid) << 64 | u128::from(v),
                end: v.wrapping_add(5),
                expires_us: v as i64,
                seconds: 30,
            }),
            failures: (v % 11) as u32,
            attempt: (v % 7) as u32,
            delivered_end: v.wrapping_add(pid),
        }
    }

    fn sorted<'a>(it: impl Iterator<Item = (&'a u64, &'a CursorRow)>) -> Vec<(u64, CursorRow)> {
        let mut v: Vec<(u64, CursorRow)> = it.map(|(p, r)| (*p, *r)).collect();
        v.sort_unstable_by_key(|(p, _)| *p);
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Inserts and one-field writes across shards, with several snapshots alive at once,
        /// taken and dropped between them, against a `BTreeMap` of whole rows: each snapshot
        /// keeps its moment whichever rows are written after, and the live map every field.
        /// (No removal exists; add `Op::Remove` when it does: review s30 L5.)
        #[test]
        fn the_map_and_its_snapshots_match_a_b_tree(ops in prop::collection::vec(op(), 1..80)) {
            let mut m = CursorMap::default();
            let mut model: BTreeMap<u64, CursorRow> = BTreeMap::new();
            let mut held: Vec<(CursorsSnapshot, Vec<(u64, CursorRow)>)> = Vec::new();
            for op in ops {
                match op {
                    Op::Insert(pid, v) => {
                        let had = model.insert(pid, full_row(pid, v));
                        prop_assert_eq!(m.insert(pid, full_row(pid, v)), had);
                    }
                    Op::Write(pid) => {
                        if let Some(c) = model.get_mut(&pid) {
                            c.failures = c.failures.wrapping_add(1);
                        }
                        let r = m.get_mut(&pid);
                        prop_assert_eq!(r.is_some(), model.contains_key(&pid));
                        if let Some(r) = r {
                            r.failures = r.failures.wrapping_add(1);
                        }
                    }
                    Op::Snapshot => {
                        let at: Vec<(u64, CursorRow)> = model.iter().map(|(k, v)| (*k, *v)).collect();
                        held.push((m.snapshot(), at));
                    }
                    Op::DropSnapshot(i) => {
                        if !held.is_empty() {
                            let n = held.len();
                            held.remove(i % n);
                        }
                    }
                    Op::Fold => {
                        m.fold_owned(3);
                    }
                }
                let want: Vec<(u64, CursorRow)> = model.iter().map(|(k, v)| (*k, *v)).collect();
                prop_assert_eq!(sorted(m.iter()), want);
                prop_assert_eq!(m.len(), model.len());
                prop_assert_eq!(m.charged, m.charged_by_walk(), "the running sums");
                for (snap, at) in &held {
                    prop_assert_eq!(&sorted(snap.iter()), at);
                    prop_assert_eq!(snap.len(), at.len());
                }
            }
        }
    }
}
