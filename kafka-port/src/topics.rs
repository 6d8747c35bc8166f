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
pub const MAX_TOPIC_PARTITIONS: u32 = 10_000;
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

/// Every queue name, sorted.
pub async fn names(door: &Door) -> Result<Vec<String>, QueenError> {
    match door
        .bus
        .call(door.ctx.clone(), Command::Read(ReadReq::Queues))
        .await?
    {
        Outcome::Read(ReadAnswer::Queues(qs)) => Ok(qs.into_iter().map(|q| q.name).collect()),
        other => Err(unexpected(&other)),
    }
}

/// The partition count a topic shows; `Err` with `NotFound` when there is no such queue.
pub async fn partition_count(door: &Door, topic: &str) -> Result<u32, QueenError> {
    let mut highest: Option<u32> = None;
    let mut offset = 0usize;
    loop {
        let read = ReadReq::Queue {
            queue: topic.to_owned(),
            page: Page {
                limit: PAGE,
                offset,
            },
        };
        let doc = match door.bus.call(door.ctx.clone(), Command::Read(read)).await? {
            Outcome::Read(ReadAnswer::Queue(doc)) => doc,
            other => return Err(unexpected(&other)),
        };
        for p in &doc.partitions {
            if let Some(i) = kafka_index(&p.name) {
                highest = Some(highest.map_or(i, |h| h.max(i)));
            }
        }
        offset += doc.partitions.len();
        if doc.partitions.is_empty() || offset >= doc.page.total {
            break;
        }
    }
    let floor = crate::admin::floor::get(door, topic)
        .await?
        .unwrap_or(door.cfg.default_partitions);
    Ok(shown(highest, floor))
}

/// The count shown for a topic whose highest numeric partition is `highest`.
pub fn shown(highest: Option<u32>, floor: u32) -> u32 {
    let from_names = highest.map_or(0, |h| h + 1);
    from_names.max(floor).clamp(1, MAX_TOPIC_PARTITIONS)
}

/// Creates the queue (a no-op for one that exists: the configure merges nothing).
pub async fn create(door: &Door, topic: &str) -> Result<(), QueenError> {
    queenmq_protocol::limits::check_name("topic", topic)?;
    let req = ConfigureReq {
        queue: topic.to_owned(),
        ..ConfigureReq::default()
    };
    match door
        .bus
        .call(door.ctx.clone(), Command::Configure(req))
        .await?
    {
        Outcome::Configured(_) => Ok(()),
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
