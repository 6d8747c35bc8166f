//! Room for the big answers of the Kafka admin reads (DescribeProducers,
//! DescribeTransactions), as the HTTP door's `reserve.rs` does for its listings (review s17
//! lead H1): before the door converts and encodes an answer the engine built, it takes the
//! bytes that answer will hold (the engine's entries while they are written, and the encoded
//! frame) out of `kafka_answer_bytes`, a part of the memory budget's connections share, and
//! keeps them until the frame is written. There is no wait: a waiting request would hold
//! the engine's answer uncounted meanwhile, so one that finds no room drops it at once and
//! answers a retriable per-item error. An answer larger than the whole room takes all of it
//! (it still goes, alone); one under [`SMALL`] takes nothing.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Answers below this are not reserved (most admin answers).
pub const SMALL: usize = 32 << 10;
/// The semaphore counts KiB, so any room fits its permit count.
const UNIT: usize = 1 << 10;

#[derive(Debug)]
pub struct AnswerRoom {
    permits: Arc<Semaphore>,
    units: usize,
}

/// Reserved room, given back when dropped (once the answer is written).
#[derive(Debug)]
pub struct Held(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

impl Held {
    /// No room taken: an answer bounded by its request, whose room the connection holds.
    pub fn nothing() -> Held {
        Held(None)
    }
}

impl AnswerRoom {
    pub fn new(bytes: usize) -> Arc<AnswerRoom> {
        let units = (bytes / UNIT).min(Semaphore::MAX_PERMITS);
        Arc::new(AnswerRoom {
            permits: Arc::new(Semaphore::new(units)),
            units,
        })
    }

    /// Room for an answer of `bytes`, now or never (`None`: refuse the answer retriably).
    pub fn take(&self, bytes: usize) -> Option<Held> {
        if bytes < SMALL {
            return Some(Held(None));
        }
        let units = bytes.div_ceil(UNIT).min(self.units);
        let want = u32::try_from(units).unwrap_or(u32::MAX);
        self.permits
            .clone()
            .try_acquire_many_owned(want)
            .ok()
            .map(|p| Held(Some(p)))
    }

    /// Bytes free now (tests and metrics).
    pub fn free(&self) -> usize {
        self.permits.available_permits() * UNIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_answers_take_nothing_and_big_ones_their_bytes_until_dropped() {
        let room = AnswerRoom::new(1 << 20);
        let small = room.take(SMALL - 1).expect("room");
        assert_eq!(room.free(), 1 << 20);
        let big = room.take(600 << 10).expect("room");
        assert_eq!(room.free(), (1 << 20) - (600 << 10));
        assert!(room.take(600 << 10).is_none(), "no room: refused at once");
        drop(big);
        drop(small);
        assert_eq!(room.free(), 1 << 20);
    }

    #[test]
    fn an_answer_above_the_room_takes_all_of_it_and_still_goes() {
        let room = AnswerRoom::new(1 << 20);
        let all = room.take(usize::MAX).expect("alone");
        assert_eq!(room.free(), 0);
        assert!(room.take(SMALL).is_none());
        drop(all);
        assert!(room.take(SMALL).is_some());
    }
}
