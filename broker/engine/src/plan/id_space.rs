//! Ids the planner may hand to new queues, partitions and groups: only those a checkpoint can
//! hold (decode refuses a next partition id above 2^32 and a partition of a queue id past
//! 2^32 (session 35), and reads a group id of u64::MAX as a deleted row) and apply can count
//! past. Past them creating is refused per item, so the node
//! keeps serving what exists and never writes a checkpoint it cannot read back.

use queenmq_protocol::QueenError;

use crate::state::{MAX_NEXT_GROUP_ID, MAX_NEXT_PARTITION_ID, MAX_NEXT_QUEUE_ID};

fn check(kind: &str, id: u64, max_next: u64) -> Result<(), QueenError> {
    if id < max_next {
        return Ok(());
    }
    Err(QueenError::unavailable(format!(
        "no {kind} can be created: this node has handed out every {kind} id it can store \
         (ids stay below {max_next}); existing {kind}s keep working"
    )))
}

pub fn new_queue(id: u64) -> Result<(), QueenError> {
    check("queue", id, MAX_NEXT_QUEUE_ID)
}

pub fn new_partition(id: u64) -> Result<(), QueenError> {
    check("partition", id, MAX_NEXT_PARTITION_ID)
}

pub fn new_group(id: u64) -> Result<(), QueenError> {
    check("consumer group", id, MAX_NEXT_GROUP_ID)
}
