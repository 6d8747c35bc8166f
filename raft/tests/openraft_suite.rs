//! openraft's own storage suite (`openraft::testing::Suite::test_all`) on this crate's
//! `LogStore` and `StateMachine`, each case on fresh on-disk stores in its own temp dir.
//! What it found and how the store meets it: docs/raft-storage.md "openraft's storage suite".

// openraft's storage traits return `openraft::StorageError` (~200 bytes) by value.
#![allow(clippy::result_large_err)]

use std::sync::{Arc, Mutex};

use openraft::storage::RaftLogStorage;
use openraft::testing::{StoreBuilder, Suite};
use openraft::{
    AnyError, ErrorSubject, ErrorVerb, RaftLogReader, StorageError, StorageIOError, Vote,
};
use queenmq_raft::{ApplyHandler, LogStore, StateMachine, TypeConfig};
use queenmq_storage::{LogOptions, SegmentLog, StateStore};
use tempfile::TempDir;

type Error = StorageError<u64>;

/// An engine stand-in: counts applied entries, snapshots as that count.
#[derive(Default)]
struct Counter {
    applied: Mutex<Option<(u64, u64, u64)>>,
}

impl ApplyHandler for Counter {
    fn apply(&self, index: u64, term: u64, _payload: &[u8]) -> Result<(), String> {
        let mut a = self.applied.lock().map_err(|e| e.to_string())?;
        let n = a.map_or(0, |(_, _, n)| n);
        *a = Some((index, term, n + 1));
        Ok(())
    }

    fn checkpointed(&self) -> Option<(u64, u64)> {
        None
    }

    fn snapshot(&self) -> (Option<(u64, u64)>, Vec<u8>) {
        let a = self.applied.lock().ok().and_then(|a| *a);
        let n = a.map_or(0, |(_, _, n)| n);
        (a.map(|(i, t, _)| (i, t)), n.to_le_bytes().to_vec())
    }

    fn restore(&self, index: u64, term: u64, bytes: &[u8]) -> Result<(), String> {
        let n: [u8; 8] = bytes.try_into().map_err(|_| "not a counter".to_string())?;
        *self.applied.lock().map_err(|e| e.to_string())? =
            Some((index, term, u64::from_le_bytes(n)));
        Ok(())
    }
}

fn io(e: impl std::error::Error + 'static) -> Error {
    StorageIOError::new(ErrorSubject::Store, ErrorVerb::Write, AnyError::new(&e)).into()
}

/// Opens a fresh segment log and state store in a new temp dir, as the broker lays them out.
fn fresh() -> Result<(TempDir, LogStore, StateMachine), Error> {
    let dir = tempfile::tempdir().map_err(io)?;
    let log_dir = dir.path().join("log");
    std::fs::create_dir_all(&log_dir).map_err(io)?;
    let (log, _report) = SegmentLog::open(&log_dir, LogOptions::default()).map_err(io)?;
    let store = Arc::new(StateStore::open(&dir.path().join("state.redb")).map_err(io)?);
    let log_store = LogStore::open(Arc::new(log), store.clone())?;
    let (sm, _gone) = StateMachine::open(Arc::new(Counter::default()), store)?;
    Ok((dir, log_store, sm))
}

struct Raw;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for Raw {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), Error> {
        fresh()
    }
}

/// Every case of openraft's suite, as openraft runs it: a new case in a new openraft
/// version runs here without an edit.
#[test]
fn openraft_storage_suite_passes() {
    if let Err(e) = Suite::<TypeConfig, LogStore, StateMachine, Raw, TempDir>::test_all(Raw) {
        panic!("openraft's storage suite failed: {e}");
    }
}

/// The case that found it: `get_initial_state` purges to the state machine's applied id
/// (1, 2) over an empty log, then the case appends index 1 and later index 3. Index 1 is at or
/// below the horizon, purged by definition: storing it made the segment log expect 2 next and
/// refuse 3. Now it is not stored and the log continues right after the horizon.
#[test]
fn an_append_at_or_below_the_purge_horizon_is_not_stored() {
    type S = Suite<TypeConfig, LogStore, StateMachine, Raw, TempDir>;
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let (_dir, store, sm) = Raw.build().await.expect("build");
        let mut kept = store.clone();
        S::get_initial_state_membership_from_log_and_sm(store, sm)
            .await
            .expect("the case passes");
        let entries = kept.try_get_log_entries(0..).await.expect("read");
        let indexes: Vec<u64> = entries.iter().map(|e| e.log_id.index).collect();
        assert_eq!(indexes, vec![3], "index 1 was below the horizon");
        let state = kept.get_log_state().await.expect("state");
        assert_eq!(state.last_purged_log_id.map(|p| p.index), Some(2));
        assert_eq!(state.last_log_id.map(|p| p.index), Some(3));
    });
}

#[test]
fn every_build_is_a_fresh_store() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let (_d1, mut a, _) = Raw.build().await.expect("build");
        let (_d2, mut b, _) = Raw.build().await.expect("build");
        a.save_vote(&Vote::new(3, 1)).await.expect("save");
        assert_eq!(b.read_vote().await.expect("read"), None);
    });
}
