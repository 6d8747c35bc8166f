//! Checkpoint slots a snapshot stream is reading (review s27 snap M1, s25 H1 second half).
//! A save overwrites one of the two slots; a stream reading that slot then fails at its next
//! chunk and is sent again from the newer generation, so a stream that needs longer than two
//! checkpoint intervals was resent for ever. A `StateView` pins its slot for its life, and a
//! save that would overwrite a pinned slot is deferred (`StateStore::defer_save`: the engine
//! skips that checkpoint, nothing is written and nothing reclaimed) at most `DEFER_MAX` times
//! in a row, so checkpoints never stop for a stream that never ends: past that the save goes
//! ahead and the stream fails as before. And only while the streams read on (review s28 snap
//! M2): a save is deferred only when some `StateView` read bytes since the last save or the
//! last deferral, so a stuck sender does not hold checkpoints even for one interval.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::sync::lock;

/// Saves deferred in a row at most: with the default checkpoint interval far more than any
/// stream needs, and the log replayed at a start grows by that many intervals at worst.
pub const DEFER_MAX: u32 = 8;

#[derive(Default)]
pub(crate) struct SlotPins {
    /// Streams reading each slot.
    readers: Mutex<[u32; 2]>,
    /// Saves deferred since the last one written.
    deferred: AtomicU32,
    /// Reads of any `StateView` that delivered bytes, ever.
    reads: AtomicU64,
    /// `reads` at the last save or deferral decision.
    seen: AtomicU64,
}

impl SlotPins {
    pub(crate) fn pin(&self, slot: usize) {
        lock(&self.readers)[slot.min(1)] += 1;
    }

    pub(crate) fn unpin(&self, slot: usize) {
        let mut r = lock(&self.readers);
        r[slot.min(1)] = r[slot.min(1)].saturating_sub(1);
    }

    pub(crate) fn pinned(&self, slot: usize) -> bool {
        lock(&self.readers)[slot.min(1)] > 0
    }

    /// A stream read bytes.
    pub(crate) fn progressed(&self) {
        self.reads.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether a save into `target` is deferred now: it is pinned, a stream read since the
    /// last save or deferral, and fewer than `DEFER_MAX` saves were deferred in a row
    /// (counted).
    pub(crate) fn defer(&self, target: usize) -> bool {
        if !self.pinned(target) {
            return false;
        }
        let reads = self.reads.load(Ordering::SeqCst);
        if self.seen.swap(reads, Ordering::SeqCst) == reads {
            return false;
        }
        let d = self.deferred.load(Ordering::SeqCst);
        if d >= DEFER_MAX {
            return false;
        }
        self.deferred.store(d + 1, Ordering::SeqCst);
        true
    }

    pub(crate) fn saved(&self) {
        self.deferred.store(0, Ordering::SeqCst);
        self.seen
            .store(self.reads.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_slot_defers_at_most_defer_max_saves_in_a_row() {
        let p = SlotPins::default();
        assert!(!p.defer(0));
        p.pin(0);
        p.pin(0);
        assert!(!p.defer(1));
        for _ in 0..DEFER_MAX {
            p.progressed();
            assert!(p.defer(0));
        }
        p.progressed();
        assert!(!p.defer(0), "checkpoints never stop for a stream");
        p.saved();
        p.progressed();
        assert!(p.defer(0));
        p.progressed();
        p.unpin(0);
        assert!(p.pinned(0));
        p.unpin(0);
        assert!(!p.defer(0));
    }

    /// Review s28 snap M2: a stream that read nothing since the last save or deferral holds
    /// no checkpoint.
    #[test]
    fn a_stream_that_does_not_read_on_defers_nothing() {
        let p = SlotPins::default();
        p.pin(0);
        assert!(!p.defer(0), "no read since the start");
        p.progressed();
        assert!(p.defer(0));
        assert!(!p.defer(0), "no read since that deferral");
        p.progressed();
        p.saved();
        assert!(!p.defer(0), "no read since the save");
    }
}
