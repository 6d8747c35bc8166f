//! Closed filter generations persisted beside the id files (review s27 "Restart"), and the
//! start that reads them instead of the ids: about 3 GB of id files for an hour at
//! 50 000 msg/s against the 10 s restart budget, where the filters are `dedup_filter_bytes`.
//!
//! Why a start may trust an installed generation for the buckets it names: every key given
//! to the ring between its first and its newest entry time went to it, and a key's id file is
//! the bucket of that time. Only the first and the last bucket of a generation may hold keys
//! of its neighbours; a neighbour that is not installed is rebuilt from the id files (the last
//! bucket), or its keys of the shared first bucket are put into the installed generation. A
//! file that fails a check, or was written for other filter sizes, is not used: its buckets
//! are read from the id files as before.

use super::txn_spill::IdStore;
use crate::dedup_filter::{Block, GenerationRing, SavedGeneration};

/// What names a filter file (docs/storage-format.md "Filter files").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FilterFileName {
    pub first_bucket: u64,
    pub last_bucket: u64,
    /// The writing process's epoch (one per start, growing) and the generation's number in
    /// that process's ring.
    pub epoch: u64,
    pub number: u64,
}

/// A closed generation's bits and what they cover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedFilter {
    pub name: FilterFileName,
    /// (epoch, number) of the generation before it in its ring, if any.
    pub prev: Option<(u64, u64)>,
    pub opened_us: i64,
    pub last_us: i64,
    pub keys: u64,
    /// The ring's tag width and probes: bits made under others mean nothing.
    pub tag_us: i64,
    pub k: u32,
    pub blocks: Vec<Block>,
}

/// The newest entry time a bucket holds.
pub(crate) fn bucket_end_us(bucket: u64) -> i64 {
    i64::try_from(bucket)
        .unwrap_or(i64::MAX)
        .saturating_add(1)
        .saturating_mul(super::txn_spill::ID_BUCKET_US)
        .saturating_sub(1)
}

/// What a start did: generations installed from files, buckets read from id files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestoreReport {
    pub installed: u64,
    pub buckets_read: u64,
}

/// The ring's identity of its generations installed from files (their writer's
/// (epoch, number)), so a generation closed later names the right predecessor.
pub(crate) type Origins = std::collections::HashMap<u64, (u64, u64)>;

/// Fills `ring` for the buckets from `from` on that `store` holds: installs usable filter files
/// in time order and reads the id files of every bucket they do not cover. Buckets before
/// `from` are past what the filters cover (`FILTER_WINDOW_MAX_US`): lookups search them by
/// time, so a 7-day window does not make a start read 7 days of files. `lost(at)`: the bucket ending at `at`
/// could not be read (the caller searches it at every lookup). Answers the newest time given.
pub(crate) fn restore(
    store: &dyn IdStore,
    from: u64,
    ring: &mut Option<GenerationRing>,
    origins: &mut Origins,
    report: &mut RestoreReport,
    lost: &mut dyn FnMut(i64),
) -> i64 {
    let mut buckets = store.buckets();
    buckets.retain(|b| *b >= from);
    let mut newest = i64::MIN;
    let read = |b: u64, ring: Option<&mut GenerationRing>, report: &mut RestoreReport| {
        let at = bucket_end_us(b);
        report.buckets_read += 1;
        let r = match ring {
            Some(r) => store.keys(b, &mut |k| r.insert(at, k)),
            None => store.keys(b, &mut |_| {}),
        };
        if let Err(e) = &r {
            tracing::warn!(bucket = b, error = %e, "an id file could not be read at start; its bucket is searched by every lookup");
        }
        (at, r.is_ok())
    };
    // Buckets below `next` are in the ring whole.
    let mut next = 0u64;
    let mut last_installed: Option<(u64, u64)> = None;
    if let Some(r) = ring.as_mut() {
        let mut names = store.filters();
        names.sort_unstable();
        for name in names {
            let f = match store.load_filter(name) {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(error = %e, ?name, "a dedup filter file is not used; its buckets are read from the id files");
                    continue;
                }
            };
            if f.name.last_bucket < from
                || f.tag_us != r.config().tag_us
                || f.k != r.probes()
                || f.blocks.len() != r.equal_share_blocks()
            {
                continue;
            }
            let chained = last_installed.is_some() && last_installed == f.prev;
            if !chained {
                if f.name.first_bucket < next {
                    continue;
                }
                for &b in buckets
                    .iter()
                    .filter(|b| **b >= next && **b < f.name.first_bucket)
                {
                    let (at, ok) = read(b, Some(&mut *r), report);
                    if !ok {
                        lost(at);
                    }
                    newest = newest.max(at);
                }
            }
            let saved = SavedGeneration {
                opened_us: f.opened_us,
                last_us: f.last_us,
                keys: f.keys,
            };
            let Some(n) = r.install(saved, &f.blocks) else {
                continue;
            };
            report.installed += 1;
            newest = newest.max(f.last_us);
            if !chained && buckets.contains(&f.name.first_bucket) {
                // Keys of its first bucket given to a generation before it that is not here.
                let first = f.name.first_bucket;
                let at = f.opened_us;
                let put = store.keys(first, &mut |k| {
                    r.insert_into(n, at, k);
                });
                if let Err(e) = put {
                    tracing::warn!(bucket = first, error = %e, "an id file could not be read at start; its bucket is searched by every lookup");
                    lost(bucket_end_us(first));
                }
            }
            origins.insert(n, (f.name.epoch, f.name.number));
            last_installed = Some((f.name.epoch, f.name.number));
            next = f.name.last_bucket;
        }
    }
    for &b in buckets.iter().filter(|b| **b >= next) {
        let (at, ok) = read(b, ring.as_mut(), report);
        if !ok {
            lost(at);
        }
        newest = newest.max(at);
    }
    newest
}
