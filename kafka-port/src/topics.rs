//! Topics as the engine knows them: a topic is a queue, Kafka partition `n` is the queue's
//! partition named `"n"`.
//!
//! A topic shows `max(floor, 1 + the highest numeric partition)` partitions, where the
//! floor is the count CreateTopics or CreatePartitions stored ([`crate::admin::floor`]) or,
//! for a topic they never touched, `default_partitions`.
//! Only canonical decimal names (`"0"`, `"17"`, never `"007"` or `"+1"`) below
//! [`MAX_TOPIC_PARTITIONS`] count; other partitions (the native API's `"Default"`, or any
//! name) stay reachable over the native API only. The engine creates a partition on its
//! first message, so a shown partition that has none yet simply has no messages.

use queenmq_protocol::{Command, ConfigureReq, Outcome, Page, QueenError, ReadAnswer, ReadReq};

use crate::Door;

/// The most partitions a topic shows, and one above the highest partition index a produce
/// may name: Kafka's partition index is an int32, but a queue this wide over Kafka is a
/// mistake, and the count bounds every Metadata answer.
pub const MAX_TOPIC_PARTITIONS: u32 = queenmq_protocol::kafka_txns::MAX_KAFKA_TOPIC_PARTITIONS;
/// Partition rows asked of the engine per read.
const PAGE: usize = 10_000;

