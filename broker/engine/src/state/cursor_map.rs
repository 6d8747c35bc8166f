//! A group's cursors by partition id, in shards of 224 consecutive ids.
//!
//! Why shards: a checkpoint takes the cursors by cloning one handle per shard under the state
//! lock and encodes them after releasing it (a queue-mode group touching a million partitions
//! holds a million cursors; encoding them under the lock was most of the checkpoint's pause).
//! The engine copies a shard only at its first write while a checkpoint still holds it: at
//! most 224 rows (256 buckets of 113 B, about 29 KB, one copy of plain bytes), timed by
//! [`super::cow_clock`].
//!
//! Why 224: hashbrown fills a table to 7/8 of its buckets (a power of two), so a full shard
//! of 224 rows sits in 256 buckets at load 7/8 (129 B a row); a shard of 256 rows would sit
//! in 512 buckets at load 1/2. Session 26 had 1792 rows (2048 buckets, a 230 KB copy); 224
//! makes the copy eight times smaller for 128 B of `Arc`, map and B-tree share per shard
//! (0.6 B a cursor), 4 465 shards for a million cursors.
//!
//! The sparse case: partition ids are global (shared by all queues), so a group whose queue
//! created its partitions while k - 1 other queues created theirs holds about 224/k rows a
//! shard: about 230 B a cursor at k = 64, 340 B at k = 128, and from k = 224 one row in a
//! 4-bucket table with its `Arc`, map and B-tree share, about 596 B (docs/memory.md has the
//! table). `held_bytes` counts it (by capacity, per shard); keying shards by the partition's
//! index in its queue would remove it (not done).
//!
//! Shards are keyed by `pid / SHARD` in a B-tree, so the shards of a group touching a few
//! partitions of a wide id space cost what they hold, and iteration is in shard order (the
//! rows inside a shard in hash order, as the single map before them).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::cow_clock;
use super::model::CursorRow;

/// Rows a full shard holds: 7/8 of 256 buckets (see `a_full_shard_fills_its_table`).
const FULL_SHARD: u64 = 224;
#[cfg(not(test))]
const SHARD: u64 = FULL_SHARD;
/// Small under test, so the property tests' few partitions cross shards (review s26 ckpt M5).
#[cfg(test)]
const SHARD: u64 = 4;

type Shard = HashMap<u64, CursorRow>;

#[derive(Default)]
pub struct CursorMap {
    shards: BTreeMap<u64, Arc<Shard>>,
    len: usize,
}

