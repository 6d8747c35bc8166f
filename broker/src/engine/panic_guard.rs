//! A panic in the engine task stops the process (exit 70) instead of leaving a node whose bus
//! is closed and that answers 503 for ever: whoever supervises the process restarts it, and
//! recovery rebuilds the state from checkpoint and log (every answered write is in the log).
//!
//! Also the test-only fault hook: `QUEEN_TEST_PANIC_AFTER_CYCLES=N` panics the engine in its
//! N-th cycle of this process. Compiled in so tests run the shipped binary; inert unless set.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

/// Exit code of a process stopped by an engine panic.
pub const PANIC_EXIT: i32 = 70;

pub struct ExitOnPanic<F> {
    inner: Pin<Box<F>>,
}

impl<F: Future<Output = ()>> ExitOnPanic<F> {
    pub fn new(inner: F) -> Self {
        ExitOnPanic {
            inner: Box::pin(inner),
        }
    }
}

impl<F: Future<Output = ()>> Future for ExitOnPanic<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        match catch_unwind(AssertUnwindSafe(|| this.inner.as_mut().poll(cx))) {
            Ok(p) => p,
            Err(payload) => {
                let why = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".to_string());
                tracing::error!(panic = %why, "the engine task panicked; stopping so a restart recovers from checkpoint and log");
                eprintln!("queen: the engine task panicked ({why}); exiting");
                std::process::exit(PANIC_EXIT);
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

/// Counts a cycle with effects; panics on the `after`-th.
pub fn maybe_panic(after: u64) {
    let n = CYCLES.fetch_add(1, Ordering::Relaxed) + 1;
    if n >= after {
        panic!("{TEST_PANIC_ENV}={after} reached: test-only panic in cycle {n}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_future_that_does_not_panic_passes_through() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(ExitOnPanic::new(async {}));
    }
}
