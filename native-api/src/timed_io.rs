//! A connection's byte stream with the door's deadlines: a request head must arrive within the
//! header timeout of its first byte (or of the connection opening), a kept-alive connection may
//! sit idle between requests for the idle timeout, and a client that stops reading its answer is
//! cut after the idle timeout too; one that reads, but slower than the minimum write rate, is
//! cut as well (see [`WriteRate`]). hyper's own `header_read_timeout` also runs while a kept-alive
//! connection is idle, so it cannot give the two their own values; this wrapper does.
//!
//! While a request is being handled (`Activity::busy`) no read deadline runs: a long poll may
//! keep the connection quiet for its whole timeout, and the body has its own bound where it is
//! read (`body::read`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Requests in flight on one connection, shared by the connection's service and its stream.
#[derive(Default)]
pub(crate) struct Activity {
    busy: AtomicUsize,
    finished: AtomicU64,
    /// The stream's reader, parked while a request was in flight: woken when the request ends
    /// so it arms the idle deadline (hyper may not read again before the client writes).
    reader: Mutex<Option<Waker>>,
}

impl Activity {
    pub(crate) fn begin(self: &Arc<Self>) -> BusyGuard {
        self.busy.fetch_add(1, Ordering::AcqRel);
        BusyGuard(self.clone())
    }
}

/// Held while a request is handled; dropping it (also when the client goes away mid-request)
/// starts the idle clock again.
pub(crate) struct BusyGuard(Arc<Activity>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        // `finished` first: a reader that sees `busy == 0` also sees that a request ended.
        self.0.finished.fetch_add(1, Ordering::AcqRel);
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
        let parked = self.0.reader.lock().map(|mut w| w.take()).unwrap_or(None);
        if let Some(w) = parked {
            w.wake();
        }
    }
}

/// A stream that can be torn down at once. A client cut for not reading must not be fed what
/// is still in the kernel's send buffer after the close (megabytes, at its own slow pace):
/// a zero linger makes the close a reset that discards it.
pub(crate) trait Abort {
    fn abort(&self);
}

impl Abort for tokio::net::TcpStream {
    fn abort(&self) {
        if let Err(e) = self.set_zero_linger() {
            tracing::debug!(error = %e, "cannot set a zero linger on a cut connection");
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    pub header: Duration,
    pub idle: Duration,
    /// Bytes per second a client must absorb while the door waits on it; 0: no minimum.
    pub min_write_rate: u64,
    /// The stretch of waiting-on-the-client time over which that rate is measured.
    pub rate_window: Duration,
}

/// The minimum transfer rate of answers. Any progress resets the idle write timer, so a
/// client that reads a few bytes now and then would otherwise hold a big answer, its buffers
/// and its connection slot forever.
///
/// The clock runs only while the door is waiting on the client: from a write the socket
/// refused (`Pending`) until hyper's buffer is drained (a flush completes). Time spent
/// producing an answer or between requests does not count. Each time `rate_window` of
/// waiting has accumulated, the bytes the client took since the last check (whether they went
/// out at once or after a wait) must reach `min_write_rate` × that time, or the connection is
/// cut; then the count starts over.
struct WriteRate {
    /// Waiting time accumulated in this window before `since`.
    waited: Duration,
    /// When the current wait began, while the door waits on the client.
    since: Option<Instant>,
    /// Bytes written since the window began.
    bytes: u64,
    timer: Option<Pin<Box<Sleep>>>,
}

impl WriteRate {
    fn new() -> Self {
        WriteRate {
            waited: Duration::ZERO,
            since: None,
            bytes: 0,
            timer: None,
        }
    }

    fn waited(&self, now: Instant) -> Duration {
        let current = self
            .since
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s));
        self.waited.saturating_add(current)
    }

