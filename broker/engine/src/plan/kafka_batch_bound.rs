//! A topic's `max.message.bytes` (protocol/src/kafka_topic_configs.rs): a produced
//! partition's record batch larger than the bound its topic's config row sets is refused with
//! PayloadTooLarge (Kafka's MESSAGE_TOO_LARGE) for that partition only, nothing of it stored.
//! Judged from the planner's own state, so the bound a produce meets is the one the log
//! holds at its place, and before any idempotent guard, so a refused batch does not advance
//! its producer's sequence.

use std::collections::HashMap;

use queenmq_protocol::kafka_producers::{BatchSpan, KafkaProduceReq};
use queenmq_protocol::kafka_topic_configs::{TopicConfigs, KAFKA_TOPIC_CONFIGS_NS};
use queenmq_protocol::{ErrorCode, QueenError};

use super::{queue_uuid, Planner};

/// An oversized batch's items, `start..end`, and the refusal each of them gets.
pub type Oversized = (usize, usize, QueenError);

fn bad_span(why: &str) -> QueenError {
    QueenError::bad_request(format!("kafka produce batch span out of bounds: {why}"))
}

impl Planner<'_> {
    /// The request's batches that pass their topic's bound, or an error when the spans do
    /// not describe the items (the door's checks again: KafkaProduce is a bus command).
    pub(super) fn oversized_batches(
        &self,
        req: &KafkaProduceReq,
    ) -> Result<Vec<Oversized>, QueenError> {
        let mut next = 0usize;
        let mut rows: HashMap<&str, Option<TopicConfigs>> = HashMap::new();
        let mut out = Vec::new();
        for &BatchSpan {
            start,
            end,
            wire_bytes,
        } in &req.batches
        {
            if start < next || end <= start || end > req.items.len() {
                return Err(bad_span("spans overlap, are empty or pass the items"));
            }
            next = end;
            let first = &req.items[start];
            if req.items[start..end]
                .iter()
                .any(|i| i.queue != first.queue || i.partition != first.partition)
            {
                return Err(bad_span("items of another partition"));
            }
            let row = rows
                .entry(first.queue.as_str())
                .or_insert_with(|| self.topic_configs(&first.queue));
            let Some(max) = row
                .as_ref()
                .filter(|c| !c.batch_fits(wire_bytes))
                .and_then(|c| c.max_message_bytes)
            else {
                continue;
            };
            let why = QueenError::new(
                ErrorCode::PayloadTooLarge,
                format!(
                    "the record batch is {wire_bytes} bytes, over topic {:?}'s \
                     max.message.bytes {max}",
                    first.queue
                ),
            );
            out.push((start, end, why));
        }
        Ok(out)
    }

    /// The config row of the queue named `queue`, if one is stored and belongs to it (a row
    /// naming no queue holds for whichever bears the name, as one a CreateTopics wrote before
    /// its queue existed).
    fn topic_configs(&self, queue: &str) -> Option<TopicConfigs> {
        let row = self.st.kv.row(KAFKA_TOPIC_CONFIGS_NS, queue)?;
        let configs = TopicConfigs::parse(&row.value);
        let owner = self.st.queue_by_name.get(queue).map(|qid| queue_uuid(*qid));
        match (&configs.queue, owner) {
            (None, _) => Some(configs),
            (Some(_), Some(id)) if configs.holds_for(&id) => Some(configs),
            // Bound to another incarnation of the name: not this queue's.
            _ => None,
        }
    }
}
