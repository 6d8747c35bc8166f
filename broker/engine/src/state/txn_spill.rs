//! The transaction ids that left the hot table (issue 12, docs/storage-format.md "The
//! transaction-id index off the heap"): past `dedup_hot_ids` rows, the oldest rows of
//! [`TxnIds`] are written to durable id files (through an [`IdStore`]) and added to the window
//! filters, then forgotten by the table. Push dedup and `GET /messages/{p}/{txn}` then ask the
//! table, then the filters, then the files of the buckets the filters name.
//!
//! Why buckets of entry time and not the filters' generation numbers name the files: the
//! numbers restart at 0 with the process, the time does not, so files written before a restart
//! are found after it, whatever the configuration (review s25 H2).
//!
//! Exactness: the filters only skip files. Every bucket a filter cannot vouch for (a generation
//! dropped for room while inside the window, review s25 H3; filters that could not be
//! allocated) is searched in its files. A damaged file is the store's to report and drop
//! (H4): its ids are no longer found, nothing else is refused.

use std::collections::BTreeMap;

use super::txn_ids::{TxnIds, TxnRow};
use crate::dedup_filter::{FilterConfig, GenerationRing};

/// Width of one id-file bucket: the `generation` number in an id file's name is
/// `entry time / ID_BUCKET_US`. Fixed, so files of any past configuration keep their meaning.
pub const ID_BUCKET_US: i64 = 60 * 1_000_000;
/// The least `dedup_hot_ids`: a table of fewer rows would write a file per push.
pub const MIN_HOT_IDS: usize = 16;

pub fn bucket_of(at_us: i64) -> u64 {
    (at_us.max(0) / ID_BUCKET_US) as u64
}

/// The newest entry time a bucket holds.
fn bucket_end_us(bucket: u64) -> i64 {
    i64::try_from(bucket)
        .unwrap_or(i64::MAX)
        .saturating_add(1)
        .saturating_mul(ID_BUCKET_US)
        .saturating_sub(1)
}

/// The key of (partition, xxh3 of the transaction id) in the filters and the id files.
pub fn id_key(pid: u64, hash: u64) -> u64 {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&pid.to_le_bytes());
    b[8..].copy_from_slice(&hash.to_le_bytes());
    xxhash_rust::xxh3::xxh3_64(&b)
}

/// Durable id files by bucket. The broker's is `<data_dir>/ids/` (docs/storage-format.md "Id
/// files"); tests use one in memory.
pub trait IdStore: Send {
    /// Writes the (key, offset) pairs of one spill of `bucket` as a new file, durable with its
    /// name when this returns.
    fn write(&mut self, bucket: u64, pairs: &mut [(u64, u64)]) -> Result<(), String>;
    /// Buckets that have files, ascending.
    fn buckets(&self) -> Vec<u64>;
    /// Calls `each` with every key of the bucket's files (rebuilding the filters at start). A
    /// damaged file is reported and dropped by the store, not answered.
    fn keys(&mut self, bucket: u64, each: &mut dyn FnMut(u64));
    /// Offers each offset of `key` in the bucket's files to `accept` until it takes one. A
    /// damaged file is reported and skipped; an error means a file could not be read at all,
    /// so the caller cannot tell new from duplicate.
    fn find(
        &self,
        bucket: u64,
        key: u64,
        accept: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<u64>, String>;
    /// Merges a bucket's files into one (no more ids will be written to it).
    fn merge(&mut self, bucket: u64);
    /// Removes the files of every bucket before `bucket`.
    fn remove_before(&mut self, bucket: u64);
}

pub struct TxnSpill {
    store: Box<dyn IdStore>,
    hot_ids: usize,
    filter: FilterConfig,
    /// Allocated at the first spill (or at start when files exist): a broker whose ids all
    /// fit the hot table never pays for it.
    ring: Option<GenerationRing>,
    /// Ids at or before this entry time are not all in the ring (`i64::MIN`: the ring is
    /// exact; `i64::MAX`: there is no ring).
    ring_lost_through_us: i64,
    /// The newest time given to the ring: later spills never go back (the ring's own rule),
    /// and a key's bucket is the bucket of the time it was given, so the ring's generation
    /// times name the buckets to search.
    newest_us: i64,
    /// The bucket written last and not merged yet.
    open_bucket: Option<u64>,
    removed_below: u64,
    /// A failed write is warned about once until one succeeds, and tried again only once
    /// the table holds this many rows (not at every push while the disk refuses).
    failing: bool,
    retry_at_len: usize,
}

impl TxnSpill {
    /// A spill over `store`, its filters rebuilt from the files it holds (buckets older than
    /// `keep_us` before `now_us` are removed first).
    pub fn open(
        mut store: Box<dyn IdStore>,
        hot_ids: usize,
        filter: FilterConfig,
        keep_us: i64,
        now_us: i64,
    ) -> TxnSpill {
        let below = bucket_of(now_us.saturating_sub(keep_us));
        store.remove_before(below);
        let mut spill = TxnSpill {
            store,
            hot_ids: hot_ids.max(MIN_HOT_IDS),
            filter,
            ring: None,
            ring_lost_through_us: i64::MIN,
            newest_us: i64::MIN,
            open_bucket: None,
            removed_below: below,
            failing: false,
            retry_at_len: 0,
        };
        let buckets = spill.store.buckets();
        if !buckets.is_empty() {
            spill.ensure_ring(keep_us);
        }
        for b in buckets {
            // A key is given the end of its bucket: never earlier than its entry time, so the
            // ring keeps it at least as long as the window does.
            let at = bucket_end_us(b);
            spill.newest_us = spill.newest_us.max(at);
            let TxnSpill { store, ring, .. } = &mut spill;
            match ring {
                Some(r) => store.keys(b, &mut |k| r.insert(at, k)),
                None => store.keys(b, &mut |_| {}),
            }
            // Files of older buckets may be the inputs of an interrupted merge.
            spill.store.merge(b);
        }
        spill.sync_lost();
        spill
    }