    /// Ends the window if it is full: `Err` when the client was too slow over it.
    fn check(&mut self, limits: &Timeouts, now: Instant) -> io::Result<()> {
        let waited = self.waited(now);
        if waited < limits.rate_window {
            return Ok(());
        }
        let needed = u128::from(limits.min_write_rate).saturating_mul(waited.as_millis()) / 1000;
        if u128::from(self.bytes) < needed {
            tracing::debug!(
                bytes = self.bytes,
                waited_ms = waited.as_millis() as u64,
                "closing connection: client reads its answer too slowly"
            );
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "client read its answer slower than http_min_write_rate_bytes",
            ));
        }
        self.waited = Duration::ZERO;
        self.bytes = 0;
        if self.since.is_some() {
            self.since = Some(now);
        }
        Ok(())
    }

    /// The socket took `n` bytes.
    fn wrote(&mut self, limits: &Timeouts, n: usize) -> io::Result<()> {
        self.bytes = self.bytes.saturating_add(n as u64);
        self.check(limits, Instant::now())
    }

    /// The socket refused to take more: the door waits on the client. Registers a wake-up
    /// for the end of the window so a client that takes nothing at all is checked too.
    fn blocked(&mut self, limits: &Timeouts, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let now = Instant::now();
        if self.since.is_none() {
            self.since = Some(now);
        }
        loop {
            self.check(limits, Instant::now())?;
            let left = limits
                .rate_window
                .saturating_sub(self.waited(Instant::now()));
            let deadline = Instant::now().checked_add(left).unwrap_or_else(far_future);
            let timer = self
                .timer
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
            timer.as_mut().reset(deadline);
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }

    /// hyper's buffer is drained: the door no longer waits on the client.
    fn drained(&mut self) {
        if let Some(s) = self.since.take() {
            self.waited = self
                .waited
                .saturating_add(Instant::now().saturating_duration_since(s));
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// A request is in flight: no read deadline.
    Off,
    /// Reading a request head: cut at the header deadline.
    Head,
    /// Between requests: cut at the idle deadline; the first byte starts a head.
    Idle,
}

pub(crate) struct TimedIo<T> {
    inner: T,
    activity: Arc<Activity>,
    limits: Timeouts,
    wait: Wait,
    seen_finished: u64,
    read_timer: Pin<Box<Sleep>>,
    write_timer: Option<Pin<Box<Sleep>>>,
    rate: WriteRate,
}

impl<T> TimedIo<T> {
    /// A fresh connection is expected to send its request at once: it starts in the head phase.
    pub(crate) fn new(inner: T, activity: Arc<Activity>, limits: Timeouts) -> Self {
        TimedIo {
            inner,
            activity,
            limits,
            wait: Wait::Head,
            seen_finished: 0,
            read_timer: Box::pin(tokio::time::sleep(limits.header)),
            write_timer: None,
            rate: WriteRate::new(),
        }
    }

    fn arm(&mut self, wait: Wait) {
        let d = match wait {
            Wait::Head => self.limits.header,
            Wait::Idle | Wait::Off => self.limits.idle,
        };
        self.wait = wait;
        let deadline = Instant::now().checked_add(d).unwrap_or_else(far_future);
        self.read_timer.as_mut().reset(deadline);
    }
}

impl<T: Abort> TimedIo<T> {
    /// Whether a minimum rate applies (a zero window would make the check spin).
    fn rate_on(&self) -> bool {
        self.limits.min_write_rate > 0 && !self.limits.rate_window.is_zero()
    }

    fn stalled_write(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.rate_on() {
            if let Poll::Ready(Err(e)) = self.rate.blocked(&self.limits, cx) {
                self.inner.abort();
                return Poll::Ready(Err(e));
            }
        }
        let idle = self.limits.idle;
        let timer = self.write_timer.get_or_insert_with(|| {
            let deadline = Instant::now().checked_add(idle).unwrap_or_else(far_future);
            Box::pin(tokio::time::sleep_until(deadline))
        });
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.inner.abort();
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "client did not read its answer within the idle timeout",
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// A write that finished: progress resets the stall timer and counts toward the rate.
    fn progressed(&mut self, done: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        self.write_timer = None;
        if let Poll::Ready(Ok(n)) = &done {
            if self.rate_on() {
                if let Err(e) = self.rate.wrote(&self.limits, *n) {
                    self.inner.abort();
                    return Poll::Ready(Err(e));
                }
            }
        }
        done
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365)
}

impl<T: AsyncRead + Unpin> AsyncRead for TimedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.activity.busy.load(Ordering::Acquire) > 0 {
            me.wait = Wait::Off;
            if let Ok(mut w) = me.activity.reader.lock() {
                *w = Some(cx.waker().clone());
            }
            // Re-checked after registering: a request that ended in between has already woken
            // nobody, so fall through and arm the idle deadline now.
            if me.activity.busy.load(Ordering::Acquire) > 0 {
                return Pin::new(&mut me.inner).poll_read(cx, buf);
            }
        }
        let finished = me.activity.finished.load(Ordering::Acquire);
        if me.wait == Wait::Off || finished != me.seen_finished {
            me.seen_finished = finished;
            me.arm(Wait::Idle);
        }
        let before = buf.filled().len();
        match Pin::new(&mut me.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if me.wait == Wait::Idle && buf.filled().len() > before {
                    me.arm(Wait::Head);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match me.read_timer.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    let what = if me.wait == Wait::Head {
                        "request head not received within the header timeout"
                    } else {
                        "connection idle past the idle timeout"
                    };
                    tracing::debug!(what, "closing connection");
                    Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, what)))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<T: AsyncWrite + Abort + Unpin> AsyncWrite for TimedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        match Pin::new(&mut me.inner).poll_write(cx, buf) {
            Poll::Pending => me.stalled_write(cx).map(|r| r.map(|()| 0)),
            done => me.progressed(done),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        match Pin::new(&mut me.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => me.stalled_write(cx).map(|r| r.map(|()| 0)),
            done => me.progressed(done),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match Pin::new(&mut me.inner).poll_flush(cx) {
            Poll::Pending => me.stalled_write(cx),
            done => {
                me.write_timer = None;
                // hyper flushes its stream only once its own buffer is written out.
                if matches!(done, Poll::Ready(Ok(()))) {
                    me.rate.drained();
                }
                done
            }
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match Pin::new(&mut me.inner).poll_shutdown(cx) {
            Poll::Pending => me.stalled_write(cx),
            done => {
                me.write_timer = None;
                done
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    impl Abort for DuplexStream {
        fn abort(&self) {}
    }

    fn limits(min_write_rate: u64) -> Timeouts {
        Timeouts {
            header: Duration::from_secs(10),
            idle: Duration::from_secs(10),
            min_write_rate,
            rate_window: Duration::from_millis(200),
        }
    }

    /// Writes `total` bytes to a reader taking `chunk` bytes every `every`; the write's result.
    async fn send(min_rate: u64, total: usize, chunk: usize, every: Duration) -> io::Result<()> {
        send_with(limits(min_rate), total, chunk, every).await
    }

    async fn send_with(
        limits: Timeouts,
        total: usize,
        chunk: usize,
        every: Duration,
    ) -> io::Result<()> {
        let (a, mut b) = tokio::io::duplex(1024);
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; chunk];
            loop {
                match b.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => tokio::time::sleep(every).await,
                }
            }
        });
        let mut io = TimedIo::new(a, Arc::new(Activity::default()), limits);
        let out = io.write_all(&vec![7u8; total]).await;
        drop(io);
        let _ = reader.await;
        out
    }

    #[tokio::test]
    async fn a_reader_below_the_minimum_rate_is_cut() {
        // ~2 KB/s against a 10 KB/s minimum: progress all the time, never enough.
        let started = std::time::Instant::now();
        let err = send(10_000, 200_000, 100, Duration::from_millis(50))
            .await
            .expect_err("cut");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_fast_reader_and_a_disabled_minimum_pass() {
        assert!(send(10_000, 200_000, 1024, Duration::ZERO).await.is_ok());
        // Without a minimum only the idle timer runs, and progress resets it.
        assert!(send(0, 3_000, 100, Duration::from_millis(20)).await.is_ok());
        // A zero window (not reachable from the config) turns the check off instead of spinning.
        let zero = Timeouts {
            rate_window: Duration::ZERO,
            ..limits(u64::MAX)
        };
        let slow = send_with(zero, 3_000, 100, Duration::from_millis(20));
        assert!(tokio::time::timeout(Duration::from_secs(10), slow)
            .await
            .is_ok_and(|r| r.is_ok()));
    }

    #[test]
    fn time_spent_not_waiting_on_the_client_does_not_count() {
        let l = limits(1_000_000);
        let mut r = WriteRate::new();
        let t0 = Instant::now();
        r.since = Some(t0);
        r.drained();
        // A long pause between answers: nothing waited, so nothing is due.
        assert!(r.check(&l, t0 + Duration::from_secs(3600)).is_ok());
        r.since = Some(t0);
        assert!(r.check(&l, t0 + Duration::from_millis(250)).is_err());
        // Enough bytes over the window pass, and the window starts over.
        let mut r = WriteRate::new();
        r.since = Some(t0);
        r.bytes = 300_000;
        assert!(r.check(&l, t0 + Duration::from_millis(250)).is_ok());
        assert_eq!(r.bytes, 0);
        // Huge rates and windows saturate instead of overflowing.
        let huge = Timeouts {
            min_write_rate: u64::MAX,
            rate_window: Duration::from_millis(1),
            ..l
        };
        r.since = Some(t0);
        assert!(r.check(&huge, t0 + Duration::from_secs(1 << 40)).is_err());
    }
}
