//! A waiting ephemeral pop (`wait=true`): its long-poll slot first, then messages, then, if
//! none came or a `windowBuffer` is open, parked on the queue's gate until the deadline.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::ephemeral_door::{EphemeralDoor, EphemeralMessage, EphemeralRefusal, PopAsk};

/// The slot is asked for before anything is popped. Without one the pop cannot wait: it
/// answers at once what is there, as a pop without `wait`, and only an empty answer is
/// refused, so nothing a pop took is ever thrown away or charged an attempt (review s14 R1).
///
/// A push wakes one waiter of a gate (`notify_one`), and only a pop rings it for the next:
/// so every wait is followed by a pop, even past the deadline, and a waiter that used a wake
/// but leaves without popping (a refusal, the queue deleted) rings its gate again. Otherwise
/// the wake dies with it and the other waiters sleep to their timeouts beside a due message
/// (review s18 ephemeral H1; the last pop also finds a lease that ended meanwhile, M3).
pub async fn pop_waiting(
    store: &dyn EphemeralDoor,
    tenant: &str,
    ask: &PopAsk<'_>,
    timeout_ms: u64,
) -> Result<Vec<EphemeralMessage>, EphemeralRefusal> {
    let Some(_slot) = store.wait_slot(tenant) else {
        let got = store.pop(tenant, ask)?;
        if got.is_empty() {
            return Err(EphemeralRefusal::Unavailable(
                "too many waiting pops".into(),
            ));
        }
        return Ok(got);
    };
    let mut got = store.pop(tenant, ask)?;
    let mut waiter = Waiter {
        store,
        tenant,
        ask,
        gate: None,
        woken: None,
    };
    let out = waiting(&mut waiter, timeout_ms, &mut got).await;
    drop(waiter);
    out.map(|()| got)
}

/// A waiting pop's hold on its gate. Dropped when the pop answers, or when its request goes
/// away mid-wait: either way the wake it used is handed on and its gate let go, which the
/// store drops if no other waiter holds it (review s20 ephemeral M3: an unheld gate stayed,
/// charged, until a push or the sweep met it). The gate lives here, not in the wait's own
/// frame, so the wait (which borrows it) is always gone before the store is told.
struct Waiter<'a> {
    store: &'a dyn EphemeralDoor,
    tenant: &'a str,
    ask: &'a PopAsk<'a>,
    /// The gate it parks on.
    gate: Option<Arc<Notify>>,
    /// The gate whose wake this waiter used and has not popped after yet.
    woken: Option<Arc<Notify>>,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        if let Some(gate) = self.woken.take() {
            gate.notify_one();
        }
        if self.gate.take().is_some() {
            self.store.unwait(self.tenant, self.ask);
        }
    }
}

async fn waiting(
    w: &mut Waiter<'_>,
    timeout_ms: u64,
    got: &mut Vec<EphemeralMessage>,
) -> Result<(), EphemeralRefusal> {
    let (store, tenant, ask) = (w.store, w.tenant, w.ask);
    let start = tokio::time::Instant::now();
    // Until something arrives; then, with a windowBuffer, a little longer to fatten it.
    let mut until = start + Duration::from_millis(timeout_ms);
    loop {
        if got.len() >= ask.batch {
            return Ok(());
        }
        let (window_ms, window_count) = store.window(tenant, ask.queue);
        let want = (window_count as usize).clamp(1, ask.batch);
        if !got.is_empty() {
            if window_ms == 0 || got.len() >= want {
                return Ok(());
            }
            until =
                until.min(tokio::time::Instant::now() + Duration::from_millis(window_ms.into()));
        }
        let gate = match store.wake(tenant, ask) {
            Ok(Some(gate)) => gate,
            Ok(None) => return Ok(()),
            // No room for its gate: what this pop already took is answered.
            Err(_) if !got.is_empty() => return Ok(()),
            Err(e) => return Err(e),
        };
        let gate = &*w.gate.insert(gate);
        let rung = gate.notified();
        tokio::pin!(rung);
        rung.as_mut().enable();
        let more = match store.pop(
            tenant,
            &PopAsk {
                batch: ask.batch - got.len(),
                existing: true,
                ..ask.clone()
            },
        ) {
            Ok(more) => more,
            // Deleted since `wake` (review s14 R6): answered with what it has.
            Err(EphemeralRefusal::NotFound) => return Ok(()),
            // What this pop already took is answered, never thrown away.
            Err(_) if !got.is_empty() => return Ok(()),
            Err(e) => return Err(e),
        };
        w.woken = None;
        let empty = more.is_empty();
        got.extend(more);
        if !empty {
            continue;
        }
        if tokio::time::Instant::now() >= until {
            return Ok(());
        }
        tokio::select! {
            _ = &mut rung => w.woken = Some(gate.clone()),
            _ = tokio::time::sleep_until(until) => {}
        }
    }
}