    pub fn hot_ids(&self) -> usize {
        self.hot_ids
    }

    /// Bytes of the filters' allocation (0 until the first spill).
    pub fn filter_bytes(&self) -> usize {
        self.ring.as_ref().map_or(0, |r| r.allocated_bytes())
    }

    fn ensure_ring(&mut self, keep_us: i64) {
        if self.ring.is_some() || self.ring_lost_through_us == i64::MAX {
            return;
        }
        match GenerationRing::new(self.filter, keep_us) {
            Ok(r) => self.ring = Some(r),
            Err(e) => {
                tracing::warn!(error = %e, "dedup filters not allocated: every spilled id lookup reads the id files");
                self.ring_lost_through_us = i64::MAX;
            }
        }
    }

    fn sync_lost(&mut self) {
        if let Some(r) = &self.ring {
            self.ring_lost_through_us = self.ring_lost_through_us.max(r.stats().lost_through_us);
        }
    }

    /// After rows were recorded: past `hot_ids`, the oldest rows go to the files (then the
    /// filters), down to three quarters of the bound. A failed write keeps them in the table
    /// (warned, counted) and is tried again at the next record: no id is ever dropped.
    pub fn spill(&mut self, ids: &mut TxnIds, keep_us: i64, now_us: i64) {
        let below = bucket_of(now_us.saturating_sub(keep_us));
        if below > self.removed_below {
            self.store.remove_before(below);
            self.removed_below = below;
        }
        if ids.len() <= self.hot_ids || ids.len() < self.retry_at_len {
            return;
        }
        let n = ids.whole_groups_of(ids.len() - self.hot_ids + self.hot_ids / 4);
        let rows = ids.oldest(n);
        let mut newest = self.newest_us;
        let mut per: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
        let mut given: Vec<(i64, u64)> = Vec::with_capacity(rows.len());
        for (t, TxnRow { pid, offset, hash }) in rows {
            newest = newest.max(t);
            let key = id_key(pid, hash);
            per.entry(bucket_of(newest))
                .or_default()
                .push((key, offset));
            given.push((newest, key));
        }
        for (b, pairs) in per.iter_mut() {
            if let Err(e) = self.store.write(*b, pairs) {
                metrics::counter!("queen_dedup_spill_failures_total").increment(1);
                if !self.failing {
                    tracing::warn!(error = %e, bucket = b, "transaction ids could not be written to their id file; they stay in memory until a write succeeds");
                    self.failing = true;
                }
                self.retry_at_len = ids.len().saturating_add(self.hot_ids / 4);
                return;
            }
        }
        self.failing = false;
        self.retry_at_len = 0;
        self.ensure_ring(keep_us);
        if let Some(r) = &mut self.ring {
            r.set_window(keep_us);
            for (at, key) in given {
                r.insert(at, key);
            }
        }
        self.newest_us = newest;
        self.sync_lost();
        ids.forget_oldest(n);
        metrics::counter!("queen_dedup_spilled_ids_total").increment(n as u64);
        // Buckets before the newest written get no more ids: one file each.
        let newest_bucket = bucket_of(newest);
        let closed: Vec<u64> = self
            .open_bucket
            .into_iter()
            .chain(per.keys().copied())
            .filter(|b| *b < newest_bucket)
            .collect();
        for b in closed {
            self.store.merge(b);
        }
        self.open_bucket = Some(newest_bucket);
    }

    /// The offset of a spilled id of `pid` inside `window_us` before `now_us` that `accept`
    /// confirms (against the frame), newest bucket first.
    pub fn find(
        &self,
        pid: u64,
        hash: u64,
        now_us: i64,
        window_us: i64,
        accept: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<u64>, String> {
        let key = id_key(pid, hash);
        let horizon = now_us.saturating_sub(window_us);
        let lo = bucket_of(horizon);
        let mut search: Vec<(u64, u64)> = Vec::new();
        if self.ring_lost_through_us >= horizon {
            search.push((lo, bucket_of(self.ring_lost_through_us.min(now_us))));
        }
        if let Some(r) = &self.ring {
            for g in r
                .lookup(key, now_us, window_us)
                .filter_map(|n| r.generation(n))
            {
                search.push((bucket_of(g.opened_us.max(horizon)), bucket_of(g.last_us)));
            }
        }
        if search.is_empty() {
            return Ok(None);
        }
        let mut buckets: Vec<u64> = self
            .store
            .buckets()
            .into_iter()
            .filter(|b| search.iter().any(|(a, z)| a <= b && b <= z))
            .collect();
        buckets.reverse();
        for b in buckets {
            if let Some(off) = self.store.find(b, key, accept)? {
                return Ok(Some(off));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
#[path = "txn_spill_tests.rs"]
mod tests;
