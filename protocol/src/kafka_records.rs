//! Kafka DeleteRecords (docs/kafka-compat.md "DeleteRecords"): a partition's log start offset
//! moves up to a requested offset, the same floor retention moves, but exact: nothing below
//! it is served to Kafka fetches, HTTP pops or listings again.

/// One partition whose records below `offset` are to be deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRecordsTarget {
    pub queue: String,
    pub partition: String,
    /// The new log start offset; -1 means the high watermark (Kafka's
    /// `DeleteRecordsRequest.HIGH_WATERMARK`).
    pub offset: i64,
}

/// The offset Kafka's DeleteRecords uses for "up to the high watermark".
pub const HIGH_WATERMARK: i64 = -1;

/// The most partitions one DeleteRecords command may name.
pub const MAX_DELETE_RECORDS_TARGETS: usize = 10_000;
/// The work one DeleteRecords command may do, as a retention cycle's: a partition whose
/// floor moves costs 1 plus its queue's consumer groups (each group's cursor is moved up,
/// on the leader and on every replay). Targets past it are answered [`DeleteRecordsVerdict::Busy`];
/// the first moving target is always taken.
pub const DELETE_RECORDS_WORK_PER_COMMAND: usize = 16_384;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRecordsReq {
    pub targets: Vec<DeleteRecordsTarget>,
}

/// One target's answer, index-aligned with the request's targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteRecordsVerdict {
    /// The partition's log start offset is now `low_watermark` (never lowered: a request
    /// below it leaves it where it is, as in Kafka).
    Deleted { low_watermark: u64 },
    /// An offset above the high watermark, or negative other than -1 (OFFSET_OUT_OF_RANGE).
    OutOfRange,
    /// No such queue (UNKNOWN_TOPIC_OR_PARTITION).
    UnknownQueue,
    /// Past the command's [`DELETE_RECORDS_WORK_PER_COMMAND`]: not moved, retriable
    /// (REQUEST_TIMED_OUT).
    Busy,
}
