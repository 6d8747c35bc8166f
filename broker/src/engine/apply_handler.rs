//! The Raft state-machine seam: committed entries are applied to the shared state. On the
//! leader the planner already applied them (same cycle number), so only the log position moves.

use std::sync::Arc;

use queenmq_raft::ApplyHandler;

use super::Shared;
use crate::codec::DecodeError;
use crate::entry::decode_entry;
use crate::state::{decode_state, encode_state, Loc, State};

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

/// Applies one committed entry: the same path for a follower, a replay at start and the
/// leader. The leader already applied the effects while planning (its `last_cycle` is at the
/// entry's cycle), so for it only the log position moves.
pub fn apply_entry(
    st: &mut State,
    index: u64,
    term: u64,
    payload: &[u8],
) -> Result<(), DecodeError> {
    let (header, effects) = decode_entry(payload)?;
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

impl ApplyHandler for EngineApply {
    fn apply(&self, index: u64, term: u64, payload: &[u8]) -> Result<(), String> {
        let mut st = self.shared.lock();
        apply_entry(&mut st, index, term, payload).map_err(|e| {
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
        *self.shared.lock() = s;
        Ok(())
    }
}
