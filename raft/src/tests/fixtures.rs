//! Shared pieces of this crate's tests: a recording ApplyHandler and on-disk stores.

use std::path::Path;
use std::sync::{Arc, Mutex};

use queenmq_storage::LogOptions;

use crate::backend::{SegmentLog, StateStore};
use crate::ApplyHandler;

/// Records every applied entry; its checkpoint is fixed at construction.
pub struct Recorder {
    checkpoint: Option<(u64, u64)>,
    applied: Mutex<Vec<(u64, u64, Vec<u8>)>>,
}

impl Recorder {
    pub fn new(checkpoint: Option<(u64, u64)>) -> Arc<Recorder> {
        Arc::new(Recorder {
            checkpoint,
            applied: Mutex::new(Vec::new()),
        })
    }

    pub fn applied(&self) -> Vec<(u64, u64, Vec<u8>)> {
        self.applied.lock().unwrap().clone()
    }
}

impl ApplyHandler for Recorder {
    fn apply(&self, index: u64, term: u64, payload: &[u8]) {
        self.applied
            .lock()
            .unwrap()
            .push((index, term, payload.to_vec()));
    }

    fn checkpointed(&self) -> Option<(u64, u64)> {
        self.checkpoint
    }

    fn snapshot(&self) -> (Option<(u64, u64)>, Vec<u8>) {
        let applied = self.applied.lock().unwrap();
        let last = applied.last().map(|(i, t, _)| (*i, *t)).or(self.checkpoint);
        (last, applied.len().to_le_bytes().to_vec())
    }

    fn restore(&self, _index: u64, _term: u64, _bytes: &[u8]) {
        self.applied.lock().unwrap().clear();
    }
}

/// Opens the segment log and state store under `dir`, as the broker lays them out.
pub fn open_stores(dir: &Path) -> (Arc<SegmentLog>, Arc<StateStore>) {
    let log_dir = dir.join("log");
    std::fs::create_dir_all(&log_dir).unwrap();
    let (log, _report) = SegmentLog::open(&log_dir, LogOptions::default()).unwrap();
    let store = StateStore::open(&dir.join("state.redb")).unwrap();
    (Arc::new(log), Arc::new(store))
}
