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
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: 64 * 1024 * 1024,
            max_record_bytes: 256 * 1024 * 1024,
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
}
