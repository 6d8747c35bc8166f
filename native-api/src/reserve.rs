//! Room reserved for a big answer before it is built.
//!
//! `crate::answer` counts an answer from the moment its handler returns it, which leaves the
//! building itself uncounted: sixteen listings of ~20 MB arriving in the same instant were all
//! built (the engine's document, then its JSON text) before the first was held, and a node
//! with a 64 MiB budget peaked at 533 MiB. So a request whose answer can be big first takes a
//! reservation of what its answer can weigh, out of the room the owner gives answers (the
//! `connections` share of the budget, `ConnectionMeter::answer_room`), waits a bounded time
//! for it, builds, and gives it back once `Answers::hold` has counted the real answer: from
//! then on the held-answer gate bounds it. Reservations are not added to the pool: they are an
//! upper bound, often far above the answer, and counting them would refuse small writes
//! while a big listing is built.
//!
//! A bound above the whole room takes the whole room, so a listing larger than the share still
//! runs (alone) instead of waiting forever; a bound under [`SMALL`] reserves nothing, so
//! ordinary small reads never queue behind a big one.

use std::sync::Arc;
use std::time::Duration;

use axum::response::Response;
use queenmq_protocol::QueenError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::answer::{self, Answers};
use crate::error::ApiError;

/// Answers bounded below this are built without a reservation.
pub(crate) const SMALL: usize = 32 << 10;
/// How long a request waits for room before it is refused (503, retriable).
pub(crate) const WAIT: Duration = Duration::from_secs(5);
/// The semaphore counts KiB: a byte-grained count would overflow its `u32` requests.
const UNIT: usize = 1 << 10;

#[derive(Debug)]
pub(crate) struct Room {
    /// None when the owner gives no room: nothing is reserved (nothing is counted either).
    permits: Option<Arc<Semaphore>>,
    units: usize,
    answers: Arc<Answers>,
    wait: Duration,
}

