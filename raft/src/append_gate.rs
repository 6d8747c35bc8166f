//! The gate a snapshot stage closes on the log store's appends before it decides whether the
//! log is kept (review s22 snapshot H2): an append that passed the gate before it closed is
//! waited for until its records are written, so the keep decision sees them; one that comes
//! later is refused, since it could be acknowledged and then lost with a replaced log.

use std::sync::{Condvar, Mutex, MutexGuard};

#[derive(Default)]
struct State {
    closed: bool,
    /// Appends that passed the gate and have not yet written their records (or failed).
    passing: usize,
}

#[derive(Default)]
pub(crate) struct AppendGate {
    state: Mutex<State>,
    drained: Condvar,
}

/// One append through the gate; dropping it (written, failed or cancelled) lets a closing
/// stage go on.
pub(crate) struct Pass<'g>(&'g AppendGate);

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.passing = s.passing.saturating_sub(1);
        if s.passing == 0 {
            self.0.drained.notify_all();
        }
    }
}

impl AppendGate {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Two plain numbers: a panic while holding the lock leaves a usable value behind.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// None once the gate is closed. Never blocks for long (the lock guards two numbers).
    pub(crate) fn enter(&self) -> Option<Pass<'_>> {
        let mut s = self.lock();
        if s.closed {
            return None;
        }
        s.passing += 1;
        Some(Pass(self))
    }

    /// Closes the gate and waits until every append that passed it is done. Blocking: never
    /// call it from a runtime worker (the appends it waits for run there).
    pub(crate) fn close_and_drain(&self) {
        let mut s = self.lock();
        s.closed = true;
        while s.passing > 0 {
            s = self.drained.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Opens the gate again (a stage that changed nothing).
    pub(crate) fn open(&self) {
        self.lock().closed = false;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{channel, RecvTimeoutError};
    use std::time::Duration;

    use super::AppendGate;

    #[test]
    fn closing_waits_for_appends_that_passed_and_refuses_later_ones() {
        let gate = AppendGate::default();
        let pass = gate.enter().unwrap();
        std::thread::scope(|s| {
            let (tx, rx) = channel();
            let g = &gate;
            s.spawn(move || {
                g.close_and_drain();
                tx.send(()).unwrap();
            });
            // Cannot pass falsely: a close that did not wait would have answered by now.
            let early = rx.recv_timeout(Duration::from_millis(300));
            assert_eq!(early, Err(RecvTimeoutError::Timeout));
            drop(pass);
            rx.recv().unwrap();
        });
        assert!(
            gate.enter().is_none(),
            "an append after the close got through"
        );
        gate.open();
        assert!(gate.enter().is_some());
    }
}
