//! When the leader runs the compactor (docs/storage-format.md "Pinning and the compactor"):
//! once after each checkpoint, and again in the next cycles while it makes progress, with one
//! segment's worth of bytes to copy per checkpoint interval. The copies themselves are
//! planned in `queenmq_engine::plan::compaction`.

use queenmq_engine::log::ReplicatedLog;
use queenmq_engine::plan::{Compacted, CompactionBudget, Planner, Segment};

#[derive(Debug)]
pub struct Compactor {
    /// False when reclamation is off: a copy would then free nothing.
    enabled: bool,
    /// Whether the next cycle looks at the oldest pinned segment (each look walks the runs).
    due: bool,
    budget: CompactionBudget,
}

impl Compactor {
    pub fn new(enabled: bool) -> Self {
        Compactor {
            enabled,
            due: enabled,
            budget: CompactionBudget::default(),
        }
    }

    /// A checkpoint was written: one more segment's worth may be copied, and looked for.
    pub fn after_checkpoint(&mut self) {
        self.budget.reset();
        self.due = self.enabled;
    }

    /// Copies live runs of the oldest pinned sealed segment into the cycle's entry, if due.
    pub fn plan(
        &mut self,
        planner: &mut Planner<'_>,
        log: &dyn ReplicatedLog,
        max_entry_bytes: usize,
    ) -> Option<Compacted> {
        if !self.due {
            return None;
        }
        self.due = false;
        let floor = planner.st.run_floor.lowest()?;
        let (first, last, bytes) = log.sealed_segment_of(floor)?;
        let budget = self.budget.left(bytes);
        if budget == 0 {
            return None;
        }
        let seg = Segment { first, last, bytes };
        match planner.plan_compaction(seg, budget, max_entry_bytes) {
            Ok(c) => {
                self.budget.spend(c.bytes);
                // Progress, and room left: the rest of this segment, or the next pinned one,
                // in the next cycle. A look that copied nothing waits for the next checkpoint.
                self.due = c.runs > 0;
                Some(c)
            }
            Err(e) => {
                tracing::warn!(segment_first = first, error = %e, "the compactor could not read a live run; the segment stays until its messages go");
                None
            }
        }
    }
}
