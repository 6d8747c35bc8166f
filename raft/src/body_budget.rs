//! The bytes of request bodies the cluster listener holds at once (review s14 F6). Each
//! connection reads one body at a time, but connections are many: without a cap, peers each
//! sending (or only declaring) a full append or snapshot chunk would hold their sum. A body's
//! declared length is taken from this budget after its header is checked and before a byte of
//! it is allocated, and given back once its request is answered; a body that cannot get it
//! waits (in arrival order) only as long as the listener's body deadline allows.
//!
//! Small bodies (votes, heartbeats, appends of a few entries: at most [`SMALL_BODY`]) never
//! queue behind large ones: declared-and-stalled large bodies could hold the whole budget for
//! the 10 s deadline, longer than an election timeout. They take a reserve of their own
//! ([`SMALL_RESERVE`], on top of the budget), or the budget's room if it has some free at once.
//!
//! The budget is part of the broker's memory budget: what is taken is charged to its
//! `cluster_bodies` pool through [`Charge`] (docs/memory.md).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncRead;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::wire::{self, WireError};

/// The largest body that takes the small bodies' reserve.
pub const SMALL_BODY: u32 = 64 * 1024;
/// The small bodies' reserve: 16 bodies of the largest small size, far more votes.
pub const SMALL_RESERVE: usize = 16 * SMALL_BODY as usize;

/// Told each change of the bytes held (+ taken, − given back): the broker's pool.
pub type Charge = Arc<dyn Fn(isize) + Send + Sync>;

/// The listener's budget of body bytes. Clones share it.
#[derive(Clone)]
pub struct BodyBudget {
    sem: Arc<Semaphore>,
    small: Arc<Semaphore>,
    bytes: usize,
    held: Arc<AtomicUsize>,
    charge: Option<Charge>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a body of {len} bytes is over the cluster listener's body budget of {budget} bytes")]
pub struct OverBudget {
    pub len: u32,
    pub budget: usize,
}

impl BodyBudget {
    /// A budget of `bytes` (at most tokio's largest semaphore, far above any memory), plus
    /// the small bodies' reserve.
    pub fn new(bytes: usize, charge: Option<Charge>) -> BodyBudget {
        let bytes = bytes.min(Semaphore::MAX_PERMITS - SMALL_RESERVE);
        metrics::gauge!("queen_cluster_body_budget_bytes").set((bytes + SMALL_RESERVE) as f64);
        // `queen_cluster_body_bytes` is not reset: it counts by increments, and a second
        // budget in the process (tests, a restarted listener) would zero what others hold.
        BodyBudget {
            sem: Arc::new(Semaphore::new(bytes)),
            small: Arc::new(Semaphore::new(SMALL_RESERVE)),
            bytes,
            held: Arc::default(),
            charge,
        }
    }

