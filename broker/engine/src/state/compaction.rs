//! Applying the compactor's copies: a run keeps its offsets, ids and creation time, and only
//! where its frames live changes (docs/storage-format.md "Pinning and the compactor"). Apply
//! reads nothing: the frames travel in the `RunCopy` effect itself, so a follower and a
//! replay point the run at the copy alone, exactly as the leader did.

use super::model::PENDING_INDEX;
use super::{Loc, State};

impl State {
    /// Points run `base..base+count` of partition `pid` at the frames at `loc`. A run that is
    /// no longer held whole as it was copied (retention removed it, its queue went) is left
    /// alone: the copy's bytes are then dead, like any removed message's.
    pub fn copy_run(&mut self, pid: u64, base: u64, count: u32, loc: Loc) {
        let Some(p) = self.partitions.get_mut(&pid) else {
            return;
        };
        let i = p.runs.partition_point(|r| r.base_offset < base);
        if p.runs
            .get(i)
            .is_none_or(|r| r.base_offset != base || r.count != count)
        {
            return;
        }
        self.run_floor.set_index(p, i, loc.index, loc.pos, true);
    }

    /// Replaces the PENDING log index of the runs the cycle copied with the committed index.
    pub fn commit_copied_runs(&mut self, copied: &[(u64, u64)], index: u64) {
        for &(pid, base) in copied {
            let Some(p) = self.partitions.get_mut(&pid) else {
                continue;
            };
            let i = p.runs.partition_point(|r| r.base_offset < base);
            if let Some(pos) = p
                .runs
                .get(i)
                .filter(|r| r.base_offset == base && r.index == PENDING_INDEX)
                .map(|r| r.pos)
            {
                self.run_floor.set_index(p, i, index, pos, false);
            }
        }
    }
}