/// Kafka's own topic-name rule (1..=249 of `[A-Za-z0-9._-]`, never `.` or `..`), checked
/// before the engine sees a name: Kafka clients and tools assume it, and an empty name would
/// make a queue the HTTP API cannot address.
pub fn valid_topic_name(name: &str) -> bool {
    (1..=249).contains(&name.len())
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The Kafka partition index a Queen partition name stands for, if any.
pub fn kafka_index(name: &str) -> Option<u32> {
    let canonical = name == "0" || (!name.starts_with('0') && !name.is_empty());
    if !canonical || !name.bytes().all(|b| b.is_ascii_digit()) || name.len() > 5 {
        return None;
    }
    name.parse::<u32>()
        .ok()
        .filter(|n| *n < MAX_TOPIC_PARTITIONS)
}

/// Kafka's words for a collision (`Topic.validate`'s, so tools that match them still do).
pub fn collision_message(topic: &str, existing: &str) -> String {
    format!("Topic '{topic}' collides with existing topic: {existing}")
}

/// Every queue name, sorted.
pub async fn names(door: &Door) -> Result<Vec<String>, QueenError> {
    match door
        .bus
        .call(door.describe_ctx(), Command::Read(ReadReq::Queues))
        .await?
    {
        Outcome::Read(ReadAnswer::Queues(qs)) => Ok(qs.into_iter().map(|q| q.name).collect()),
        other => Err(unexpected(&other)),
    }
}

/// A topic as the admin APIs judge it.
#[derive(Debug, Clone)]
pub struct Topic {
    /// The queue's id (a floor row names it).
    pub queue_id: String,
    /// The partitions it shows.
    pub count: u32,
    /// The stored floor row, for a conditional rewrite (it may belong to a dead queue).
    pub floor: Option<crate::admin::floor::Row>,
    /// Retained bytes of each Kafka partition that has a queue partition yet.
    pub sizes: std::collections::BTreeMap<u32, u64>,
}

/// The partition count a topic shows; `Err` with `NotFound` when there is no such queue.
pub async fn partition_count(door: &Door, topic: &str) -> Result<u32, QueenError> {
    lookup(door, topic).await.map(|t| t.count)
}

/// The topic's queue, count and floor row; `Err` with `NotFound` when there is no such queue.
pub async fn lookup(door: &Door, topic: &str) -> Result<Topic, QueenError> {
    let mut highest: Option<u32> = None;
    let mut sizes = std::collections::BTreeMap::new();
    let mut offset = 0usize;
    let mut doc = read(door, topic, PAGE, offset).await?;
    let queue_id = std::mem::take(&mut doc.queue.id);
    loop {
        for p in &doc.partitions {
            if let Some(i) = kafka_index(&p.name) {
                highest = Some(highest.map_or(i, |h| h.max(i)));
                sizes.insert(i, p.retained_bytes);
            }
        }
        offset += doc.partitions.len();
        if doc.partitions.is_empty() || offset >= doc.page.total {
            break;
        }
        doc = read(door, topic, PAGE, offset).await?;
    }
    let floor = crate::admin::floor::get(door, topic).await?;
    let count = floor
        .as_ref()
        .and_then(|f| f.count_for(&queue_id))
        .unwrap_or(door.cfg.default_partitions);
    Ok(Topic {
        queue_id,
        count: shown(highest, count),
        floor,
        sizes,
    })
}

/// Whether the queue exists, at the cost of one partition row.
pub async fn exists(door: &Door, topic: &str) -> Result<bool, QueenError> {
    settings(door, topic).await.map(|s| s.is_some())
}

/// The queue's options (`None`: no such queue), at the cost of one partition row.
pub async fn settings(
    door: &Door,
    topic: &str,
) -> Result<Option<queenmq_protocol::QueueSettings>, QueenError> {
    queue(door, topic).await.map(|q| q.map(|(_, s)| s))
}

/// The queue's id and options (`None`: no such queue), at the cost of one partition row.
pub async fn queue(
    door: &Door,
    topic: &str,
) -> Result<Option<(String, queenmq_protocol::QueueSettings)>, QueenError> {
    match read(door, topic, 1, 0).await {
        Ok(doc) => Ok(Some((doc.queue.id, doc.queue.options))),
        Err(e) if e.code == queenmq_protocol::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

async fn read(
    door: &Door,
    topic: &str,
    limit: usize,
    offset: usize,
) -> Result<queenmq_protocol::QueueDoc, QueenError> {
    let read = ReadReq::Queue {
        queue: topic.to_owned(),
        page: Page { limit, offset },
    };
    match door
        .bus
        .call(door.describe_ctx(), Command::Read(read))
        .await?
    {
        Outcome::Read(ReadAnswer::Queue(doc)) => Ok(doc),
        other => Err(unexpected(&other)),
    }
}

/// The count shown for a topic whose highest numeric partition is `highest`.
pub fn shown(highest: Option<u32>, floor: u32) -> u32 {
    let from_names = highest.map_or(0, |h| h + 1);
    from_names.max(floor).clamp(1, MAX_TOPIC_PARTITIONS)
}

/// Creates the queue (a no-op for one that exists: the configure merges nothing); its id.
pub async fn create(door: &Door, topic: &str) -> Result<String, QueenError> {
    create_with(door, topic, queenmq_protocol::QueueOptions::default()).await
}

/// [`create`] with options (a topic's configs, `admin::topic_configs`).
pub async fn create_with(
    door: &Door,
    topic: &str,
    options: queenmq_protocol::QueueOptions,
) -> Result<String, QueenError> {
    queenmq_protocol::limits::check_name("topic", topic)?;
    let req = ConfigureReq {
        queue: topic.to_owned(),
        options,
        ..ConfigureReq::default()
    };
    match door
        .bus
        .call(door.ctx.clone(), Command::Configure(req))
        .await?
    {
        Outcome::Configured(c) => Ok(c.queue_id),
        other => Err(unexpected(&other)),
    }
}

pub fn unexpected(o: &Outcome) -> QueenError {
    QueenError::new(
        queenmq_protocol::ErrorCode::Internal,
        format!("the engine answered an unexpected outcome: {o:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_small_decimal_names_are_kafka_partitions() {
        assert_eq!(kafka_index("0"), Some(0));
        assert_eq!(kafka_index("17"), Some(17));
        assert_eq!(kafka_index("9999"), Some(9_999));
        for bad in [
            "",
            "007",
            "00",
            "+1",
            "-1",
            "1e3",
            "Default",
            "10000",
            "99999999999",
        ] {
            assert_eq!(kafka_index(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_shown_count_covers_numeric_names_and_the_default() {
        assert_eq!(shown(None, 1), 1);
        assert_eq!(shown(None, 8), 8);
        assert_eq!(shown(Some(11), 8), 12);
        assert_eq!(shown(Some(0), 3), 3);
        assert_eq!(shown(None, 0), 1);
    }
}
