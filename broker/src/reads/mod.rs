//! Read-only answers from applied state, as the JSON documents of spec/native-api.md §2.2,
//! §2.10, §2.11 and the admin reads. These are HTTP-shaped on purpose: they exist for the
//! admin API; the Kafka door will get typed reads of its own.

mod groups;
mod messages;
mod queues;

use queenmq_protocol::{QueenError, ReadReq};
use serde_json::Value;

pub use groups::{group_lag, GroupLag};
pub use queues::queue_depth;

use crate::engine::ReaderHandle;
use crate::state::model::{cursor_start, Group, Partition};
use crate::state::State;

pub fn answer(st: &State, rd: &mut ReaderHandle<'_>, req: &ReadReq) -> Result<Value, QueenError> {
    match req {
        ReadReq::Queues => Ok(queues::list(st)),
        ReadReq::Queue { queue, page } => queues::one(st, queue, *page),
        ReadReq::QueueDepth { queue, group, page } => {
            queues::depth(st, queue, group.as_deref(), *page)
        }
        ReadReq::Overview => Ok(queues::overview(st)),
        ReadReq::Namespaces => Ok(queues::labels(st, true)),
        ReadReq::Tasks => Ok(queues::labels(st, false)),
        ReadReq::Partitions {
            queue,
            limit,
            offset,
        } => Ok(queues::partitions(st, queue.as_deref(), *limit, *offset)),
        ReadReq::Status | ReadReq::StatusQueues => Ok(queues::status(st, None)),
        ReadReq::StatusQueue { queue } => Ok(queues::status(st, Some(queue))),
        ReadReq::Message {
            partition_id,
            transaction_id,
        } => messages::one(st, rd, partition_id, transaction_id),
        ReadReq::Messages {
            queue,
            limit,
            offset,
        } => messages::list(st, rd, queue.as_deref(), *limit, *offset),
        ReadReq::Dlq(q) => messages::dlq(st, rd, q),
        ReadReq::TraceNames { limit, offset } => Ok(messages::trace_names(st, *limit, *offset)),
        ReadReq::TracesByName {
            name,
            limit,
            offset,
        } => Ok(messages::traces_by_name(st, name, *limit, *offset)),
        ReadReq::TracesForMessage {
            partition_id,
            transaction_id,
        } => Ok(messages::traces_for(st, partition_id, transaction_id)),
        ReadReq::ConsumerGroups => Ok(groups::list(st)),
        ReadReq::ConsumerGroup { group } => groups::one(st, group),
        ReadReq::LaggingGroups { min_lag_seconds } => Ok(groups::lagging(st, *min_lag_seconds)),
    }
}

/// The group's cursor on a partition, as it would start if never touched.
pub fn committed_of(g: &Group, p: &Partition) -> u64 {
    g.cursors
        .get(&p.id)
        .map_or_else(|| cursor_start(p, g.start_from_us), |c| c.committed)
}
