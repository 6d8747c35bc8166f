//! Answers waiting for their client, in the `connections` pool.
//!
//! A handler returns its whole answer (a listing can be tens of MB) and hyper then writes it
//! at the client's pace: a slow reader holds it all that time, long after the request's own
//! bytes were given back. So each answer is counted from the moment its handler returns it
//! until it has been handed to hyper whole (or the connection drops it), and answers in flight
//! are bounded: while some are held and the pool is over its share of the budget, new
//! requests other than the probes are refused with 503 and Retry-After, and a finished
//! side-effect-free answer (a read) that would add to such a pool is dropped for the same 503.
//! A lone answer always goes out, however large, so a big listing is never refused forever.
//!
//! The body is handed to hyper in copies of [`CHUNK`] bytes: hyper queues what it is given
//! until the socket takes it, so a 20 MB frame (or a slice sharing its allocation) would stay
//! in hyper's queue, unseen, until the slow client had read it all. With copies, hyper asks
//! for the next chunk only when its queue has room, and the whole answer is freed (and
//! uncounted) once its last chunk is copied.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use axum::body::Body;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use bytes::{Buf, Bytes};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use queenmq_protocol::QueenError;

use crate::error::ApiError;
use crate::meter::ConnectionMeter;

/// The copy handed to hyper at a time: hyper queues at most 16 of them per connection.
pub(crate) const CHUNK: usize = 16 << 10;

/// The answers of all connections held at once, and the meter they are counted in.
#[derive(Debug)]
pub(crate) struct Answers {
    meter: Option<Arc<dyn ConnectionMeter>>,
    /// Bytes of answers held (all connections), besides the pool: the gates ask whether
    /// answers take part in the pool being over its share.
    held: AtomicUsize,
}

impl Answers {
    pub(crate) fn new(meter: Option<Arc<dyn ConnectionMeter>>) -> Arc<Answers> {
        Arc::new(Answers {
            meter,
            held: AtomicUsize::new(0),
        })
    }

    /// Whether a new request is refused: answers are held and the pool is over its share.
    /// Without answers held the connection and long-poll caps bound the pool on their own.
    pub(crate) fn crowded(&self) -> bool {
        match &self.meter {
            Some(m) => self.held.load(Ordering::Acquire) > 0 && m.over_share(),
            None => false,
        }
    }

    /// Counts `resp`'s body until hyper has taken it whole. A `droppable` answer (one whose
    /// request changed nothing) that comes while other answers are held and would leave the
    /// pool over its share is dropped and replaced by a 503.
    pub(crate) fn hold(self: &Arc<Self>, resp: Response, droppable: bool) -> Response {
        let Some(meter) = &self.meter else {
            return resp;
        };
        let bytes = usize::try_from(resp.body().size_hint().lower()).unwrap_or(usize::MAX);
        // fetch_add: of two answers finishing together, exactly one sees the other.
        let others = self.held.fetch_add(bytes, Ordering::AcqRel);
        meter.answer(bytes, true);
        if droppable && others > 0 && meter.over_share() {
            self.release(bytes);
            drop(resp);
            tracing::debug!(bytes, "answer dropped: answers in flight fill the budget");
            return self.hold(crowded().into_response(), false);
        }
        resp.map(|inner| {
            Body::new(HeldAnswer {
                inner,
                stash: Bytes::new(),
                inner_counted: bytes,
                stash_counted: 0,
                answers: self.clone(),
            })
        })
    }

    fn add(&self, bytes: usize) {
        if let Some(m) = &self.meter {
            self.held.fetch_add(bytes, Ordering::AcqRel);
            m.answer(bytes, true);
        }
    }

    fn release(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        if let Some(m) = &self.meter {
            let _ = self
                .held
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                    Some(h.saturating_sub(bytes))
                });
            m.answer(bytes, false);
        }
    }
}

/// Whether dropping the answer loses nothing: a GET that is not a pop (pops lease what they
/// return) only reads.
pub(crate) fn droppable(method: &Method, path: &str) -> bool {
    (method == Method::GET || method == Method::HEAD) && !path.starts_with("/api/v1/pop")
}

pub(crate) fn crowded() -> ApiError {
    ApiError(QueenError::unavailable(
        "answers waiting for slow clients fill the connections' share of the memory budget \
         (memory_limit_bytes); retry later",
    ))
}

/// An answer body, counted until hyper has taken its last byte or dropped it.
struct HeldAnswer {
    inner: Body,
    /// The frame being handed out in copies; its allocation lives until the last copy.
    stash: Bytes,
    /// Counted for what `inner` has not yielded yet (its size hint when it was held).
    inner_counted: usize,
    /// Counted for the stash: its whole length until it is used up.
    stash_counted: usize,
    answers: Arc<Answers>,
}

