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
pub struct Held(#[allow(dead_code)] Vec<OwnedSemaphorePermit>);

impl Held {
    /// No room taken: an answer bounded by its request, whose room the connection holds.
    pub fn nothing() -> Held {
        Held(Vec::new())
    }
}

/// Room taken piece by piece for one answer built from several engine answers (OffsetFetch's
/// groups, DescribeGroups' groups: review s19 kafka H2). Pieces under [`SMALL`] add up until
/// they reach it, so a thousand small pieces are reserved too.
#[derive(Debug)]
pub struct Gathered {
    held: Vec<OwnedSemaphorePermit>,
    loose: usize,
}

impl Gathered {
    pub fn new() -> Gathered {
        Gathered {
            held: Vec::new(),
            loose: 0,
        }
    }

    /// Room for `bytes` more of the answer, now or never (false: refuse that piece; what
    /// was taken before stays held).
    pub fn take(&mut self, room: &AnswerRoom, bytes: usize) -> bool {
        let want = self.loose.saturating_add(bytes);
        if want < SMALL {
            self.loose = want;
            return true;
        }
        match room.take(want) {
            Some(Held(permits)) => {
                self.held.extend(permits);
                self.loose = 0;
                true
            }
            None => false,
        }
    }

    /// Everything taken, held until the answer is written.
    pub fn held(self) -> Held {
        Held(self.held)
    }
}

impl Default for Gathered {
    fn default() -> Self {
        Gathered::new()
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
            return Some(Held(Vec::new()));
        }
        let units = bytes.div_ceil(UNIT).min(self.units);
        let want = u32::try_from(units).unwrap_or(u32::MAX);
        self.permits
            .clone()
            .try_acquire_many_owned(want)
            .ok()
            .map(|p| Held(vec![p]))
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
    fn gathered_pieces_add_up_past_small_and_a_refused_piece_keeps_the_rest() {
        let room = AnswerRoom::new(1 << 20);
        let mut g = Gathered::new();
        for _ in 0..64 {
            assert!(g.take(&room, 1 << 10));
        }
        assert_eq!(
            room.free(),
            (1 << 20) - (64 << 10),
            "small pieces are reserved"
        );
        assert!(g.take(&room, 600 << 10));
        assert!(!g.take(&room, 600 << 10), "no room: that piece is refused");
        let held = g.held();
        assert_eq!(room.free(), (1 << 20) - (664 << 10));
        drop(held);
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
