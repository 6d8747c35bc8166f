//! A topic's partition floor: the count CreateTopics or CreatePartitions gave it.
//!
//! The engine creates a partition on its first message, so a topic made with 8 partitions
//! and no messages has no partition rows to count. The floor is kept durably in a reserved
//! KV namespace (one row per topic), written through the engine like any other KV row, so it
//! survives restarts and replicates. A topic with no floor shows the configured default, as an
//! auto-created one does.
//!
//! A row is `{"partitions":8,"queue":"<queue id>"}`: it belongs to one incarnation of the
//! name, so a floor left by a queue deleted over HTTP (which never clears it) is not inherited
//! by the next queue of that name. A row without `queue` (or a bare count, the first format)
//! was written by a CreateTopics before its queue existed and holds for whichever queue bears
//! the name. Every write is conditional on the version the writer read, so racing admin
//! requests cannot both win, nor lower a count another raised.

use queenmq_protocol::QueenError;
use serde_json::Value;

use super::kv_row;
use crate::topics::MAX_TOPIC_PARTITIONS;
use crate::Door;

/// The reserved namespace (the native KV API may read it; only this door writes it).
pub const NS: &str = queenmq_protocol::KAFKA_PARTITIONS_NS;

/// A stored floor row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// `None`: the row does not hold a count in range, and is ignored.
    pub count: Option<u32>,
    /// The queue the count belongs to; `None`: any queue of the name.
    pub queue: Option<String>,
    /// For a conditional rewrite.
    pub version: u64,
}

impl Row {
    /// The count this row gives the queue `queue_id`, if it belongs to it.
    pub fn count_for(&self, queue_id: &str) -> Option<u32> {
        match &self.queue {
            Some(q) if q != queue_id => None,
            _ => self.count,
        }
    }
}

/// The stored row, if any.
pub async fn get(door: &Door, topic: &str) -> Result<Option<Row>, QueenError> {
    Ok(kv_row::get(door, NS, topic).await?.map(|(value, version)| {
        let (count, queue) = value.as_deref().map_or((None, None), parse);
        Row {
            count,
            queue,
            version,
        }
    }))
}

/// The count and owning queue a row's value holds.
pub fn parse(value: &str) -> (Option<u32>, Option<String>) {
    let in_range = |n: u64| {
        u32::try_from(n)
            .ok()
            .filter(|n| (1..=MAX_TOPIC_PARTITIONS).contains(n))
    };
    match serde_json::from_str::<Value>(value) {
        Ok(Value::Number(n)) => (n.as_u64().and_then(in_range), None),
        Ok(Value::Object(m)) => (
            m.get("partitions")
                .and_then(Value::as_u64)
                .and_then(in_range),
            m.get("queue").and_then(Value::as_str).map(str::to_owned),
        ),
        _ => (None, None),
    }
}

pub fn encode(count: u32, queue: Option<&str>) -> String {
    match queue {
        Some(q) => serde_json::json!({ "partitions": count, "queue": q }).to_string(),
        None => serde_json::json!({ "partitions": count }).to_string(),
    }
}

/// Writes the floor if the row is still at `seen` (the version read; `None`: there was no
/// row). `Ok(None)`: another request changed the row first; `Ok(Some(version))`: written.
pub async fn put(
    door: &Door,
    topic: &str,
    count: u32,
    queue: Option<&str>,
    seen: Option<u64>,
) -> Result<Option<u64>, QueenError> {
    let value = encode(count, queue);
    kv_row::put(door, NS, topic, value, seen, "storing a partition floor").await
}

/// Takes back a floor this request wrote at `version`, unless another request rewrote it.
pub async fn take_back(door: &Door, topic: &str, version: u64) -> Result<(), QueenError> {
    kv_row::delete_at(door, NS, topic, version, "taking back a partition floor")
        .await
        .map(|_| ())
}

/// Drops the floor of a deleted topic, so one created again under the name starts afresh.
pub async fn clear(door: &Door, topic: &str) -> Result<(), QueenError> {
    kv_row::clear(door, NS, topic).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_counts_in_range_are_floors() {
        assert_eq!(parse("8"), (Some(8), None));
        assert_eq!(parse("10000"), (Some(10_000), None));
        for bad in ["0", "-1", "10001", "\"8\"", "", "1.5", "{}", "[8]"] {
            assert_eq!(parse(bad).0, None, "{bad}");
        }
        assert_eq!(parse(r#"{"partitions":0,"queue":"q"}"#).0, None);
    }

    #[test]
    fn a_row_belongs_to_its_queue_or_to_any_when_it_names_none() {
        let bound = encode(8, Some("q1"));
        let (count, queue) = parse(&bound);
        let row = Row {
            count,
            queue,
            version: 3,
        };
        assert_eq!(row.count_for("q1"), Some(8));
        assert_eq!(row.count_for("q2"), None, "a dead incarnation's floor");
        let (count, queue) = parse(&encode(5, None));
        let pending = Row {
            count,
            queue,
            version: 1,
        };
        assert_eq!(pending.count_for("anything"), Some(5));
    }
}