/// A reservation; the room comes back when the last clone is dropped. Clone only because a
/// response's extensions must be: it rides on the response until `Answers::hold` counted it.
#[derive(Clone, Debug)]
pub(crate) struct Reserved(#[allow(dead_code)] Arc<OwnedSemaphorePermit>);

impl Room {
    pub(crate) fn new(answers: Arc<Answers>, room_bytes: usize, wait: Duration) -> Arc<Room> {
        let units = (room_bytes / UNIT).min(Semaphore::MAX_PERMITS);
        Arc::new(Room {
            permits: (units > 0).then(|| Arc::new(Semaphore::new(units))),
            units,
            answers,
            wait,
        })
    }

    /// Reserves room for an answer of at most `bound` bytes (none below [`SMALL`]), or refuses
    /// retriably when none frees within the wait or held answers fill the share meanwhile.
    pub(crate) async fn take(&self, bound: usize) -> Result<Option<Reserved>, ApiError> {
        let Some(permits) = &self.permits else {
            return Ok(None);
        };
        if bound < SMALL {
            return Ok(None);
        }
        let units = bound.div_ceil(UNIT).min(self.units);
        // `units` is at most MAX_PERMITS, which fits u32 on every target tokio supports.
        let want = u32::try_from(units).unwrap_or(u32::MAX);
        let permit =
            match tokio::time::timeout(self.wait, permits.clone().acquire_many_owned(want)).await {
                Ok(Ok(p)) => p,
                // The semaphore is never closed; were it, nothing would be bounded any more.
                Ok(Err(_)) => return Ok(None),
                Err(_) => return Err(busy()),
            };
        // An answer held while this one waited may fill the share: building now would only
        // have the answer dropped at `hold`, after its cost was paid.
        if self.answers.crowded() {
            return Err(answer::crowded());
        }
        Ok(Some(Reserved(Arc::new(permit))))
    }
}

impl Reserved {
    /// Keeps the reservation with `resp` until the door has counted it (serve.rs takes it off).
    pub(crate) fn ride(reserved: Option<Reserved>, resp: &mut Response) {
        if let Some(r) = reserved {
            resp.extensions_mut().insert(r);
        }
    }

    /// Takes the reservation off a response, to drop once the answer is counted.
    pub(crate) fn take_off(resp: &mut Response) -> Option<Reserved> {
        resp.extensions_mut().remove::<Reserved>()
    }
}

fn busy() -> ApiError {
    ApiError(QueenError::unavailable(
        "answers being built fill the connections' share of the memory budget \
         (memory_limit_bytes); retry later",
    ))
}

/// What a page of stored messages can weigh as JSON: every row as large as the largest
/// message the door accepts (`max_message`, the body limit) plus its fields. A true bound,
/// so it is mostly above the share and a big listing runs alone; listings are admin reads.
pub(crate) fn page_bound(rows: usize, max_message: usize) -> usize {
    /// Ids, names (up to 512 bytes each, escaped), offsets, times and a DLQ row's error text
    /// (up to 16 KiB) of one row.
    const ROW_FIELDS: usize = 24 << 10;
    const DOCUMENT: usize = 256;
    rows.max(1)
        .saturating_mul(max_message.saturating_add(ROW_FIELDS))
        .saturating_add(DOCUMENT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_pool::Pool;

    use axum::response::IntoResponse;

    use crate::meter::ConnectionMeter;

    const SHARE: usize = 1 << 20;

    /// A room of SHARE bytes over a pool whose share is SHARE too.
    fn setup(wait: Duration) -> (Arc<Answers>, Arc<Room>) {
        let pool: Arc<dyn ConnectionMeter> = Arc::new(Pool {
            share: SHARE,
            ..Pool::default()
        });
        let answers = Answers::new(Some(pool.clone()));
        let room = Room::new(answers.clone(), pool.answer_room(), wait);
        (answers, room)
    }

    fn free(room: &Room) -> usize {
        room.permits
            .as_ref()
            .map_or(0, |p| p.available_permits() * UNIT)
    }

    #[tokio::test]
    async fn small_answers_reserve_nothing() {
        let (_answers, room) = setup(WAIT);
        assert!(room.take(SMALL - 1).await.expect("room").is_none());
        assert_eq!(free(&room), SHARE);
    }

    #[tokio::test]
    async fn a_reservation_takes_its_bound_and_gives_it_back_when_dropped() {
        let (_answers, room) = setup(WAIT);
        let r = room.take(300 << 10).await.expect("room").expect("reserved");
        assert_eq!(free(&room), SHARE - (300 << 10));
        let mut resp = axum::http::StatusCode::OK.into_response();
        Reserved::ride(Some(r), &mut resp);
        assert_eq!(
            free(&room),
            SHARE - (300 << 10),
            "held while it rides the response"
        );
        let off = Reserved::take_off(&mut resp);
        assert!(off.is_some());
        drop(off);
        assert_eq!(free(&room), SHARE);
    }

    #[tokio::test]
    async fn a_bound_above_the_room_takes_all_of_it_and_still_goes() {
        let (_answers, room) = setup(WAIT);
        let r = room
            .take(usize::MAX)
            .await
            .expect("room")
            .expect("reserved");
        assert_eq!(free(&room), 0);
        drop(r);
        assert_eq!(free(&room), SHARE);
    }

    #[tokio::test]
    async fn a_request_that_finds_no_room_within_the_wait_is_refused_retriably() {
        // A short wait: nothing gives the room back, so it always runs out.
        let (_answers, room) = setup(Duration::from_millis(20));
        let first = room.take(SHARE).await.expect("room");
        let err = room.take(SMALL).await.expect_err("no room");
        let resp = axum::response::IntoResponse::into_response(err);
        assert_eq!(resp.status(), 503);
        assert!(resp.headers().contains_key("retry-after"));
        drop(first);
        assert!(room.take(SMALL).await.expect("room").is_some());
    }

    #[tokio::test]
    async fn waiting_requests_go_in_turn_as_room_is_given_back() {
        let (_answers, room) = setup(WAIT);
        let first = room.take(SHARE / 2).await.expect("room");
        let second = room.take(SHARE / 2).await.expect("room");
        let third = {
            let room = room.clone();
            tokio::spawn(async move { room.take(SHARE / 2).await.map(|r| r.is_some()) })
        };
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "the room is full");
        drop(first);
        assert!(third.await.expect("task").expect("room"));
        drop(second);
    }

    #[tokio::test]
    async fn held_answers_filling_the_share_refuse_the_build() {
        let (answers, room) = setup(WAIT);
        let big = answers.hold(
            (axum::http::StatusCode::OK, vec![b'x'; 2 * SHARE]).into_response(),
            true,
        );
        let err = room.take(SMALL).await.expect_err("crowded");
        assert_eq!(
            axum::response::IntoResponse::into_response(err).status(),
            503
        );
        assert_eq!(free(&room), SHARE, "a refused request keeps no room");
        drop(big);
        assert!(room.take(SMALL).await.expect("room").is_some());
    }

    #[tokio::test]
    async fn without_room_nothing_is_reserved_or_refused() {
        let answers = Answers::new(None);
        let room = Room::new(answers, 0, WAIT);
        assert!(room.take(usize::MAX).await.expect("room").is_none());
    }

    #[test]
    fn a_page_is_bounded_by_its_rows_at_the_largest_message() {
        assert!(page_bound(200, 64 << 20) > 200 * (64 << 20));
        assert!(
            page_bound(0, 100) > 0,
            "an empty page still answers a document"
        );
        assert_eq!(page_bound(usize::MAX, usize::MAX), usize::MAX);
        assert!(
            page_bound(1, 10) < SMALL,
            "one tiny row needs no reservation"
        );
    }
}
