//! Floor leases: a snapshot stream reading records `F..` holds one, and no purge deletes a
//! segment holding any of them while it lives (docs/storage-format.md "The sender pins what
//! it streams"). In memory only: no stream survives a restart.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::SegmentLog;
use crate::backend::SegmentFile;
use crate::format::LEN_FIELD;
use crate::sync::{lock, read};
use crate::StorageError;

/// Floors held, each with how many leases hold it.
pub(crate) type LeaseTable = Arc<Mutex<BTreeMap<u64, usize>>>;

/// Keeps records `floor()..` in the log until dropped.
#[derive(Debug)]
pub struct FloorLease {
    table: LeaseTable,
    floor: u64,
}

impl FloorLease {
    pub fn floor(&self) -> u64 {
        self.floor
    }
}

impl Drop for FloorLease {
    fn drop(&mut self) {
        let mut table = lock(&self.table);
        if let Some(n) = table.get_mut(&self.floor) {
            *n -= 1;
            if *n == 0 {
                table.remove(&self.floor);
            }
        }
    }
}

/// A run of consecutive records inside one segment file.
pub(crate) struct RecordSpan {
    pub file: Arc<dyn SegmentFile>,
    pub path: PathBuf,
    pub offset: u64,
    pub len: u64,
}

impl SegmentLog {
    /// Leases records `floor..`: until the guard is dropped, no purge deletes a segment
    /// holding one of them. Taken under the purge lock, so a purge already running finishes
    /// first; refused when it deleted `floor` (the log now starts above it).
    pub fn lease_floor(&self, floor: u64) -> Result<FloorLease, StorageError> {
        let _no_purge_now = lock(&self.purge_lock);
        if let Some(first) = self.first_index().filter(|&first| first > floor) {
            return Err(StorageError::SnapshotUnavailable {
                reason: format!(
                    "records from index {floor} were reclaimed: the log now starts at {first}"
                ),
            });
        }
        *lock(&self.leases).entry(floor).or_insert(0) += 1;
        Ok(FloorLease {
            table: self.leases.clone(),
            floor,
        })
    }

    /// `index` lowered below every leased floor: the highest index a purge may delete through,
    /// None when a lease holds index 0 (nothing may go).
    pub(crate) fn lease_clamp(&self, index: u64) -> Option<u64> {
        match lock(&self.leases).keys().next() {
            Some(&floor) => floor.checked_sub(1).map(|f| f.min(index)),
            None => Some(index),
        }
    }

    /// Where records `from..=to` lie on disk, one span per segment, and their byte total;
    /// None unless the log holds all of them.
    pub(crate) fn record_spans(&self, from: u64, to: u64) -> Option<(Vec<RecordSpan>, u64)> {
        let idx = read(&self.index);
        if from > to || idx.first_index()? > from || idx.last()?.0 < to {
            return None;
        }
        let mut spans = Vec::new();
        let mut total = 0u64;
        for seg in idx.segments.iter() {
            if seg.last_index() < from || seg.first_index > to {
                continue;
            }
            let start = seg.offset_of(from.max(seg.first_index))?;
            let end = if to >= seg.last_index() {
                seg.end
            } else {
                seg.offset_of(to + 1)?
            };
            debug_assert!(end >= start + LEN_FIELD);
            spans.push(RecordSpan {
                file: seg.file.clone(),
                path: seg.path.clone(),
                offset: start,
                len: end - start,
            });
            total += end - start;
        }
        Some((spans, total))
    }
}
