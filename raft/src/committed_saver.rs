//! Persists the committed log id in the background, latest value wins.
//!
//! openraft calls `save_committed` on every commit advance, inside its core loop and before it
//! applies anything. Writing it durably there would put a second fsync (redb's commit) in
//! series with the log's fsync on every write. It does not need to be: the persisted committed
//! id only lets a restart re-apply sooner, and it is safe for it to lag, never to lead — it
//! is only ever set after the entries it names were flushed and committed. A lagging value
//! means a restarted single voter commits the rest with its first blank entry instead, which
//! `RaftNode::start_single` waits for anyway. So the core loop records it in memory and this
//! thread writes the newest value whenever redb is free, coalescing bursts into one commit.
//!
//! At start the broker reads the persisted value (`meta::read_persisted`) and opens the log with
//! it as `durable_through`: recovery refuses to cut at or below it, because those entries were
//! acknowledged. Above it, a torn tail is still cut, since the value may lag.
//!
//! Paced: a redb commit costs its own fsyncs on the same disk as the log, and under load a
//! new committed id arrives every few milliseconds. Saving at most every `PACE` keeps that
//! disk time off the write path; stopping still saves the newest value at once.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use openraft::ErrorSubject;

use crate::backend::StateStore;
use crate::meta;
use crate::types::RaftLogId;

/// Least time between two saves while running.
const PACE: Duration = Duration::from_millis(500);

#[derive(Default)]
struct State {
    latest: Option<RaftLogId>,
    saved: Option<RaftLogId>,
    failure: Option<String>,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock leaves plain data behind; keep going with it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub struct CommittedSaver {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl CommittedSaver {
    /// `saved` is the value already on disk.
    pub fn spawn(
        store: Arc<StateStore>,
        saved: Option<RaftLogId>,
    ) -> std::io::Result<CommittedSaver> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                latest: saved,
                saved,
                ..State::default()
            }),
            wake: Condvar::new(),
        });
        let for_thread = shared.clone();
        let thread = std::thread::Builder::new()
            .name("raft-committed".into())
            .spawn(move || run(&store, &for_thread))?;
        Ok(CommittedSaver {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Records `committed` for the thread to persist. Fails if an earlier write failed, because
    /// then the state store is broken and openraft should stop rather than go on.
    pub fn set(&self, committed: Option<RaftLogId>) -> Result<(), String> {
        let mut st = self.shared.lock();
        if let Some(f) = &st.failure {
            return Err(f.clone());
        }
        st.latest = committed;
        drop(st);
        self.shared.wake.notify_one();
        Ok(())
    }

    pub fn latest(&self) -> Option<RaftLogId> {
        self.shared.lock().latest
    }

    /// Writes the newest value if it is not on disk yet, then ends the thread. Blocks.
    pub fn stop_and_join(&self) {
        self.signal_stop();
        let handle = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(handle) = handle {
            if handle.join().is_err() {
                tracing::error!("the raft committed-id saver thread panicked");
            }
        }
    }

    fn signal_stop(&self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
    }
}

impl Drop for CommittedSaver {
    fn drop(&mut self) {
        // Without an explicit stop the thread would wait forever; it still saves the last value.
        self.signal_stop();
    }
}

fn run(store: &StateStore, shared: &Shared) {
    let mut st = shared.lock();
    loop {
        while st.latest == st.saved && !st.stop {
            st = shared.wake.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if st.latest == st.saved || st.failure.is_some() {
            return;
        }
        let value = st.latest;
        drop(st);
        let result = meta::put(store, meta::COMMITTED, &value, ErrorSubject::Store);
        st = shared.lock();
        match result {
            Ok(()) => st.saved = value,
            Err(e) => {
                tracing::error!(error = %e, "persisting the raft committed log id failed");
                st.failure = Some(e.to_string());
                return;
            }
        }
        let until = Instant::now() + PACE;
        while !st.stop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = shared
                .wake
                .wait_timeout(st, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}

#[cfg(test)]
mod tests {
    use openraft::ErrorSubject;

    use super::*;
    use crate::types::log_id;

    fn stored(store: &StateStore) -> Option<RaftLogId> {
        meta::get::<Option<RaftLogId>>(store, meta::COMMITTED, ErrorSubject::Store)
            .unwrap()
            .flatten()
    }

    #[test]
    fn the_newest_value_is_on_disk_after_stop() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(StateStore::open(&dir.path().join("s.redb")).unwrap());
        let saver = CommittedSaver::spawn(store.clone(), None).unwrap();
        for i in 0..500 {
            saver.set(Some(log_id(1, i))).unwrap();
        }
        assert_eq!(
            saver.latest(),
            Some(log_id(1, 499)),
            "readers see the newest at once"
        );
        saver.stop_and_join();
        assert_eq!(stored(&store), Some(log_id(1, 499)));
    }

    #[test]
    fn dropping_without_stop_still_saves_the_newest_value() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(StateStore::open(&dir.path().join("s.redb")).unwrap());
        let saver = CommittedSaver::spawn(store.clone(), None).unwrap();
        saver.set(Some(log_id(2, 7))).unwrap();
        let thread = saver.thread.lock().unwrap().take().unwrap();
        drop(saver);
        thread.join().unwrap();
        assert_eq!(stored(&store), Some(log_id(2, 7)));
    }
}
