//! What the planner asks of the node's memory budget. The budget and its pools live with the
//! process (broker's `memory`); the planner only needs these answers, and tests plan with none.

use queenmq_protocol::QueenError;

pub trait MemoryGate {
    /// Whether the node refuses writes that grow the state for memory now.
    fn pressed(&self) -> bool;
    /// The answer a write gets while [`Self::pressed`] (counted where the budget lives).
    fn refusal(&self) -> QueenError;
    /// Payload bytes answers may still take: the connections share of the budget less what
    /// the door holds (answers waiting for their clients).
    fn answer_room(&self) -> usize;
}
