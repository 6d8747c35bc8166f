//! Reads by offset (spec/native-api.md §2.12): what a door asks of the engine and what it gets
//! back. Both the Queen HTTP door (`/api/v1/fetch`, `/api/v1/partitions/changed`) and the
//! Kafka port (Fetch, ListOffsets) ask these; neither takes a lease or moves a cursor.

use bytes::Bytes;

/// The most entries one fetch may name (the client sends at most 1000).
pub const MAX_FETCH_ENTRIES: usize = 1024;
/// The most payload bytes one entry, and one whole call, may carry: a bigger ask is clamped.
pub const MAX_FETCH_BYTES: usize = 8 << 20;
/// What one record costs the byte budget besides its payload: its offset, id and times as
/// rendered. Without it, a budget of 8 MiB of one-byte payloads would be millions of rows.
pub const FETCH_RECORD_OVERHEAD: usize = 64;
/// The most partitions one `partitions/changed` page lists.
pub const MAX_CHANGED_PAGE: usize = 1000;
/// The most partitions one `partitions/changed` call looks at: a queue of millions of
/// partitions is walked over several calls (the answer's `next`), not in one engine cycle.
pub const CHANGED_SCAN: usize = 65_536;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchEntry {
    pub queue: String,
    pub partition: String,
    pub offset: u64,
    /// Already clamped to 1..=[`MAX_FETCH_BYTES`] by the door.
    pub max_bytes: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchReq {
    pub entries: Vec<FetchEntry>,
    /// The whole call's payload budget, clamped like an entry's.
    pub max_bytes: usize,
    /// Kafka's `read_committed` isolation: each entry stops at its partition's last stable
    /// offset and lists the aborted transactions of what it serves.
    pub read_committed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchError {
    /// Below the oldest kept record or past the next offset to assign.
    OffsetOutOfRange,
    /// No such partition in the queue (nothing was ever pushed to it).
    UnknownPartition,
    /// The record at the fetch offset is stored encrypted and does not open (no key, another
    /// key, changed bytes): only this entry fails, and the records before it were served.
    Corrupt,
    /// No such queue.
    UnknownQueue,
}

impl FetchError {
    pub fn code(self) -> &'static str {
        match self {
            FetchError::OffsetOutOfRange => "OFFSET_OUT_OF_RANGE",
            FetchError::Corrupt => "CORRUPT_MESSAGE",
            FetchError::UnknownPartition | FetchError::UnknownQueue => "UNKNOWN_TOPIC_OR_PARTITION",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedRecord {
    pub offset: u64,
    pub transaction_id: String,
    /// The stored payload: the JSON text as pushed.
    pub payload: Bytes,
    /// When the push that wrote it was stored.
    pub created_us: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchedEntry {
    /// The next offset the partition will assign.
    pub high_watermark: u64,
    /// The oldest offset still kept.
    pub log_start: u64,
    /// Where the next read of this partition starts: past the last record served, and past
    /// the hidden records (an open or aborted Kafka transaction's, markers) the read stepped
    /// over, so that a reader whose whole window is hidden still moves on (review F3).
    pub next_offset: u64,
    pub records: Vec<FetchedRecord>,
    pub error: Option<FetchError>,
    /// The first offset of the partition's oldest open Kafka transaction, else
    /// `high_watermark` (docs/kafka-transactions.md).
    pub last_stable: u64,
    /// The Kafka transactions' stretches among `records`, in offset order: what the Kafka
    /// door encodes as transactional and control batches.
    pub txn_marks: Vec<TxnMark>,
    /// `read_committed` only: the aborted transactions overlapping `records`, oldest first.
    pub aborted: Vec<AbortedTxn>,
}

/// What a stretch of offsets of a Kafka transaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnMarkKind {
    /// Records of a transaction (open or aborted: a committed one's are plain records).
    Data,
    CommitMarker,
    AbortMarker,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnMark {
    pub base_offset: u64,
    pub count: u32,
    pub producer_id: i64,
    pub epoch: i16,
    pub kind: TxnMarkKind,
}

/// An aborted transaction as Kafka's Fetch lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: u64,
}

/// Index-aligned with the request's entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchAnswer {
    pub entries: Vec<FetchedEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedReq {
    pub queue: String,
    /// Clamped to 1..=[`MAX_CHANGED_PAGE`] by the door.
    pub limit: usize,
    /// Only partitions last written at or after this time.
    pub since_us: Option<i64>,
    /// Only partitions after this one (an earlier page's `next`).
    pub after: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedPartition {
    pub name: String,
    pub id: u64,
    /// The offset of the last record, -1 when none.
    pub last_offset: i64,
    pub log_start: u64,
    pub last_write_us: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangedAnswer {
    /// Every write stamped before this time is counted in the answer; later ones are stamped
    /// at or after it.
    pub safe_us: i64,
    pub partitions: Vec<ChangedPartition>,
    /// Where the next page starts, when the walk is not over.
    pub next: Option<u64>,
    /// The queue does not exist.
    pub unknown: bool,
}

/// Which offset ListOffsets asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetAt {
    Earliest,
    Latest,
    /// The last stable offset (Latest for Kafka's `read_committed`).
    Stable,
    /// The first record stored at or after this time.
    Time(i64),
    /// The record with the largest store time (the last one).
    MaxTime,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetQuery {
    pub queue: String,
    pub partition: String,
    pub at: OffsetAt,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OffsetFound {
    /// -1 when no record answers (a time after the last record, an empty partition).
    pub offset: i64,
    /// The store time of that record, -1 when none or for Earliest/Latest.
    pub time_us: i64,
    /// The queue does not exist. A partition nothing was pushed to answers as empty.
    pub unknown: bool,
}
