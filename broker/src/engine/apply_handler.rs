//! The Raft state-machine seam: committed entries are applied to the shared state. On the
//! leader the planner already applied them (same cycle number), so only the log position moves.

use std::sync::Arc;

use queenmq_raft::ApplyHandler;

use super::Shared;
use crate::entry::decode_entry;
use crate::state::{decode_state, encode_state, Loc};

pub struct EngineApply {
    shared: Arc<Shared>,
    checkpointed: Option<(u64, u64)>,
}

impl EngineApply {
    pub fn new(shared: Arc<Shared>) -> Self {
        let checkpointed = shared.lock().applied;
        EngineApply {
            shared,
            checkpointed,
        }
    }
}

impl ApplyHandler for EngineApply {
    fn apply(&self, index: u64, term: u64, payload: &[u8]) -> Result<(), String> {
        // A committed entry we cannot read means a bug or corruption past the CRC: applying
        // around it would diverge, so the group stops here and its owner rebuilds it.
        let (header, effects) = decode_entry(payload).map_err(|e| {
            tracing::error!(index, error = %e, "committed entry does not decode; stopping the group");
            format!("committed entry {index} does not decode: {e}")
        })?;
        let mut st = self.shared.lock();
        if header.cycle > st.last_cycle {
            for (e, pos) in &effects {
                st.apply(e, header.now_us, Loc { index, pos: *pos });
            }
            st.last_cycle = header.cycle;
            st.last_now_us = st.last_now_us.max(header.now_us);
        }
        st.applied = Some((index, term));
        Ok(())
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
        *self.shared.lock() = s;
        Ok(())
    }
}
