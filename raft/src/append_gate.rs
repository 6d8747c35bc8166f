//! The gate a snapshot stage closes on the log store's appends before it decides whether the
//! log is kept (review s22 snapshot H2): an append that passed the gate before it closed is
//! waited for until its records are written, so the keep decision sees them. One that comes
//! while the stage decides waits for its outcome (review s23 M2: a refused stage must not
//! stop the group): it goes on once the stage is refused, and is refused once a stage is
//! staged, since it could then be acknowledged and lost with a replaced log.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
enum Phase {
    #[default]
    Open,
    /// A stage is deciding: appends wait.
    Closing,
    /// A stage is staged: appends are refused until the group is reopened.
    Staged,
}

#[derive(Default)]
struct State {
    phase: Phase,
    /// Appends that passed the gate and have not yet written their records (or failed).
    passing: usize,
}

#[derive(Default)]
pub(crate) struct AppendGate {
    state: Mutex<State>,
    drained: Condvar,
    /// Wakes the appends waiting on a closing gate when the stage's outcome is known.
    decided: tokio::sync::Notify,
}

/// One append through the gate. It owns its gate, so the log writer thread can hold it until
/// the records are written: dropping the append's future after its job was sent must not let
/// a closing stage go on before those records are in the log (review s23 L1).
pub(crate) struct Pass(Arc<AppendGate>);

impl Drop for Pass {
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
        // Plain data: a panic while holding the lock leaves a usable value behind.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A pass while the gate is open; waits while a stage decides; None once one is staged.
    pub(crate) async fn enter(self: &Arc<Self>) -> Option<Pass> {
        loop {
            // Created before the phase is read: `notify_waiters` reaches a future from its
            // creation on, so an outcome published between the read and the await is not lost.
            let decided = self.decided.notified();
            {
                let mut s = self.lock();
                match s.phase {
                    Phase::Open => {
                        s.passing += 1;
                        return Some(Pass(self.clone()));
                    }
                    Phase::Staged => return None,
                    Phase::Closing => {}
                }
            }
            decided.await;
        }
    }

    /// Closes the gate and waits until every append that passed it is done. Blocking: never
    /// call it from a runtime worker (the appends it waits for run there).
    pub(crate) fn close_and_drain(&self) {
        let mut s = self.lock();
        s.phase = Phase::Closing;
        while s.passing > 0 {
            s = self.drained.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Opens the gate again (a stage that changed nothing); waiting appends go on.
    pub(crate) fn open(&self) {
        self.decide(Phase::Open);
    }

    /// A stage is staged: waiting and later appends are refused.
    pub(crate) fn seal(&self) {
        self.decide(Phase::Staged);
    }

    /// Whether a stage is deciding (tests wait for it before they append).
    #[cfg(test)]
    pub(crate) fn is_closing(&self) -> bool {
        self.lock().phase == Phase::Closing
    }

    fn decide(&self, phase: Phase) {
        self.lock().phase = phase;
        self.decided.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{channel, RecvTimeoutError};
    use std::sync::Arc;
    use std::time::Duration;

    use super::AppendGate;

    /// Cannot pass falsely: a close that did not wait would have answered within the bound.
    const QUIET: Duration = Duration::from_millis(300);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn closing_waits_for_passes_and_a_refused_stage_lets_waiting_appends_on() {
        let gate = Arc::new(AppendGate::default());
        let pass = gate.enter().await.unwrap();
        close_waits_for(&gate, pass);

        // An append meeting the closing gate waits, neither passed nor refused.
        let g = gate.clone();
        let waiting = tokio::spawn(async move { g.enter().await.is_some() });
        tokio::time::sleep(QUIET).await;
        assert!(
            !waiting.is_finished(),
            "an append got an answer while the stage decided"
        );
        gate.open();
        assert!(
            waiting.await.unwrap(),
            "refused after the stage was refused"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_staged_gate_refuses_waiting_and_later_appends() {
        let gate = Arc::new(AppendGate::default());
        let g = gate.clone();
        tokio::task::spawn_blocking(move || g.close_and_drain())
            .await
            .unwrap();
        let g = gate.clone();
        let waiting = tokio::spawn(async move { g.enter().await.is_some() });
        tokio::time::sleep(QUIET).await;
        assert!(!waiting.is_finished());
        gate.seal();
        assert!(!waiting.await.unwrap(), "an append passed a staged gate");
        assert!(gate.enter().await.is_none());
    }

    /// The pass outlives the future that took it (review s23 L1): moved elsewhere (the log
    /// writer's job), it holds the close until it is dropped there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pass_moved_out_of_a_cancelled_append_still_holds_the_close() {
        let gate = Arc::new(AppendGate::default());
        let (job_tx, job_rx) = channel();
        let g = gate.clone();
        let append = tokio::spawn(async move {
            let pass = g.enter().await.unwrap();
            job_tx.send(pass).unwrap();
            std::future::pending::<()>().await;
        });
        let pass = tokio::task::spawn_blocking(move || job_rx.recv().unwrap())
            .await
            .unwrap();
        append.abort();
        assert!(append.await.unwrap_err().is_cancelled());
        close_waits_for(&gate, pass);
    }

    /// Closes `gate` on a thread: the close must wait while `pass` lives, and end once it drops.
    fn close_waits_for<P>(gate: &Arc<AppendGate>, pass: P) {
        let (tx, rx) = channel();
        let g = gate.clone();
        let closer = std::thread::spawn(move || {
            g.close_and_drain();
            tx.send(()).unwrap();
        });
        assert_eq!(rx.recv_timeout(QUIET), Err(RecvTimeoutError::Timeout));
        drop(pass);
        rx.recv().unwrap();
        closer.join().unwrap();
    }
}
