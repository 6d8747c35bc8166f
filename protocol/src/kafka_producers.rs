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
/// The default cap on producer states one tenant keeps; past it the longest-idle producer's
/// state is evicted, as if it had expired, if it has been idle at least
/// [`DEFAULT_PRODUCER_EVICT_MIN_IDLE_MS`].
pub const DEFAULT_MAX_PRODUCER_IDS: u64 = 10_000;
/// The least idleness that lets a producer's state be evicted at the cap
/// (`kafka_producer_evict_min_idle_ms`): 15 minutes, three times librdkafka's
/// `delivery.timeout.ms`, so a producer still retrying a batch keeps its duplicate check.
pub const DEFAULT_PRODUCER_EVICT_MIN_IDLE_MS: u64 = 15 * 60 * 1000;
/// The most producer states one command may evict at the cap (the rest of the new producers
/// are refused as [`GuardVerdict::Full`], retriable).
pub const PRODUCER_EVICT_PER_COMMAND: usize = 64;
/// The largest id InitProducerId hands out: the counter stops below `i64::MAX`, so it never
/// wraps and a checkpoint's `next_id` is at most `i64::MAX - 1`.
pub const MAX_PRODUCER_ID: i64 = i64::MAX - 2;
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

/// One partition's idempotent batch and the items it became. One batch per partition, as
/// Kafka allows from produce v3 on: several would let a repeat answer for a new batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerGuard {
    pub queue: String,
    pub partition: String,
    /// The partition's items: `items[start..end]` of the request.
    pub start: usize,
    pub end: usize,
    pub batch: ProducerBatch,
}

/// One produced partition's record batch: items `start..end` of the request came from it,
/// and `wire_bytes` is its size as sent, which its topic's `max.message.bytes` bounds
/// (crate::kafka_topic_configs). Checked by the engine against its own state, so an alter
/// and a produce are ordered by the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSpan {
    pub start: usize,
    pub end: usize,
    pub wire_bytes: usize,
}

/// A produce whose idempotent partitions are checked and appended in one planner step.
#[derive(Debug, Clone, Default)]
pub struct KafkaProduceReq {
    pub items: Vec<PushItem>,
    pub guards: Vec<ProducerGuard>,
    /// Every produced partition's batch (guarded or not), in item order.
    pub batches: Vec<BatchSpan>,
    /// Producer states idle longer than this are gone (`kafka_producer_id_expiration_ms`).
    pub expiration_ms: u64,
    /// States kept (`kafka_max_producer_ids`): a new producer past it evicts the one idle
    /// longest, if that one has been idle at least `evict_min_idle_ms`.
    pub max_producers: u64,
    /// `kafka_producer_evict_min_idle_ms`: no state younger than this is evicted.
    pub evict_min_idle_ms: u64,
    /// The produce request's transactional id: every guard's batch is then a record batch
    /// of that transaction, appended only into a partition it added, at its current epoch
    /// (docs/kafka-transactions.md).
    pub transactional_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KafkaProducersReq {
    /// InitProducerId without a transactional id. `current` is the (id, epoch) a v3+ client
    /// names to have its epoch bumped (KIP-360); `None` asks for a new id. A new id makes no
    /// state: the producer's state appears with its first batch.
    InitProducerId {
        current: Option<(i64, i16)>,
        expiration_ms: u64,
    },
}

/// The engine's answer to InitProducerId.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitProducerOutcome {
    Granted {
        producer_id: i64,
        epoch: i16,
    },
    /// Past [`MAX_PRODUCER_ID`] (Kafka answers COORDINATOR_LOAD_IN_PROGRESS when it has no
    /// producer id to hand out).
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
    /// An epoch older than the partition has seen, or than the transactional id's
    /// (INVALID_PRODUCER_EPOCH).
    Fenced,
    /// A transactional batch for a partition not in the open transaction of its
    /// transactional id, or of another producer (INVALID_TXN_STATE).
    NotInTransaction,
    /// A transactional batch that would pass the partition's cap on transactional stretches
    /// (POLICY_VIOLATION: the client aborts the transaction; nothing was appended).
    TxnIndexFull,
    /// A producer id this broker never handed out (UNKNOWN_PRODUCER_ID).
    UnknownProducer,
    /// A batch larger than its topic's `max.message.bytes` (MESSAGE_TOO_LARGE): refused
    /// before its sequence is judged, so the producer's sequence does not advance.
    TooLarge,
    /// A new producer's first batch finds `kafka_max_producer_ids` states held and none
    /// idle at least `kafka_producer_evict_min_idle_ms` (or the command's evictions spent, or
    /// the request alone names more producers than the cap): REQUEST_TIMED_OUT, retriable.
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
