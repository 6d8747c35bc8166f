//! A panic in the engine task ends that group's engine with the panic's message instead of
//! unwinding into the runtime: the group's supervisor (crate::group) rebuilds the group from
//! checkpoint and log in the process (every answered write is in the log), and the node's
//! other groups and its door go on.
//!
//! Also the test-only fault hook: `QUEEN_TEST_PANIC_AFTER_CYCLES=N` panics the engine in its
//! N-th cycle of this process (once). Compiled in so tests run the shipped binary; inert
//! unless set.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

/// Runs the engine's future; a panic inside becomes `Err(message)`.
pub struct CatchPanic<F> {
    inner: Pin<Box<F>>,
}

impl<F, E> CatchPanic<F>
where
    F: Future<Output = Result<(), E>>,
{
    pub fn new(inner: F) -> Self {
        CatchPanic {
            inner: Box::pin(inner),
        }
    }
}

impl<F, E> Future for CatchPanic<F>
where
    F: Future<Output = Result<(), E>>,
    E: From<String>,
{
    type Output = Result<(), E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), E>> {
        let this = self.get_mut();
        match catch_unwind(AssertUnwindSafe(|| this.inner.as_mut().poll(cx))) {
            Ok(p) => p,
            Err(payload) => {
                let why = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".to_string());
                tracing::error!(panic = %why, "the engine task panicked; the group is rebuilt from checkpoint and log");
                Poll::Ready(Err(E::from(format!("the engine panicked: {why}"))))
            }
        }
    }
}

/// The environment variable of the test-only fault hook.
pub const TEST_PANIC_ENV: &str = "QUEEN_TEST_PANIC_AFTER_CYCLES";

pub fn test_panic_after() -> Option<u64> {
    let n = std::env::var(TEST_PANIC_ENV)
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()?;
    tracing::warn!(
        cycles = n,
        "{TEST_PANIC_ENV} is set: the engine will panic on purpose (test-only hook)"
    );
    Some(n)
}

static CYCLES: AtomicU64 = AtomicU64::new(0);

/// Counts a cycle with effects; panics on the `after`-th (only: the rebuilt group goes on).
pub fn maybe_panic(after: u64) {
    let n = CYCLES.fetch_add(1, Ordering::Relaxed) + 1;
    if n == after {
        panic!("{TEST_PANIC_ENV}={after} reached: test-only panic in cycle {n}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: Future>(f: F) -> F::Output {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(f)
    }

    #[test]
    fn a_future_that_does_not_panic_passes_through() {
        assert_eq!(
            block_on(CatchPanic::new(async { Ok::<(), String>(()) })),
            Ok(())
        );
        let failed = block_on(CatchPanic::new(async { Err("log failed".to_string()) }));
        assert_eq!(failed, Err("log failed".to_string()));
    }

    #[test]
    fn a_panic_becomes_the_engines_failure() {
        let out = block_on(CatchPanic::new(async {
            if std::hint::black_box(true) {
                panic!("boom");
            }
            Ok(())
        }));
        assert_eq!(out, Err("the engine panicked: boom".to_string()));
    }
}