impl HttpBody for HeldAnswer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let me = self.get_mut();
        loop {
            if !me.stash.is_empty() {
                let n = me.stash.len().min(CHUNK);
                let chunk = Bytes::copy_from_slice(&me.stash[..n]);
                me.stash.advance(n);
                if me.stash.is_empty() {
                    // An emptied `Bytes` still points into the allocation: let it go.
                    me.stash = Bytes::new();
                    me.answers.release(std::mem::take(&mut me.stash_counted));
                }
                return Poll::Ready(Some(Ok(Frame::data(chunk))));
            }
            match ready!(Pin::new(&mut me.inner).poll_frame(cx)) {
                None => {
                    me.answers.release(std::mem::take(&mut me.inner_counted));
                    return Poll::Ready(None);
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let len = data.len();
                        let known = len.min(me.inner_counted);
                        me.inner_counted -= known;
                        // A body longer than its hint: count what it brought beyond.
                        me.answers.add(len - known);
                        me.stash = data;
                        me.stash_counted = len;
                        if len == 0 {
                            me.answers.release(std::mem::take(&mut me.stash_counted));
                        }
                    }
                    Err(other) => return Poll::Ready(Some(Ok(other))),
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.stash.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let stash = self.stash.len() as u64;
        let mut hint = SizeHint::new();
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(stash));
        }
        hint.set_lower(inner.lower().saturating_add(stash));
        hint
    }
}

impl Drop for HeldAnswer {
    fn drop(&mut self) {
        self.answers
            .release(self.inner_counted.saturating_add(self.stash_counted));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_pool::Pool;
    use http_body_util::BodyExt;

    fn setup(share: usize) -> (Arc<Pool>, Arc<Answers>) {
        let pool = Arc::new(Pool {
            share,
            ..Pool::default()
        });
        let answers = Answers::new(Some(pool.clone()));
        (pool, answers)
    }

    fn answer(len: usize) -> Response {
        (axum::http::StatusCode::OK, vec![b'x'; len]).into_response()
    }

    fn counted(pool: &Pool) -> usize {
        pool.bytes.load(Ordering::Relaxed)
    }

    #[tokio::test]
    async fn an_answer_is_counted_until_its_last_chunk_is_taken() {
        let (pool, answers) = setup(1 << 20);
        let resp = answers.hold(answer(5 * CHUNK + 7), true);
        assert_eq!(counted(&pool), 5 * CHUNK + 7);
        let mut body = resp.into_body();
        assert_eq!(body.size_hint().exact(), Some(5 * CHUNK as u64 + 7));
        let mut got = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.expect("in-memory body").into_data().expect("data");
            assert!(data.len() <= CHUNK);
            got.extend_from_slice(&data);
            if got.len() < 5 * CHUNK + 7 {
                assert_eq!(counted(&pool), 5 * CHUNK + 7, "held while chunks remain");
            }
        }
        assert_eq!(got, vec![b'x'; 5 * CHUNK + 7]);
        assert_eq!(counted(&pool), 0);
        assert!(body.is_end_stream());
        drop(body);
        assert_eq!(counted(&pool), 0, "given back once");
        assert_eq!(answers.held.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_dropped_answer_gives_its_bytes_back() {
        let (pool, answers) = setup(1 << 20);
        let mut body = answers.hold(answer(3 * CHUNK), true).into_body();
        let _first = body.frame().await;
        assert_eq!(counted(&pool), 3 * CHUNK);
        drop(body);
        assert_eq!(counted(&pool), 0);
        assert!(!answers.crowded());
    }

    #[test]
    fn a_lone_answer_passes_and_later_ones_are_refused_until_it_goes() {
        let (pool, answers) = setup(1000);
        assert!(!answers.crowded());
        // Larger than the whole share, but nothing else is held.
        let big = answers.hold(answer(5000), true);
        assert_eq!(big.status(), 200);
        assert!(answers.crowded(), "new requests are refused");
        // A finished read is dropped for a 503 with Retry-After ...
        let read = answers.hold(answer(10), true);
        assert_eq!(read.status(), 503);
        assert!(read.headers().contains_key("retry-after"));
        // ... but what changed something (a pop, a push) is kept and counted.
        let before = counted(&pool);
        let pop = answers.hold(answer(10), false);
        assert_eq!(pop.status(), 200);
        assert_eq!(counted(&pool), before + 10);
        drop(big);
        drop(pop);
        drop(read);
        assert_eq!(counted(&pool), 0);
        assert!(!answers.crowded());
        assert_eq!(answers.hold(answer(10), true).status(), 200);
    }

    #[test]
    fn small_answers_under_the_share_all_pass() {
        let (pool, answers) = setup(1000);
        let held: Vec<_> = (0..10).map(|_| answers.hold(answer(50), true)).collect();
        assert!(held.iter().all(|r| r.status() == 200));
        assert_eq!(counted(&pool), 500);
        assert!(!answers.crowded());
        drop(held);
        assert_eq!(counted(&pool), 0);
    }

    #[test]
    fn without_a_meter_nothing_is_refused() {
        let answers = Answers::new(None);
        let a = answers.hold(answer(1 << 20), true);
        let b = answers.hold(answer(1 << 20), true);
        assert!(a.status() == 200 && b.status() == 200);
        assert!(!answers.crowded());
    }

    #[test]
    fn only_reads_are_droppable() {
        assert!(droppable(&Method::GET, "/api/v1/messages"));
        assert!(!droppable(&Method::GET, "/api/v1/pop/queue/q"));
        assert!(!droppable(&Method::GET, "/api/v1/pop"));
        assert!(!droppable(&Method::POST, "/api/v1/push"));
        assert!(!droppable(&Method::DELETE, "/api/v1/resources/queues/q"));
    }
}
