//! Tunables of the segment log and what `open` tells the caller about recovery.

use std::path::PathBuf;

use crate::format::MAX_PAYLOAD_LIMIT;
use crate::StorageError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOptions {
    /// A segment is rolled once the next record would push it past this size. A record larger
    /// than this still gets written, alone in its own segment.
    pub segment_bytes: u64,
    /// Largest payload accepted by `append` and believed by recovery. Recovery trusts no length
    /// prefix above it, so lowering it across a restart cuts records written under a higher one.
    pub max_record_bytes: u32,
    /// Every record at or below this index was acknowledged as durable (the persisted Raft
    /// committed index, the checkpoint's applied index). Recovery never cuts it, and refuses
    /// to open a log that ends below it, unless `accept_data_loss`.
    pub durable_through: u64,
    /// The operator's explicit consent to drop damaged acknowledged records: recovery cuts
    /// at the first damage anyway and logs exactly what it dropped at ERROR level.
    pub accept_data_loss: bool,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: 64 * 1024 * 1024,
            max_record_bytes: 256 * 1024 * 1024,
            durable_through: 0,
            accept_data_loss: false,
        }
    }
}

impl LogOptions {
    pub(crate) fn validate(&self) -> Result<(), StorageError> {
        if self.segment_bytes == 0 {
            return Err(StorageError::InvalidOptions {
                reason: "segment_bytes must be above 0".into(),
            });
        }
        if self.max_record_bytes > MAX_PAYLOAD_LIMIT {
            return Err(StorageError::InvalidOptions {
                reason: format!(
                    "max_record_bytes {} exceeds {MAX_PAYLOAD_LIMIT}, the most a u32 length prefix can frame",
                    self.max_record_bytes
                ),
            });
        }
        Ok(())
    }
}

/// What `SegmentLog::open` found on disk.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecoveryReport {
    pub segments: usize,
    pub records: u64,
    pub truncated: Option<TornTail>,
}

/// Where recovery cut the log and why. Everything from `offset` in `segment` on, and every
/// later segment, was removed; `cut_bytes` counts all of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    pub segment: PathBuf,
    pub offset: u64,
    pub cut_bytes: u64,
    pub reason: String,
    /// The index the first removed record held (or would have held).
    pub first_lost_index: u64,
    /// Set when the cut dropped acknowledged records because `accept_data_loss` allowed it;
    /// `None` for a torn tail, which was never acknowledged.
    pub accepted_loss: Option<LogLoss>,
}

/// Acknowledged records that recovery cannot keep: where the damage is and what cutting there
/// drops. `Display` is the one sentence the operator reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLoss {
    /// The damaged file (or the log directory when records are missing at its end).
    pub segment: PathBuf,
    /// Byte offset of the damage in `segment`.
    pub offset: u64,
    pub reason: String,
    /// Indexes dropped: `first_index..=last_index`, as far as anything on disk or the
    /// persisted committed index tells.
    pub first_index: u64,
    pub last_index: u64,
    /// Records past the damage that still verify and would be dropped with it.
    pub readable_records: u64,
    /// Bytes removed from the disk by the cut.
    pub bytes: u64,
}

impl std::fmt::Display for LogLoss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "log records {}..={} ({} records still readable past the damage, {} bytes) at byte \
             offset {} of {}: {}",
            self.first_index,
            self.last_index,
            self.readable_records,
            self.bytes,
            self.offset,
            self.segment.display(),
            self.reason
        )
    }
}