/// A group's cursors at one moment, detached from the group (shared shards).
pub struct CursorsSnapshot {
    shards: Vec<Arc<Shard>>,
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
        self.shards.iter().flat_map(|s| s.iter())
    }

    /// What the shared shards held when taken, by capacity: the most the engine's copies of
    /// them can hold (a copy keeps the original's buckets).
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
        self.shards.get(&(pid / SHARD))?.get(pid)
    }

    pub fn contains_key(&self, pid: &u64) -> bool {
        self.get(pid).is_some()
    }

    /// Copies the row's shard first if a checkpoint still holds it, so only a row that exists
    /// pays that copy.
    pub fn get_mut(&mut self, pid: &u64) -> Option<&mut CursorRow> {
        self.get(pid)?;
        writable(self.shards.get_mut(&(pid / SHARD))?).get_mut(pid)
    }

    pub fn insert(&mut self, pid: u64, row: CursorRow) -> Option<CursorRow> {
        let shard = self.shards.entry(pid / SHARD).or_default();
        let old = writable(shard).insert(pid, row);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    pub fn iter(&self) -> impl Iterator<Item = (&u64, &CursorRow)> {
        self.shards.values().flat_map(|s| s.iter())
    }

    pub fn values(&self) -> impl Iterator<Item = &CursorRow> {
        self.shards.values().flat_map(|s| s.values())
    }

    /// What the cursors hold in memory: each shard's table by capacity, its `Arc` and its
    /// B-tree entry.
    pub fn held_bytes(&self) -> usize {
        self.shards
            .values()
            .map(|s| shard_bytes(s))
            .fold(0usize, usize::saturating_add)
    }

    /// The cursors as they are now, in O(shards): later writes copy the shards they touch.
    pub fn snapshot(&self) -> CursorsSnapshot {
        CursorsSnapshot {
            shards: self.shards.values().cloned().collect(),
            len: self.len,
            held_bytes: self.held_bytes(),
        }
    }
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

/// A shard's table by capacity (hashbrown: `capacity + 1` buckets below 8, else 8/7 of it; a
/// row and a control byte per bucket plus a 16-byte group of control bytes) and what holds it
/// (the `Arc`'s counts and the `HashMap`, 64 B, and about 64 B of B-tree node per entry).
fn shard_bytes(s: &Shard) -> usize {
    const ROW: usize = std::mem::size_of::<(u64, CursorRow)>() + 1;
    let cap = s.capacity();
    let buckets = match cap {
        0 => 0,
        1..=7 => cap + 1,
        _ => cap.saturating_mul(8) / 7,
    };
    let table = match buckets {
        0 => 0,
        b => b.saturating_mul(ROW).saturating_add(16),
    };
    table.saturating_add(128)
}

/// The shard, copied first (and the copy timed) if a checkpoint shares it.
fn writable(shard: &mut Arc<Shard>) -> &mut Shard {
    if Arc::get_mut(shard).is_none() {
        let started = cow_clock::start();
        let copy = Arc::make_mut(shard);
        cow_clock::record(cow_clock::Block::Cursors, started);
        return copy;
    }
    Arc::make_mut(shard)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(committed: u64) -> CursorRow {
        CursorRow {
            committed,
            ..CursorRow::default()
        }
    }

    #[test]
    fn a_full_shard_fills_its_table() {
        let mut shard = Shard::default();
        for pid in 0..FULL_SHARD {
            shard.insert(pid, row(pid));
        }
        assert_eq!(
            shard.capacity(),
            FULL_SHARD as usize,
            "no free capacity left"
        );
        shard.insert(FULL_SHARD, row(0));
        assert!(
            shard.capacity() > FULL_SHARD as usize,
            "one more row grows the table"
        );
    }

    #[test]
    fn insert_get_and_count_across_shards() {
        let mut m = CursorMap::default();
        for pid in [1, 2, SHARD + 1, 1 << 30] {
            assert!(m.insert(pid, row(pid)).is_none());
        }
        assert_eq!(
            m.insert(2, row(7)),
            Some(row(2)),
            "replacing keeps the count"
        );
        assert_eq!(m.len(), 4);
        assert_eq!(m[&(SHARD + 1)].committed, SHARD + 1);
        assert!(m.get(&3).is_none() && m.get_mut(&3).is_none());
        m.get_mut(&1).unwrap().committed = 9;
        let mut all: Vec<(u64, u64)> = m.iter().map(|(p, r)| (*p, r.committed)).collect();
        all.sort_unstable();
        assert_eq!(
            all,
            vec![(1, 9), (2, 7), (SHARD + 1, SHARD + 1), (1 << 30, 1 << 30)]
        );
        assert!(m.held_bytes() >= 4 * std::mem::size_of::<CursorRow>());
    }

    #[test]
    fn a_snapshot_keeps_its_moment_and_writes_copy_only_the_shard_they_touch() {
        let mut m = CursorMap::default();
        for pid in [1, 2, SHARD + 1] {
            m.insert(pid, row(0));
        }
        let snap = m.snapshot();
        let _ = cow_clock::take();
        m.get_mut(&1).unwrap().committed = 5;
        m.insert(3, row(3));
        let copies = cow_clock::take().copies;
        assert_eq!(
            copies, 1,
            "the first write copied the shard, the second did not"
        );
        assert!(
            Arc::ptr_eq(&m.shards[&1], &snap.shards[1]),
            "untouched shard"
        );
        assert!(!Arc::ptr_eq(&m.shards[&0], &snap.shards[0]));
        let mut held: Vec<(u64, u64)> = snap.iter().map(|(p, r)| (*p, r.committed)).collect();
        held.sort_unstable();
        assert_eq!(held, vec![(1, 0), (2, 0), (SHARD + 1, 0)]);
        assert_eq!(snap.len(), 3);
        let row_size = std::mem::size_of::<(u64, CursorRow)>();
        assert!(
            snap.held_bytes() >= 2 * 4 * row_size,
            "two shards of at least 4 buckets each, by capacity: {}",
            snap.held_bytes()
        );
        drop(snap);
        m.insert(SHARD + 2, row(1));
        assert_eq!(
            cow_clock::take().copies,
            0,
            "no copy once no checkpoint holds it"
        );
    }
}
