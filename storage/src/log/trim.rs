//! Removing records: from the end for Raft conflicts, from the front for purges.

use super::SegmentLog;
use crate::format::SEGMENT_HEADER_LEN;
use crate::sync::{lock, read, write};
use crate::StorageError;

impl SegmentLog {
    /// Deletes records `index..`, durably. Readers stop seeing them before the disk changes;
    /// if the disk change then fails, the log is poisoned, because memory and disk disagree.
    pub fn truncate_from(&self, index: u64) -> Result<(), StorageError> {
        let mut dirty = lock(&self.writer);
        self.check_poisoned()?;
        let (removed, cut) = {
            let mut idx = write(&self.index);
            let Some((last, _)) = idx.last() else {
                return Ok(());
            };
            if index > last {
                return Ok(());
            }
            let keep = idx.segments.partition_point(|s| s.first_index < index);
            let removed = idx.segments.split_off(keep);
            let cut = match idx.segments.last_mut() {
                Some(seg) if seg.last_index() >= index => {
                    let offset = seg.offset_of(index).unwrap_or(seg.end);
                    let slots = (index - seg.first_index) as usize;
                    seg.entries.truncate(slots);
                    seg.end = offset;
                    Some((seg.name.clone(), seg.file.clone(), offset))
                }
                _ => None,
            };
            (removed, cut)
        };

        // Newest first, each removal durable before the next, so a crash part-way leaves a
        // contiguous prefix on disk whatever order the filesystem persists removals in.
        for seg in removed.iter().rev() {
            dirty.files.remove(&seg.name);
            if let Err(e) = self.backend.remove(&seg.name) {
                return Err(self.poison(StorageError::io("remove segment", &seg.path)(e)));
            }
            if let Err(e) = self.backend.sync_dir() {
                return Err(self.poison(StorageError::io(
                    "sync directory of",
                    self.backend.locate(""),
                )(e)));
            }
        }
        if let Some((name, file, offset)) = cut {
            debug_assert!(offset > SEGMENT_HEADER_LEN);
            if let Err(e) = file.set_len(offset).and_then(|()| file.sync_data()) {
                return Err(self.poison(StorageError::io(
                    "truncate segment",
                    self.backend.locate(&name),
                )(e)));
            }
        }
        self.synced_through
            .fetch_min(index.saturating_sub(1), std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// The last index of the newest segment, other than the one appends go to, whose records
    /// are all `<= index` (lowered below every leased floor): how far `purge_upto(index)` would delete while leaving the log a
    /// segment to append to. None when no such segment exists.
    pub fn sealed_through(&self, index: u64) -> Option<u64> {
        let index = self.lease_clamp(index)?;
        let idx = read(&self.index);
        let sealed = idx.segments.len().checked_sub(1)?;
        let n = idx.segments[..sealed].partition_point(|s| s.last_index() <= index);
        Some(idx.segments[n.checked_sub(1)?].last_index())
    }

    /// (first index, last index, file bytes) of the sealed segment (not the one appends go to)
    /// holding `index`: what the compactor measures its live runs against.
    pub fn sealed_segment_of(&self, index: u64) -> Option<(u64, u64, u64)> {
        let bound = self.lease_clamp(u64::MAX)?;
        let idx = read(&self.index);
        let at = idx.segment_for(index)?;
        if at + 1 >= idx.segments.len() {
            return None;
        }
        let s = &idx.segments[at];
        // A segment a lease holds frees nothing now, however little of it is live.
        (s.last_index() <= bound).then_some((s.first_index, s.last_index(), s.end))
    }

    /// Bytes of the files `purge_upto(index)` would delete now.
    pub fn sealed_bytes_through(&self, index: u64) -> u64 {
        let Some(index) = self.lease_clamp(index) else {
            return 0;
        };
        let idx = read(&self.index);
        let sealed = idx.segments.len().saturating_sub(1);
        idx.segments[..sealed]
            .iter()
            .take_while(|s| s.last_index() <= index)
            .map(|s| s.end)
            .sum()
    }

    /// Deletes every whole sealed segment whose records are all `<= index`, oldest first; a
    /// segment that also holds a later record stays, and so does the one appends go to, so
    /// `first_index` may remain below `index + 1`. A floor lease (`lease_floor`) lowers
    /// `index` to below its floor while it lives. The number of segment files deleted.
    ///
    /// Appends never wait for it: the victims are chosen under the writer lock, but unlinked
    /// and the directory fsynced outside it (purges are serialised by their own lock, which
    /// keeps the oldest-first order). Each segment leaves the index only once its removal is
    /// durable, so the index never has a hole: a failed unlink stops the purge with the
    /// segment and every later one still indexed and on disk (the next purge retries it); a
    /// failed directory fsync leaves the disk unknown, so it poisons the log, as `sync` does.
    pub fn purge_upto(&self, index: u64) -> Result<usize, StorageError> {
        let _one_at_a_time = lock(&self.purge_lock);
        self.check_poisoned()?;
        // Under the purge lock: a lease is taken either before (and bounds this purge) or
        // after it (and is refused if this purge deleted its floor).
        let Some(index) = self.lease_clamp(index) else {
            return Ok(0);
        };
        let victims: Vec<(u64, String, std::path::PathBuf)> = {
            let _writer = lock(&self.writer);
            let idx = read(&self.index);
            let sealed = idx.segments.len().saturating_sub(1);
            idx.segments[..sealed]
                .iter()
                .take_while(|s| s.last_index() <= index)
                .map(|s| (s.first_index, s.name.clone(), s.path.clone()))
                .collect()
        };
        let mut deleted = 0;
        for (first, name, path) in victims {
            self.backend
                .remove(&name)
                .map_err(StorageError::io("remove segment", &path))?;
            let synced = self.backend.sync_dir();
            {
                // The name is gone from the directory: the index follows it either way.
                let mut dirty = lock(&self.writer);
                dirty.files.remove(&name);
                let mut idx = write(&self.index);
                if idx
                    .segments
                    .first()
                    .is_some_and(|s| s.first_index == first && s.name == name)
                {
                    idx.segments.remove(0);
                }
            }
            if let Err(e) = synced {
                return Err(self.poison(StorageError::io(
                    "sync directory of",
                    self.backend.locate(""),
                )(e)));
            }
            deleted += 1;
        }
        Ok(deleted)
    }
}