    /// The budget for large bodies, without the small bodies' reserve.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The bytes bodies hold now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Takes `len` bytes, waiting for them behind earlier bodies (a small one only behind
    /// other small ones); a length the whole budget cannot hold is refused at once (it would
    /// wait for ever).
    pub async fn take(&self, len: u32) -> Result<BodyPermit, OverBudget> {
        let over = OverBudget {
            len,
            budget: self.bytes,
        };
        let n = len as usize;
        if n > self.bytes {
            return Err(over);
        }
        let permit = if len <= SMALL_BODY {
            let free = self.small.clone().try_acquire_many_owned(len);
            match free.or_else(|_| self.sem.clone().try_acquire_many_owned(len)) {
                Ok(p) => Ok(p),
                Err(_) => self.small.clone().acquire_many_owned(len).await,
            }
        } else {
            self.sem.clone().acquire_many_owned(len).await
        };
        // The semaphores are never closed, so an error cannot happen; treated as a refusal.
        let permit = permit.map_err(|_| over)?;
        self.held.fetch_add(n, Ordering::Relaxed);
        metrics::gauge!("queen_cluster_body_bytes").increment(n as f64);
        if let Some(c) = &self.charge {
            c(isize::try_from(n).unwrap_or(isize::MAX));
        }
        Ok(BodyPermit {
            _permit: permit,
            len: n,
            held: self.held.clone(),
            charge: self.charge.clone(),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error(transparent)]
    Over(#[from] OverBudget),
    #[error("no whole body of {len} bytes within {deadline:?} of its header")]
    Deadline { len: u32, deadline: Duration },
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// Reads a body of `len` bytes (its header already checked) once `budget` holds room for it,
/// all within `deadline` of the header: a peer that declares a body and stalls, or trickles
/// it, is cut there and gives its room back. The error closes the connection.
pub async fn read_within<R: AsyncRead + Unpin>(
    r: &mut R,
    len: u32,
    budget: &BodyBudget,
    deadline: Duration,
) -> Result<(BodyPermit, Vec<u8>), BodyError> {
    let read = async {
        let permit = budget.take(len).await?;
        // Reserved whole once the budget holds it: grown by doubling, the buffer's capacity
        // would reach up to twice what the budget was charged.
        let mut body = Vec::with_capacity(len as usize);
        wire::read_body(r, len, &mut body).await?;
        Ok::<_, BodyError>((permit, body))
    };
    let r = match tokio::time::timeout(deadline, read).await {
        Ok(r) => r,
        Err(_) => Err(BodyError::Deadline { len, deadline }),
    };
    let reason = match &r {
        Err(BodyError::Over(_)) => "body_over_budget",
        Err(BodyError::Deadline { .. }) => "body_deadline",
        _ => return r,
    };
    crate::listener_metrics::closed(reason);
    r
}

/// A body's bytes, given back when dropped.
pub struct BodyPermit {
    _permit: OwnedSemaphorePermit,
    len: usize,
    held: Arc<AtomicUsize>,
    charge: Option<Charge>,
}

impl std::fmt::Debug for BodyPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyPermit")
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for BodyPermit {
    fn drop(&mut self) {
        self.held.fetch_sub(self.len, Ordering::Relaxed);
        metrics::gauge!("queen_cluster_body_bytes").decrement(self.len as f64);
        if let Some(c) = &self.charge {
            c(-isize::try_from(self.len).unwrap_or(isize::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicIsize;

    #[tokio::test]
    async fn a_body_over_the_budget_is_refused_without_waiting() {
        let b = BodyBudget::new(1000, None);
        let _all = b.take(1000).await.unwrap();
        // Refused at once even though the budget is taken: it could never fit.
        assert_eq!(
            b.take(1001).await.err(),
            Some(OverBudget {
                len: 1001,
                budget: 1000
            })
        );
        assert_eq!(b.held(), 1000);
    }

    #[tokio::test]
    async fn bodies_wait_for_room_and_give_it_back_to_the_pool() {
        let pool = Arc::new(AtomicIsize::new(0));
        let p = pool.clone();
        let charge: Charge = Arc::new(move |d| {
            p.fetch_add(d, Ordering::Relaxed);
        });
        // Units above the small bodies' size: these take the budget, not the reserve.
        const K: u32 = SMALL_BODY + 1;
        let b = BodyBudget::new(10 * K as usize, Some(charge));
        let first = b.take(6 * K).await.unwrap();
        let second = b.take(4 * K).await.unwrap();
        let all = 10 * K as usize;
        assert_eq!(
            (b.held(), pool.load(Ordering::Relaxed)),
            (all, all as isize)
        );
        let waiting = tokio::spawn({
            let b = b.clone();
            async move { b.take(5 * K).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(first);
        waiting.await.unwrap().unwrap();
        drop(second);
        assert_eq!((b.held(), pool.load(Ordering::Relaxed)), (0, 0));
        assert_eq!(b.sem.available_permits(), all);
        assert_eq!(b.small.available_permits(), SMALL_RESERVE);
    }

    /// Large bodies waiting for a full budget never hold up a small one: it takes the
    /// reserve, and once that is full, waits only for the reserve.
    #[tokio::test]
    async fn a_small_body_never_waits_behind_large_ones() {
        let b = BodyBudget::new(1 << 20, None);
        let _all = b.take(1 << 20).await.unwrap();
        let large = tokio::spawn({
            let b = b.clone();
            async move { b.take(SMALL_BODY + 1).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        assert!(!large.is_finished());
        let vote = b.take(100).await.unwrap();
        let biggest_small = b.take(SMALL_BODY).await.unwrap();
        assert_eq!(b.held(), (1 << 20) + 100 + SMALL_BODY as usize);
        drop((vote, biggest_small));
        let reserve = b.take(SMALL_BODY).await.unwrap();
        let rest: Vec<_> = futures_take_all(&b, SMALL_RESERVE / SMALL_BODY as usize - 1).await;
        let waiting = tokio::spawn({
            let b = b.clone();
            async move { b.take(1).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(reserve);
        waiting.await.unwrap().unwrap();
        drop(rest);
        large.abort();
    }

    async fn futures_take_all(b: &BodyBudget, n: usize) -> Vec<BodyPermit> {
        let mut v = Vec::new();
        for _ in 0..n {
            v.push(b.take(SMALL_BODY).await.unwrap());
        }
        v
    }

    /// A peer that declares a body and sends part of it is cut at the deadline and gives its
    /// room back; one declaring more than the budget is refused before a byte is read.
    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_is_cut_and_an_oversized_one_never_read() {
        let b = BodyBudget::new(1000, None);
        let (mut peer, mut conn) = tokio::io::duplex(4096);
        tokio::io::AsyncWriteExt::write_all(&mut peer, &[7; 300])
            .await
            .unwrap();
        let r = read_within(&mut conn, 800, &b, Duration::from_millis(30)).await;
        assert!(
            matches!(r, Err(BodyError::Deadline { len: 800, .. })),
            "{r:?}"
        );
        assert_eq!(b.held(), 0);
        let r = read_within(&mut conn, 1001, &b, Duration::from_secs(3600)).await;
        assert!(matches!(r, Err(BodyError::Over(_))), "{r:?}");
        // The stalled read took the 300 bytes, the refused one none: the next body is whole.
        tokio::io::AsyncWriteExt::write_all(&mut peer, &[8; 500])
            .await
            .unwrap();
        let (permit, body) = read_within(&mut conn, 500, &b, Duration::from_secs(3600))
            .await
            .unwrap();
        assert_eq!((body, b.held()), (vec![8; 500], 500));
        drop(permit);
        assert_eq!(b.held(), 0);
    }
}
