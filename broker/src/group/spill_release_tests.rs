//! Review s27 M3: the failed incarnation's id-file writer is stopped before the next one opens
//! `ids/`, even while something still holds the failed state.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use queenmq_engine::dedup_filter::FilterConfig;
use queenmq_engine::state::{IdStore, TxnSpill};

use crate::engine::Shared;
use crate::state::State;

/// A store that says when the last holder (the spill or its writer thread) let it go.
struct Watched {
    released: Arc<AtomicBool>,
    /// One file of bucket 0, so the writer is started at open.
    pairs: Vec<(u64, u64)>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.released.store(true, Ordering::SeqCst);
    }
}

impl IdStore for Watched {
    fn write(&self, _: u64, _: &mut [(u64, u64)]) -> Result<(), String> {
        Ok(())
    }
    fn buckets(&self) -> Vec<u64> {
        vec![0]
    }
    fn keys(&self, _: u64, each: &mut dyn FnMut(u64)) -> Result<(), String> {
        self.pairs.iter().for_each(|(k, _)| each(*k));
        Ok(())
    }
    fn find(&self, _: u64, _: u64, _: &mut dyn FnMut(u64) -> bool) -> Result<Option<u64>, String> {
        Ok(None)
    }
    fn merge(&self, _: u64) {}
    fn remove_before(&self, _: u64) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spill_writer_is_joined_while_the_failed_state_is_still_held() {
    let released = Arc::new(AtomicBool::new(false));
    let store = Watched {
        released: released.clone(),
        pairs: vec![(7, 1)],
    };
    let filter = FilterConfig {
        bytes: 64 << 10,
        ..FilterConfig::default()
    };
    let spill = TxnSpill::open(Box::new(store), 16, filter, 3_600_000_000, 60_000_000);
    assert!(spill.writer_started(), "files at open start the writer");
    let state = State {
        txn_spill: Some(Box::new(spill)),
        ..State::default()
    };
    let shared = Shared::new(state);
    // A holder of the failed state that outlives the incarnation (as EngineApply may).
    let lingering = shared.clone();
    super::supervisor::join_spill_writer(&shared).await;
    drop(shared);
    assert!(
        released.load(Ordering::SeqCst),
        "the writer and its store are gone before the next incarnation opens"
    );
    assert!(lingering.lock().txn_spill.is_none());
}
