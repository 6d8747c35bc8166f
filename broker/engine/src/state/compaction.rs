//! Applying the compactor's copies: a run keeps its offsets, ids and creation time, and only
//! where its frames live changes (docs/storage-format.md "Pinning and the compactor"). Apply
//! reads nothing: the frames travel in the `RunCopy` effect itself, so a follower and a
//! replay point the run at the copy alone, exactly as the leader did.

use super::frame::skip_frames;
use super::model::PENDING_INDEX;
use super::{Loc, State};

impl State {
    /// Points run `base..base+count` of partition `pid` at the `frames` at `loc`. A run that
    /// is no longer held whole as it was copied (retention removed it, its queue went) is left
    /// alone: the copy's bytes are then dead, like any removed message's. So is a run whose
    /// copy does not hold exactly `count` frames: once re-pointed, its old bytes would be
    /// deleted and the run read from a copy that is not it (review L2). The frames travel in
    /// the entry, so every node refuses the same copy.
    pub fn copy_run(&mut self, pid: u64, base: u64, count: u32, frames: &[u8], loc: Loc) {
        if !skip_frames(frames, u64::from(count)).is_ok_and(|rest| rest.is_empty()) {
            tracing::error!(
                pid,
                base,
                count,
                len = frames.len(),
                index = loc.index,
                "a run copy does not hold exactly its run's frames; the run stays where it is"
            );
            return;
        }
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
