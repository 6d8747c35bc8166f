//! Read-only answers from applied state, as the domain values of queenmq_protocol::views: the
//! doors render them (the Queen API's JSON of spec/native-api.md §2.2, §2.10, §2.11 and the
//! admin reads lives in native-api/src/render).

mod analytics;
mod collisions;
pub(crate) mod fetch;
#[cfg(test)]
mod fetch_tests;
mod groups;
pub(crate) mod kafka_groups;
pub(crate) mod kafka_txns;
mod messages;
mod partition_stats;
mod queues;
pub mod timers;

use queenmq_protocol::{QueenError, ReadAnswer, ReadReq};

pub use groups::{group_lag, GroupLag};
pub use queues::queue_depth;

use crate::reader::MessageReader;
use crate::state::model::{cursor_start, Group, Partition};
use crate::state::State;

/// [`answer`] at time `now_us` (the cycle's), for the reads whose window defaults to now.
pub fn answer_at(
    st: &State,
    rd: &mut MessageReader<'_>,
    req: &ReadReq,
    now_us: i64,
) -> Result<ReadAnswer, QueenError> {
    match req {
        ReadReq::Analytics(q) if q.to_us.is_none() => {
            let q = queenmq_protocol::AnalyticsQuery {
                to_us: Some(now_us),
                ..q.clone()
            };
            Ok(ReadAnswer::Analytics(analytics::series(st, &q)?))
        }
        _ => answer(st, rd, req),
    }
}

/// The reads a cluster follower answers from its applied state, for the Kafka port's
/// Metadata (docs/cluster.md "Kafka clients"): the queue list, one queue's partitions and a
/// collision check, none of which reads the message log. `None` for every other read, which
/// only the leader answers.
pub fn applied_metadata(st: &State, req: &ReadReq) -> Option<Result<ReadAnswer, QueenError>> {
    use ReadAnswer as A;
    Some(match req {
        ReadReq::Queues => Ok(A::Queues(queues::list(st))),
        ReadReq::Queue { queue, page } => queues::one(st, queue, *page).map(A::Queue),
        ReadReq::TopicCollisions { names } => {
            collisions::collisions(st, names).map(A::TopicCollisions)
        }
        _ => return None,
    })
}

pub fn answer(
    st: &State,
    rd: &mut MessageReader<'_>,
    req: &ReadReq,
) -> Result<ReadAnswer, QueenError> {
    use ReadAnswer as A;
    Ok(match req {
        ReadReq::Queues => A::Queues(queues::list(st)),
        ReadReq::TopicCollisions { names } => {
            A::TopicCollisions(collisions::collisions(st, names)?)
        }
        ReadReq::Queue { queue, page } => A::Queue(queues::one(st, queue, *page)?),
        ReadReq::QueueDepth { queue, group, page } => {
            A::Depth(queues::depth(st, queue, group.as_deref(), *page)?)
        }
        ReadReq::Overview => A::Overview(queues::overview(st)),
        ReadReq::Namespaces => A::Namespaces(queues::labels(st, true)),
        ReadReq::Tasks => A::Tasks(queues::labels(st, false)),
        ReadReq::Partitions {
            queue,
            limit,
            offset,
        } => A::Partitions(queues::partitions(st, queue.as_deref(), *limit, *offset)),
        ReadReq::Status | ReadReq::StatusQueues => A::Status(queues::status(st, None)),
        ReadReq::StatusQueue { queue } => A::Status(queues::status(st, Some(queue))),
        ReadReq::Message {
            partition_id,
            transaction_id,
        } => A::Message(messages::one(st, rd, partition_id, transaction_id)?),
        ReadReq::Messages {
            queue,
            limit,
            offset,
        } => A::Messages(messages::list(st, rd, queue.as_deref(), *limit, *offset)?),
        ReadReq::Dlq(q) => A::Dlq(messages::dlq(st, rd, q)?),
        ReadReq::TraceNames { limit, offset } => {
            A::TraceNames(messages::trace_names(st, *limit, *offset))
        }
        ReadReq::TracesByName {
            name,
            limit,
            offset,
        } => A::TracesByName(messages::traces_by_name(st, name, *limit, *offset)),
        ReadReq::TracesForMessage {
            partition_id,
            transaction_id,
        } => A::TracesForMessage(messages::traces_for(st, partition_id, transaction_id)),
        ReadReq::ConsumerGroups => A::ConsumerGroups(groups::list(st)),
        ReadReq::ConsumerGroup { group } => A::ConsumerGroup(groups::one(st, group)?),
        ReadReq::LaggingGroups { min_lag_seconds } => {
            A::Lagging(groups::lagging(st, *min_lag_seconds))
        }
        ReadReq::Timer { queue, key } => A::Timer(timers::one(st, queue, key)),
        ReadReq::Timers {
            queue,
            after,
            limit,
        } => A::Timers(timers::page(st, queue, after.as_deref(), *limit)),
        ReadReq::Fetch(f) => A::Fetch(fetch::fetch(st, rd, f, false)?),
        ReadReq::VisibleFetch(f) => A::Fetch(fetch::fetch(st, rd, f, true)?),
        ReadReq::Changed(c) => A::Changed(fetch::changed(st, c)),
        ReadReq::ListOffsets(q) => A::Offsets(fetch::offsets(st, q)),
        ReadReq::Analytics(q) => A::Analytics(analytics::series(st, q)?),
        // Whole answers here; the engine loop grants a cycle's share instead
        // (Planner::plan_kafka_txn_read).
        ReadReq::KafkaTxns(q) => {
            A::KafkaTxns(kafka_txns::answer(st, q, kafka_txns::Grant::UNLIMITED)?.0)
        }
    })
}

/// The group's cursor on a partition, as it would start if never touched.
pub fn committed_of(g: &Group, p: &Partition) -> u64 {
    g.cursors
        .get(&p.id())
        .map_or_else(|| cursor_start(p, g.start_from_us), |c| c.committed)
}
