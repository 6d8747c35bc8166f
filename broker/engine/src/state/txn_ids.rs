//! The transaction ids of recent messages: dedup of pushes and ack resolution look up
//! (partition, xxh3-64 of the id) → offset here. Hash hits are verified against the stored
//! frame by the callers, so a collision never merges two messages.
//!
//! Why one structure for all partitions: a map and a deque per partition cost ~250 bytes of
//! table overhead on every partition, idle ones included (neither shrinks). Here a message
//! costs one index row and one 24-byte FIFO row while it is remembered, and a partition
//! nothing. Rows are forgotten oldest first; the FIFO groups rows by creation time, so the
//! time costs 12 bytes per group commit, not per message.

use std::collections::HashMap;

use super::fifo::{BlockFifo, FifoSnapshot};

/// Index shards: one big table would rehash every row at once when it grows (a stall of
/// ~100 ms at a few million rows); a shard holds 1/256 of them.
const SHARDS: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnRow {
    pub pid: u64,
    pub offset: u64,
    pub hash: u64,
}

/// The FIFO of a `TxnIds` at one moment: time groups and rows, oldest first.
pub struct TxnSnapshot {
    times: FifoSnapshot<(i64, u32)>,
    rows: FifoSnapshot<TxnRow>,
}

impl TxnSnapshot {
    pub fn groups(&self) -> usize {
        self.times.rows()
    }

    pub fn rows(&self) -> usize {
        self.rows.rows()
    }

    /// (created_us, number of rows) per group.
    pub fn time_iter(&self) -> impl Iterator<Item = &(i64, u32)> {
        self.times.iter()
    }

    pub fn row_iter(&self) -> impl Iterator<Item = &TxnRow> {
        self.rows.iter()
    }

    /// The block handles taking it cloned (`fifo.rs`: one per shelf and per loose block).
    pub fn handles(&self) -> usize {
        self.times.handles() + self.rows.handles()
    }
}

pub struct TxnIds {
    index: Box<[HashMap<(u64, u64), u64>]>,
    rows: BlockFifo<TxnRow>,
    /// (created_us, number of rows) for consecutive runs of `rows` with one creation time.
    times: BlockFifo<(i64, u32)>,
    /// Rows ever forgotten from the front: a spill written in the background names the rows
    /// it took by their place in this count, so rows expired meanwhile are not forgotten twice.
    forgotten: u64,
    /// The newest group takes no more rows: a spill in flight took it whole, and rows added
    /// to it later would leave with it unwritten.
    sealed: bool,
}

impl Default for TxnIds {
    fn default() -> Self {
        TxnIds {
            index: (0..SHARDS).map(|_| HashMap::new()).collect(),
            rows: BlockFifo::default(),
            times: BlockFifo::default(),
            forgotten: 0,
            sealed: false,
        }
    }
}

fn shard(hash: u64) -> usize {
    // The hash is xxh3 of the transaction id: its top bits are as uniform as any.
    (hash >> 56) as usize % SHARDS
}

