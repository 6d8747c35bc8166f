//! A waiting ephemeral pop (`wait=true`): its long-poll slot first, then messages, then, if
//! none came or a `windowBuffer` is open, parked on the queue's gate until the deadline.

use std::time::Duration;

use crate::ephemeral_door::{EphemeralDoor, EphemeralMessage, EphemeralRefusal, PopAsk};

/// The slot is asked for before anything is popped. Without one the pop cannot wait: it
/// answers at once what is there, as a pop without `wait`, and only an empty answer is
/// refused, so nothing a pop took is ever thrown away or charged an attempt (review s14 R1).
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
    let start = tokio::time::Instant::now();
    // Until something arrives; then, with a windowBuffer, a little longer to fatten it.
    let mut until = start + Duration::from_millis(timeout_ms);
    loop {
        let (window_ms, window_count) = store.window(tenant, ask.queue);
        let want = (window_count as usize).clamp(1, ask.batch);
        if !got.is_empty() {
            if window_ms == 0 || got.len() >= want {
                break;
            }
            until =
                until.min(tokio::time::Instant::now() + Duration::from_millis(window_ms.into()));
        }
        if tokio::time::Instant::now() >= until {
            break;
        }
        let Some(gate) = store.wake(tenant, ask) else {
            break;
        };
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
            Err(EphemeralRefusal::NotFound) => break,
            // What this pop already took is answered, never thrown away.
            Err(_) if !got.is_empty() => break,
            Err(e) => return Err(e),
        };
        if more.is_empty() {
            tokio::select! {
                _ = &mut rung => {}
                _ = tokio::time::sleep_until(until) => {}
            }
        }
        got.extend(more);
        if got.len() >= ask.batch {
            break;
        }
    }
    Ok(got)
}
