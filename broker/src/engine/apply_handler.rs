//! The Raft state-machine seam: committed entries are applied to the shared state. On the
//! leader the planner already applied them (same cycle number), so only the log position moves.

use std::sync::Arc;

use queenmq_raft::ApplyHandler;

use super::{record_cow_copies, Shared};
pub use queenmq_engine::apply::{apply_entry, apply_entry_noting};
use queenmq_engine::state::{cow_clock, decode_state, encode_state};

pub struct EngineApply {
    shared: Arc<Shared>,
    checkpointed: Option<(u64, u64)>,
    /// The `tenant` label of the copies a follower's apply makes.
    tenant: Arc<str>,
    /// The `default` group of a cluster member with `cluster_tenant_groups`: where the tenant
    /// declarations it commits (effect 67) are recorded and queued for opening.
    declarations: Option<crate::group::hosted::Declarations>,
}

impl EngineApply {
    pub fn new(shared: Arc<Shared>, tenant: Arc<str>) -> Self {
        let checkpointed = shared.lock().applied;
        EngineApply {
            shared,
            checkpointed,
            tenant,
            declarations: None,
        }
    }

    pub fn with_declarations(mut self, d: crate::group::hosted::Declarations) -> Self {
        self.declarations = Some(d);
        self
    }
}

impl ApplyHandler for EngineApply {
    fn apply(&self, index: u64, term: u64, payload: &[u8]) -> Result<(), String> {
        let mut st = self.shared.lock();
        // A follower's apply writes blocks a checkpoint may still share, under the lock on
        // the Raft apply thread: time its copies as a cycle's are (review s26 ckpt M4). What
        // this thread counted before is not this stretch's.
        let _ = cow_clock::take();
        let mut declared = Vec::new();
        let applied = apply_entry_noting(&mut st, index, term, payload, &mut declared);
        record_cow_copies(&self.tenant, cow_clock::take());
        applied.map_err(|e| {
            // A committed entry we cannot read means a bug or corruption past the CRC:
            // applying around it would diverge, so the group stops here and its owner
            // rebuilds it.
            tracing::error!(index, error = %e, "committed entry does not decode; stopping the group");
            format!("committed entry {index} does not decode: {e}")
        })?;
        drop(st);
        if declared.is_empty() {
            return Ok(());
        }
        let Some(sink) = &self.declarations else {
            // Only a member with the key on declares. A node with it off never hosts the
            // tenant (its apply moves past the entry): the key is set alike on every node.
            tracing::warn!(index, "a tenant declaration committed while cluster_tenant_groups is off here: this node will not host the tenant (set the key alike on every node)");
            return Ok(());
        };
        for (tenant, voters) in declared {
            sink.applied(&tenant, &voters).map_err(|e| {
                tracing::error!(index, tenant, error = %e, "recording a tenant declaration failed; stopping the group");
                format!("recording the declaration of tenant {tenant:?} at {index} failed: {e}")
            })?;
        }
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
        let mut st = self.shared.lock();
        // The node's own id files and filters stay: they are not state (state/txn_spill.rs).
        s.txn_spill = st.txn_spill.take();
        *st = s;
        Ok(())
    }
}
