//! The Raft state-machine seam: committed entries are applied to the shared state. On the
//! leader the planner already applied them (same cycle number), so only the log position moves.

use std::sync::Arc;

use queenmq_raft::ApplyHandler;

use super::{record_cow_copies, Shared};
pub use queenmq_engine::apply::apply_entry;
use queenmq_engine::state::{cow_clock, decode_state, encode_state};

pub struct EngineApply {
    shared: Arc<Shared>,
    checkpointed: Option<(u64, u64)>,
    /// The `tenant` label of the copies a follower's apply makes.
    tenant: Arc<str>,
}

impl EngineApply {
    pub fn new(shared: Arc<Shared>, tenant: Arc<str>) -> Self {
        let checkpointed = shared.lock().applied;
        EngineApply {
            shared,
            checkpointed,
            tenant,
        }
    }
}

impl ApplyHandler for EngineApply {
    fn apply(&self, index: u64, term: u64, payload: &[u8]) -> Result<(), String> {
        let mut st = self.shared.lock();
        // A follower's apply writes blocks a checkpoint may still share, under the lock on
        // the Raft apply thread: time its copies as a cycle's are (review s26 ckpt M4). What
        // this thread counted before is not this stretch's.
        let _ = cow_clock::take();
        let applied = apply_entry(&mut st, index, term, payload);
        record_cow_copies(&self.tenant, cow_clock::take());
        applied.map_err(|e| {
            // A committed entry we cannot read means a bug or corruption past the CRC:
            // applying around it would diverge, so the group stops here and its owner
            // rebuilds it.
            tracing::error!(index, error = %e, "committed entry does not decode; stopping the group");
            format!("committed entry {index} does not decode: {e}")
        })
    }

    fn checkpointed(&self) -> Option<(u64, u64)> {
        self.checkpointed
    }

    fn snapshot(&self) -> (Option<(u64, u64)>, Vec<u8>) {
        let st = self.shared.lock();
        (st.applied, encode_state(&st))
    }

    fn restore(&self, index: u64, term: u64, bytes: &[u8]) -> Result<(), String> {
        let mut s = decode_state(bytes).map_err(|e| {
            tracing::error!(index, error = %e, "snapshot does not decode; stopping the group");
            format!("snapshot at {index} does not decode: {e}")
        })?;
        s.applied = Some((index, term));
        let mut st = self.shared.lock();
        // The node's own id files and filters stay: they are not state (state/txn_spill.rs).
        s.txn_spill = st.txn_spill.take();
        if let Some(spill) = s.txn_spill.as_mut() {
            spill.table_replaced();
        }
        *st = s;
        Ok(())
    }
}
