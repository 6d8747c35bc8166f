//! The in-memory index: for every record, where it starts and its term, so `read` is one
//! positioned read and `term_of` no read at all. 16 bytes per record.

use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::SegmentFile;

pub(crate) struct Segment {
    pub name: String,
    pub path: PathBuf,
    pub file: Arc<dyn SegmentFile>,
    pub first_index: u64,
    /// (file offset of the record's `len` field, term), one per record from `first_index` on.
    pub entries: Vec<(u64, u64)>,
    /// Offset just past the last record.
    pub end: u64,
}

impl Segment {
    /// Invariant of `LogIndex`: never called on an empty segment. The one is taken from the
    /// count, not the sum, so the arithmetic holds up to any index.
    pub fn last_index(&self) -> u64 {
        debug_assert!(!self.entries.is_empty(), "last_index of an empty segment");
        self.first_index + (self.entries.len() as u64).saturating_sub(1)
    }

    fn slot(&self, index: u64) -> Option<usize> {
        let slot = usize::try_from(index.checked_sub(self.first_index)?).ok()?;
        (slot < self.entries.len()).then_some(slot)
    }

    /// (offset, on-disk length, term) of a record in this segment.
    pub fn locate(&self, index: u64) -> Option<(u64, u64, u64)> {
        let slot = self.slot(index)?;
        let (offset, term) = self.entries[slot];
        let next = self.entries.get(slot + 1).map_or(self.end, |e| e.0);
        Some((offset, next - offset, term))
    }

    pub fn offset_of(&self, index: u64) -> Option<u64> {
        self.slot(index).map(|s| self.entries[s].0)
    }
}

/// Invariants: segments are sorted, each holds at least one record, and together they hold
/// one contiguous run of indexes.
#[derive(Default)]
pub(crate) struct LogIndex {
    pub segments: Vec<Segment>,
}

impl LogIndex {
    pub fn first_index(&self) -> Option<u64> {
        self.segments.first().map(|s| s.first_index)
    }

    pub fn last(&self) -> Option<(u64, u64)> {
        let seg = self.segments.last()?;
        let (_, term) = *seg.entries.last()?;
        Some((seg.last_index(), term))
    }

    pub fn segment_for(&self, index: u64) -> Option<usize> {
        let pos = self.segments.partition_point(|s| s.first_index <= index);
        let at = pos.checked_sub(1)?;
        (index <= self.segments[at].last_index()).then_some(at)
    }

    pub fn find(&self, index: u64) -> Option<&Segment> {
        self.segment_for(index).map(|at| &self.segments[at])
    }

    pub fn disk_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.end).sum()
    }

    pub fn records(&self) -> u64 {
        self.segments.iter().map(|s| s.entries.len() as u64).sum()
    }
}
