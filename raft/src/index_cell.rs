//! A lock-free `Option<u64>` that one task writes and `RaftNode::status` reads.
//!
//! openraft publishes its metrics after it has answered the client, so right after `propose`
//! returns they can still show the previous applied index; the state machine sets this cell
//! before it returns from `apply`, so status never reports less than a caller has seen.

use std::sync::atomic::{AtomicU64, Ordering};

/// Stores `index + 1`, with 0 meaning None.
#[derive(Debug, Default)]
pub struct IndexCell(AtomicU64);

impl IndexCell {
    pub fn set(&self, index: Option<u64>) {
        self.0
            .store(index.map_or(0, |i| i.saturating_add(1)), Ordering::Release);
    }

    pub fn get(&self) -> Option<u64> {
        self.0.load(Ordering::Acquire).checked_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::IndexCell;

    #[test]
    fn round_trips_none_zero_and_values() {
        let c = IndexCell::default();
        assert_eq!(c.get(), None);
        c.set(Some(0));
        assert_eq!(c.get(), Some(0));
        c.set(Some(41));
        assert_eq!(c.get(), Some(41));
        c.set(None);
        assert_eq!(c.get(), None);
    }
}