impl TxnIds {
    pub fn get(&self, pid: u64, hash: u64) -> Option<u64> {
        self.index[shard(hash)].get(&(pid, hash)).copied()
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Usable slots of the index tables, summed (the memory accounting sizes them).
    pub fn index_capacity(&self) -> usize {
        self.index.iter().map(|m| m.capacity()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Remembers the messages `base..base + hashes.len()` of `pid`, created at `created_us`
    /// (never earlier than what is already remembered: apply times only grow).
    pub fn record(&mut self, created_us: i64, pid: u64, base: u64, hashes: &[u64]) {
        for (i, h) in hashes.iter().enumerate() {
            let offset = base + i as u64;
            self.index[shard(*h)].insert((pid, *h), offset);
            self.push_row(
                created_us,
                TxnRow {
                    pid,
                    offset,
                    hash: *h,
                },
            );
        }
    }

    fn push_row(&mut self, created_us: i64, row: TxnRow) {
        self.rows.push_back(row);
        match self.times.back_mut() {
            Some((t, n)) if !self.sealed && *t == created_us && *n < u32::MAX => *n += 1,
            _ => {
                self.times.push_back((created_us, 1));
                self.sealed = false;
            }
        }
    }

    /// Rows forgotten from the front since this table was made.
    pub fn forgotten(&self) -> u64 {
        self.forgotten
    }

    /// Rows recorded from now on start a new time group (see `sealed`).
    pub fn seal(&mut self) {
        self.sealed = true;
    }

    /// Forgets every row created before `before_us`.
    pub fn expire(&mut self, before_us: i64) {
        while let Some(&(t, n)) = self.times.front() {
            if t >= before_us {
                break;
            }
            self.times.pop_front();
            for _ in 0..n {
                let Some(r) = self.rows.pop_front() else {
                    break;
                };
                self.forget_row(r);
            }
        }
        self.release_popped();
    }

    /// Frees blocks popped while a checkpoint held their shelf, once it no longer does.
    fn release_popped(&mut self) {
        self.times.release_popped();
        self.rows.release_popped();
    }

    /// How many of the oldest rows to take to take at least `n` in whole time groups (a
    /// group's rows share a FIFO row that may be frozen, so groups are never split).
    pub fn whole_groups_of(&self, n: usize) -> usize {
        let mut m = 0usize;
        for &(_, k) in self.times.iter() {
            if m >= n {
                break;
            }
            m += k as usize;
        }
        m
    }

    /// The oldest `n` rows with their creation times, oldest first (the spill to id files
    /// writes them before `forget_oldest` drops them).
    pub fn oldest(&self, n: usize) -> Vec<(i64, TxnRow)> {
        self.iter().take(n).map(|(t, r)| (t, *r)).collect()
    }

    /// Forgets the oldest time groups until at least `n` rows are gone (`whole_groups_of`
    /// gives the `n` this drops exactly).
    pub fn forget_oldest(&mut self, n: usize) {
        let mut gone = 0usize;
        while gone < n {
            let Some((_, k)) = self.times.pop_front() else {
                break;
            };
            for _ in 0..k {
                let Some(r) = self.rows.pop_front() else {
                    break;
                };
                self.forget_row(r);
            }
            gone += k as usize;
        }
        self.release_popped();
    }

    fn forget_row(&mut self, r: TxnRow) {
        self.forgotten += 1;
        let map = &mut self.index[shard(r.hash)];
        let key = (r.pid, r.hash);
        // Only forget the row if a newer message did not reuse the hash.
        if map.get(&key) == Some(&r.offset) {
            map.remove(&key);
            // A table does not shrink by itself: give memory back after a burst.
            if map.capacity() > 1024 && map.len() < map.capacity() / 4 {
                let keep = map.len() * 2;
                map.shrink_to(keep);
            }
        }
    }

    /// Every remembered row with its creation time, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = (i64, &TxnRow)> {
        self.times
            .iter()
            .flat_map(|&(t, n)| std::iter::repeat_n(t, n as usize))
            .zip(self.rows.iter())
    }

    /// The rows as they are now, for a checkpoint written after the state lock is released.
    pub fn snapshot(&self) -> TxnSnapshot {
        TxnSnapshot {
            times: self.times.snapshot(),
            rows: self.rows.snapshot(),
        }
    }

    /// Rebuilds from rows in time order (as `iter` yields them).
    pub fn from_rows(rows: impl IntoIterator<Item = (i64, TxnRow)>) -> Self {
        let mut ids = TxnIds::default();
        for (t, r) in rows {
            ids.index[shard(r.hash)].insert((r.pid, r.hash), r.offset);
            ids.push_row(t, r);
        }
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_found_until_they_expire_and_a_reused_hash_survives() {
        let mut ids = TxnIds::default();
        ids.record(10, 1, 0, &[7, 8]);
        ids.record(10, 2, 0, &[7]);
        ids.record(20, 1, 2, &[7]);
        assert_eq!(ids.get(1, 7), Some(2), "the newer message owns the hash");
        assert_eq!(ids.get(1, 8), Some(1));
        assert_eq!(ids.get(2, 7), Some(0));
        assert_eq!(ids.times.len(), 2, "rows of one time share a group");
        assert_eq!(ids.len(), 4);
        ids.expire(15);
        assert_eq!(ids.len(), 1);
        assert_eq!(ids.get(1, 8), None);
        assert_eq!(ids.get(2, 7), None);
        assert_eq!(
            ids.get(1, 7),
            Some(2),
            "not forgotten by the older row's expiry"
        );
        ids.expire(21);
        assert!(ids.is_empty());
        assert_eq!(ids.get(1, 7), None);
    }

    #[test]
    fn iter_and_from_rows_round_trip() {
        let mut ids = TxnIds::default();
        ids.record(5, 3, 10, &[1, 2, 3]);
        ids.record(6, 4, 0, &[9]);
        let rows: Vec<(i64, TxnRow)> = ids.iter().map(|(t, r)| (t, *r)).collect();
        assert_eq!(rows.len(), 4);
        let back = TxnIds::from_rows(rows.clone());
        assert_eq!(back.iter().map(|(t, r)| (t, *r)).collect::<Vec<_>>(), rows);
        assert_eq!(back.index, ids.index);
        let snap = ids.snapshot();
        ids.record(7, 4, 1, &[10]);
        assert_eq!(
            snap.time_iter().copied().collect::<Vec<_>>(),
            vec![(5, 3), (6, 1)]
        );
        assert_eq!(snap.groups(), 2);
        assert_eq!(snap.rows(), 4);
        assert_eq!(snap.row_iter().count(), 4);
    }
}
