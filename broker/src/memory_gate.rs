//! The planner's view of the node's memory budget (queenmq_engine::plan::MemoryGate).

use queenmq_engine::plan::MemoryGate;
use queenmq_protocol::QueenError;

use crate::memory::{Memory, Pool};

impl MemoryGate for Memory {
    fn pressed(&self) -> bool {
        Memory::pressed(self)
    }

    fn refusal(&self) -> QueenError {
        Memory::refusal(self)
    }

    fn answer_room(&self) -> usize {
        self.budget
            .connections_bytes()
            .saturating_sub(self.pools.get(Pool::Connections))
    }
}
