//! The node's cap on parked long polls, shared by every group's waiters.
//!
//! Each group used to cap its own waiters at `max_long_polls`, so a node with many tenant
//! groups could park that many per group, past the memory share the cap was computed from
//! (docs/memory.md, "connections"). A slot is taken when a pop parks and given back when the
//! parked entry is dropped, whichever way it leaves (answered, expired, closed, engine gone).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[derive(Debug)]
pub struct LongPollSlots {
    held: AtomicUsize,
    max: usize,
}

/// One parked poll's place; given back on drop.
#[derive(Debug)]
pub struct LongPollSlot(Arc<LongPollSlots>);

impl LongPollSlots {
    pub fn new(max: usize) -> Arc<LongPollSlots> {
        Arc::new(LongPollSlots {
            held: AtomicUsize::new(0),
            max,
        })
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// A slot, or None when the node's polls are at the cap.
    pub fn try_take(self: &Arc<Self>) -> Option<LongPollSlot> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held < self.max).then_some(held + 1)
            })
            .ok()
            .map(|_| LongPollSlot(self.clone()))
    }
}

impl Drop for LongPollSlot {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_shared_and_given_back_on_drop() {
        let node = LongPollSlots::new(2);
        let a = node.try_take();
        let b = node.clone().try_take();
        assert!(a.is_some() && b.is_some());
        assert!(
            node.try_take().is_none(),
            "the cap is the node's, not a group's"
        );
        drop(a);
        assert!(node.try_take().is_some());
    }
}
