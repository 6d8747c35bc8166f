//! Kafka idempotent producers (docs/kafka-compat.md "Idempotent producers"): producer ids
//! handed out by InitProducerId, and the produce path that checks each idempotent batch's
//! epoch and sequence numbers against the partition's last batches in the same engine entry
//! that appends it, so two connections producing at once cannot both pass the check.

use crate::types::PushItem;

/// Batches remembered per producer and partition for the duplicate check (Kafka's
/// `ProducerStateEntry.NUM_BATCHES_TO_RETAIN`, the most a client keeps in flight).
pub const PRODUCER_BATCHES_KEPT: usize = 5;
/// Kafka's `producer.id.expiration.ms` default: a day.
pub const DEFAULT_PRODUCER_ID_EXPIRATION_MS: u64 = 86_400_000;
/// The default cap on producer states one tenant keeps.
pub const DEFAULT_MAX_PRODUCER_IDS: u64 = 10_000;
/// The most producer states one planner command may expire (the rest wait for the next).
pub const PRODUCER_EXPIRY_PER_COMMAND: usize = 256;

/// One idempotent batch as the produce request carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerBatch {
    pub producer_id: i64,
    pub epoch: i16,
    pub first_seq: i32,
    /// `first_seq` advanced by the batch's last offset delta, wrapping at `i32::MAX` to 0.
    pub last_seq: i32,
    /// Its records: items `start..start + records` of the partition's items.
    pub records: usize,
}

/// One partition's idempotent batches, in request order, and the items they became.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerGuard {
    pub queue: String,
    pub partition: String,
    /// The partition's items: `items[start..end]` of the request.
    pub start: usize,
    pub end: usize,
    pub batches: Vec<ProducerBatch>,
}

/// A produce whose idempotent partitions are checked and appended in one planner step.
#[derive(Debug, Clone, Default)]
pub struct KafkaProduceReq {
    pub items: Vec<PushItem>,
    pub guards: Vec<ProducerGuard>,
    /// Producer states idle longer than this are gone (`kafka_producer_id_expiration_ms`).
    pub expiration_ms: u64,
    /// States past which no new producer is remembered (`kafka_max_producer_ids`).
    pub max_producers: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KafkaProducersReq {
    /// InitProducerId without a transactional id. `current` is the (id, epoch) a v3+ client
    /// names to have its epoch bumped (KIP-360); `None` asks for a new id.
    InitProducerId {
        current: Option<(i64, i16)>,
        expiration_ms: u64,
        max_producers: u64,
    },
}

/// The engine's answer to InitProducerId.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitProducerOutcome {
    Granted {
        producer_id: i64,
        epoch: i16,
    },
    /// At `kafka_max_producer_ids` (Kafka answers COORDINATOR_LOAD_IN_PROGRESS when it has no
    /// producer id to hand out; the client retries).
    Full,
}

/// The verdict on one guarded partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardVerdict {
    /// Appended: its answer is its items' results.
    Appended,
    /// A repeat of a batch appended before: nothing was appended, this was its base offset.
    Duplicate { base_offset: u64 },
    /// A sequence number that does not follow the partition's last (OUT_OF_ORDER_SEQUENCE).
    OutOfOrder,
    /// An epoch older than the partition has seen (INVALID_PRODUCER_EPOCH).
    Fenced,
    /// A producer id this broker never handed out (UNKNOWN_PRODUCER_ID).
    UnknownProducer,
    /// At `kafka_max_producer_ids`: a producer whose state expired cannot be remembered again
    /// until others expire (retriable).
    Full,
}

#[derive(Debug, Clone)]
pub struct KafkaProduceOutcome {
    /// Index-aligned with the request's items; items of a guard not `Appended` were not
    /// pushed and their result says nothing.
    pub results: Vec<crate::types::PushResult>,
    /// Index-aligned with the request's guards.
    pub verdicts: Vec<GuardVerdict>,
}

/// Kafka's `DefaultRecordBatch.incrementSequence`: sequence numbers wrap from `i32::MAX` to 0.
pub fn increment_sequence(seq: i32, by: i32) -> i32 {
    if seq > i32::MAX - by {
        by - (i32::MAX - seq) - 1
    } else {
        seq + by
    }
}

/// Kafka's `ProducerAppendInfo.inSequence`: `next` follows `last`, across the wrap.
pub fn in_sequence(last: i32, next: i32) -> bool {
    i64::from(next) == i64::from(last) + 1 || (next == 0 && last == i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_wrap_as_kafkas_do() {
        assert_eq!(increment_sequence(5, 3), 8);
        assert_eq!(increment_sequence(i32::MAX, 0), i32::MAX);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        assert!(in_sequence(4, 5));
        assert!(in_sequence(i32::MAX, 0));
        assert!(!in_sequence(4, 4) && !in_sequence(4, 6) && !in_sequence(i32::MAX, 1));
    }
}
