//! A topic's config row (protocol/src/kafka_topic_configs.rs: `max.message.bytes`,
//! `segment.bytes`), kept as the partition floor is: one row per topic in a reserved KV
//! namespace, naming the queue it belongs to, every rewrite conditional on the version read.
//! The engine reads the same row to bound each produced batch.

use queenmq_protocol::kafka_topic_configs::{TopicConfigs, KAFKA_TOPIC_CONFIGS_NS as NS};
use queenmq_protocol::QueenError;

use super::kv_row;
use crate::Door;

/// A stored row: its configs and its version (for a conditional rewrite).
pub type Row = (TopicConfigs, u64);

pub async fn get(door: &Door, topic: &str) -> Result<Option<Row>, QueenError> {
    Ok(kv_row::get(door, NS, topic).await?.map(|(value, version)| {
        let configs = value
            .as_deref()
            .map(TopicConfigs::parse)
            .unwrap_or_default();
        (configs, version)
    }))
}

/// The configs that hold for the queue `queue_id`: its row's, unless the row belongs to a
/// dead queue of the name (deleted over HTTP, which never clears the row).
pub fn holding(row: Option<&Row>, queue_id: &str) -> TopicConfigs {
    row.map(|(c, _)| c)
        .filter(|c| c.holds_for(queue_id))
        .cloned()
        .unwrap_or_default()
}

/// Stores `configs` if the row is still at `seen` (`None`: there was no row); a row that
/// sets nothing is deleted instead. `Ok(None)`: another request changed the row first.
pub async fn write(
    door: &Door,
    topic: &str,
    configs: &TopicConfigs,
    seen: Option<u64>,
) -> Result<Option<u64>, QueenError> {
    match (configs.is_empty(), seen) {
        (true, None) => Ok(Some(0)),
        (true, Some(v)) => {
            kv_row::delete_at(door, NS, topic, v, "dropping a topic's config row").await
        }
        (false, _) => {
            let what = "storing a topic's config row";
            kv_row::put(door, NS, topic, configs.encode(), seen, what).await
        }
    }
}

/// Takes back a row this request wrote at `version`, unless another request rewrote it.
pub async fn take_back(door: &Door, topic: &str, version: u64) -> Result<(), QueenError> {
    kv_row::delete_at(door, NS, topic, version, "taking back a topic's config row")
        .await
        .map(|_| ())
}

/// Drops the row of a deleted topic, so one created again under the name starts afresh.
pub async fn clear(door: &Door, topic: &str) -> Result<(), QueenError> {
    kv_row::clear(door, NS, topic).await
}
